"""int8 scalar quantization on the shared correction algebra and kernels.

Three ways to map floats to bytes, one API (``fit`` / ``encode`` / ``estimate`` /
``similarity_scores`` / :class:`~bbqlib.FlatIndex`):

``"osq"``
    Per-vector optimized scalar quantization at 8 bits with 8-bit queries (Lucene 10.4's
    ``UNSIGNED_BYTE`` encoding, Elasticsearch's current ``int8``): exactly
    :class:`~bbqlib.BBQQuantizer` with ``bits=8``, which this class delegates to.
``"per_dim"``
    One ``[min, max]`` (or quantile) interval per dimension fitted on the data, as faiss
    ``SQ8``; float queries are scored against the uint8 codes.
``"global"``
    Lucene 9.9's ``ScalarQuantizer`` (Elasticsearch ``int8_hnsw`` before BBQ): one interval
    for every value, from averaged quantiles, and a per-vector offset correction.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from .. import scoring
from .._validation import check_vectors, prepare_for_similarity
from ..encoding import Encoding, get_encoding
from ..similarity import Similarity, resolve_similarity
from .base import Quantizer
from .bbq import BBQQuantizer, _make_transform
from .encoded import EncodedVectors
from .registry import register_quantizer

__all__ = ["ScalarQuantizer", "METHODS", "lucene_confidence_interval"]

#: Quantization methods of :class:`ScalarQuantizer`.
METHODS = ("osq", "per_dim", "global")
#: Bits per dimension supported by every method (8: int8; 7: Lucene / Elasticsearch int7).
_BITS = (7, 8)
#: per_dim stores no per-vector corrections (||x̂||² and ΣX are recomputed from the codes).
NO_CORRECTIONS = np.dtype([])
#: global stores Lucene's float32 score offset for the inner-product similarities.
OFFSET_CORRECTIONS = np.dtype([("additional", "<f4")])
#: Lucene's quantile sample: 25,000 vectors, quantiles averaged over chunks of 20 vectors.
GLOBAL_SAMPLE_SIZE = 25_000
GLOBAL_CHUNK = 20
#: Rows encoded per NumPy pass (bounds float64 temporaries to about 25 MB at d = 384).
_ROWS = 8192


def lucene_confidence_interval(dim: int) -> float:
    """Lucene's default confidence interval, ``max(0.9, 1 - 1 / (dim + 1))``."""
    return max(0.9, 1.0 - 1.0 / (int(dim) + 1))


