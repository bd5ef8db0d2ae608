"""SAQ: PCA segments with their own bit widths, CAQ code adjustment, any average bit budget."""

from __future__ import annotations

import numpy as np

from ..._validation import check_k
from ...encoding import ENCODINGS, SAQ_QUERY_BITS, padded_dim
from ..base import Quantizer
from ..encoded import EncodedVectors
from ..registry import register_quantizer
from .encoding import (
    DEFAULT_EPS0,
    SAQ_MAX_BITS,
    SAQ_MIN_BITS,
    SAQEncoding,
    _check_bits,
    _check_int,
    _eps0,
    saq_corrections_dtype,
)
from .plan import (
    PlanStats,
    SAQPlan,
    budget_bits,
    error_table,
    fit_pca,
    neighbour_stats,
    plan_segments,
)
from .scanner import SAQScanner

__all__ = [
    "SAQQuantizer",
    "SAQEncoding",
    "SAQ_QUERY_BITS",
    "SAQ_MIN_BITS",
    "SAQ_MAX_BITS",
    "DEFAULT_EPS0",
    "saq_corrections_dtype",
]

#: Default segment limit of the plan (tail included).
DEFAULT_MAX_SEGMENTS = 8
#: Below this average the "auto" error model is the neighbour-aware one.
AUTO_NEIGHBOUR_BELOW = 2.0
# Rows per encode chunk and (query, doc) pairs per dense estimate block.
_CHUNK = 8192


