"""Exact rescoring of candidate lists (``bbqlib._kernels.rerank``) in plain NumPy.

The value of query ``q`` and candidate row ``v = vectors[id]`` is a lane sum of float64 terms
(:func:`reference.osq.lane_sum`: lane ``j`` of 8 adds the terms ``8t + j`` in order, the lanes
are combined as ``((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))``, then the ``d mod 8``
trailing terms are added one by one):

* inner product: ``t_i = float64(q_i) · float64(v_i)`` (exact for float32 inputs);
* squared distance: ``t_i = e_i · e_i`` with ``e_i = float64(q_i) - float64(v_i)``.

Candidates < 0 are padding and get ``nan``. The kernel scores several candidates at once, but
each value is this sum of its own row alone, so the two agree bit for bit.
"""

from __future__ import annotations

import numpy as np

from .osq import lane_sum

__all__ = ["exact_candidates", "exact_terms"]


def exact_terms(queries: np.ndarray, vectors: np.ndarray, cand: np.ndarray, is_l2: bool):
    """float64 terms [nq, m, d] of every (query, candidate) pair; padding rows are zeros."""
    Q = np.asarray(queries, dtype=np.float64)
    V = np.asarray(vectors, dtype=np.float64)
    cand = np.asarray(cand, dtype=np.int64)
    nq, m = cand.shape
    rows = np.zeros((nq, m, Q.shape[1]))
    valid = cand >= 0
    rows[valid] = V[cand[valid]]
    if is_l2:
        diff = Q[:, None, :] - rows
        return diff * diff
    return Q[:, None, :] * rows


def exact_candidates(queries, vectors, cand, is_l2: bool) -> np.ndarray:
    """Exact raw values float64 [nq, m] (``d²`` if ``is_l2`` else ``ip``), ``nan`` for -1."""
    cand = np.asarray(cand, dtype=np.int64)
    terms = exact_terms(queries, vectors, cand, is_l2)
    nq, m, d = terms.shape
    sums = lane_sum(terms.reshape(nq * m, d)).reshape(nq, m)
    return np.where(cand >= 0, sums, np.nan)
