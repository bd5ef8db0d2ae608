"""Optimized scalar quantization (spec §1) in plain NumPy, vectorized over rows.

Lucene/Elasticsearch ``OptimizedScalarQuantizer``, step by step:

1. centre on the centroid, ``x = v - c`` (in float32, as Lucene does);
2. row statistics: mean, population std, ``‖x‖²``, min, max, and ``⟨v, c⟩``;
3. initial interval ``[a, b] = clamp(mean ∓ g_B · std, xmin, xmax)`` (``MINIMUM_MSE_GRID``);
4. up to ``iters`` closed-form coordinate-descent steps on the anisotropic loss
   ``L(a, b) = (1-λ) ⟨x, x - x̂⟩² / ‖x‖² + λ ‖x - x̂‖²``, stopping when the normal equations
   are singular, when the interval no longer moves (``< 1e-8``), or when the loss would grow
   (the worse interval is not accepted);
5. codes by Java's ``Math.round`` (``floor(t + 0.5)``), all zero when ``b == a``;
6. corrections ``(a, b, ‖x‖² or ⟨v, c⟩, Σk)``.

Arithmetic follows ``bbqlib._kernels.osq`` operation by operation (float32 centring, interval
ends rounded to float32 but combined in float64, float64 everywhere else, left-to-right sums
through ``np.cumsum``) so that codes and intervals agree bit for bit; only the loop structure
differs (rows in parallel as arrays, rows dropping out of the optimization through a mask).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = [
    "MINIMUM_MSE_GRID",
    "OSQReference",
    "java_round",
    "seq_sum",
    "initial_interval",
    "osq_loss",
    "osq_reference",
    "dequantize",
]

#: Half-widths of the MSE-optimal uniform quantizer of N(0, 1), bits 1..8 (spec §1.2).
MINIMUM_MSE_GRID = (0.798, 1.493, 2.051, 2.514, 2.916, 3.278, 3.611, 3.922)


class OSQReference(NamedTuple):
    codes: np.ndarray  # uint8 [n, d]
    lower: np.ndarray  # float32 [n]
    upper: np.ndarray  # float32 [n]
    additional: np.ndarray  # float32 [n]
    component_sum: np.ndarray  # int64 [n]
    iterations: np.ndarray  # int64 [n]: accepted coordinate-descent steps per row


def java_round(t: np.ndarray) -> np.ndarray:
    """Java's ``Math.round``: ``floor(t + 0.5)`` (ties go up, unlike NumPy's half-to-even)."""
    return np.floor(t + 0.5)


def seq_sum(a: np.ndarray) -> np.ndarray:
    """Row sums accumulated left to right in float64, as a scalar loop does.

    ``np.sum`` adds pairwise, which differs in the last bits; ``np.cumsum`` is sequential.
    """
    a = np.asarray(a, dtype=np.float64)
    if a.shape[1] == 0:
        return np.zeros(a.shape[0])
    return np.cumsum(a, axis=1)[:, -1]


def _clamp(x: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.minimum(np.maximum(x, a[:, None]), b[:, None])


def initial_interval(x: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """``clamp(mean ∓ g_B·std, xmin, xmax)`` of centred rows ``x`` (float64), float32 values."""
    d = x.shape[1]
    mean = seq_sum(x) / d
    diff = x - mean[:, None]
    std = np.sqrt(seq_sum(diff * diff) / d)
    g = MINIMUM_MSE_GRID[bits - 1]
    xmin, xmax = x.min(axis=1), x.max(axis=1)
    a = np.minimum(np.maximum(-g * std + mean, xmin), xmax).astype(np.float32)
    b = np.minimum(np.maximum(g * std + mean, xmin), xmax).astype(np.float32)
    return a, b


def _grid(a, b, levels: float):
    """``step = (b - a) / levels`` and its inverse ``levels / (b - a)`` (0 when b == a)."""
    width = b - a
    with np.errstate(divide="ignore"):
        inv = np.where(width != 0.0, levels / np.where(width != 0.0, width, 1.0), 0.0)
    return width / levels, inv


def osq_loss(x, a, b, levels: float, norm2, lam: float) -> np.ndarray:
    """Anisotropic loss (spec §1.3) of intervals ``[a, b]`` per row of ``x`` (float64)."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    step, inv = _grid(a, b, levels)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        k = java_round((_clamp(x, a, b) - a[:, None]) * inv[:, None])
        q = a[:, None] + step[:, None] * k
        err = x - q
        xe = seq_sum(x * err)
        e = seq_sum(err * err)
        return (1.0 - lam) * xe * xe / norm2 + lam * e


