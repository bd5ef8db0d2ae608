"""Plain NumPy references for int8 scalar quantization (per-dimension and Lucene's global).

Written from the published algorithms, not from bbqlib's code:

* per-dimension (faiss ``ScalarQuantizer`` ``QT_8bit``, ``RS_minmax``): per dimension
  ``vdiff = vmax - vmin``, code ``floor(levels · clip((x - vmin) / vdiff, 0, 1))``, decoded at
  the cell centre ``vmin + (code + 1/2) · vdiff / levels``. bbqlib stores the step and the
  centre offset as float32, ``scale = fl32(vdiff / levels)``, ``offset = fl32(vmin + scale/2)``,
  and decodes ``offset + scale · code``; :func:`per_dim_decode` follows that model.
* global (Lucene ``ScalarQuantizer``, 9.9 - 10.x): quantiles from chunks of 20 vectors,
  averaged; float32 ``alpha`` / ``scale``; ``Math.round`` codes; per-vector offset
  ``Σ a (v - a/2) + (dx - dxq) dxq`` summed in float32, as the Java code does.
"""

from __future__ import annotations

import numpy as np

f32 = np.float32


# ----------------------------------------------------------------------------- per-dimension
def per_dim_fit(X: np.ndarray, quantile: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per-dimension interval: min/max, or the central ``quantile`` fraction (linear)."""
    X = np.asarray(X, dtype=np.float32)
    if quantile is None or quantile == 1.0:
        return X.min(axis=0), X.max(axis=0)
    tail = (1.0 - quantile) / 2.0
    X64 = X.astype(np.float64)
    lo = [np.quantile(X64[:, i], tail) for i in range(X.shape[1])]
    hi = [np.quantile(X64[:, i], 1.0 - tail) for i in range(X.shape[1])]
    return np.array(lo, dtype=np.float32), np.array(hi, dtype=np.float32)


def per_dim_encode(X, vmin, vmax, bits: int = 8) -> np.ndarray:
    """Codes, one dimension at a time (zero-range dimensions: 0)."""
    levels = 2**bits - 1
    X = np.asarray(X, dtype=np.float64)
    codes = np.zeros(X.shape, dtype=np.uint8)
    for i in range(X.shape[1]):
        lo, hi = np.float64(vmin[i]), np.float64(vmax[i])
        scale = f32((hi - lo) / levels)
        if not scale > 0:
            continue
        t = np.minimum(np.maximum((X[:, i] - lo) / (hi - lo), 0.0), 1.0)
        codes[:, i] = np.floor(levels * t)
    return codes


def per_dim_decode(codes, vmin, vmax, bits: int = 8) -> np.ndarray:
    """float64 ``x̂ = offset + scale · code`` (see the module docstring)."""
    levels = 2**bits - 1
    lo = np.asarray(vmin, dtype=np.float32).astype(np.float64)
    scale = ((np.asarray(vmax, dtype=np.float32).astype(np.float64) - lo) / levels).astype(f32)
    scale = np.where(scale > 0, scale, f32(0))
    offset = (lo + 0.5 * scale.astype(np.float64)).astype(f32)
    return offset.astype(np.float64) + scale.astype(np.float64) * codes


# ----------------------------------------------------------------------------- global (Lucene)
def lucene_quantiles(values: np.ndarray, ci: float) -> tuple[float, float]:
    """``ScalarQuantizer.getUpperAndLowerQuantile`` of one chunk of values."""
    arr = np.sort(np.asarray(values, dtype=np.float32).ravel())
    n = arr.size
    k = int(f32(n) * (f32(1) - f32(ci)) / f32(2) + f32(0.5))
    middle = arr[k : n - k] if k > 0 and n > 2 else arr
    return float(middle.min()), float(middle.max())


def global_fit(X: np.ndarray, ci: float) -> tuple[float, float]:
    """Lucene ``fromVectors`` on at most 25,000 vectors (no sampling here): quantiles of every
    chunk of 20 vectors, averaged in double; ``ci = 1`` takes the plain min and max."""
    X = np.asarray(X, dtype=np.float32)
    if ci == 1.0:
        return float(X.min()), float(X.max())
    chunk = min(20, len(X))
    lowers, uppers = [], []
    for start in range(0, len(X) - chunk + 1, chunk):
        lo, hi = lucene_quantiles(X[start : start + chunk], ci)
        lowers.append(lo)
        uppers.append(hi)
    return float(f32(np.sum(lowers) / len(lowers))), float(f32(np.sum(uppers) / len(uppers)))


def global_quantize(X, lower: float, upper: float, bits: int, euclidean: bool):
    """Lucene ``ScalarQuantizer.quantize`` row by row in float32: ``(codes, offsets)``."""
    levels = f32(2**bits - 1)
    lo, hi = f32(lower), f32(upper)
    width = hi - lo
    scale = levels / width if width > 0 else f32(0)
    alpha = width / levels if width > 0 else f32(0)
    X = np.asarray(X, dtype=np.float32)
    codes = np.zeros(X.shape, dtype=np.uint8)
    offsets = np.zeros(len(X), dtype=np.float32)
    for r, v in enumerate(X):
        dx = v - lo
        dxc = np.minimum(np.maximum(v, lo), hi) - lo
        dxs = scale * dxc
        k = np.floor(dxs.astype(np.float64) + 0.5)
        dxq = k.astype(np.float32) * alpha
        codes[r] = k
        terms = lo * (v - lo / f32(2)) + (dx - dxq) * dxq
        acc = f32(0)
        for t in terms:  # Java's float accumulator
            acc = f32(acc + t)
        offsets[r] = 0.0 if euclidean else acc
    return codes, offsets, float(alpha)


def global_scores(q_codes, q_off, d_codes, d_off, alpha: float, euclidean: bool) -> np.ndarray:
    """Lucene's raw scores [nq, n]: ``α² ||X - Y||²`` or ``α² <X, Y> + o_y + o_x`` (float64)."""
    Y = np.asarray(q_codes, dtype=np.int64)
    X = np.asarray(d_codes, dtype=np.int64)
    a2 = np.float64(alpha) ** 2
    if euclidean:
        diff = Y[:, None, :] - X[None, :, :]
        return a2 * (diff * diff).sum(axis=2)
    return a2 * (Y @ X.T) + np.asarray(q_off, np.float64)[:, None] + np.asarray(d_off)[None, :]


# ----------------------------------------------------------------------------- kernels
def byte_dot(q: np.ndarray, d: np.ndarray) -> int:
    """``<X, Y>`` of two uint8 vectors in Python integers (no overflow possible)."""
    return int(np.dot(np.asarray(q, dtype=np.int64), np.asarray(d, dtype=np.int64)))