@register_quantizer
class ScalarQuantizer(Quantizer):
    """int8 (or int7) scalar quantization: per-vector OSQ, per-dimension or global scales.

    Parameters
    ----------
    bits : {8, 7}
        Bits per stored dimension; 7 reproduces Lucene/Elasticsearch ``int7``.
    method : {"osq", "per_dim", "global"}
        ``"osq"`` (default): Lucene's per-vector optimized interval around the data mean,
        16 bytes of corrections, byte queries. ``"per_dim"``: faiss ``SQ8``-style per-dimension
        interval, no corrections, float queries. ``"global"``: Lucene 9.9's one interval from
        quantiles plus a 4-byte score offset per vector (none for euclidean), byte queries.
    similarity : {"cosine", "dot_product", "euclidean", "max_inner_product"} or an alias
    query_bits : {"auto", None, 4, 7, 8}
        ``"auto"``: ``bits`` for ``osq`` and ``global``, float queries (None) for ``per_dim``.
        ``osq`` takes any query width of the encoding table; ``per_dim`` also takes 4, 7 or
        8 (the scaled query ``s ∘ u`` is min/max-quantized, so the integer kernel runs);
        ``global`` quantizes queries on its own grid, so only ``bits`` is accepted.
    precondition : {None, "dense", "block", "hadamard", True} or a Transform
        Random orthogonal transform applied to docs and queries first (any method).
    seed : int, optional
        Seed of the preconditioner and of ``global``'s row sample (default 42, as Lucene).
    quantile : float in (0, 1], optional
        Central fraction of values the interval keeps (``per_dim``: per dimension, default 1.0 =
        min/max as faiss ``SQ8``; ``global``: Lucene's ``confidence_interval``, default
        ``max(0.9, 1 - 1/(d+1))``). Not used by ``osq``.

    Attributes
    ----------
    encoding_ : Encoding
        ``osq``: the table row ``(bits, query_bits)``. ``per_dim`` / ``global``: the same row
        with the corrections they store (0 bytes, or 4 for ``global`` inner products).
    vmin_, vmax_, scale_, offset_ : float32 [d]
        ``per_dim``: the interval, ``scale = (vmax - vmin) / (2^bits - 1)`` and
        ``offset = vmin + scale / 2``. Codes are faiss's ``floor(levels · t)`` with ``t`` the
        clipped position in the interval, dequantized at cell centres,
        ``x̂_i = offset_i + scale_i · X_i``. A zero-range dimension has ``scale_i = 0``,
        codes 0 and ``x̂_i = vmin_i``.
    lower_, upper_, alpha_ : float
        ``global``: the interval and its step ``(upper - lower) / (2^bits - 1)``.
    bbq_ : BBQQuantizer
        ``osq``: the fitted quantizer every call is delegated to.

    Notes
    -----
    Every method fits the affine algebra of :mod:`bbqlib._kernels.scoring`. ``per_dim``: with
    ``m = offset``, ``y = s ∘ u``, ``⟨x̂, u⟩ = ⟨m, u⟩ + ⟨X, y⟩``, so doc rows are
    ``(0, 1, ΣX, ||x̂||² or 0)``
    and float query rows ``(0, 1, Σy, ⟨m, u⟩)`` for inner products or
    ``(0, 1, Σy, ||u||² - 2⟨m, u⟩)`` for euclidean (``d² = ||u||² + ||x̂||² - 2⟨x̂, u⟩``).
    ``global`` (Lucene ``ScalarQuantizer``): codes ``round((clamp(v) - a) / α)``, score
    ``α²⟨X, Y⟩ + o_x + o_y`` with ``o = Σ_i a(v_i - a/2) + (dx_i - dxq_i) dxq_i``, i.e. rows
    ``(0, α, 0, o)``; euclidean ``α²||X - Y||²``, rows ``(0, α, 0, α²||X||²)``.

    Examples
    --------
    >>> import numpy as np, bbqlib
    >>> X = np.random.default_rng(0).normal(size=(1000, 64)).astype(np.float32)
    >>> q = bbqlib.ScalarQuantizer(method="per_dim", similarity="euclidean").fit(X)
    >>> enc = q.encode(X)
    >>> enc.bytes_per_vector
    64
    >>> q.estimate(X[:2], enc).shape
    (2, 1000)
    """

    _param_names = ("bits", "method", "similarity", "query_bits", "precondition", "seed",
                    "quantile")  # fmt: skip

    def __init__(
        self,
        bits: int = 8,
        method: str = "osq",
        similarity: str = "cosine",
        query_bits: int | None | str = "auto",
        *,
        precondition=None,
        seed: int | None = None,
        quantile: float | None = None,
    ):
        self.bits = bits
        self.method = method
        self.similarity = similarity
        self.query_bits = query_bits
        self.precondition = precondition
        self.seed = seed
        self.quantile = quantile

    # -- validation ---------------------------------------------------------------------------
    def _check_params(self) -> tuple[Encoding, Similarity]:
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {list(METHODS)}, got {self.method!r}")
        if isinstance(self.bits, bool) or self.bits not in _BITS:
            raise ValueError(
                f"bits must be 8 (int8) or 7 (Lucene int7), got {self.bits!r}; for 1, 2 or 4 "
                "bits use bbqlib.BBQQuantizer"
            )
        similarity = resolve_similarity(self.similarity)
        qb = self.query_bits
        if self.method == "osq":
            if self.quantile is not None:
                raise ValueError(
                    f"quantile={self.quantile!r} does not apply to method='osq' (it picks an "
                    "interval per vector); leave it None or use method='per_dim' or 'global'"
                )
            return get_encoding(self.bits, qb), similarity
        if self.quantile is not None:
            q = self.quantile
            if isinstance(q, bool) or not isinstance(q, (int, float, np.floating)):
                raise TypeError(f"quantile must be a float in (0, 1] or None, got {q!r}")
            if not 0.0 < float(q) <= 1.0:
                raise ValueError(f"quantile must be in (0, 1] (1 = min/max), got {q!r}")
        if self.method == "per_dim":
            encoding = get_encoding(self.bits, None if qb == "auto" else qb)
            dtype = NO_CORRECTIONS
        else:
            if qb not in ("auto", self.bits) or isinstance(qb, bool):
                raise ValueError(
                    f"method='global' quantizes queries on the docs' grid, so query_bits must "
                    f"be 'auto' or {self.bits}, got {qb!r}"
                )
            encoding = get_encoding(self.bits, self.bits)
            dtype = NO_CORRECTIONS if similarity.is_distance else OFFSET_CORRECTIONS
        return dataclasses.replace(encoding, corrections_dtype=dtype), similarity

    # -- fitting ------------------------------------------------------------------------------
    def fit(self, X) -> ScalarQuantizer:
        """Validate the parameters and learn the method's grid (or the OSQ centroid)."""
        encoding, similarity = self._check_params()
        if self.method == "osq":
            bbq = BBQQuantizer(
                bits=self.bits,
                query_bits=self.query_bits,
                similarity=self.similarity,
                precondition=self.precondition,
                seed=self.seed,
            ).fit(X)
            self._adopt(bbq)
            return self
        X = prepare_for_similarity(check_vectors(X, "X"), similarity, "X")
        transform = _make_transform(self.precondition, X.shape[1], self.seed)
        if transform is not None:
            X = transform.transform(X)
        levels = 2**self.bits - 1
        if self.method == "per_dim":
            grid = _fit_per_dim(X, levels, self.quantile)
        else:
            ci = lucene_confidence_interval(X.shape[1]) if self.quantile is None else self.quantile
            grid = _fit_global(X, levels, float(ci), 42 if self.seed is None else self.seed)
        self._set_fitted(encoding, similarity, X.shape[1], grid, transform)
        return self

    def _adopt(self, bbq: BBQQuantizer) -> None:
        self.bbq_ = bbq
        self.encoding_ = bbq.encoding_
        self.similarity_ = bbq.similarity_
        self.dim_ = bbq.dim_
        self.transform_ = bbq.transform_
        self.centroid_ = bbq.centroid_
        self.centroid_dot_ = bbq.centroid_dot_
        self.fingerprint_ = bbq.fingerprint_  # codes are interchangeable with BBQQuantizer(8)

    def _set_fitted(self, encoding, similarity, dim, grid: dict, transform) -> None:
        self.encoding_ = encoding
        self.similarity_ = similarity
        self.dim_ = int(dim)
        self.transform_ = transform
        self.centroid_dot_ = 0.0
        self.levels_ = 2**encoding.doc_bits - 1
        if self.method == "per_dim":
            vmin, scale, offset = per_dim_grid(grid["vmin"], grid["vmax"], self.levels_)
            self.vmin_, self.scale_, self.offset_ = _frozen(vmin), _frozen(scale), _frozen(offset)
            self.vmax_ = _frozen(grid["vmax"])
            parts = (self.vmin_, self.vmax_)
        else:
            self.lower_ = float(np.float32(grid["lower"]))
            self.upper_ = float(np.float32(grid["upper"]))
            self.alpha_, self.inv_alpha_ = _global_steps(self.lower_, self.upper_, self.levels_)
            parts = (np.float32(self.lower_), np.float32(self.upper_))
        self.fingerprint_ = self._fingerprint(
            self.method,
            encoding.doc_bits,
            similarity.value,
            *parts,
            None if transform is None else transform.fingerprint(),
        )

    # -- encoding -----------------------------------------------------------------------------
    def _rotated(self, X: np.ndarray) -> np.ndarray:
        return X if self.transform_ is None else self.transform_.transform(X)

    def encode(self, X) -> EncodedVectors:
        """Quantize docs: ``d`` code bytes plus the method's corrections (16, 0 or 4 bytes)."""
        self._check_fitted()
        if self.method == "osq":
            return self.bbq_.encode(X)
        X = self._rotated(self._validated(X, "X"))
        corrections = np.zeros(len(X), dtype=self.encoding_.corrections_dtype)
        if self.method == "per_dim":
            codes = per_dim_codes(X, self.vmin_, self.vmax_, self.scale_, self.levels_)
        else:
            codes, offsets = self._global_codes(X)
            if not self.similarity_.is_distance:
                corrections["additional"] = offsets
        return EncodedVectors(codes, corrections, self.encoding_, self.dim_, 0.0, self.fingerprint_)

    def _global_codes(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return global_codes(X, self.lower_, self.upper_, self.alpha_, self.inv_alpha_,
                            self.levels_)  # fmt: skip

    def _doc_codes(self, enc: EncodedVectors) -> scoring.DocCodes:
        if self.method == "osq":
            return self.bbq_._doc_codes(enc)
        codes = np.ascontiguousarray(enc.codes)
        factors = np.zeros((len(enc), 4), dtype=np.float32)
        l2 = self.similarity_.is_distance
        if self.method == "per_dim":
            factors[:, 1] = 1.0
            factors[:, 2] = codes.sum(axis=1, dtype=np.int64)
            if l2:
                factors[:, 3] = per_dim_norms(codes, self.offset_, self.scale_)
        else:
            factors[:, 1] = self.alpha_
            if l2:
                factors[:, 3] = self.alpha_**2 * _square_sums(codes)
            else:
                factors[:, 3] = enc.corrections["additional"]
        return scoring.DocCodes("bytes", codes, factors, 0, enc.dim, 0.0, l2)

    def _query_codes(self, Q: np.ndarray) -> scoring.QueryCodes:
        if self.method == "osq":
            return self.bbq_._query_codes(Q)
        Q = self._rotated(Q)
        factors = np.zeros((len(Q), 4), dtype=np.float64)
        l2 = self.similarity_.is_distance
        if self.method == "global":
            codes, offsets = self._global_codes(Q)
            factors[:, 1] = self.alpha_
            factors[:, 3] = self.alpha_**2 * _square_sums(codes) if l2 else offsets
            return scoring.QueryCodes("bytes", codes, factors)
        # per_dim: y = s ∘ u carries the scales; <m, u> and ||u||² go into add_y.
        y = np.ascontiguousarray(Q * self.scale_, dtype=np.float32)
        mu = Q.astype(np.float64) @ self.offset_.astype(np.float64)
        if l2:
            factors[:, 3] = np.einsum("ij,ij->i", Q, Q, dtype=np.float64) - 2.0 * mu
        else:
            factors[:, 3] = mu
        qb = self.encoding_.query_bits
        if qb is None:
            factors[:, 1] = 1.0
            factors[:, 2] = y.sum(axis=1, dtype=np.float64)
            return scoring.QueryCodes("float", y, factors)
        codes, lower, step = minmax_codes(y, 2**qb - 1)
        factors[:, 0] = lower
        factors[:, 1] = step
        factors[:, 2] = codes.sum(axis=1, dtype=np.int64)
        return scoring.QueryCodes("bytes", codes, factors)

    # -- state for files ----------------------------------------------------------------------
    def get_state(self) -> tuple[dict, dict]:
        """``(params, arrays)`` that :meth:`from_state` turns back into this fitted quantizer."""
        self._check_fitted()
        params = {
            "class": type(self).__name__,
            "method": self.method,
            "bits": self.encoding_.doc_bits,
            "query_bits": self.encoding_.query_bits,
            "similarity": self.similarity_.value,
            "seed": self.seed,
            "quantile": None if self.quantile is None else float(self.quantile),
            "dim": self.dim_,
            "fingerprint": self.fingerprint_,
            "transform": None,
        }
        if self.method == "osq":
            params["bbq"], arrays = self.bbq_.get_state()
            return params, arrays
        if self.method == "per_dim":
            arrays = {"vmin": np.asarray(self.vmin_), "vmax": np.asarray(self.vmax_)}
        else:
            arrays = {"interval": np.array([self.lower_, self.upper_], dtype=np.float32)}
        if self.transform_ is not None:
            t_params, t_arrays = self.transform_.get_state()
            params["transform"] = t_params
            arrays.update({f"transform.{k}": v for k, v in t_arrays.items()})
        return params, arrays

    @classmethod
    def from_state(cls, params: dict, arrays: dict) -> ScalarQuantizer:
        method = params["method"]
        if method == "osq":
            bbq = BBQQuantizer.from_state(params["bbq"], arrays)
            q = cls(
                bits=params["bits"],
                method="osq",
                similarity=params["similarity"],
                query_bits=params["query_bits"],
                precondition=bbq.transform_,
                seed=params["seed"],
            )
            q._adopt(bbq)
            return q
        transform = None
        if params.get("transform"):
            from ..transforms import transform_from_state

            t_arrays = {
                k.split(".", 1)[1]: v for k, v in arrays.items() if k.startswith("transform.")
            }
            transform = transform_from_state(params["transform"], t_arrays)
        q = cls(
            bits=params["bits"],
            method=method,
            similarity=params["similarity"],
            query_bits=params["query_bits"],
            precondition=transform,
            seed=params["seed"],
            quantile=params["quantile"],
        )
        encoding, similarity = q._check_params()
        if method == "per_dim":
            grid = {"vmin": arrays["vmin"], "vmax": arrays["vmax"]}
        else:
            lower, upper = np.asarray(arrays["interval"], dtype=np.float32)
            grid = {"lower": lower, "upper": upper}
        q._set_fitted(encoding, similarity, params["dim"], grid, transform)
        if q.fingerprint_ != params["fingerprint"]:
            raise ValueError("quantizer state is inconsistent (fingerprint mismatch)")
        return q


# --------------------------------------------------------------------------------- per_dim
def _frozen(a) -> np.ndarray:
    a = np.array(a, dtype=np.float32)
    a.flags.writeable = False
    return a


def _fit_per_dim(X: np.ndarray, levels: int, quantile: float | None) -> dict:
    if quantile is None or float(quantile) == 1.0:
        lo = X.min(axis=0)
        hi = X.max(axis=0)
    else:
        tail = (1.0 - float(quantile)) / 2.0
        lo, hi = np.quantile(X.astype(np.float64), [tail, 1.0 - tail], axis=0)
    return {"vmin": lo, "vmax": hi}


def per_dim_grid(vmin, vmax, levels: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """float32 ``(vmin, scale, offset)`` of faiss's grid ``x̂ = vmin + scale · (X + 1/2)``.

    ``scale = (vmax - vmin) / levels``; ``offset = vmin + scale / 2`` is the ``m`` of
    ``x̂ = m + scale · X``. A zero (or float32-underflowing) range gives ``scale = 0``, so
    the codes are 0 and ``x̂_i = vmin_i``: no division by zero, no NaN.
    """
    lo = np.asarray(vmin, dtype=np.float32)
    width = np.asarray(vmax, dtype=np.float32).astype(np.float64) - lo
    scale = (width / levels).astype(np.float32)
    scale[~(scale > 0)] = 0.0
    offset = (lo + 0.5 * scale.astype(np.float64)).astype(np.float32)
    return lo, scale, offset


def per_dim_codes(X: np.ndarray, vmin, vmax, scale, levels: int) -> np.ndarray:
    """uint8 codes ``floor(levels · clip((x - vmin) / (vmax - vmin), 0, 1))``, as faiss SQ8.

    Dimensions with ``scale = 0`` (zero range) get code 0.
    """
    codes = np.empty(X.shape, dtype=np.uint8)
    live = scale > 0
    m = vmin.astype(np.float64)
    width = np.where(live, vmax.astype(np.float64) - m, 1.0)
    for r0 in range(0, len(X), _ROWS):
        t = np.clip((X[r0 : r0 + _ROWS].astype(np.float64) - m) / width, 0.0, 1.0)
        t = np.floor(levels * t)
        t[:, ~live] = 0
        codes[r0 : r0 + _ROWS] = t
    return codes


def minmax_codes(y: np.ndarray, levels: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-row min/max quantization: codes ``round((y - lo) / step)``, ``lo``, ``step``.

    ``y ≈ lo + step · Y`` with ``step = (max - min) / levels`` (0 for a constant row, whose
    codes are 0). Used for per_dim's quantized queries, where it keeps more recall than
    OSQ's clipped interval (0.990 vs 0.974 on spacy-wordvec-300, 8-bit queries).
    """
    lo = y.min(axis=1).astype(np.float64)
    step = (y.max(axis=1).astype(np.float64) - lo) / levels
    div = np.where(step > 0, step, 1.0)
    t = np.floor((y - lo[:, None]) / div[:, None] + 0.5)
    codes = np.clip(t, 0, levels).astype(np.uint8)
    return codes, lo, step


def per_dim_norms(codes: np.ndarray, offset: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """``||x̂||²`` (float64 [n]) of per_dim codes, ``x̂ = offset + scale · X``."""
    out = np.empty(len(codes), dtype=np.float64)
    m = offset.astype(np.float64)
    s = scale.astype(np.float64)
    for r0 in range(0, len(codes), _ROWS):
        xh = m + s * codes[r0 : r0 + _ROWS]
        out[r0 : r0 + _ROWS] = np.einsum("ij,ij->i", xh, xh)
    return out


# --------------------------------------------------------------------------------- global
def _fit_global(X: np.ndarray, levels: int, ci: float, seed: int) -> dict:
    """Lucene ``ScalarQuantizer.fromVectors``: quantiles averaged over 20-vector chunks."""
    if ci == 1.0:
        return {"lower": X.min(), "upper": X.max()}
    n = len(X)
    if n > GLOBAL_SAMPLE_SIZE:
        rows = np.sort(np.random.default_rng(seed).choice(n, GLOBAL_SAMPLE_SIZE, replace=False))
        X = X[rows]
        n = GLOBAL_SAMPLE_SIZE
    chunk = min(GLOBAL_CHUNK, n)
    # Like Lucene, a last partial chunk is left out.
    values = np.sort(X[: n - n % chunk].reshape(n // chunk, -1), axis=1)
    lower, upper = chunk_quantiles(values, ci)
    return {"lower": lower.mean(dtype=np.float64), "upper": upper.mean(dtype=np.float64)}


def chunk_quantiles(sorted_rows: np.ndarray, ci: float) -> tuple[np.ndarray, np.ndarray]:
    """Lucene's ``getUpperAndLowerQuantile`` of every (sorted) row."""
    length = sorted_rows.shape[1]
    f32 = np.float32
    k = int(f32(length) * (f32(1) - f32(ci)) / f32(2) + f32(0.5))
    if length <= 2 or k >= length - k:
        k = 0
    return sorted_rows[:, k], sorted_rows[:, length - k - 1]


def _global_steps(lower: float, upper: float, levels: int) -> tuple[float, float]:
    """Lucene's float32 ``alpha = (upper - lower) / levels`` and ``scale = levels / (upper -
    lower)``; both 0 when the interval is empty (every code is then 0)."""
    width = np.float32(upper) - np.float32(lower)
    if not width > 0:
        return 0.0, 0.0
    return float(width / np.float32(levels)), float(np.float32(levels) / width)


def global_codes(X, lower, upper, alpha, inv_alpha, levels) -> tuple[np.ndarray, np.ndarray]:
    """Lucene ``ScalarQuantizer.quantize``: codes and the float64 score offsets.

    Codes are ``round(scale · (clamp(v, a, b) - a))`` in float32 arithmetic as Lucene; the offset
    ``Σ_i a (v_i - a/2) + (dx_i - dxq_i) dxq_i`` is summed in float64.
    """
    lo, hi = np.float32(lower), np.float32(upper)
    al, sc = np.float64(np.float32(alpha)), np.float32(inv_alpha)
    codes = np.empty(X.shape, dtype=np.uint8)
    offsets = np.empty(len(X), dtype=np.float64)
    for r0 in range(0, len(X), _ROWS):
        v = X[r0 : r0 + _ROWS]
        dxs = sc * (np.clip(v, lo, hi) - lo)
        k = np.clip(np.floor(dxs.astype(np.float64) + 0.5), 0, levels)
        codes[r0 : r0 + _ROWS] = k
        v64 = v.astype(np.float64)
        dx = v64 - np.float64(lo)
        dxq = k * al
        terms = np.float64(lo) * (v64 - np.float64(lo) / 2.0) + (dx - dxq) * dxq
        offsets[r0 : r0 + _ROWS] = terms.sum(axis=1)
    return codes, offsets


def _square_sums(codes: np.ndarray) -> np.ndarray:
    """``Σ_i X_i²`` per row, exact (int64)."""
    out = np.empty(len(codes), dtype=np.int64)
    for r0 in range(0, len(codes), _ROWS):
        c = codes[r0 : r0 + _ROWS].astype(np.int32)
        out[r0 : r0 + _ROWS] = np.einsum("ij,ij->i", c, c, dtype=np.int64)
    return out
