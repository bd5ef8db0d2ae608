"""SAQ query preparation: per-segment rounding of query rows, their 4-bit tables and constants.

A query row ``y`` (coded dimensions of SAQ's frame, float32) is rounded per segment ``s`` to
``top = 2^b - 1`` levels: ``lo_s = min y_s``, ``step_s = (max y_s - lo_s) / top`` (float64),
codes ``c = clip(rint((y - lo_s) / step_s), 0, top)`` (a constant segment, ``step_s = 0``,
divides by 1: every code 0), ``q̂_s = lo_s + step_s c`` and ``err_s = ‖q̂_s - y_s‖``.

:func:`fastscan_tables` does this at 4 bits and adds what the 4-bit lookup-table scans of
:mod:`bbqlib._kernels.saq_fastscan` read (its module doc): the nibble tables of the codes
(:func:`bbqlib._kernels.lut.tables_from_codes`) and per segment, for a first pass that reads
the top ``keep_s`` of the doc's ``B_s`` planes (``r_s = B_s - keep_s`` dropped), ``w_s =
2^r_s``, ``const_s = ((2^r_s - 1)/2 - (2^B_s - 1)/2) Σ q̂_s`` (``q̂`` as float32, as the float
path stores it), ``rounding_s = err_s / sqrt(d_s)`` and ``trunc_s = ‖y_s‖ sqrt((4^r_s - 1) /
12)``. :func:`round_queries` is the rounding alone at any width (``query_bits``), and
:func:`segment_constants` the float tables' constants ``(2^B_s - 1)/2 Σ y_s``.

Every sum runs sequentially over the segment's dimensions in float64 (one fixed order, so a
query's numbers do not depend on the batch it came in, the thread count or NumPy's pairwise
summation). ``tests/reference/saq.py`` holds the NumPy twins.

:func:`rotate_rows` puts query rows in SAQ's frame (``y = x @ F``, ``F`` the coded columns
of the PCA frame): each output is accumulated in float32 over the input dimensions in
order, ``y_j = (((0 + x_0 F_0j) + x_1 F_1j) + ...)``, one fixed order, so a query rotated
alone (inside the fused IVF call) equals its row of a batch bit for bit, which a BLAS product
of one row does not promise.
"""

from __future__ import annotations

import numpy as np

from .lut import tables_from_codes
from .policy import kernel, parallel_kernel, prange

__all__ = [
    "QUERY_FLOATS_PER_THREAD",
    "ROTATION_BLOCK",
    "ROTATION_WORK_PER_THREAD",
    "fastscan_tables",
    "rotate_block",
    "rotate_rows",
    "round_queries",
    "segment_constants",
]

#: Query floats per thread: enough work to outweigh a parallel region's fork and join
#: (docs/threads.md), so one query or a batch of a few hundred runs on the calling thread.
QUERY_FLOATS_PER_THREAD = 200_000
#: Multiply-adds of :func:`rotate_rows` per thread (about 20 queries of 384 x 256), by the
#: same rule.
ROTATION_WORK_PER_THREAD = 2_000_000
#: Query rows rotated together (each row of the frame read once per block, from L1).
ROTATION_BLOCK = 8


def _query_work(Qc, *rest) -> int:
    return Qc.shape[0] * Qc.shape[1]


def _rotation_work(X, F, out) -> int:
    return X.shape[0] * F.shape[0] * F.shape[1]


@kernel
def rotate_block(X, q0, q1, F, out):
    """``out[q, j] = Σ_i X[q, i] F[i, j]`` for rows ``q0 <= q < q1``, in float32, ``i`` in
    order (module doc); ``X`` float32 [nq, d], ``F`` float32 [d, m] C-contiguous, ``out``
    float32 [nq, m]. Four input dimensions per sweep over a row of ``out`` (the same sums in
    the same order, a quarter of its loads and stores) and every row of the block per four
    rows of ``F`` (read once per block); the sweep over ``j`` is what vectorizes."""
    d = F.shape[0]
    m = F.shape[1]
    for q in range(q0, q1):
        for j in range(m):
            out[q, j] = np.float32(0.0)
    i = 0
    while i + 4 <= d:
        f0 = F[i]
        f1 = F[i + 1]
        f2 = F[i + 2]
        f3 = F[i + 3]
        for q in range(q0, q1):
            x0 = np.float32(X[q, i])
            x1 = np.float32(X[q, i + 1])
            x2 = np.float32(X[q, i + 2])
            x3 = np.float32(X[q, i + 3])
            row = out[q]
            for j in range(m):
                row[j] = (((row[j] + x0 * f0[j]) + x1 * f1[j]) + x2 * f2[j]) + x3 * f3[j]
        i += 4
    while i < d:
        fi = F[i]
        for q in range(q0, q1):
            xi = np.float32(X[q, i])
            row = out[q]
            for j in range(m):
                row[j] = row[j] + xi * fi[j]
        i += 1