def osq_reference(
    X: np.ndarray,
    centroid: np.ndarray,
    bits: int,
    *,
    euclidean: bool,
    iters: int = 5,
    lam: float = 0.1,
) -> OSQReference:
    """Quantize every row of ``X`` against ``centroid`` with ``bits`` bits (spec §1).

    Parameters
    ----------
    X : float [n, d] (cast to float32); centroid : float [d] (cast to float32)
    bits : 1..8
    euclidean : additional correction ``‖v - c‖²`` if True, else ``⟨v, c⟩``
    iters, lam : coordinate-descent steps and anisotropic weight (Lucene: 5 and 0.1)
    """
    X = np.asarray(X, dtype=np.float32)
    c = np.asarray(centroid, dtype=np.float32)
    n, d = X.shape
    levels = float(2**bits - 1)

    x = (X - c).astype(np.float64)  # float32 centring, then float64
    norm2 = seq_sum(x * x)
    cdot = seq_sum(X.astype(np.float64) * c.astype(np.float64))
    a32, b32 = initial_interval(x, bits)
    a, b = a32.astype(np.float64), b32.astype(np.float64)

    active = (norm2 > 0.0) & (iters > 0)  # norm2 == 0: nothing to optimize
    scale = (1.0 - lam) / np.where(active, norm2, 1.0)
    best = osq_loss(x, a, b, levels, norm2, lam)
    iterations = np.zeros(n, dtype=np.int64)

    for _ in range(iters):
        rows = np.flatnonzero(active)
        if rows.size == 0:
            break
        xr, ar, br = x[rows], a[rows], b[rows]
        _, inv = _grid(ar, br, levels)
        s = java_round((_clamp(xr, ar, br) - ar[:, None]) * inv[:, None]) / levels
        daa = seq_sum((1.0 - s) * (1.0 - s))
        dab = seq_sum((1.0 - s) * s)
        dbb = seq_sum(s * s)
        dax = seq_sum(xr * (1.0 - s))
        dbx = seq_sum(xr * s)
        sc = scale[rows]
        # Normal equations of the loss for fixed assignments (spec §1.4).
        m0 = sc * dax * dax + lam * daa
        m1 = sc * dax * dbx + lam * dab
        m2 = sc * dbx * dbx + lam * dbb
        det = m0 * m2 - m1 * m1
        singular = det == 0.0
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            safe = np.where(singular, 1.0, det)
            # the new ends are rounded to float32, as Lucene stores them
            a_new = ((m2 * dax - m1 * dbx) / safe).astype(np.float32).astype(np.float64)
            b_new = ((m0 * dbx - m1 * dax) / safe).astype(np.float32).astype(np.float64)
            unmoved = (np.abs(ar - a_new) < 1e-8) & (np.abs(br - b_new) < 1e-8)
        loss = osq_loss(xr, a_new, b_new, levels, norm2[rows], lam)
        worse = loss > best[rows]
        accept = ~(singular | unmoved | worse)
        took = rows[accept]
        a[took], b[took], best[took] = a_new[accept], b_new[accept], loss[accept]
        iterations[took] += 1
        active[rows[~accept]] = False

    step = (b - a) / levels
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (_clamp(x, a, b) - a[:, None]) / np.where(step != 0.0, step, 1.0)[:, None]
    # Java: Math.round(NaN) == 0 when the interval collapses (b == a).
    k = np.where(step[:, None] != 0.0, java_round(t), 0.0)
    codes = k.astype(np.uint8)
    return OSQReference(
        codes=codes,
        lower=a.astype(np.float32),
        upper=b.astype(np.float32),
        additional=(norm2 if euclidean else cdot).astype(np.float32),
        component_sum=codes.sum(axis=1, dtype=np.int64),
        iterations=iterations,
    )


def dequantize(codes: np.ndarray, lower, upper, bits: int) -> np.ndarray:
    """Centred reconstruction ``x̂ = a + k (b - a) / (2^B - 1)`` in float64 [n, d]."""
    a = np.asarray(lower, dtype=np.float64)[:, None]
    b = np.asarray(upper, dtype=np.float64)[:, None]
    return a + np.asarray(codes, dtype=np.float64) * (b - a) / (2**bits - 1)
