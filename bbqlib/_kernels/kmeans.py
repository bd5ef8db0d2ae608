"""k-means kernels: nearest-centroid assignment, neighbourhood assignment, SOAR, centroid sums.

All distances are squared L2 computed from differences (``sum((x - c)**2)``), not through the
``||x||^2 - 2 x.c + ||c||^2`` expansion: for the centroid counts k-means uses (k <= ~130) the
4-candidate register-blocked loop below is faster than a float32 BLAS matmul per block
(``benchmarks/results/clustering.md``), and it does not lose digits to cancellation when
``x`` is far from the origin.

Tie rule everywhere: candidates are scanned in their listed order and a strictly smaller
computed distance wins, so among equal computed values the first listed candidate is kept
(exactly equal true distances may still round differently in the 4-wide and the tail loop).

Grouped kernels process vectors cluster by cluster (``rows[starts[g]:starts[g + 1]]`` are the
vectors whose current centroid is ``groups[g]``) so that a group's candidate centroids stay in
L2 cache while its members stream past, and so that ``prange`` over groups gives each thread
whole groups: results do not depend on the thread count.

Each parallel kernel has a ``*_serial`` twin running the same per-row code in one thread, for
calls too small to pay for waking the thread pool (the results are identical).
"""

from __future__ import annotations

import numpy as np

from .policy import kernel, parallel_kernel, prange

__all__ = [
    "nearest_centroid_kernel",
    "nearest_centroid_serial",
    "nearest_in_neighbourhood_kernel",
    "nearest_in_neighbourhood_serial",
    "soar_kernel",
    "soar_serial",
    "centroid_sums_kernel",
]

# Reassociation lets LLVM vectorize the float32 reductions; no nnan/ninf (inputs are validated
# finite by the callers, and we never want comparisons against NaN/inf folded away).
# Clustering publishes no estimator bias, so reordering the sums is harmless here.
_FASTMATH = {"reassoc", "contract", "nsz"}

# A vector is "on" its primary centroid when ||x - c1||^2 is at most this (ES's SOAR_MIN_DISTANCE).
SOAR_MIN_RESIDUAL = 1e-16


@kernel(fastmath=_FASTMATH)
def _sqdist(x, C, a):
    d = x.shape[0]
    s = np.float32(0.0)
    for t in range(d):
        u = x[t] - C[a, t]
        s += u * u
    return s


@kernel(fastmath=_FASTMATH)
def _sqdist4(x, C, a, b, c, e):
    d = x.shape[0]
    s0 = np.float32(0.0)
    s1 = np.float32(0.0)
    s2 = np.float32(0.0)
    s3 = np.float32(0.0)
    for t in range(d):
        v = x[t]
        u0 = v - C[a, t]
        u1 = v - C[b, t]
        u2 = v - C[c, t]
        u3 = v - C[e, t]
        s0 += u0 * u0
        s1 += u1 * u1
        s2 += u2 * u2
        s3 += u3 * u3
    return s0, s1, s2, s3


@kernel(fastmath=_FASTMATH)
def _nearest_listed(x, C, cand, best, best_id):
    """Scan centroids ``cand`` (in order) starting from ``(best, best_id)``; return the winner."""
    m = cand.shape[0]
    q = 0
    while q + 4 <= m:
        a = cand[q]
        b = cand[q + 1]
        c = cand[q + 2]
        e = cand[q + 3]
        s0, s1, s2, s3 = _sqdist4(x, C, a, b, c, e)
        if s0 < best:
            best = s0
            best_id = a
        if s1 < best:
            best = s1
            best_id = b
        if s2 < best:
            best = s2
            best_id = c
        if s3 < best:
            best = s3
            best_id = e
        q += 4
    while q < m:
        a = cand[q]
        s = _sqdist(x, C, a)
        if s < best:
            best = s
            best_id = a
        q += 1
    return best, best_id


@parallel_kernel(fastmath=_FASTMATH)
def nearest_centroid_kernel(X, C, out):
    """``out[i] = argmin_j ||X[i] - C[j]||^2`` over all centroids (first index on ties).

    X float32 [n, d], C float32 [k, d] (k >= 1), out int32 [n].
    """
    order = np.arange(C.shape[0]).astype(np.int32)
    for i in prange(X.shape[0]):
        _, best_id = _nearest_listed(X[i], C, order, np.float32(np.inf), np.int32(0))
        out[i] = best_id


@kernel(fastmath=_FASTMATH)
def nearest_centroid_serial(X, C, out):
    """Single-threaded :func:`nearest_centroid_kernel` (same per-row code, same results).

    For small calls: a parallel region costs a thread wake-up, and on a busy machine a
    scheduler time slice, which dwarfs a few thousand distance evaluations.
    """
    order = np.arange(C.shape[0]).astype(np.int32)
    for i in range(X.shape[0]):
        _, best_id = _nearest_listed(X[i], C, order, np.float32(np.inf), np.int32(0))
        out[i] = best_id


@kernel(fastmath=_FASTMATH)
def _neighbourhood_group(X, C, rows, lo, hi, c, cand, out):
    for p in range(lo, hi):
        i = rows[p]
        x = X[i]
        s = _sqdist(x, C, c)
        _, best_id = _nearest_listed(x, C, cand, s, c)
        out[i] = best_id


@parallel_kernel(fastmath=_FASTMATH)
def nearest_in_neighbourhood_kernel(X, C, rows, starts, groups, neigh, out):
    """Nearest centroid among a vector's current centroid and that centroid's neighbours.

    For group g with current centroid ``c = groups[g]`` and every row ``i`` in
    ``rows[starts[g]:starts[g + 1]]``: candidates are ``c`` first, then ``neigh[c, :]`` in order;
    ``out[i]`` receives the winner (the current centroid is kept on ties).

    X float32 [n, d], C float32 [k, d], rows int64 [n'], starts int64 [G + 1], groups int32 [G],
    neigh int32 [k, m], out int32 [n] (only the listed rows are written).
    """
    for g in prange(groups.shape[0]):
        c = groups[g]
        _neighbourhood_group(X, C, rows, starts[g], starts[g + 1], c, neigh[c], out)


