"""RaBitQ and Extended RaBitQ (1 to 8 bits): unbiased estimates with per-pair error bounds."""

from __future__ import annotations

import math

import numpy as np

from ..._kernels.rabitq import bound_rerank
from ..._kernels.rabitq_query import rabitq_query_pairs
from ..._kernels.scoring import EMPTY_ID
from ..._params import Boolean, Integer
from ..._validation import check_k
from ...encoding import (
    ENCODINGS,
    FAMILIES,
    RABITQ_CORRECTIONS_I32,
    RABITQ_CORRECTIONS_U16,
    Encoding,
    padded_dim,
)
from ...layouts.codes import DocCodes, QueryCodes
from ...layouts.scan import estimate_raw
from ...packing import pack_planes, plane_words, unpack_planes
from ...search.topk import merge_topk
from ..base import Quantizer
from ..centre import robust_centre
from ..encoded import EncodedVectors
from ..registry import register_quantizer
from .codes import fast_rescale_factor, grid_codes, quantize_rows

__all__ = [
    "RaBitQQuantizer",
    "RABITQ_BITS",
    "RABITQ_QUERY_BITS",
    "RABITQ_CORRECTIONS_U16",
    "RABITQ_CORRECTIONS_I32",
    "DEFAULT_EPS0",
    "rabitq_encoding",
]

#: Bits per dimension of stored RaBitQ codes (the registry's rabitq rows).
RABITQ_BITS = FAMILIES["rabitq"].doc_bits
#: Query bits; ``None`` is an unquantized float query.
RABITQ_QUERY_BITS = FAMILIES["rabitq"].query_bits
#: Default confidence multiplier of the error bound (a z-score: about 94% per pair).
DEFAULT_EPS0 = 1.9
#: Most vectors rescored per query by ``rerank="bound"`` (Elasticsearch's rescore cap).
BOUND_RERANK_CAP = 10_000
# Rows encoded per chunk (bounds float64 temporaries at chunk * d * 8 bytes).
_CHUNK = 8192
# Queries per dense estimate in rerank="bound": at most 32, and at most 2^22 (query, doc)
# pairs so that the float64 estimate, bound and key arrays stay near 100 MB.
_BOUND_BATCH = 32
_BOUND_PAIRS = 1 << 22


def rabitq_encoding(bits: int, query_bits: int | None | str = "auto") -> Encoding:
    """The registry row of RaBitQ codes (``bits`` bit planes at every width).

    ``query_bits="auto"``: 4 at 1 bit, ``None`` (float query, as faiss's multi-bit stage)
    above. Corrections: :data:`RABITQ_CORRECTIONS_U16` (14 B, 1-4 bits) or
    :data:`RABITQ_CORRECTIONS_I32` (16 B, 5-8 bits).
    """
    return ENCODINGS.lookup("rabitq", bits, query_bits)


def _check_eps0(eps0) -> float:
    if eps0 is None:
        return DEFAULT_EPS0
    if isinstance(eps0, bool) or not isinstance(eps0, (int, float, np.number)):
        raise ValueError(f"eps0 must be a positive number (a z-score, default 1.9), got {eps0!r}")
    if not math.isfinite(eps0) or eps0 <= 0:
        raise ValueError(f"eps0 must be a finite number > 0 (default 1.9), got {eps0!r}")
    return float(eps0)


