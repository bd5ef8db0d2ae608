"""Exact rescoring of candidate lists on float vectors."""

from __future__ import annotations

import numpy as np

from .policy import parallel_kernel, prange

__all__ = ["exact_candidates"]


@parallel_kernel
def exact_candidates(queries, vectors, cand, is_l2, out):
    """Exact raw values (d² or ip) of ``queries[q]`` and ``vectors[cand[q, j]]``, float64 sums.

    Candidates < 0 (padding) get ``nan``.
    """
    nq, kk = cand.shape
    d = queries.shape[1]
    for q in prange(nq):
        for j in range(kk):
            idx = cand[q, j]
            if idx < 0:
                out[q, j] = np.nan
                continue
            acc = 0.0
            if is_l2:
                for i in range(d):
                    diff = np.float64(queries[q, i]) - np.float64(vectors[idx, i])
                    acc += diff * diff
            else:
                for i in range(d):
                    acc += np.float64(queries[q, i]) * np.float64(vectors[idx, i])
            out[q, j] = acc
