"""Lucene 9.9's int8: one interval for every value, from quantiles, and a score offset."""

from __future__ import annotations

import numpy as np

from ..._kernels.pairs import grid_pairs
from ...layouts.codes import DocCodes, QueryCodes
from ..base import _pair_args
from ..centre import without_outliers
from ..encoded import EncodedVectors
from ..registry import register_quantizer
from . import ScalarQuantizer

#: Rows encoded per NumPy pass (bounds float64 temporaries to about 25 MB at d = 384).
_ROWS = 8192

__all__ = ["GlobalScalarQuantizer", "chunk_quantiles", "global_codes", "GLOBAL_SAMPLE_SIZE"]

#: Lucene's quantile sample: 25,000 vectors, quantiles averaged over chunks of 20 vectors.
GLOBAL_SAMPLE_SIZE = 25_000
GLOBAL_CHUNK = 20


@register_quantizer
class GlobalScalarQuantizer(ScalarQuantizer, method="global"):
    """``ScalarQuantizer(method="global")``: see :class:`~bbqlib.ScalarQuantizer`.

    Attributes
    ----------
    lower_, upper_, alpha_ : float
        The interval and its step ``(upper - lower) / (2^bits - 1)``.

    Notes
    -----
    Lucene ``ScalarQuantizer``: codes ``round((clamp(v) - a) / α)``, score
    ``α²⟨X, Y⟩ + o_x + o_y`` with ``o = Σ_i a(v_i - a/2) + (dx_i - dxq_i) dxq_i``, i.e. rows
    ``(0, α, 0, o)`` of the correction algebra; euclidean ``α²||X - Y||²``, rows
    ``(0, α, 0, α²||X||²)``. Queries are quantized on the docs' grid.
    """

    family = "int8_global"

    def _fit_transformed(self, X: np.ndarray) -> None:
        from . import lucene_confidence_interval

        levels = 2**self.encoding_.doc_bits - 1
        ci = lucene_confidence_interval(X.shape[1]) if self.quantile is None else self.quantile
        seed = 42 if self.seed is None else self.seed
        # one far row must not stretch the interval (it would take its chunk's quantiles)
        lower, upper = _fit_global(without_outliers(X), float(ci), seed)
        self._set_interval(lower, upper, levels)

    def _set_interval(self, lower, upper, levels: int) -> None:
        self.levels_ = levels
        self.centroid_dot_ = 0.0
        self.lower_ = float(np.float32(lower))
        self.upper_ = float(np.float32(upper))
        self.alpha_, self.inv_alpha_ = _global_steps(self.lower_, self.upper_, levels)

    # -- codes against list centres (IVF) -----------------------------------------------------
    def fit_residuals(self, R: np.ndarray) -> None:
        """Refit the interval on residuals (their range is narrower than the data's)."""
        self._check_fitted()
        self._fit_transformed(np.ascontiguousarray(R, dtype=np.float32))
        self._seal()

    def encode_pairs(self, W, rows, centres, lists):
        """Residual codes on the global grid, ``r̂ = lower + α X``, with exact centre terms:
        rows ``(lower, α, ΣX, <x, c> or ||x - c||²)`` of the correction algebra (Lucene's
        per-vector offset correction is for codes without a centre and is not used here)."""
        m = rows.shape[0]
        codes = np.empty((m, W.shape[1]), dtype=np.uint8)
        factors = np.empty((m, 4), dtype=np.float32)
        factors[:, 0] = self.lower_
        factors[:, 1] = self.alpha_
        for r0 in range(0, m, _ROWS):
            V = W[rows[r0 : r0 + _ROWS]].astype(np.float64)
            C = centres[lists[r0 : r0 + _ROWS]].astype(np.float64)
            R = V - C
            c, _ = self._codes(R.astype(np.float32))
            codes[r0 : r0 + _ROWS] = c
            factors[r0 : r0 + _ROWS, 2] = c.sum(axis=1, dtype=np.int64)
            if self.similarity_.is_distance:
                factors[r0 : r0 + _ROWS, 3] = np.einsum("ij,ij->i", R, R)
            else:
                factors[r0 : r0 + _ROWS, 3] = np.einsum("ij,ij->i", V, C)
        return codes, factors

    def scanner(self):
        """Residual queries on the docs' grid."""
        from ..scanner import GridScanner

        self._check_fitted()
        return GridScanner(self)

    def query_pairs(self, Qt, centres, pair_query, pair_list, *, lut: bool = False):
        """Residual queries ``q - c`` per pair, on the same grid as the docs
        (:func:`bbqlib._kernels.pairs.grid_pairs`, which the one-query path calls too)."""
        codes = np.empty((len(pair_query), Qt.shape[1]), dtype=np.uint8)
        factors = np.empty((len(pair_query), 4), dtype=np.float64)
        if len(codes):
            grid_pairs(
                *_pair_args(Qt, centres, pair_query, pair_list), float(self.lower_),
                float(self.upper_), float(self.alpha_), float(self.inv_alpha_),
                int(self.levels_), bool(self.similarity_.is_distance), codes, factors,
            )  # fmt: skip
        return codes, factors

    def _fingerprint_parts(self) -> tuple:
        return ("global", self.encoding_.doc_bits, self.similarity_.value,
                np.float32(self.lower_), np.float32(self.upper_))  # fmt: skip

    def _state(self) -> tuple[dict, dict]:
        return {}, {"interval": np.array([self.lower_, self.upper_], dtype=np.float32)}

    def _restore(self, params: dict, arrays: dict) -> None:
        lower, upper = np.asarray(arrays["interval"], dtype=np.float32)
        self._set_interval(lower, upper, 2**self.encoding_.doc_bits - 1)

    def _codes(self, X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return global_codes(X, self.lower_, self.upper_, self.alpha_, self.inv_alpha_,
                            self.levels_)  # fmt: skip

    def encode(self, X) -> EncodedVectors:
        """Quantize docs: ``d`` code bytes plus the score offset (inner products only)."""
        self._check_fitted()
        X = self._rotated(self._validated(X, "X"))
        l2 = self.similarity_.is_distance
        corrections = np.zeros(len(X), dtype=self.encoding_.corrections(l2))
        codes, offsets = self._codes(X)
        if not l2:
            corrections["additional"] = offsets
        return EncodedVectors(codes, corrections, self.encoding_, self.dim_, 0.0, self.fingerprint_)

    def _doc_codes(self, enc: EncodedVectors) -> DocCodes:
        codes = np.ascontiguousarray(enc.codes)
        l2 = self.similarity_.is_distance
        factors = np.zeros((len(enc), 4), dtype=np.float32)
        factors[:, 1] = self.alpha_
        if l2:
            factors[:, 3] = self.alpha_**2 * _square_sums(codes)
        else:
            factors[:, 3] = enc.corrections["additional"]
        return DocCodes(enc.encoding, codes, factors, enc.dim, 0.0, l2)

    def _query_codes(self, Q: np.ndarray) -> QueryCodes:
        Q = self._rotated(Q)
        factors = np.zeros((len(Q), 4), dtype=np.float64)
        codes, offsets = self._codes(Q)
        factors[:, 1] = self.alpha_
        if self.similarity_.is_distance:
            factors[:, 3] = self.alpha_**2 * _square_sums(codes)
        else:
            factors[:, 3] = offsets
        return QueryCodes.of(self.encoding_, codes, factors)


def _fit_global(X: np.ndarray, ci: float, seed: int) -> tuple[float, float]:
    """Lucene ``ScalarQuantizer.fromVectors``: quantiles averaged over 20-vector chunks."""
    if ci == 1.0:
        return X.min(), X.max()
    n = len(X)
    if n > GLOBAL_SAMPLE_SIZE:
        rows = np.sort(np.random.default_rng(seed).choice(n, GLOBAL_SAMPLE_SIZE, replace=False))
        X = X[rows]
        n = GLOBAL_SAMPLE_SIZE
    chunk = min(GLOBAL_CHUNK, n)
    # Like Lucene, a last partial chunk is left out.
    values = np.sort(X[: n - n % chunk].reshape(n // chunk, -1), axis=1)
    lower, upper = chunk_quantiles(values, ci)
    return lower.mean(dtype=np.float64), upper.mean(dtype=np.float64)


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