@kernel(fastmath=_FASTMATH)
def nearest_in_neighbourhood_serial(X, C, rows, starts, groups, neigh, out):
    """Single-threaded :func:`nearest_in_neighbourhood_kernel`."""
    for g in range(groups.shape[0]):
        c = groups[g]
        _neighbourhood_group(X, C, rows, starts[g], starts[g + 1], c, neigh[c], out)


@kernel(fastmath=_FASTMATH)
def _dot4(r, D, q):
    d = r.shape[0]
    p0 = np.float32(0.0)
    p1 = np.float32(0.0)
    p2 = np.float32(0.0)
    p3 = np.float32(0.0)
    for t in range(d):
        v = r[t]
        p0 += v * D[q, t]
        p1 += v * D[q + 1, t]
        p2 += v * D[q + 2, t]
        p3 += v * D[q + 3, t]
    return p0, p1, p2, p3


@kernel(fastmath=_FASTMATH)
def _dot1(r, D, q):
    d = r.shape[0]
    p = np.float32(0.0)
    for t in range(d):
        p += r[t] * D[q, t]
    return p


@kernel
def _soar_value(rr, p, dd, lam):
    # With r = x - c1 and D = c - c1:  ||x - c||^2 = rr - 2p + dd  and  <r, x - c> = rr - p.
    # Working on residual-scale quantities avoids the cancellation of the ||x||^2 expansion.
    rr64 = np.float64(rr)
    p64 = np.float64(p)
    dist = rr64 - 2.0 * p64 + np.float64(dd)
    if rr64 <= SOAR_MIN_RESIDUAL:
        return dist
    proj = rr64 - p64
    return dist + lam * proj * proj / rr64


@kernel(fastmath=_FASTMATH)
def _soar_group(X, C, rows, lo, hi, c1, cand, lam, out):
    d = X.shape[1]
    m = cand.shape[0]
    # Candidate offsets D = c - c1 and their norms, shared by the whole group.
    D = np.empty((m, d), dtype=np.float32)
    dd = np.empty(m, dtype=np.float32)
    for q in range(m):
        s = np.float32(0.0)
        for t in range(d):
            u = C[cand[q], t] - C[c1, t]
            D[q, t] = u
            s += u * u
        dd[q] = s
    r = np.empty(d, dtype=np.float32)
    for pos in range(lo, hi):
        i = rows[pos]
        rr = np.float32(0.0)
        for t in range(d):
            u = X[i, t] - C[c1, t]
            r[t] = u
            rr += u * u
        best = np.inf
        best_q = 0
        q = 0
        while q + 4 <= m:
            p0, p1, p2, p3 = _dot4(r, D, q)
            v = _soar_value(rr, p0, dd[q], lam)
            if v < best:
                best = v
                best_q = q
            v = _soar_value(rr, p1, dd[q + 1], lam)
            if v < best:
                best = v
                best_q = q + 1
            v = _soar_value(rr, p2, dd[q + 2], lam)
            if v < best:
                best = v
                best_q = q + 2
            v = _soar_value(rr, p3, dd[q + 3], lam)
            if v < best:
                best = v
                best_q = q + 3
            q += 4
        while q < m:
            v = _soar_value(rr, _dot1(r, D, q), dd[q], lam)
            if v < best:
                best = v
                best_q = q
            q += 1
        out[i] = cand[best_q]


@parallel_kernel(fastmath=_FASTMATH)
def soar_kernel(X, C, rows, starts, groups, neigh, lam, out):
    """SOAR secondary assignment, group by group of primary centroid.

    For group g with primary ``c1 = groups[g]``, each row ``i`` in its slice gets
    ``out[i] = argmin over c in neigh[c1, :]`` of
    ``||x - c||^2 + lam * <r, x - c>^2 / ||r||^2`` with ``r = x - c1`` (plain ``||x - c||^2``
    when ``||r||^2 <= 1e-16``). ``neigh[c1]`` must not contain ``c1``. First listed wins ties.

    X float32 [n, d], C float32 [k, d], rows int64, starts int64 [G + 1], groups int32 [G],
    neigh int32 [k, m] (m >= 1), lam float64, out int32 [n].
    """
    for g in prange(groups.shape[0]):
        c1 = groups[g]
        _soar_group(X, C, rows, starts[g], starts[g + 1], c1, neigh[c1], lam, out)


@kernel(fastmath=_FASTMATH)
def soar_serial(X, C, rows, starts, groups, neigh, lam, out):
    """Single-threaded :func:`soar_kernel`."""
    for g in range(groups.shape[0]):
        c1 = groups[g]
        _soar_group(X, C, rows, starts[g], starts[g + 1], c1, neigh[c1], lam, out)


@kernel
def centroid_sums_kernel(X, assign, sums):
    """``sums[assign[i]] += X[i]`` in float64, accumulated in row order.

    Serial on purpose: one pass over contiguous rows vectorizes and is memory-bound;
    splitting the dimensions across threads is slower (``benchmarks/ivf/clustering.py``
    times Lloyd's iterations), and splitting rows would make the float64 sums depend on the
    thread count.

    X float32 [n, d], assign int32 [n] (values in [0, k)), sums float64 [k, d] (caller zeroes).
    """
    n = X.shape[0]
    d = X.shape[1]
    for i in range(n):
        a = assign[i]
        for t in range(d):
            sums[a, t] += X[i, t]
