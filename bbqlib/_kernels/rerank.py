"""Exact rescoring of candidate lists on float vectors.

Every value is a lane sum of float64 terms (:mod:`bbqlib._kernels.lanes`): ``q_i v_i`` for the
inner product, ``(float64(q_i) - float64(v_i))²`` for the squared distance, in a fixed order
that does not depend on the machine, the thread count, or which candidates are scored
together. The NumPy twin is ``tests/reference/rerank.py``; the two agree bit for bit.

Candidate rows are random reads, so memory latency, not arithmetic, bounds the loop: a query's
valid candidates are scored 8 at a time, which keeps 8 rows' loads (and 8 accumulator chains)
in flight; the last group is padded with its last row. Fewer rows at a time leave the loop
waiting on memory; more, or software prefetch, gain nothing once 8 loads overlap (the
rerank columns of ``benchmarks/results/flat.md`` include this loop).
"""

from __future__ import annotations

import numpy as np

from .lanes import lane_dots, lane_sqdists
from .policy import kernel, parallel_kernel, prange

__all__ = [
    "exact_candidates",
    "exact_int8",
    "exact_dots",
    "exact_sqdists",
    "exact_cosines",
    "INNER_PRODUCT",
    "SQUARED_L2",
    "COSINE",
]

#: Modes of :func:`exact_candidates`: the inner product, the squared distance, or the inner
#: product over the doc's norm (cosine against raw docs; the query is unit length already).
INNER_PRODUCT, SQUARED_L2, COSINE = 0, 1, 2


@kernel(inline="always")
def _row(vectors, ids, cols, t):
    """Row ``ids[cols[t]]`` of ``vectors``, C-contiguous (copied only when strided)."""
    return np.ascontiguousarray(vectors[ids[cols[t]]])


@kernel(inline="always")
def _valid_columns(ids, res, cols) -> int:
    """Columns of the valid candidates (``ids >= 0``) into ``cols``; ``nan`` for the others."""
    m = 0
    for j in range(ids.shape[0]):
        if ids[j] < 0:
            res[j] = np.nan
        else:
            cols[m] = j
            m += 1
    return m


@kernel(inline="always")
def _query_rows(query, vectors, ids, cols, res, mode):
    """Score one query's valid candidates 8 rows at a time (module notes).

    The last group is padded with the last valid row again (its value is computed twice and
    written once): one 8-row body instead of bodies for 8, 4, 2 and 1 rows, which is what
    the first compile of this kernel costs. A value does not depend on its group.
    """
    m = _valid_columns(ids, res, cols)
    group = np.empty(8, dtype=np.int64)
    for t in range(0, m, 8):
        for a in range(8):
            group[a] = cols[min(t + a, m - 1)]
        rows = (
            _row(vectors, ids, group, 0),
            _row(vectors, ids, group, 1),
            _row(vectors, ids, group, 2),
            _row(vectors, ids, group, 3),
            _row(vectors, ids, group, 4),
            _row(vectors, ids, group, 5),
            _row(vectors, ids, group, 6),
            _row(vectors, ids, group, 7),
        )
        values = lane_sqdists(query, rows) if mode == SQUARED_L2 else lane_dots(query, rows)
        for a in range(min(8, m - t)):
            v = values[a]
            if mode == COSINE:
                v = v / np.sqrt(lane_dots(rows[a], (rows[a],))[0])
            res[group[a]] = v


@kernel
def _dots_range(queries, vectors, cand, valid, out, q0, q1):
    """Inner products of queries ``q0:q1`` with their candidates (:func:`_query_rows`).

    Not inlined: one compiled body serves the multi-threaded kernel (a call per query) and
    one-thread calls (all queries), so neither compiles the lane code twice.
    """
    for q in range(q0, q1):
        _query_rows(queries[q], vectors, cand[q], valid[q], out[q], INNER_PRODUCT)


@kernel
def _sqdists_range(queries, vectors, cand, valid, out, q0, q1):
    """Squared distances of queries ``q0:q1`` to their candidates (:func:`_query_rows`)."""
    for q in range(q0, q1):
        _query_rows(queries[q], vectors, cand[q], valid[q], out[q], SQUARED_L2)


@kernel
def _cosines_range(queries, vectors, cand, valid, out, q0, q1):
    """Cosines of queries ``q0:q1`` (unit length) with their raw candidate rows."""
    for q in range(q0, q1):
        _query_rows(queries[q], vectors, cand[q], valid[q], out[q], COSINE)


def _cosines_one_thread(queries, vectors, cand, out) -> None:
    _cosines_range(queries, vectors, cand, np.empty(cand.shape, np.int64), out, 0, cand.shape[0])


def _dots_one_thread(queries, vectors, cand, out) -> None:
    _dots_range(queries, vectors, cand, np.empty(cand.shape, np.int64), out, 0, cand.shape[0])


def _sqdists_one_thread(queries, vectors, cand, out) -> None:
    _sqdists_range(queries, vectors, cand, np.empty(cand.shape, np.int64), out, 0, cand.shape[0])


#: Candidate components (candidates x dimension) per thread: enough work to outweigh a
#: parallel region's fork and join whether the rows are in cache or not (docs/threads.md,
#: ``benchmarks/serving/serving.py --sections contention``).
RERANK_PER_THREAD = 2_000_000


def _rerank_work(queries, vectors, cand, out) -> int:
    return cand.size * queries.shape[1]