@register_quantizer
class RaBitQQuantizer(Quantizer):
    """RaBitQ (1 bit) and Extended RaBitQ (2-8 bits) with unbiased estimates and error bounds.

    Parameters
    ----------
    bits : int in 1..8
        Bits per dimension of the stored codes: the sign bit plus ``bits - 1`` extra bits.
    query_bits : {4, 7, 8, None, "auto"}
        ``"auto"`` (default): 4 at 1 bit (RaBitQ's quantized query), ``None`` above (a float
        query, as faiss's multi-bit second stage). Quantized queries use a uniform grid over
        each rotated residual's own ``[min, max]`` with deterministic nearest rounding.
    similarity : {"cosine", "dot_product", "euclidean", "max_inner_product"} or an alias
        ``cosine`` normalizes, then works as ``dot_product``; inner products go through the
        centroid terms ``<o_r, q_r> = <o_r - c, q_r - c> + <o_r, c> + <q_r, c> - <c, c>``.
    rotation : {"dense", "hadamard", "block", None} or a Transform
        Random orthogonal transform applied to docs and queries (default: a dense Haar
        matrix). ``None`` skips it, and with it the guarantees: the estimator is unbiased and
        the bound holds only over the rotation's randomness.
    seed : int, optional
        Seed of the rotation (the transform's default when None).
    fast : bool
        Use one fixed rescaling factor per ``(dim, bits)`` instead of the exact per-vector
        sweep (RaBitQ-Library's ``faster_config``; O(d) instead of O(d log d) per vector,
        slightly larger error, still unbiased).

    Attributes
    ----------
    centroid_ : float32 [d]
        Mean of the fitted vectors without far outliers (:mod:`bbqlib.quantizers.centre`)
        in the rotated frame (after normalization for cosine).
    transform_ : Transform or None
    encoding_ : Encoding
        :func:`rabitq_encoding` row in use.
    rescale_factor_ : float
        The fixed factor of ``fast=True`` (0 otherwise).

    Notes
    -----
    With ``o' = P(o_r - c)``, the code is the grid point ``y* = argmax <y, o'> / ||y||`` over
    ``y in {±1/2, ±3/2, ..., ±(2^B - 1)/2}^d`` (signs of ``o'``, magnitudes by the rescaling
    sweep), stored as unsigned ``x_u = y* - c_B`` (``c_B = -(2^B - 1)/2``) in ``B`` bit planes.
    The estimate of ``<o_r - c, q_r - c>`` is ``r_o <ō, q'> / <ō, o>``
    (Gao & Long, SIGMOD 2024; Gao et al., SIGMOD 2025), affine in the codes:
    ``x̂ = l_x (x_u + c_B)`` with ``l_x = Δ/a_o = r_o² / <y*, o'>``, so the core kernels score
    it (``a_x = c_B l_x``). Its error is about ``r_o r_q sqrt(1 - a_o²) / (a_o sqrt(d - 1))``
    times a standard normal; ``eps0`` times that (twice for squared L2) is the half-width
    returned by ``estimate(..., return_bounds=True)``: ``eps0 = 1.9`` covers about 94% of
    pairs (a two-sided z-score, not a guarantee). With a quantized query the rounding error
    ``e = ŷ - y`` adds ``(r_o / a_o) ||e|| / sqrt(d)`` in quadrature.

    Storage: ``bits * padded_dim(d) / 8`` code bytes plus 14 (1-4 bits) or 16 (5-8 bits)
    bytes of corrections per vector (see :data:`RABITQ_CORRECTIONS_U16`), e.g. 62 B at 1 bit
    and d = 384.

    Examples
    --------
    >>> import numpy as np, bbqlib
    >>> X = np.random.default_rng(0).normal(size=(1000, 64)).astype(np.float32)
    >>> q = bbqlib.RaBitQQuantizer(bits=2, similarity="euclidean", seed=0).fit(X)
    >>> enc = q.encode(X)
    >>> enc.bytes_per_vector
    30
    >>> est, lower, upper = q.estimate(X[:2], enc, return_bounds=True)
    >>> est.shape, bool((lower <= est).all() and (est <= upper).all())
    ((2, 1000), True)
    """

    family = "rabitq"
    has_error_bound = True
    default_eps0 = DEFAULT_EPS0
    _param_names = ("bits", "query_bits", "similarity", "rotation", "seed", "fast")
    _transform_param = "rotation"
    _constraints = {"fast": [Boolean()], "seed": [None, Integer()]}

    def __init__(
        self,
        bits: int = 1,
        query_bits: int | None | str = "auto",
        similarity: str = "cosine",
        *,
        rotation="dense",
        seed: int | None = None,
        fast: bool = False,
    ):
        self.bits = bits
        self.query_bits = query_bits
        self.similarity = similarity
        self.rotation = rotation
        self.seed = seed
        self.fast = fast

    # -- fitting ----------------------------------------------------------------------------
    def _fit_transformed(self, X: np.ndarray) -> None:
        """The centre (the rotated rows' mean without far outliers:
        :func:`~bbqlib.quantizers.centre.robust_centre`) and, with ``fast``, the fixed
        rescaling factor."""
        self._set_centroid(robust_centre(X))
        d, bits = X.shape[1], self.encoding_.doc_bits
        self.rescale_factor_ = fast_rescale_factor(d, bits) if self.fast else 0.0

    def _set_centroid(self, centroid) -> None:
        self.centroid_ = np.asarray(centroid, dtype=np.float32)
        self.centroid_.flags.writeable = False
        self.centroid_dot_ = float(np.dot(self.centroid_.astype(np.float64), self.centroid_))

    def _fingerprint_parts(self) -> tuple:
        return (
            self.encoding_.doc_bits,
            self.similarity_.value,
            bool(self.fast),
            self.rescale_factor_,
            self.centroid_,
        )

    def _state(self) -> tuple[dict, dict]:
        return (
            {"fast": bool(self.fast), "rescale_factor": self.rescale_factor_},
            {"centroid": np.asarray(self.centroid_)},
        )

    def _restore(self, params: dict, arrays: dict) -> None:
        self._set_centroid(np.array(arrays["centroid"], dtype=np.float32))
        self.rescale_factor_ = float(params["rescale_factor"])

    # -- encoding ---------------------------------------------------------------------------
    def rotate(self, X: np.ndarray) -> np.ndarray:
        """Apply the fitted rotation to validated, prepared rows (no copy without one)."""
        return self._rotated(X)

    def encode(self, X) -> EncodedVectors:
        """Quantize docs: ``bits`` bit planes and 14 (16 above 4 bits) bytes of corrections."""
        return self.encode_rotated(self.rotate(self._validated(X, "X")), self.centroid_)

    def encode_rotated(self, Xr: np.ndarray, centroid: np.ndarray) -> EncodedVectors:
        """Encode already rotated rows against a centre in the rotated frame.

        The hook for residual coding (an IVF list codes ``Xr - centroid`` of its own
        centroid); :meth:`encode` calls it with the fitted centre.
        """
        self._check_fitted()
        Xr = np.ascontiguousarray(Xr, dtype=np.float32)
        c = np.asarray(centroid, dtype=np.float64)
        enc = self.encoding_
        bits = enc.doc_bits
        n, d = Xr.shape
        codes = np.empty((n, enc.doc_bytes(d)), dtype=np.uint8)
        corr = np.empty(n, dtype=enc.corrections_dtype)
        for start in range(0, n, _CHUNK):
            stop = min(n, start + _CHUNK)
            x_u, fields = quantize_rows(
                Xr[start:stop], c, bits, self.rescale_factor_ if self.fast else None
            )
            codes[start:stop] = pack_planes(x_u, bits)
            for name in ("delta_over_a", "error", "component_sum"):
                corr[name][start:stop] = fields[name]
            if self.similarity_.is_distance:
                corr["additional"][start:stop] = fields["r2"]
            else:
                corr["additional"][start:stop] = Xr[start:stop].astype(np.float64) @ c
        cc = float(c @ c)
        return EncodedVectors(codes, corr, enc, d, cc, self.fingerprint_)

    def _doc_codes(self, enc: EncodedVectors) -> DocCodes:
        c = enc.corrections
        bits = enc.encoding.doc_bits
        c_b = -(2**bits - 1) / 2.0
        scale = c["delta_over_a"].astype(np.float64)
        factors = np.empty((len(enc), 4), dtype=np.float32)
        factors[:, 0] = c_b * scale
        factors[:, 1] = scale
        factors[:, 2] = c["component_sum"]
        factors[:, 3] = c["additional"]
        return DocCodes(
            enc.encoding,
            plane_words(enc.codes),
            factors,
            enc.dim,
            enc.centroid_dot,
            self.similarity_.is_distance,
        )

    # -- queries ----------------------------------------------------------------------------
    def _query_codes(self, Q: np.ndarray) -> QueryCodes:
        return self.query_codes_rotated(self.rotate(Q), self.centroid_)[0]

    def query_codes_rotated(self, Qr: np.ndarray, centroid: np.ndarray):
        """Query codes for rotated queries against a centre: ``(codes, r_q, rounding_norm)``.

        ``r_q = ||q' - c||`` and ``rounding_norm = ||ŷ - y||`` (0 for float queries) feed the
        error bound.
        """
        c = np.asarray(centroid, dtype=np.float64)
        Qr64 = np.asarray(Qr, dtype=np.float64)
        y = (Qr64 - c).astype(np.float32)
        y64 = y.astype(np.float64)
        r_q = np.sqrt(np.einsum("ij,ij->i", y64, y64))
        factors = np.empty((len(y), 4), dtype=np.float64)
        factors[:, 3] = r_q**2 if self.similarity_.is_distance else Qr64 @ c
        qb = self.encoding_.query_bits
        if qb is None:
            factors[:, 0] = 0.0
            factors[:, 1] = 1.0
            factors[:, 2] = y64.sum(axis=1)
            return QueryCodes.of(self.encoding_, y, factors), r_q, np.zeros(len(y))
        codes, e_norm = grid_codes(y64, qb, factors)
        words = plane_words(pack_planes(codes, qb))
        return QueryCodes.of(self.encoding_, words, factors), r_q, e_norm

    # -- codes against list centres (IVF) -----------------------------------------------------
    def encode_pairs(self, W, rows, centres, lists):
        """RaBitQ codes of the residuals ``W[rows[p]] - centres[lists[p]]`` (in the rotated
        frame: the rotation is linear, so rotating residuals or rows is the same)."""
        enc = self.encoding_
        bits = enc.doc_bits
        m = rows.shape[0]
        codes = np.empty((m, enc.doc_bytes(W.shape[1])), dtype=np.uint8)
        factors = np.empty((m, 4), dtype=np.float32)
        c_b = -(2**bits - 1) / 2.0
        zero = np.zeros(W.shape[1])
        for start in range(0, m, _CHUNK):
            stop = min(m, start + _CHUNK)
            V = W[rows[start:stop]].astype(np.float64)
            C = centres[lists[start:stop]].astype(np.float64)
            x_u, fields = quantize_rows(
                V - C, zero, bits, self.rescale_factor_ if self.fast else None
            )
            codes[start:stop] = pack_planes(x_u, bits)
            scale = fields["delta_over_a"]
            factors[start:stop, 0] = c_b * scale
            factors[start:stop, 1] = scale
            factors[start:stop, 2] = fields["component_sum"]
            if self.similarity_.is_distance:
                factors[start:stop, 3] = fields["r2"]
            else:
                factors[start:stop, 3] = np.einsum("ij,ij->i", V, C)
        return codes, factors

    def scanner(self):
        """Float residual queries (quantized queries: the batch path)."""
        from ..scanner import ResidualScanner

        self._check_fitted()
        return ResidualScanner(self)

    def query_pairs(self, Qt, centres, pair_query, pair_list, *, lut: bool = False):
        """Residual queries ``q - c`` per pair: float, or on RaBitQ's per-query grid.

        Quantized queries take one fused kernel per batch
        (:func:`bbqlib._kernels.rabitq_query.rabitq_query_pairs`): the codes and ``(a_y,
        l_y, ΣY)`` of :func:`grid_codes` bit for bit, packed as the scan reads them, without
        ``[pairs, d]`` float temporaries.
        """
        qb = self.encoding_.query_bits
        if qb is None:
            return self._float_query_pairs(Qt, centres, pair_query, pair_list)
        d = Qt.shape[1]
        planes = 0 if lut else self.encoding_.query_planes
        width = padded_dim(d) if lut else planes * padded_dim(d) // 8
        codes = np.empty((len(pair_query), width), dtype=np.uint8)
        factors = np.empty((len(pair_query), 4), dtype=np.float64)
        rabitq_query_pairs(
            np.ascontiguousarray(Qt, dtype=np.float32),
            np.ascontiguousarray(centres, dtype=np.float32),
            np.ascontiguousarray(pair_query, dtype=np.int64),
            np.ascontiguousarray(pair_list, dtype=np.int64),
            int(qb), bool(self.similarity_.is_distance), int(planes), codes, factors,
        )  # fmt: skip
        return (codes if lut else codes.view(np.uint64)), factors

    # -- estimates and bounds ---------------------------------------------------------------
    def estimate(
        self, Q, enc: EncodedVectors, *, return_bounds: bool = False, eps0: float = DEFAULT_EPS0
    ):
        """Unbiased raw estimates [nq, n]: squared L2 (euclidean) or inner product.

        Parameters
        ----------
        Q : float array [nq, d] or [d]
        enc : EncodedVectors from :meth:`encode`
        return_bounds : bool
            Also return ``lower`` and ``upper`` = estimate ∓ half-width.
        eps0 : float
            Confidence multiplier (default 1.9; None means the default). The half-width is
            ``eps0 · σ`` with ``σ = error · r_q`` (float query; twice that for squared L2),
            so ``eps0`` is a z-score: 1.9 covers about 94% of pairs, 2.58 about 99%. With a
            quantized query ``σ`` also holds the rounding term (see Notes of the class).

        Returns
        -------
        est : float32 [nq, n], or ``(est, lower, upper)`` with ``return_bounds``.
        """
        eps0 = _check_eps0(eps0)
        self._check_encoded(enc)
        Q = self._validated(Q, "Q", allow_1d=True)
        qc, r_q, e_norm = self.query_codes_rotated(self.rotate(Q), self.centroid_)
        est = estimate_raw(qc, self._cached_doc_codes(enc))
        if not return_bounds:
            return est.astype(np.float32)
        half = eps0 * self._sigma(enc, r_q, e_norm)
        return (
            est.astype(np.float32),
            (est - half).astype(np.float32),
            (est + half).astype(np.float32),
        )

    def error_sd(self, Q, enc: EncodedVectors) -> np.ndarray:
        """Model standard deviation [nq, n] of each raw estimate (bound = ``eps0`` times it)."""
        self._check_encoded(enc)
        Q = self._validated(Q, "Q", allow_1d=True)
        _, r_q, e_norm = self.query_codes_rotated(self.rotate(Q), self.centroid_)
        return self._sigma(enc, r_q, e_norm)

    def _sigma(self, enc: EncodedVectors, r_q: np.ndarray, e_norm: np.ndarray) -> np.ndarray:
        err = enc.corrections["error"].astype(np.float64)
        sigma = r_q[:, None] * err[None, :]
        if self.encoding_.query_bits is not None:
            norm = self._norm_over_a(enc)
            rounding = e_norm[:, None] * norm[None, :] / math.sqrt(enc.dim)
            sigma = np.sqrt(sigma**2 + rounding**2)
        return sigma * (2.0 if self.similarity_.is_distance else 1.0)

    def _norm_over_a(self, enc: EncodedVectors) -> np.ndarray:
        """``r_o / a_o = l_x ||x_u + c_B||`` per doc, from the codes (cached on ``enc``)."""
        key = ("rabitq_norm_over_a", self.fingerprint_)
        if key not in enc._cache:
            bits = enc.encoding.doc_bits
            c_b = -(2**bits - 1) / 2.0
            sq = np.empty(len(enc))
            if bits == 1:
                sq[:] = enc.dim / 4.0
            for start in range(0, len(enc) if bits > 1 else 0, 65536):
                stop = min(len(enc), start + 65536)
                y = unpack_planes(enc.codes[start:stop], bits, enc.dim).astype(np.float64) + c_b
                sq[start:stop] = np.einsum("ij,ij->i", y, y)
            scale = enc.corrections["delta_over_a"].astype(np.float64)
            enc._cache[key] = scale * np.sqrt(sq)
        return enc._cache[key]

    # -- bound-driven rerank ----------------------------------------------------------------
    def search_bound_rerank(
        self,
        Q,
        codes: EncodedVectors,
        vectors: np.ndarray,
        k: int,
        *,
        allowed=None,
        eps0=DEFAULT_EPS0,
        cap: int = BOUND_RERANK_CAP,
    ):
        """Top ``k`` with exact scores, rescoring only the candidates the bound cannot rule out.

        Candidates are visited in estimate order; each is rescored on its float vector iff its
        optimistic bound (lower bound of d², upper bound of the inner product) beats the
        current k-th exact value (spec §1.4), at most ``cap`` per query.

        Parameters
        ----------
        Q : float array [nq, d] or [d]
        codes : EncodedVectors of ``vectors``
        vectors : float32 [n, d], the prepared float vectors (normalized for cosine)
        k : int
        allowed : boolean mask [n], optional
        eps0 : float
            Confidence multiplier of the bound (default 1.9).
        cap : int
            Most vectors rescored per query (default 10,000; never below ``k``).

        Returns
        -------
        keys : float64 [nq, k]
            Ranking keys of the exact values (``-d²`` or the inner product), best first
            (``-inf`` padding); ``self.similarity_.raw(keys)`` gives the values.
        ids : int64 [nq, k] (``-1`` padding)
        vectors_read : int64 [nq]
            Float vectors rescored per query.
        """
        eps0 = _check_eps0(eps0)
        self._check_encoded(codes)
        k = check_k(k)
        Q = self._validated(Q, "Q", allow_1d=True)
        n = len(codes)
        vectors = np.asarray(vectors)
        if vectors.ndim != 2 or vectors.shape != (n, self.dim_):
            raise ValueError(
                f"vectors must have shape ({n}, {self.dim_}) to match the codes, got "
                f"{vectors.shape}"
            )
        if vectors.dtype != np.float32:
            vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        mask = np.empty(0, np.uint8)
        if allowed is not None:
            allowed = np.asarray(allowed)
            if allowed.dtype != bool or allowed.shape != (n,):
                raise ValueError(f"allowed must be a boolean mask of shape ({n},)")
            mask = np.ascontiguousarray(allowed, dtype=np.uint8)
        nq = len(Q)
        out_keys = np.full((nq, k), -np.inf)
        ids = np.full((nq, k), -1, dtype=np.int64)
        reads = np.zeros(nq, dtype=np.int64)
        if n == 0:
            return out_keys, ids, reads
        is_l2 = self.similarity_.is_distance
        doc_codes = self._cached_doc_codes(codes)
        Qr = self.rotate(Q)
        batch = max(1, min(_BOUND_BATCH, _BOUND_PAIRS // n))
        for q0 in range(0, nq, batch):
            q1 = min(nq, q0 + batch)
            qc, r_q, e_norm = self.query_codes_rotated(Qr[q0:q1], self.centroid_)
            est = estimate_raw(qc, doc_codes)
            keys = self.similarity_.key(est)
            opt = keys + eps0 * self._sigma(codes, r_q, e_norm)
            heap_keys = np.full((q1 - q0, k), -np.inf)
            heap_ids = np.full((q1 - q0, k), EMPTY_ID, dtype=np.int64)
            bound_rerank(
                keys,
                opt,
                np.ascontiguousarray(Q[q0:q1]),
                vectors,
                mask,
                max(int(cap), k),
                is_l2,
                heap_keys,
                heap_ids,
                reads[q0:q1],
            )
            heap_keys, heap_ids = merge_topk(heap_keys, heap_ids, k)
            empty = heap_ids == EMPTY_ID
            out_keys[q0:q1] = np.where(empty, -np.inf, heap_keys)
            ids[q0:q1] = np.where(empty, -1, heap_ids)
        return out_keys, ids, reads
