"""Exact rescoring of candidate lists on float vectors.

Every value is a lane sum of float64 terms (:mod:`bbqlib._kernels.lanes`): ``q_i v_i`` for the
inner product, ``(float64(q_i) - float64(v_i))²`` for the squared distance, in a fixed order
that does not depend on the machine, the thread count, or which candidates are scored
together. The NumPy twin is ``tests/reference/rerank.py``; the two agree bit for bit.

Candidate rows are random reads, so memory latency, not arithmetic, bounds the loop: a query's
valid candidates are scored 8 at a time, which keeps 8 rows' loads (and 8 accumulator chains)
in flight, and the last ``m mod 8`` in groups of 4, 2 and 1. On a Xeon (AVX-512), d = 384,
rows of a 93 MB memory map: ~100 ns per random row, ~33 ns per cached row; 4 rows at a time
took 1.15x as long, one at a time 2.3x, 16 at a time or software prefetch gained nothing.
"""

from __future__ import annotations

import numpy as np

from .lanes import lane_dots, lane_sqdists
from .policy import kernel, parallel_kernel, prange

__all__ = ["exact_candidates", "exact_candidates_serial", "INNER_PRODUCT", "SQUARED_L2", "COSINE"]

#: Modes: the inner product, the squared distance, or the inner product over the doc's norm
#: (cosine against raw docs; the query is unit length already).
INNER_PRODUCT, SQUARED_L2, COSINE = 0, 1, 2


@kernel(inline="always")
def _row(vectors, ids, cols, t):
    """Row ``ids[cols[t]]`` of ``vectors``, C-contiguous (copied only when strided)."""
    return np.ascontiguousarray(vectors[ids[cols[t]]])


@kernel(inline="always")
def _score(query, rows, mode, cols, t, out_row):
    """Values of ``query`` with the tuple ``rows`` into ``out_row[cols[t : t + len(rows)]]``."""
    if mode == SQUARED_L2:
        values = lane_sqdists(query, rows)
    else:
        values = lane_dots(query, rows)
    for a in range(len(rows)):
        v = values[a]
        if mode == COSINE:
            v = v / np.sqrt(lane_dots(rows[a], (rows[a],))[0])
        out_row[cols[t + a]] = v


@kernel(inline="always")
def _one_query(query, vectors, ids, mode, cols, res):
    """Exact values of one query with its candidate rows ``ids`` (< 0: ``nan``) into ``res``."""
    m = 0
    for j in range(ids.shape[0]):
        if ids[j] < 0:
            res[j] = np.nan
        else:
            cols[m] = j
            m += 1
    t = 0
    while t + 8 <= m:
        rows = (
            _row(vectors, ids, cols, t),
            _row(vectors, ids, cols, t + 1),
            _row(vectors, ids, cols, t + 2),
            _row(vectors, ids, cols, t + 3),
            _row(vectors, ids, cols, t + 4),
            _row(vectors, ids, cols, t + 5),
            _row(vectors, ids, cols, t + 6),
            _row(vectors, ids, cols, t + 7),
        )
        _score(query, rows, mode, cols, t, res)
        t += 8
    if t + 4 <= m:
        rows4 = (
            _row(vectors, ids, cols, t),
            _row(vectors, ids, cols, t + 1),
            _row(vectors, ids, cols, t + 2),
            _row(vectors, ids, cols, t + 3),
        )
        _score(query, rows4, mode, cols, t, res)
        t += 4
    if t + 2 <= m:
        rows2 = (_row(vectors, ids, cols, t), _row(vectors, ids, cols, t + 1))
        _score(query, rows2, mode, cols, t, res)
        t += 2
    if t < m:
        _score(query, (_row(vectors, ids, cols, t),), mode, cols, t, res)


@parallel_kernel
def exact_candidates(queries, vectors, cand, mode, out):
    """Exact raw values of ``queries[q]`` and ``vectors[cand[q, j]]``, float64 lane sums.

    ``queries`` float32 [nq, d] C-contiguous; ``vectors`` float32 or float64 [n, d], any 2-D
    array (a read-only memory map, a view): rows with unit stride are read in place, other
    rows copied. ``cand`` int64 [nq, m]; candidates < 0 (padding) get ``nan``. ``mode``:
    :data:`INNER_PRODUCT`, :data:`SQUARED_L2` or :data:`COSINE`. Parallel over queries.
    """
    nq, kk = cand.shape
    valid = np.empty((nq, kk), dtype=np.int64)  # per query, the valid candidates' columns
    for q in prange(nq):
        _one_query(queries[q], vectors, cand[q], mode, valid[q], out[q])


@kernel
def exact_candidates_serial(queries, vectors, cand, mode, out):
    """:func:`exact_candidates` on the calling thread (one query per call, no pool)."""
    valid = np.empty(cand.shape[1], dtype=np.int64)
    for q in range(cand.shape[0]):
        _one_query(queries[q], vectors, cand[q], mode, valid, out[q])