@parallel_kernel(work=_rerank_work, min_work=RERANK_PER_THREAD, serial=_dots_one_thread)
def exact_dots(queries, vectors, cand, out):
    """Inner products of ``queries[q]`` with ``vectors[cand[q, j]]`` (:func:`exact_candidates`)."""
    nq, kk = cand.shape
    valid = np.empty((nq, kk), dtype=np.int64)  # per query, the valid candidates' columns
    for q in prange(nq):
        _dots_range(queries, vectors, cand, valid, out, q, q + 1)


@parallel_kernel(work=_rerank_work, min_work=RERANK_PER_THREAD, serial=_sqdists_one_thread)
def exact_sqdists(queries, vectors, cand, out):
    """Squared distances of ``queries[q]`` to ``vectors[cand[q, j]]`` (:func:`exact_candidates`)."""
    nq, kk = cand.shape
    valid = np.empty((nq, kk), dtype=np.int64)
    for q in prange(nq):
        _sqdists_range(queries, vectors, cand, valid, out, q, q + 1)


@parallel_kernel(work=_rerank_work, min_work=RERANK_PER_THREAD, serial=_cosines_one_thread)
def exact_cosines(queries, vectors, cand, out):
    """Cosines of unit ``queries[q]`` with raw ``vectors[cand[q, j]]`` (candidate scorers)."""
    nq, kk = cand.shape
    valid = np.empty((nq, kk), dtype=np.int64)
    for q in prange(nq):
        _cosines_range(queries, vectors, cand, valid, out, q, q + 1)


# ---------------------------------------------------------------------- int8 stored rows
@kernel(inline="always")
def _dequantize_into(buf, a, codes, scales, i):
    """``buf[a] = float32(scales[i]) * float32(codes[i])``: the rows NumPy's dequantization
    (:func:`bbqlib.scoring.stored.stored_rows`) makes, value for value."""
    s = scales[i]
    row = codes[i]
    for j in range(row.shape[0]):
        buf[a, j] = s * np.float32(row[j])


@kernel
def _int8_range(queries, codes, scales, cand, valid, out, mode, q0, q1):
    """Exact values of queries ``q0:q1`` with int8 rows, 8 dequantized rows at a time into a
    scratch block, then the lane sums of :func:`_query_rows` (same values as float32 rows)."""
    buf = np.empty((8, codes.shape[1]), dtype=np.float32)
    for q in range(q0, q1):
        ids, res, cols = cand[q], out[q], valid[q]
        m = _valid_columns(ids, res, cols)
        for t in range(0, m, 8):
            for a in range(8):
                _dequantize_into(buf, a, codes, scales, ids[cols[min(t + a, m - 1)]])
            rows = (buf[0], buf[1], buf[2], buf[3], buf[4], buf[5], buf[6], buf[7])
            if mode == SQUARED_L2:
                values = lane_sqdists(queries[q], rows)
            else:
                values = lane_dots(queries[q], rows)
            for a in range(min(8, m - t)):
                v = values[a]
                if mode == COSINE:
                    v = v / np.sqrt(lane_dots(rows[a], (rows[a],))[0])
                res[cols[t + a]] = v


def _int8_work(queries, codes, scales, cand, mode, out) -> int:
    return cand.size * queries.shape[1]


def _int8_one_thread(queries, codes, scales, cand, mode, out) -> None:
    valid = np.empty(cand.shape, np.int64)
    _int8_range(queries, codes, scales, cand, valid, out, mode, 0, cand.shape[0])


@parallel_kernel(work=_int8_work, min_work=RERANK_PER_THREAD, serial=_int8_one_thread)
def exact_int8(queries, codes, scales, cand, mode, out):
    """:func:`exact_candidates` on int8 rows ``scales[i] * codes[i]`` (``codes`` int8 [n, d],
    ``scales`` float32 [n], any strides: the two fields of the stored int8 records)."""
    nq, kk = cand.shape
    valid = np.empty((nq, kk), dtype=np.int64)
    for q in prange(nq):
        _int8_range(queries, codes, scales, cand, valid, out, mode, q, q + 1)


_BY_MODE = {INNER_PRODUCT: exact_dots, SQUARED_L2: exact_sqdists, COSINE: exact_cosines}
_ONE_THREAD = {
    INNER_PRODUCT: _dots_one_thread,
    SQUARED_L2: _sqdists_one_thread,
    COSINE: _cosines_one_thread,
}


def exact_candidates(queries, vectors, cand, mode, out, *, parallel: bool = True) -> None:
    """Exact raw values (d² or ip) of ``queries[q]`` and ``vectors[cand[q, j]]``, float64 sums.

    ``queries`` float32 [nq, d] C-contiguous; ``vectors`` float32 or float64 [n, d] (or uint16:
    float16 bit patterns, :mod:`bbqlib._kernels.lanes`), any 2-D
    array (a read-only memory map, a view): rows with unit stride are read in place, other
    rows copied. ``cand`` int64 [nq, m]; candidates < 0 (padding) get ``nan``. ``mode``:
    :data:`INNER_PRODUCT`, :data:`SQUARED_L2` or :data:`COSINE`; ``parallel=False`` runs on
    the calling thread (one query from a scorer).

    One kernel per mode (:func:`exact_dots`, :func:`exact_sqdists`, :func:`exact_cosines`):
    a process compiles only the one its index uses.
    """
    if parallel:
        _BY_MODE[int(mode)](queries, vectors, cand, out)
    else:
        _ONE_THREAD[int(mode)](queries, vectors, cand, out)
