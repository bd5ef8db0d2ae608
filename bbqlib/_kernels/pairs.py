"""Queries coded against list centres, one (query, list) pair at a time, for the float and
byte families (the batch path and the fused one-query path call the same bodies, so a query
searched alone gets its row of a batch bit for bit).

For ``P`` pairs, ``Q`` float32 [nq, d] (prepared, transformed), ``C`` float32 [K, d] the
centres, ``pair_query`` / ``pair_list`` int64 [P]; factor rows ``f_out`` float64 [P, 4] are
``(a_y, l_y, ΣY, add_y)`` of the correction algebra (:mod:`bbqlib._kernels.scoring`):

* :func:`residual_pairs`: ``y = float32(q - c)`` (float64 difference), rows
  ``(0, 1, Σy, ||y||²)`` (euclidean) or ``(0, 1, Σy, <q, c>)``;
* :func:`scaled_pairs`: ``y = float32(s ∘ q)`` (int8 ``per_dim``: the same for every list),
  rows ``(0, 1, Σy, ||q||² - 2 m_c)`` (euclidean) or ``(0, 1, Σy, m_c + <c, c>)`` with
  ``m_c = <q, c> + <q, offset>``;
* :func:`grid_pairs`: the residual of :func:`residual_pairs` coded on int8 ``global``'s
  fixed grid (Lucene's float32 ``ScalarQuantizer.quantize`` arithmetic), rows
  ``(lower, alpha, Σk, ||y||² or <q, c>)``.

Every sum is a lane sum (:mod:`bbqlib._kernels.lanes`): its order is fixed, so results do not
depend on the machine. ``tests/reference/pairs.py`` is the NumPy reference.
"""

from __future__ import annotations

import numpy as np

from .lanes import lane_dots
from .policy import kernel, parallel_kernel, prange

__all__ = ["residual_pairs", "scaled_pairs", "grid_pairs"]


@kernel(inline="always")
def _residual_row(q, c, is_l2, ones, y, f):
    for i in range(q.shape[0]):
        y[i] = np.float32(np.float64(q[i]) - np.float64(c[i]))
    f[0] = 0.0
    f[1] = 1.0
    sums = lane_dots(y, (ones, y))
    f[2] = sums[0]
    f[3] = sums[1] if is_l2 else lane_dots(q, (c,))[0]


@kernel(inline="always")
def _scaled_row(q, c, scale, offset, is_l2, ones, y, f):
    for i in range(q.shape[0]):
        y[i] = q[i] * scale[i]
    # one row per call: the rows may differ in type (read-only maps, the caller's query)
    mc = lane_dots(q, (c,))[0] + lane_dots(q, (offset,))[0]
    f[0] = 0.0
    f[1] = 1.0
    f[2] = lane_dots(y, (ones,))[0]
    if is_l2:
        f[3] = lane_dots(q, (q,))[0] - 2.0 * mc
    else:
        f[3] = mc + lane_dots(c, (c,))[0]


@kernel(inline="always")
def _grid_row(q, c, lower, upper, alpha, inv_alpha, levels, is_l2, ones, y, codes, f):
    _residual_row(q, c, is_l2, ones, y, f)
    lo = np.float32(lower)
    hi = np.float32(upper)
    sc = np.float32(inv_alpha)
    top = np.float64(levels)
    total = 0
    for i in range(y.shape[0]):
        v = min(max(y[i], lo), hi)
        k = np.floor(np.float64(sc * (v - lo)) + 0.5)
        k = min(max(k, 0.0), top)
        codes[i] = np.uint8(k)
        total += np.int64(k)
    f[0] = lower
    f[1] = alpha
    f[2] = total


@kernel
def residual_pair_rows(Q, C, pair_query, pair_list, is_l2, y_out, f_out, p0, p1):
    """:func:`residual_pairs` of pairs ``p0 .. p1`` (the body both paths call)."""
    ones = np.ones(Q.shape[1], dtype=np.float32)
    for p in range(p0, p1):
        _residual_row(Q[pair_query[p]], C[pair_list[p]], is_l2, ones, y_out[p], f_out[p])


@kernel
def scaled_pair_rows(Q, C, pair_query, pair_list, scale, offset, is_l2, y_out, f_out, p0, p1):
    """:func:`scaled_pairs` of pairs ``p0 .. p1``."""
    ones = np.ones(Q.shape[1], dtype=np.float32)
    for p in range(p0, p1):
        _scaled_row(
            Q[pair_query[p]], C[pair_list[p]], scale, offset, is_l2, ones, y_out[p], f_out[p]
        )


@kernel
def grid_pair_rows(
    Q, C, pair_query, pair_list, lower, upper, alpha, inv_alpha, levels, is_l2, codes_out,
    f_out, p0, p1,
):  # fmt: skip
    """:func:`grid_pairs` of pairs ``p0 .. p1``."""
    ones = np.ones(Q.shape[1], dtype=np.float32)
    y = np.empty(Q.shape[1], dtype=np.float32)
    for p in range(p0, p1):
        _grid_row(
            Q[pair_query[p]], C[pair_list[p]], lower, upper, alpha, inv_alpha, levels, is_l2,
            ones, y, codes_out[p], f_out[p],
        )  # fmt: skip


def _pair_work(Q, C, pair_query, *args) -> int:
    return pair_query.shape[0] * Q.shape[1]


def _residual_serial(*args) -> None:
    residual_pair_rows(*args, 0, args[2].shape[0])


def _scaled_serial(*args) -> None:
    scaled_pair_rows(*args, 0, args[2].shape[0])


def _grid_serial(*args) -> None:
    grid_pair_rows(*args, 0, args[2].shape[0])


@parallel_kernel(work=_pair_work, min_work=1 << 20, serial=_residual_serial)
def residual_pairs(Q, C, pair_query, pair_list, is_l2, y_out, f_out):
    """Float residual queries of every pair into ``y_out`` float32 [P, d] and ``f_out``."""
    n = pair_query.shape[0]
    for t in prange(n):
        residual_pair_rows(Q, C, pair_query, pair_list, is_l2, y_out, f_out, t, t + 1)


@parallel_kernel(work=_pair_work, min_work=1 << 20, serial=_scaled_serial)
def scaled_pairs(Q, C, pair_query, pair_list, scale, offset, is_l2, y_out, f_out):
    """int8 ``per_dim`` float queries of every pair into ``y_out`` and ``f_out``."""
    n = pair_query.shape[0]
    for t in prange(n):
        scaled_pair_rows(Q, C, pair_query, pair_list, scale, offset, is_l2, y_out, f_out, t, t + 1)


@parallel_kernel(work=_pair_work, min_work=1 << 20, serial=_grid_serial)
def grid_pairs(
    Q, C, pair_query, pair_list, lower, upper, alpha, inv_alpha, levels, is_l2, codes_out, f_out
):
    """int8 ``global`` codes of every pair's residual into ``codes_out`` uint8 [P, d]."""
    n = pair_query.shape[0]
    for t in prange(n):
        grid_pair_rows(
            Q, C, pair_query, pair_list, lower, upper, alpha, inv_alpha, levels, is_l2,
            codes_out, f_out, t, t + 1,
        )  # fmt: skip