@parallel_kernel(work=_rotation_work, min_work=ROTATION_WORK_PER_THREAD)
def rotate_rows(X, F, out):
    """:func:`rotate_block` over blocks of :data:`ROTATION_BLOCK` rows: ``X`` float32
    [nq, d], ``out`` float32 [nq, m]."""
    n = X.shape[0]
    for b in prange((n + ROTATION_BLOCK - 1) // ROTATION_BLOCK):
        q0 = b * ROTATION_BLOCK
        rotate_block(X, q0, min(n, q0 + ROTATION_BLOCK), F, out)


@kernel(inline="always")
def _round_segment(y, p, d, top, out, codes):
    """Round ``y[p : p + d]`` to ``top + 1`` levels (module doc): ``q̂`` into ``out`` (float32)
    and the codes into ``codes`` at the same positions; returns ``(lo, step, err, Σ q̂)``
    (``Σ`` of the float32 ``q̂`` in float64)."""
    lo = np.float64(y[p])
    hi = lo
    for i in range(p + 1, p + d):
        v = np.float64(y[i])
        lo = min(lo, v)
        hi = max(hi, v)
    step = (hi - lo) / top
    div = step if step > 0.0 else 1.0
    err = 0.0
    total = 0.0
    for i in range(p, p + d):
        v = np.float64(y[i])
        c = np.rint((v - lo) / div)
        c = min(max(c, 0.0), np.float64(top))
        yq = lo + step * c
        out[i] = np.float32(yq)
        codes[i] = np.int64(c)
        e = yq - v
        err += e * e
        total += np.float64(out[i])
    return lo, step, np.sqrt(err), total


@kernel(inline="always")
def _segment_sums(y, p, d):
    """``(Σ y_i, Σ y_i²)`` over ``y[p : p + d]`` in float64, in order."""
    total = 0.0
    squares = 0.0
    for i in range(p, p + d):
        v = np.float64(y[i])
        total += v
        squares += v * v
    return total, squares


@parallel_kernel(work=_query_work, min_work=QUERY_FLOATS_PER_THREAD)
def round_queries(Qc, start, dims, top, out, codes, lo, step, err):
    """Round every segment of the rows of ``Qc`` float32 [nq, >= coded] to ``top + 1``
    levels: ``out`` float32 and ``codes`` (uint8 or uint16) [nq, >= coded] at the coded
    dimensions, ``lo``, ``step``, ``err`` float64 [nq, S]."""
    for q in prange(Qc.shape[0]):
        for s in range(start.shape[0]):
            lo[q, s], step[q, s], err[q, s], _ = _round_segment(
                Qc[q], start[s], dims[s], top, out[q], codes[q]
            )


@parallel_kernel(work=_query_work, min_work=QUERY_FLOATS_PER_THREAD)
def fastscan_tables(Qc, start, dims, bits, keep, tables, lo, step, w, const, rounding, trunc):
    """4-bit tables and per-segment constants of query rows (module doc).

    Parameters
    ----------
    Qc : float32 [nq, >= coded]; start, dims, bits, keep : int64 [S] (the plan's segments
    and the planes per segment the first pass reads)
    tables : uint8 [nq, 2 * coded / 8 * 32] (out); lo, step, w, const, rounding, trunc :
    float64 [nq, S] (out)
    """
    S_ = start.shape[0]
    coded = start[S_ - 1] + dims[S_ - 1] if S_ else 0
    for q in prange(Qc.shape[0]):
        qhat = np.empty(coded, dtype=np.float32)
        codes = np.zeros(coded, dtype=np.uint8)
        for s in range(S_):
            p = start[s]
            d = dims[s]
            lo[q, s], step[q, s], e, total = _round_segment(Qc[q], p, d, 15, qhat, codes)
            r = bits[s] - keep[s]
            w[q, s] = 2.0**r
            const[q, s] = ((2.0**r - 1.0) / 2.0 - (2.0 ** bits[s] - 1.0) / 2.0) * total
            rounding[q, s] = e / np.sqrt(np.float64(d))
            _, squares = _segment_sums(Qc[q], p, d)
            trunc[q, s] = np.sqrt(squares) * np.sqrt((4.0**r - 1.0) / 12.0)
        tables_from_codes(codes, coded // 8, tables[q])


@parallel_kernel(work=_query_work, min_work=QUERY_FLOATS_PER_THREAD)
def segment_constants(rows, start, dims, bits, qconst):
    """``qconst[q, s] = (2^B_s - 1)/2 · Σ rows[q, s's dimensions]`` (float64 [nq, S]) of
    float32 query rows [nq, >= coded]: the float lookup tables' constants."""
    for q in prange(rows.shape[0]):
        for s in range(start.shape[0]):
            total, _ = _segment_sums(rows[q], start[s], dims[s])
            qconst[q, s] = (2.0 ** bits[s] - 1.0) / 2.0 * total
