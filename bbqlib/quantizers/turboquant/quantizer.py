"""TurboQuant (Zandieh, Daliri, Hadian and Mirrokni, arXiv 2504.19874, ICLR 2026): a random
rotation, a Lloyd-Max codebook per coordinate, and optionally a 1-bit QJL sketch of the
residual for unbiased inner products."""

from __future__ import annotations

import math

import numpy as np

from ..._params import Integer
from ...encoding import ENCODINGS
from ..base import Quantizer
from ..encoded import EncodedVectors
from ..registry import register_quantizer
from .codebook import QJL_VALUES, boundaries_of, lloyd_max_codebook, lut_tables, lut_width
from .codebook import pack_codes as pack_stream
from .encoding import family_of, groups_of

__all__ = ["TurboQuantQuantizer"]

# Rows encoded per chunk (bounds the float64 temporaries).
_CHUNK = 8192
# Queries whose tables are built at once in a scan (tables of 8-bit codes: 0.4 MB per query
# at d = 384).
QUERY_BATCH = 64


@register_quantizer
class TurboQuantQuantizer(Quantizer):
    """TurboQuant: near-optimal distortion from a rotation and a fixed scalar codebook.

    Parameters
    ----------
    bits : int
        Bits per coordinate: 1-8 (``variant="mse"``) or 2-8 (``"prod"``: ``bits - 1`` MSE
        bits and one QJL bit).
    variant : {"mse", "prod"}
        ``"mse"``: the codebook minimising the expected squared error (the estimate of an
        inner product shrinks toward 0: ``E<q, x̂> ≈ (1 - D) <q, x>``, ``D`` the distortion).
        ``"prod"``: the MSE code at ``bits - 1`` plus the signs of ``S r`` (``S`` a
        Gaussian d x d matrix, ``r`` the residual of the unit vector) and ``‖r‖``, which make
        the inner-product estimate unbiased (over ``S``).
    similarity : {"cosine", "dot_product", "euclidean", "max_inner_product"} or an alias
    rotation : {"dense", "hadamard", "block", None} or a Transform
        The random orthogonal transform (default: a dense Haar matrix, as the paper).
    seed : int, optional
        Seed of the rotation and of the QJL matrix.

    Attributes
    ----------
    codebook_ : float64 [2^m]
        Lloyd-Max centroids of one coordinate of a random unit vector in ``R^d`` (the Beta
        density ``∝ (1 - x²)^((d - 3)/2)``), ``m`` the MSE bits.
    qjl_ : float32 [d, d] or None
        The QJL matrix ``S`` (``prod``).

    Notes
    -----
    A vector ``x`` is stored as ``‖x‖`` and the codes of ``u = Πx / ‖x‖``: per coordinate the
    nearest centroid ``c[k_j]``; ``prod`` also stores ``γ = ‖u - c[k]‖`` and
    ``z = sign(S (u - c[k]))``. Estimates, with ``y = Πq``:

    * ``<q, x> ≈ ‖x‖ (<y, c[k]> + γ sqrt(π/2) / d · <S y, z>)`` (the second term: ``prod``);
    * ``‖q - x‖² ≈ ‖q‖² + ‖x‖² - 2 <q, x>`` with the stored (exact) ``‖x‖``.

    No centring (the method is data-oblivious): ``fit`` learns nothing from the data but its
    dimension. In an IVF the codes are of residuals ``x - c`` against the list centres.
    Storage: ``bits · ceil(d / 8)`` code bytes plus 4 (``mse``) or 8 (``prod``) bytes.

    Examples
    --------
    >>> import numpy as np, bbqlib
    >>> X = np.random.default_rng(0).normal(size=(500, 64)).astype(np.float32)
    >>> q = bbqlib.TurboQuantQuantizer(bits=4, similarity="euclidean", seed=0).fit(X)
    >>> q.encode(X).bytes_per_vector
    36
    """

    family = "turboquant"
    _param_names = ("bits", "variant", "similarity", "rotation", "seed")
    _transform_param = "rotation"
    _constraints = {"seed": [None, Integer()]}

    def __init__(self, bits: int = 4, variant: str = "mse", similarity: str = "cosine", *,
                 rotation="dense", seed: int | None = None):  # fmt: skip
        self.bits = bits
        self.variant = variant
        self.similarity = similarity
        self.rotation = rotation
        self.seed = seed

    # -- fitting ----------------------------------------------------------------------------
    def _encoding_for_params(self):
        return ENCODINGS.lookup(family_of(self.variant), self.bits, None)

    @classmethod
    def _encoding_for_state(cls, params: dict):
        return ENCODINGS.lookup(family_of(params["variant"]), params["bits"], None)

    @property
    def supported_query_bits(self) -> tuple:
        return (None,)

    def _fit_transformed(self, X: np.ndarray) -> None:
        d = X.shape[1]
        qjl = None
        if self.encoding_.variant == "prod":
            rng = np.random.default_rng([0 if self.seed is None else int(self.seed), 0x51])
            qjl = rng.standard_normal((d, d)).astype(np.float32)
        self._set_fitted(lloyd_max_codebook(d, self.encoding_.mse_bits), qjl)

    def _set_fitted(self, codebook, qjl) -> None:
        self.codebook_ = np.asarray(codebook, dtype=np.float64)
        self.qjl_ = None if qjl is None else np.ascontiguousarray(qjl, dtype=np.float32)
        self.centroid_dot_ = 0.0
        self._bounds = boundaries_of(self.codebook_)
        self._qjl64 = None if qjl is None else self.qjl_.astype(np.float64)

    def _fingerprint_parts(self) -> tuple:
        return (self.encoding_.variant, self.encoding_.doc_bits, self.similarity_.value,
                self.codebook_, self.qjl_)  # fmt: skip

    def _state(self) -> tuple[dict, dict]:
        arrays = {"codebook": self.codebook_}
        if self.qjl_ is not None:
            arrays["qjl"] = self.qjl_
        return {"variant": self.encoding_.variant}, arrays

    def _restore(self, params: dict, arrays: dict) -> None:
        qjl = arrays.get("qjl")
        self._set_fitted(np.array(arrays["codebook"]), None if qjl is None else np.array(qjl))

    # -- encoding ---------------------------------------------------------------------------
    @property
    def _prod(self) -> bool:
        return self.encoding_.variant == "prod"

    @property
    def _qjl_scale(self) -> float:
        """``sqrt(π/2) / d``: the QJL estimator's constant."""
        return math.sqrt(math.pi / 2.0) / self.dim_

    def code_rows(self, R: np.ndarray):
        """Codes of rows ``R`` (in the rotated frame): ``(packed uint8 [n, doc_bytes], norm
        [n], gamma [n], unit float64 [n, d])`` with ``unit`` the unit vector's estimate
        ``c[k] + γ sqrt(π/2)/d · Sᵀ z`` (``prod``) or ``c[k]``, as the scan scores it."""
        R = np.asarray(R, dtype=np.float64)
        n, d = R.shape
        groups = groups_of(d)
        norm = np.sqrt(np.einsum("ij,ij->i", R, R))
        U = R / np.where(norm > 0, norm, 1.0)[:, None]
        idx = np.searchsorted(self._bounds, U, side="right").astype(np.uint8)
        unit = self.codebook_[idx]
        parts = [pack_stream(idx, self.encoding_.mse_bits, groups)]
        gamma = np.zeros(n)
        if self._prod:
            resid = U - unit
            gamma = np.sqrt(np.einsum("ij,ij->i", resid, resid))
            signs = (resid @ self._qjl64.T) > 0
            parts.append(pack_stream(signs.astype(np.uint8), 1, groups))
            z = np.where(signs, 1.0, -1.0)
            unit = unit + (self._qjl_scale * gamma)[:, None] * (z @ self._qjl64)
        return np.concatenate(parts, axis=1), norm, gamma, unit

    def encode(self, X) -> EncodedVectors:
        """``bits · ceil(d / 8)`` code bytes and the norm (and ``gamma``) per vector."""
        self._check_fitted()
        X = self._rotated(self._validated(X, "X"))
        n = len(X)
        enc = self.encoding_
        codes = np.empty((n, enc.doc_bytes(self.dim_)), dtype=np.uint8)
        corr = np.zeros(n, dtype=enc.corrections_dtype)
        for s0 in range(0, n, _CHUNK):
            s1 = min(n, s0 + _CHUNK)
            codes[s0:s1], norm, gamma, _ = self.code_rows(X[s0:s1])
            corr["norm"][s0:s1] = norm
            if self._prod:
                corr["gamma"][s0:s1] = gamma
        return EncodedVectors(codes, corr, enc, self.dim_, 0.0, self.fingerprint_)

    def _factors(self, norm, gamma, add) -> np.ndarray:
        """Factor rows float32 [n, 4]: ``(‖x‖, ‖x‖ γ sqrt(π/2)/d, add, 0)``."""
        f = np.zeros((len(norm), 4), dtype=np.float32)
        f[:, 0] = norm
        if self._prod:
            f[:, 1] = np.float64(norm) * gamma * self._qjl_scale
        f[:, 2] = add
        return f

    def _doc_rows(self, enc: EncodedVectors):
        """``(codes, factors)`` of encoded docs as the kernels read them (cached on ``enc``)."""
        key = ("turboquant_rows", self.fingerprint_)
        if key not in enc._cache:
            c = enc.corrections
            norm = c["norm"].astype(np.float64)
            gamma = c["gamma"].astype(np.float64) if self._prod else np.zeros(len(enc))
            add = norm * norm if self.similarity_.is_distance else np.zeros(len(enc))
            enc._cache[key] = (np.ascontiguousarray(enc.codes), self._factors(norm, gamma, add))
        return enc._cache[key]

    # -- queries ----------------------------------------------------------------------------
    def tables(self, Y: np.ndarray):
        """The query side of the scans for rows ``Y`` in the rotated frame: ``(tm, tq)``
        float32 tables (``tq`` of the projection ``S y`` for ``prod``, else empty)."""
        groups = groups_of(self.dim_)
        bits = self.encoding_.mse_bits
        tm = lut_tables(Y, self.codebook_, bits, groups)
        if self._prod:
            tq = lut_tables(np.asarray(Y, np.float64) @ self._qjl64.T, QJL_VALUES, 1, groups)
        else:
            tq = np.zeros((len(Y), 1, 1), dtype=np.float32)
        return tm, tq

    def _scan_args(self) -> tuple:
        """``(bits, w, groups, prod, is_l2)``: the kernels' fixed arguments."""
        bits = self.encoding_.mse_bits
        return (bits, lut_width(bits), groups_of(self.dim_), self._prod,
                self.similarity_.is_distance)  # fmt: skip

    def _query_adds(self, Qp: np.ndarray) -> np.ndarray:
        if not self.similarity_.is_distance:
            return np.zeros(len(Qp))
        Q64 = np.asarray(Qp, dtype=np.float64)
        return np.einsum("ij,ij->i", Q64, Q64)

    # -- the scoring API --------------------------------------------------------------------
    def estimate(self, Q, enc: EncodedVectors, *, return_bounds: bool = False, eps0=None):
        """Raw estimates [nq, n]: squared L2 (euclidean) or inner products (no bounds)."""
        if return_bounds:
            return super().estimate(Q, enc, return_bounds=True)
        from .scan import estimate_raw

        self._check_encoded(enc)
        Qp = self._validated(Q, "Q", allow_1d=True)
        return estimate_raw(self, Qp, enc).astype(np.float32)

    def topk_keys(self, Qp, enc: EncodedVectors, k: int, *, allowed=None, id_base: int = 0):
        """Top ``k`` per prepared query: ``(keys, ids)`` (TurboQuant's own flat scan)."""
        from .scan import topk_keys

        self._check_encoded(enc)
        return topk_keys(self, Qp, enc, k, allowed, id_base)

    def scorer(self, query, enc: EncodedVectors):
        """A callable ``score_ids(ids) -> float32`` of one query's estimates for chosen docs
        (equal to ``estimate(query, enc)[0, ids]``)."""
        from .scan import TurboQuantScorer

        self._check_encoded(enc)
        Qp = self._validated(query, "query", allow_1d=True)
        if len(Qp) != 1:
            raise ValueError(
                f"query must be one vector [d], got {len(Qp)} rows; make one scorer per query"
            )
        return TurboQuantScorer(self, Qp, enc)

    def scanner(self):
        """:class:`~bbqlib.quantizers.turboquant.scanner.TurboQuantScanner`."""
        from .scanner import TurboQuantScanner

        self._check_fitted()
        return TurboQuantScanner(self)

    # -- codes against list centres (IVF) ---------------------------------------------------
    def encode_pairs(self, W, rows, centres, lists):
        """Codes of the residuals ``W[rows[p]] - centres[lists[p]]`` and their factor rows
        ``(‖o‖, ‖o‖ γ sqrt(π/2)/d, add, 0)``: ``add = ‖o‖² + 2 <c, ô>`` (euclidean: the scan
        takes ``‖q - c‖² + add - 2 <q, ô>``) or 0 (the scan takes ``<q, c> + <q, ô>``)."""
        enc = self.encoding_
        m = len(rows)
        codes = np.empty((m, enc.doc_bytes(W.shape[1])), dtype=np.uint8)
        factors = np.empty((m, self.pair_factor_width), dtype=np.float32)
        for s0 in range(0, m, _CHUNK):
            s1 = min(m, s0 + _CHUNK)
            C = np.asarray(centres)[lists[s0:s1]].astype(np.float64)
            R = np.asarray(W)[rows[s0:s1]].astype(np.float64) - C
            codes[s0:s1], norm, gamma, unit = self.code_rows(R)
            add = np.zeros(s1 - s0)
            if self.similarity_.is_distance:
                add = norm * norm + 2.0 * norm * np.einsum("ij,ij->i", C, unit)
            factors[s0:s1] = self._factors(norm, gamma, add)
        return codes, factors

    def query_pairs(self, Qt, centres, pair_query, pair_list, *, lut: bool = False):
        """Not used: the list scan takes one table set per query for all its lists
        (:meth:`TurboQuantScanner.scan_pairs`)."""
        raise NotImplementedError("TurboQuant lists are scanned by TurboQuantScanner.scan_pairs")