@register_quantizer
class SAQQuantizer(Quantizer):
    """SAQ: PCA, segments with their own bit widths, CAQ codes; unbiased per coded segment.

    Parameters
    ----------
    bits : float in [0.5, 8]
        Average budget in bits per (padded) dimension, codes and per-segment factors together.
        Fractional averages are fine; the plan spends whole 64-dimension blocks at whole bits,
        so the code bits it realises move in steps of ``block / D_p`` per dimension (1/6 at
        ``D_p = 384``), see :mod:`bbqlib.quantizers.saq.plan`.
    query_bits : None or int in 2..16
        ``None`` (default): float queries. Otherwise each query segment is rounded to a uniform
        grid of ``2^query_bits`` levels over its own range (deterministic nearest rounding);
        8 bits keep the error within a few percent of the float query's, 4 bits do not above
        2 bits per dimension (``benchmarks/results/saq.md``).
    similarity : {"cosine", "dot_product", "euclidean", "max_inner_product"} or an alias
    seed : int
        Seed of the per-segment rotations.
    error_model : {"auto", "reference", "neighbour"} or callable
        The dynamic program's objective (:mod:`bbqlib.quantizers.saq.plan`); ``"auto"`` takes
        the neighbour-aware model below 2 bits and the reference model from 2 bits up.
    block : {32, 64}
        Segment boundaries fall on multiples of ``block`` PCA dimensions (32: equal or
        better recall than the authors' 64 on the shared data).
    rounds : int >= 0
        CAQ coordinate-descent rounds (6, as the authors; 0: until no coordinate moves).
    max_segments : int, optional
        Segment limit of the plan (tail included); default ``min(8, D_p / block)`` (the factor
        bits and the 1% rule of the dynamic program keep plans short: 2 to 4 segments on the
        shared data). The authors' ``D_p / 128`` at 2 bits and above cost 1 to 3 recall
        points there.

    Attributes
    ----------
    plan_ : SAQPlan
        Segments and bit widths; ``plan_.describe()`` reads ``"64@5, 192@2, 128@0"``.
    mean_ : float64 [d]
        Centre of the data (the PCA mean, after normalization for cosine).
    frame_ : float32 [d, D_p]
        PCA axes, each coded segment's block rotated by its random orthogonal matrix.
    variances_ : float64 [D_p]
        Variance of the data along each PCA axis (0 on padding).
    encoding_ : SAQEncoding

    Notes
    -----
    Li, Deng, Yan, Zhi and Cheng, "SAQ: Pushing the Limits of Vector Quantization through Code
    Adjustment and Dimension Segmentation", SIGMOD 2026 (arXiv 2509.12086). With ``o_s`` a
    segment of the centred, rotated vector and ``u`` its CAQ code (odd integers, the
    cosine-maximising point of the ``B_s``-bit grid found by coordinate descent), the segment
    estimate ``‖o_s‖² <u, q_s> / <u, o_s>`` is RaBitQ's unbiased estimator over the segment's
    rotation; squared L2 is ``‖o‖² + ‖q - c‖² - 2 Σ_s est_s`` and inner products
    ``Σ_s est_s + <x - c, c> + <q, c>``. A dropped (0-bit) tail contributes no cross term,
    which biases near neighbours at low bits.

    Storage per vector: the plan's code bytes plus ``4 + 8 S`` bytes of factors (``S`` coded
    segments); never more than Extended RaBitQ's ``bits · D_p / 8 + 14`` at the same bits.

    Estimates, searches and scorers go through :class:`~bbqlib.quantizers.saq.scanner.SAQScanner`
    (``scanner()``). ``search(Q, enc, k, scan=...)`` picks the flat scan: ``"auto"`` (default)
    takes the fastest that ranks by this quantizer's estimates: with AVX2, a float query runs
    ``"two-pass"`` (a 4-bit lookup-table pass over every bit plane, then the float estimate of
    the docs whose 4-bit key, widened by 4 sds of the query's rounding, can still reach the
    k-th best) and ``query_bits=4`` runs ``"fastscan"`` (one 4-bit pass); otherwise
    ``"plain"`` (float lookup tables per code byte, every doc). ``last_rescored_`` [nq] counts
    the second pass's docs of the last flat search. ``estimate(..., return_bounds=True)``
    also returns ``estimate ∓ eps0 · error_sd`` (:meth:`error_sd`).

    Examples
    --------
    >>> import numpy as np, bbqlib
    >>> X = np.random.default_rng(0).normal(size=(2000, 64)).astype(np.float32)
    >>> q = bbqlib.SAQQuantizer(bits=2, similarity="euclidean").fit(X)
    >>> q.plan_.describe()
    '64@2'
    >>> enc = q.encode(X)
    >>> enc.bytes_per_vector
    28
    """

    _param_names = (
        "bits",
        "query_bits",
        "similarity",
        "seed",
        "error_model",
        "block",
        "rounds",
        "max_segments",
    )

    def __init__(
        self,
        bits: float = 2.0,
        query_bits: int | None = None,
        similarity: str = "cosine",
        seed: int = 0,
        *,
        error_model="auto",
        block: int = 32,
        rounds: int = 6,
        max_segments: int | None = None,
    ):
        self.bits = bits
        self.query_bits = query_bits
        self.similarity = similarity
        self.seed = seed
        self.error_model = error_model
        self.block = block
        self.rounds = rounds
        self.max_segments = max_segments

    family = "saq"
    has_error_bound = True
    default_eps0 = DEFAULT_EPS0
    _transform_param = None

    def scanner(self) -> SAQScanner:
        """:class:`~bbqlib.quantizers.saq.scanner.SAQScanner`: estimates, scans, scorers and
        the one-query paths of Flat and IVF."""
        self._check_fitted()
        return SAQScanner(self)

    # -- fitting ----------------------------------------------------------------------------
    def _check_params(self):
        bits = _check_bits(self.bits)
        qb = self.query_bits
        if (
            qb is not None
            and qb != "auto"
            and (isinstance(qb, bool) or not isinstance(qb, (int, np.integer)))
        ):
            raise ValueError(f"query_bits must be None, 'auto' or an integer in 2..16, got {qb!r}")
        if self.block not in (32, 64) or isinstance(self.block, bool):
            raise ValueError(f"block must be 32 or 64, got {self.block!r}")
        _check_int("rounds", self.rounds, 0)
        _check_int("seed", self.seed, 0)
        _check_int("max_segments", self.max_segments, 1, allow_none=True)
        model = self.error_model
        if not callable(model) and model not in ("auto", "reference", "neighbour"):
            raise ValueError(
                f"error_model must be 'auto', 'reference', 'neighbour' or a callable "
                f"(stats, start, stop, bits) -> float, got {model!r}"
            )
        if model == "auto":
            model = "neighbour" if bits < AUTO_NEIGHBOUR_BELOW else "reference"
        return bits, model

    def _encoding_for_params(self):
        """The registry row of the query width (the plan specialises it in the fit)."""
        self._check_params()
        return ENCODINGS.lookup("saq", 0, self.query_bits)

    @classmethod
    def _encoding_for_state(cls, params: dict):
        return ENCODINGS.lookup("saq", 0, params["query_bits"])

    @classmethod
    def encoding_for_record(cls, bits, query_bits, *, code_bytes=None, segments=None):
        """The encoding a calibration record's bytes follow from: the registry row of
        ``query_bits`` specialised to a plan of ``code_bytes`` and ``segments`` coded
        segments at an average of ``bits`` (:class:`bbqlib.calibration.Configuration`)."""
        row = ENCODINGS.lookup("saq", 0, query_bits)
        return SAQEncoding(
            family="saq", doc_bits=bits, query_bits=row.query_bits, wire=row.wire,
            layout=row.layout, corrections_dtype=saq_corrections_dtype(segments or 0),
            default_oversample=row.default_oversample, indexes=row.indexes,
            code_bytes=int(code_bytes or 0),
        )  # fmt: skip

    def _fit_transformed(self, X: np.ndarray) -> None:
        """PCA of ``X``, the segment plan, one random rotation per coded segment."""
        bits, model = self._check_params()
        similarity = self.similarity_
        n, d = X.shape
        if n < 2:
            raise ValueError(f"X must hold at least 2 rows to fit SAQ's PCA, got {n}")
        mean, W, var = fit_pca(X)
        Dp = padded_dim(d)
        variances = np.zeros(Dp)
        variances[:d] = var
        stats = PlanStats(variances)
        if model == "neighbour":
            Wp = np.zeros((d, Dp))
            Wp[:, :d] = W
            sample = np.random.default_rng([self.seed, 1]).choice(n, min(n, 20000), replace=False)
            Y = (X[np.sort(sample)].astype(np.float64) - mean) @ Wp
            stats = neighbour_stats(
                Y, variances, is_l2=similarity.is_distance, mean_frame=mean @ Wp, seed=self.seed
            )
        limit = self.max_segments or min(DEFAULT_MAX_SEGMENTS, Dp // self.block)
        table = error_table(model, stats, self.block)
        plan = plan_segments(
            table,
            dim=d,
            padded_dim=Dp,
            block=self.block,
            budget=budget_bits(bits, Dp),
            max_segs=limit,
            model=model if isinstance(model, str) else "custom",
        )
        from ...transforms.dense import haar_orthogonal

        rng = np.random.default_rng(self.seed)
        rotations = [haar_orthogonal(s.dims, rng) for s in plan.segments]
        frame = np.zeros((d, Dp))
        frame[:, :d] = W
        for s, P in zip(plan.segments, rotations, strict=True):
            frame[:, s.start : s.stop] = frame[:, s.start : s.stop] @ P
        flat = np.concatenate([P.ravel() for P in rotations]).astype(np.float32)
        self._set_fitted(bits, plan, mean, frame.astype(np.float32), flat, variances)

    def _set_fitted(self, bits, plan, mean, frame, rotations, variances) -> None:
        self.plan_ = plan
        self.mean_ = np.asarray(mean, dtype=np.float64)
        self.frame_ = np.ascontiguousarray(frame, dtype=np.float32)
        self.rotations_ = np.ascontiguousarray(rotations, dtype=np.float32)
        self.variances_ = np.asarray(variances, dtype=np.float64)
        for a in (self.mean_, self.frame_, self.rotations_, self.variances_):
            a.flags.writeable = False
        self.centroid_ = self.mean_.astype(np.float32)
        self.centroid_dot_ = float(self.mean_ @ self.mean_)
        self._coded = np.ascontiguousarray(self.frame_[:, : plan.coded_dims])
        self._mean32 = self.mean_.astype(np.float32)
        row = self.encoding_
        self.encoding_ = SAQEncoding(
            family=row.family,
            doc_bits=bits,
            query_bits=row.query_bits,
            wire=row.wire,
            layout=row.layout,
            corrections_dtype=saq_corrections_dtype(len(plan.segments)),
            default_oversample=3.0 if bits <= 1 else (1.5 if bits <= 3 else 1.0),
            indexes=row.indexes,
            code_bytes=plan.code_bytes,
            plan=plan.describe(),
        )

    def _fingerprint_parts(self) -> tuple:
        return (
            float(self.encoding_.doc_bits),
            self.similarity_.value,
            self.plan_.to_dict()["segments"],
            self.mean_,
            self.frame_,
        )

    def _state(self) -> tuple[dict, dict]:
        """The plan rides in the params (the file header), the PCA frame in the arrays."""
        params = {
            "bits": float(self.encoding_.doc_bits),
            "error_model": self.error_model if isinstance(self.error_model, str) else "custom",
            "plan": self.plan_.to_dict(),
        }
        arrays = {
            "mean": self.mean_,
            "frame": self.frame_,
            "rotations": self.rotations_,
            "variances": self.variances_,
        }
        return params, arrays

    def _restore(self, params: dict, arrays: dict) -> None:
        self._set_fitted(
            float(params["bits"]),
            SAQPlan.from_dict(params["plan"]),
            np.array(arrays["mean"], dtype=np.float64),
            np.array(arrays["frame"], dtype=np.float32),
            np.array(arrays["rotations"], dtype=np.float32),
            np.array(arrays["variances"], dtype=np.float64),
        )

    def fit_residuals(self, R: np.ndarray) -> None:
        """Refit PCA, plan and rotations on residuals ``R = x - c`` (their spectrum, not the
        data's, decides the segments of residual codes)."""
        self._check_fitted()
        self._fit_transformed(np.ascontiguousarray(R, dtype=np.float32))
        self._seal()

    # -- encoding ---------------------------------------------------------------------------
    def rotate(self, X: np.ndarray) -> np.ndarray:
        """Prepared rows in SAQ's frame (float32 [n, D_p], not centred): ``X @ frame_``."""
        return np.asarray(X, dtype=np.float32) @ self.frame_

    def _frame_queries(self, Qt: np.ndarray) -> np.ndarray:
        """Prepared query rows in SAQ's frame, coded dimensions only (float32 [nq, coded]):
        :func:`bbqlib._kernels.saq_query.rotate_rows`, whose fixed order makes a query
        alone (the fused IVF call) equal to its row of a batch."""
        from ..._kernels.saq_query import rotate_rows

        X = np.ascontiguousarray(Qt, dtype=np.float32)
        out = np.empty((len(X), self.plan_.coded_dims), dtype=np.float32)
        if len(X):
            rotate_rows(X, self._coded, out)
        return out

    def encode(self, X) -> EncodedVectors:
        """Codes (``plan_.code_bytes`` per vector) and ``4 + 8 S`` bytes of factors."""
        X = self._validated(X, "X")
        n = len(X)
        codes = np.empty((n, self.plan_.code_bytes), dtype=np.uint8)
        corr = np.empty(n, dtype=self.encoding_.corrections_dtype)
        fac = corr.view(np.float32).reshape(n, -1)
        for s0 in range(0, n, _CHUNK):
            Xc = X[s0 : s0 + _CHUNK] - self._mean32
            Y = Xc @ self._coded
            self._encode_frame(Y, codes[s0 : s0 + _CHUNK], fac[s0 : s0 + _CHUNK])
            if self.similarity_.is_distance:
                fac[s0 : s0 + _CHUNK, 0] = np.einsum("ij,ij->i", Xc, Xc, dtype=np.float64)
            else:
                fac[s0 : s0 + _CHUNK, 0] = Xc.astype(np.float64) @ self.mean_
        return EncodedVectors(
            codes, corr, self.encoding_, self.dim_, self.centroid_dot_, self.fingerprint_
        )

    def encode_rotated(self, Xr: np.ndarray, centroid: np.ndarray) -> EncodedVectors:
        """Encode rows already in SAQ's frame (:meth:`rotate`) against a centre in that frame.

        The hook for residual coding (an IVF list codes ``Xr - rotate(its centroid)``);
        ``additional`` is then ``‖x - c‖²`` (euclidean) or ``<x - c, c>``.
        """
        self._check_fitted()
        Xr = np.asarray(Xr, dtype=np.float32)
        c = np.asarray(centroid, dtype=np.float64)
        n = len(Xr)
        codes = np.empty((n, self.plan_.code_bytes), dtype=np.uint8)
        corr = np.empty(n, dtype=self.encoding_.corrections_dtype)
        fac = corr.view(np.float32).reshape(n, -1)
        Dc = self.plan_.coded_dims
        for s0 in range(0, n, _CHUNK):
            R = Xr[s0 : s0 + _CHUNK].astype(np.float64) - c
            self._encode_frame(
                R[:, :Dc].astype(np.float32), codes[s0 : s0 + _CHUNK], fac[s0 : s0 + _CHUNK]
            )
            fac[s0 : s0 + _CHUNK, 0] = (R * R).sum(1) if self.similarity_.is_distance else R @ c
        return EncodedVectors(
            codes, corr, self.encoding_, self.dim_, float(c @ c), self.fingerprint_
        )

    @property
    def pair_factor_width(self) -> int:
        """Float32 factors per IVF posting entry: ``1 + 2 S`` (``additional`` with the centre
        term folded in, then ``scale_s`` and ``norm_s`` per coded segment)."""
        self._check_fitted()
        return 1 + 2 * len(self.plan_.segments)

    def encode_pairs(self, W, rows, centres, lists) -> tuple[np.ndarray, np.ndarray]:
        """Codes of the residuals ``W[rows[p]] - centres[lists[p]]`` and their factor rows
        [m, 1 + 2S] (:func:`bbqlib.quantizers.saq.lists.encode_pairs`)."""
        from .lists import encode_pairs

        self._check_fitted()
        return encode_pairs(self, W, rows, centres, lists)

    def query_pairs(self, Qt, centres, pair_query, pair_list, *, lut: bool = False):
        """Not used: SAQ scans lists with one table set per query (its scanner)."""
        raise NotImplementedError("SAQ lists are scanned by SAQScanner.scan_pairs")

    def _encode_frame(self, Y, codes, fac) -> None:
        a = self.plan_.arrays()
        from ..._kernels import saq as saq_kernels  # on first use: import bbqlib stays light

        saq_kernels.caq_encode_rows(
            np.ascontiguousarray(Y, dtype=np.float32),
            a["start"],
            a["dims"],
            a["bits"],
            a["msb_off"],
            a["low_off"],
            int(self.rounds),
            codes,
            fac,
        )

    # -- queries ----------------------------------------------------------------------------
    def _query_parts(self, Q: np.ndarray):
        """``(Qc float32 [nq, coded], q_add float64 [nq])`` of validated, prepared queries."""
        Qc = Q - self._mean32
        if self.similarity_.is_distance:
            q_add = np.einsum("ij,ij->i", Qc, Qc, dtype=np.float64)
        else:
            q_add = Q.astype(np.float64) @ self.mean_
        return Qc @ self._coded, q_add

    def query_parts_rotated(self, Qr: np.ndarray, centroid: np.ndarray):
        """The same from queries in SAQ's frame against a centre in that frame (IVF hook)."""
        c = np.asarray(centroid, dtype=np.float64)
        R = np.asarray(Qr, dtype=np.float64) - c
        q_add = (R * R).sum(1) if self.similarity_.is_distance else np.asarray(Qr, np.float64) @ c
        return R[:, : self.plan_.coded_dims].astype(np.float32), q_add

    def _quantize_query(self, Qc: np.ndarray, qb: int | None = None):
        from .search import quantize_query

        return quantize_query(self, Qc, qb)

    def _tables(self, Qc: np.ndarray):
        from .search import float_tables

        return float_tables(self, Qc)

    def _doc_arrays(self, enc: EncodedVectors):
        """``(codes uint8 [n, bytes], factors float32 [n, 1 + 2S])`` as the kernels take them."""
        key = ("saq_rows", self.fingerprint_)
        if key not in enc._cache:
            codes = np.ascontiguousarray(enc.codes)
            fac = np.ascontiguousarray(enc.corrections).view(np.float32).reshape(len(enc), -1)
            enc._cache[key] = (codes, fac)
        return enc._cache[key]

    # -- error model ------------------------------------------------------------------------
    def error_sd(self, Q, enc: EncodedVectors) -> np.ndarray:
        """Model standard deviation [nq, n] of each raw estimate.

        Per coded segment ``‖o_s‖ ‖q_s‖ sqrt((1 - a_s²) / a_s²) / sqrt(d_s - 1)`` (``a_s`` the
        cosine of the code, from the stored factors and the codes), plus the rounding of a
        quantized query and, for a dropped tail, ``sqrt(Σ σ_i² q_i²)`` over its PCA axes; in
        quadrature, twice for squared L2.
        """
        self._check_encoded(enc)
        return self._sigma(self._validated(Q, "Q", allow_1d=True), enc)

    def _sigma(self, Q, enc) -> np.ndarray:
        from .bounds import segment_sigma

        return segment_sigma(self, Q, enc)

    def search_bound_rerank(self, Q, codes, vectors, k, *, allowed=None, eps0=DEFAULT_EPS0,
                            cap: int = 10_000):  # fmt: skip
        """Top ``k`` with exact scores, rescoring only candidates whose optimistic bound
        (``eps0`` model sds, :meth:`error_sd`) beats the k-th exact value: ``(keys, ids,
        vectors_read)`` as :meth:`bbqlib.RaBitQQuantizer.search_bound_rerank`."""
        from .bounds import bound_rerank_search

        self._check_encoded(codes)
        Q = self._validated(Q, "Q", allow_1d=True)
        return bound_rerank_search(self, Q, codes, vectors, check_k(k), allowed, _eps0(eps0), cap)
