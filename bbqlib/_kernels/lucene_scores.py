"""Lucene 10.5's float32 scorer (``Lucene104ScalarQuantizedVectorScorer.quantizedScore``):
dense scores and a top-k scan by score, over codes made by :mod:`bbqlib._kernels.osq_lucene`.
"""

from __future__ import annotations

import numpy as np

from .osq_lucene import (
    _EMPTY,
    SIM_EUCLIDEAN,
    SIM_MIP,
    _inline,
    _jmax,
    _jmin,
    _parallel,
    _serial,
)
from .policy import prange
from .scoring import byte_dot, plane_dot_q4

__all__ = ["lucene_scores_planes", "lucene_scores_bytes", "lucene_topk_planes", "lucene_topk_bytes"]


# ------------------------------------------------------------------------------ scorer
@_inline
def _raw(dot, qf, df, fdim, cdp, sim):
    """``quantizedScore`` up to the mapping: squared distance or inner product (float32).

    ``qf = (ay, ly, y1, add_y)``, ``df = (ax, lx, x1, add_x)`` float32, with
    ``l = (upper - lower) * SCALE_LUT[bits - 1]`` and the component sums as floats.
    """
    qc = np.float32(dot)
    ax = df[0]
    lx = df[1]
    ay = qf[0]
    ly = qf[1]
    score = ax * ay * fdim + ay * lx * df[2] + ax * ly * qf[2] + lx * ly * qc
    if sim == SIM_EUCLIDEAN:
        return (qf[3] + df[3]) - np.float32(2.0) * score
    return score + ((qf[3] + df[3]) - cdp)


@_inline
def _finish(raw, sim):
    """The similarity's mapping of :func:`_raw`, in float32 (Lucene's returned score)."""
    one = np.float32(1.0)
    if sim == SIM_EUCLIDEAN:
        return one / (one + _jmax(raw, np.float32(0.0)))
    if sim == SIM_MIP:
        if raw < np.float32(0.0):
            return one / (one + np.float32(-1.0) * raw)
        return raw + one
    return (one + _jmin(one, _jmax(raw, np.float32(-1.0)))) / np.float32(2.0)


@_serial
def _scores_row_planes(q, qf, dw, df, dp, words, fdim, cdp, sim, mapped, out):
    for j in range(dw.shape[0]):
        raw = _raw(plane_dot_q4(q, dw[j], dp, words), qf, df[j], fdim, cdp, sim)
        out[j] = _finish(raw, sim) if mapped else raw


@_serial
def _scores_row_bytes(q, qf, db, df, fdim, cdp, sim, mapped, out):
    for j in range(db.shape[0]):
        raw = _raw(byte_dot(q, db[j]), qf, df[j], fdim, cdp, sim)
        out[j] = _finish(raw, sim) if mapped else raw


@_parallel
def lucene_scores_planes(qw, qf, dw, df, dp, words, fdim, cdp, sim, mapped, out):
    """Scores [nq, n] of plane docs (``dp`` planes) against 4-plane queries.

    ``qw`` uint64 [nq, 4 * words], ``dw`` uint64 [n, dp * words]; ``qf`` / ``df`` float32 [.., 4];
    ``mapped``: Lucene's score if True, else the raw value before the mapping.
    """
    for i in prange(qw.shape[0]):
        _scores_row_planes(qw[i], qf[i], dw, df, dp, words, fdim, cdp, sim, mapped, out[i])


@_parallel
def lucene_scores_bytes(qb, qf, db, df, fdim, cdp, sim, mapped, out):
    """:func:`lucene_scores_planes` for byte codes (7-bit docs and queries)."""
    for i in prange(qb.shape[0]):
        _scores_row_bytes(qb[i], qf[i], db, df, fdim, cdp, sim, mapped, out[i])


@_inline
def _offer(scores, ids, raws, score, idx, raw):
    """Offer to a bounded min-heap (root = worst kept: lowest score, then highest id)."""
    if score < scores[0] or (score == scores[0] and idx > ids[0]) or score != score:
        return  # a NaN score never competes
    scores[0] = score
    ids[0] = idx
    raws[0] = raw
    _sift_down(scores, ids, raws, scores.shape[0])


