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

__all__ = ["exact_candidates"]


@kernel(inline="always")
def _row(vectors, ids, cols, t):
    """Row ``ids[cols[t]]`` of ``vectors``, C-contiguous (copied only when strided)."""
    return np.ascontiguousarray(vectors[ids[cols[t]]])


@kernel(inline="always")
def _score(query, rows, is_l2, cols, t, out_row):
    """Values of ``query`` with the tuple ``rows`` into ``out_row[cols[t : t + len(rows)]]``."""
    values = lane_sqdists(query, rows) if is_l2 else lane_dots(query, rows)
    for a in range(len(rows)):
        out_row[cols[t + a]] = values[a]


#: Candidate components (candidates x dimension) per thread: about 0.5 ms of work each
#: (0.1-0.3 ns per component, rows in cache or not).
RERANK_PER_THREAD = 2_000_000


def _rerank_work(queries, vectors, cand, is_l2, out) -> int:
    return cand.size * queries.shape[1]


@parallel_kernel(work=_rerank_work, min_work=RERANK_PER_THREAD)
def exact_candidates(queries, vectors, cand, is_l2, out):
    """Exact raw values (d² or ip) of ``queries[q]`` and ``vectors[cand[q, j]]``, float64 sums.

    ``queries`` float32 [nq, d] C-contiguous; ``vectors`` float32 or float64 [n, d], any 2-D
    array (a read-only memory map, a view): rows with unit stride are read in place, other
    rows copied. ``cand`` int64 [nq, m]; candidates < 0 (padding) get ``nan``.
    """
    nq, kk = cand.shape
    valid = np.empty((nq, kk), dtype=np.int64)  # per query, the valid candidates' columns
    for q in prange(nq):
        query, ids, cols, res = queries[q], cand[q], valid[q], out[q]
        m = 0
        for j in range(kk):
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
            _score(query, rows, is_l2, cols, t, res)
            t += 8
        if t + 4 <= m:
            rows4 = (
                _row(vectors, ids, cols, t),
                _row(vectors, ids, cols, t + 1),
                _row(vectors, ids, cols, t + 2),
                _row(vectors, ids, cols, t + 3),
            )
            _score(query, rows4, is_l2, cols, t, res)
            t += 4
        if t + 2 <= m:
            rows2 = (_row(vectors, ids, cols, t), _row(vectors, ids, cols, t + 1))
            _score(query, rows2, is_l2, cols, t, res)
            t += 2
        if t < m:
            _score(query, (_row(vectors, ids, cols, t),), is_l2, cols, t, res)
