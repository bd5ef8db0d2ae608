"""Optimized scalar quantization (OSQ) of a batch of vectors, one row per thread.

Lucene/Elasticsearch's ``OptimizedScalarQuantizer``: an initial interval from the row's mean
and standard deviation, then up to ``iters`` closed-form coordinate-descent steps on the
anisotropic loss, then Java-style round-half-up codes. The NumPy reference is
``tests/reference/osq.py``.
"""

from __future__ import annotations

import math

import numpy as np

from .policy import kernel, parallel_kernel, prange

__all__ = ["MINIMUM_MSE_GRID", "osq_quantize"]

#: Half-widths of the MSE-optimal uniform quantizer of a standard normal, for 1..8 bits.
MINIMUM_MSE_GRID = np.array(
    [0.798, 1.493, 2.051, 2.514, 2.916, 3.278, 3.611, 3.922], dtype=np.float64
)


@kernel(inline="always")
def _java_round(t):
    # Java's Math.round: floor(t + 0.5), not NumPy's half-to-even.
    return math.floor(t + 0.5)


@kernel(inline="always")
def _grid_pass(x, a, b, levels, norm2, lam, sums, grid_points):
    """One pass at interval [a, b]: the loss, and the normal-equation sums into ``sums``.

    Fusing the two (Lucene computes them in separate passes over the same codes) halves the
    work of the optimizer without changing what it computes.
    """
    step = (b - a) / levels
    inv = levels / (b - a) if b != a else 0.0
    xe = 0.0
    e = 0.0
    daa = 0.0
    dab = 0.0
    dbb = 0.0
    dax = 0.0
    dbx = 0.0
    for i in range(x.shape[0]):
        xi = np.float64(x[i])
        k = _java_round((min(max(xi, a), b) - a) * inv)
        err = xi - (a + step * k)
        xe += xi * err
        e += err * err
        s = grid_points[int(k)]  # == k / levels, looked up: a division per element is slow
        daa += (1.0 - s) * (1.0 - s)
        dab += (1.0 - s) * s
        dbb += s * s
        dax += xi * (1.0 - s)
        dbx += xi * s
    sums[0] = daa
    sums[1] = dab
    sums[2] = dbb
    sums[3] = dax
    sums[4] = dbx
    return (1.0 - lam) * xe * xe / norm2 + lam * e


@parallel_kernel
def osq_quantize(
    X, centroid, bits, iters, lam, euclidean, codes, lower, upper, additional, component_sum
):
    """Quantize rows of ``X`` against ``centroid`` (outputs preallocated, one row each).

    Parameters
    ----------
    X : float32 [n, d]; centroid : float32 [d]
    bits : int, 1..8; iters : coordinate-descent steps (5 for docs, 1 for IVF queries)
    lam : anisotropic weight (0.1); euclidean : additional = ||v-c||² if True else <v, c>
    codes : uint8 [n, d]; lower, upper, additional : float32 [n]; component_sum : int64 [n]
    """
    n, d = X.shape
    levels = float((1 << bits) - 1)
    grid = MINIMUM_MSE_GRID[bits - 1]
    grid_points = np.arange(1 << bits).astype(np.float64) / levels
    for r in prange(n):
        x = np.empty(d, dtype=np.float32)
        sums = np.empty(5, dtype=np.float64)
        new_sums = np.empty(5, dtype=np.float64)
        total = 0.0
        norm2 = 0.0
        cdot = 0.0
        xmin = np.inf
        xmax = -np.inf
        for i in range(d):
            # Centring in float32, as Lucene does, then float64 accumulation.
            xi = X[r, i] - centroid[i]
            x[i] = xi
            total += xi
            norm2 += np.float64(xi) * xi
            cdot += np.float64(X[r, i]) * centroid[i]
            xmin = min(xmin, xi)
            xmax = max(xmax, xi)
        mean = total / d
        var = 0.0
        for i in range(d):
            var += (x[i] - mean) * (x[i] - mean)
        std = math.sqrt(var / d)
        a = np.float64(np.float32(min(max(-grid * std + mean, xmin), xmax)))
        b = np.float64(np.float32(min(max(grid * std + mean, xmin), xmax)))

        if norm2 > 0.0 and iters > 0:
            scale = (1.0 - lam) / norm2
            best = _grid_pass(x, a, b, levels, norm2, lam, sums, grid_points)
            for _ in range(iters):
                m0 = scale * sums[3] * sums[3] + lam * sums[0]
                m1 = scale * sums[3] * sums[4] + lam * sums[1]
                m2 = scale * sums[4] * sums[4] + lam * sums[2]
                det = m0 * m2 - m1 * m1
                if det == 0.0:
                    break
                a_new = np.float64(np.float32((m2 * sums[3] - m1 * sums[4]) / det))
                b_new = np.float64(np.float32((m0 * sums[4] - m1 * sums[3]) / det))
                if abs(a - a_new) < 1e-8 and abs(b - b_new) < 1e-8:
                    break
                loss = _grid_pass(x, a_new, b_new, levels, norm2, lam, new_sums, grid_points)
                if loss > best:
                    break
                a = a_new
                b = b_new
                best = loss
                sums[:] = new_sums

        step = (b - a) / levels
        ksum = 0
        for i in range(d):
            if step == 0.0:
                k = 0  # Java: round(NaN) == 0 when the interval collapses
            else:
                k = int(_java_round((min(max(np.float64(x[i]), a), b) - a) / step))
            codes[r, i] = k
            ksum += k
        lower[r] = a
        upper[r] = b
        additional[r] = norm2 if euclidean else cdot
        component_sum[r] = ksum