@_serial
def _sift_down(scores, ids, raws, size):
    """Restore the heap property from the root over the first ``size`` entries."""
    score, idx, raw = scores[0], ids[0], raws[0]
    pos = 0
    while True:
        child = 2 * pos + 1
        if child >= size:
            break
        right = child + 1
        if right < size and (
            scores[right] < scores[child]
            or (scores[right] == scores[child] and ids[right] > ids[child])
        ):
            child = right
        if scores[child] < score or (scores[child] == score and ids[child] > idx):
            scores[pos] = scores[child]
            ids[pos] = ids[child]
            raws[pos] = raws[child]
            pos = child
        else:
            break
    scores[pos] = score
    ids[pos] = idx
    raws[pos] = raw


@_serial
def _drain(scores, ids, raws, out_scores, out_ids, out_raws):
    """Empty the heap best first (higher score, then lower id); empty slots give id -1."""
    size = scores.shape[0]
    while size > 0:
        m = size - 1  # the root is the worst entry left: it goes last
        out_scores[m] = scores[0]
        out_ids[m] = ids[0] if ids[0] != _EMPTY else -1
        out_raws[m] = raws[0]
        scores[0] = scores[m]
        ids[0] = ids[m]
        raws[0] = raws[m]
        size = m
        _sift_down(scores, ids, raws, size)


@_serial
def _topk_row_planes(q, qf, dw, df, dp, words, fdim, cdp, sim, allowed, out_s, out_i, out_r):
    k = out_s.shape[0]
    scores = np.full(k, -np.inf, dtype=np.float32)
    ids = np.full(k, _EMPTY, dtype=np.int64)
    raws = np.zeros(k, dtype=np.float32)
    use_mask = allowed.shape[0] > 0
    for j in range(dw.shape[0]):
        if use_mask and allowed[j] == 0:
            continue
        raw = _raw(plane_dot_q4(q, dw[j], dp, words), qf, df[j], fdim, cdp, sim)
        _offer(scores, ids, raws, _finish(raw, sim), np.int64(j), raw)
    _drain(scores, ids, raws, out_s, out_i, out_r)


@_serial
def _topk_row_bytes(q, qf, db, df, fdim, cdp, sim, allowed, out_s, out_i, out_r):
    k = out_s.shape[0]
    scores = np.full(k, -np.inf, dtype=np.float32)
    ids = np.full(k, _EMPTY, dtype=np.int64)
    raws = np.zeros(k, dtype=np.float32)
    use_mask = allowed.shape[0] > 0
    for j in range(db.shape[0]):
        if use_mask and allowed[j] == 0:
            continue
        raw = _raw(byte_dot(q, db[j]), qf, df[j], fdim, cdp, sim)
        _offer(scores, ids, raws, _finish(raw, sim), np.int64(j), raw)
    _drain(scores, ids, raws, out_s, out_i, out_r)


@_parallel
def lucene_topk_planes(qw, qf, dw, df, dp, words, fdim, cdp, sim, allowed, out_s, out_i, out_r):
    """Top ``k`` docs per query by Lucene's score (ties: lower id), plane layout.

    ``allowed`` uint8 [n] mask (length 0: every doc); outputs [nq, k]: score, id (-1 pads),
    raw value. A NaN score never enters the top ``k``.
    """
    for i in prange(qw.shape[0]):
        _topk_row_planes(
            qw[i], qf[i], dw, df, dp, words, fdim, cdp, sim, allowed, out_s[i], out_i[i], out_r[i]
        )


@_parallel
def lucene_topk_bytes(qb, qf, db, df, fdim, cdp, sim, allowed, out_s, out_i, out_r):
    """:func:`lucene_topk_planes` for byte codes."""
    for i in prange(qb.shape[0]):
        _topk_row_bytes(qb[i], qf[i], db, df, fdim, cdp, sim, allowed, out_s[i], out_i[i], out_r[i])
