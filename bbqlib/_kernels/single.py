"""One query per call: the batch kernels' bodies, fused so a single query costs few calls.

Engines call a library one query at a time; the batch path's per-call work in Python
(validation, packing and unpacking the query codes, planning with NumPy, merges by
``lexsort``) then costs more than the scan. These kernels run a single query's steps in one
compiled call each, on the calling thread, by calling the *same* compiled bodies the batch
kernels use (``_quantize_range``, ``_scan_lut_range``, the serial twins of
``quantize_pairs``, ``ivf_scan_lut``, ``estimate_bytes7`` and ``dedup_topk_rows``), so their
results are bit for bit the batch path's:

* :func:`prepare_one`: the finiteness check and squared norm of one float32 row (and the
  cosine normalization), what ``check_vectors`` + ``prepare_for_similarity`` compute;
* :func:`flat_lut_one`: query codes against the centroid, lookup tables straight from the
  codes (no plane packing), the lookup-table scan of every doc, the heap sorted best first;
* :func:`ivf_plan_one`: the 7-bit ranking of every list and the visit budget (indexes
  without parent centroids);
* :func:`ivf_plan_two`: with parent centroids, the best-first walk over parents to the best
  ``want`` lists and the visit budget (``plan_batch`` of one query), else
  :func:`ivf_plan_one`;
* :func:`ivf_lut_one`: the query coded against each visited list's centre, the list scan,
  the SOAR de-duplication;
* :func:`rerank_dots` / :func:`rerank_sqdists`: the exact kernel's serial body
  (:mod:`bbqlib._kernels.rerank`) over the candidates, then the best ``k`` by (key desc,
  row asc) as ``rerank_keys`` + ``finish`` give them (:func:`best_k` alone);

The IVF steps run in one call (:mod:`bbqlib._kernels.fused`): two Python threads issuing
single queries scale only when a query releases the GIL once. A flat query is one long scan,
so its three calls stay apart.

``tests/reference/single.py`` is the NumPy reference.
"""

from __future__ import annotations

import numpy as np

from . import ivf as KI
from . import scoring as KS
from .lanes import lane_dots
from .lut import LANES, _scan_lut_range, build_tables, ivf_scan_lut
from .osq import _quantize_range
from .policy import kernel
from .rerank import _dots_range, _sqdists_range
from .scoring import _block_keys, _offer, byte_dot
from .vnni import estimate_bytes7

__all__ = [
    "prepare_one",
    "flat_lut_one",
    "ivf_plan_one",
    "ivf_plan_two",
    "ivf_lut_one",
    "best_k",
    "rerank_dots",
    "rerank_sqdists",
]

EMPTY_ID = KS.EMPTY_ID
# Integer arguments of the shared bodies as int64 globals, not literals: a literal argument
# types as ``Literal[int]`` and would compile (and cache) another copy of the callee.
_ZERO = np.int64(0)
_ONE = np.int64(1)

# The single-threaded twins of the batch kernels (numba dispatchers, callable from here).
_estimate_bytes = estimate_bytes7.serial  # the plan's 7-bit centroid codes
_quantize_pairs = KI.quantize_pairs.serial
_ivf_scan_lut = ivf_scan_lut.serial
_dedup_topk_rows = KI.dedup_topk_rows.serial
_build_tables = build_tables.serial


@kernel
def prepare_one(x, cosine, out):
    """Squared norm (float64 lane sum, ``inf`` / ``nan`` when not finite) of the float32
    row ``x``; with ``cosine`` (and a finite, non-zero norm) ``out = float32(x / ||x||)``.

    The arithmetic of ``bbqlib._validation.row_sq_norms`` and ``normalize_rows``.
    """
    sq = lane_dots(x, (x,))[0]
    if cosine and np.isfinite(sq) and sq > 0.0:
        norm = np.sqrt(sq)
        for j in range(x.shape[0]):
            out[j] = np.float32(np.float64(x[j]) / norm)
    return sq


@kernel(inline="always")
def _osq_row(q2, centroid, bits, iters, lam, euclidean, codes2, qf):
    """OSQ of the one row of ``q2`` into ``codes2[0, :d]``; factor row ``qf`` float64 [4] as
    the batch path builds it from ``quantize_rows`` (``(a, (b - a) / levels, Σk, add)``)."""
    lower = np.empty(1, dtype=np.float32)
    upper = np.empty(1, dtype=np.float32)
    additional = np.empty(1, dtype=np.float32)
    component_sum = np.empty(1, dtype=np.int64)
    _quantize_range(
        q2, centroid, bits, iters, lam, euclidean, codes2, lower, upper, additional,
        component_sum, _ZERO, _ONE,
    )  # fmt: skip
    qf[0] = lower[0]
    qf[1] = (np.float64(upper[0]) - lower[0]) / float((1 << bits) - 1)
    qf[2] = component_sum[0]
    qf[3] = additional[0]


@kernel(inline="always")
def _worse(keys, ids, a, b):
    """Entry ``a`` ranks below entry ``b``: a smaller key, or the same key and a larger id."""
    return keys[a] < keys[b] or (keys[a] == keys[b] and ids[a] > ids[b])


@kernel(inline="always")
def _sift_down(keys, ids, pos, size):
    """Restore the heap below ``pos`` (the worst entry at the root) among ``size`` entries."""
    while True:
        child = 2 * pos + 1
        if child >= size:
            return
        if child + 1 < size and _worse(keys, ids, child + 1, child):
            child += 1
        if not _worse(keys, ids, child, pos):
            return
        keys[pos], keys[child] = keys[child], keys[pos]
        ids[pos], ids[child] = ids[child], ids[pos]
        pos = child


@kernel(inline="always")
def _sort_heap(keys, ids):
    """Sort a heap (root = worst entry, as ``_offer`` keeps it) in place, best first by
    (key desc, id asc); returns how many entries are not empty (``EMPTY_ID``)."""
    h = keys.shape[0]
    for end in range(h - 1, 0, -1):
        keys[0], keys[end] = keys[end], keys[0]
        ids[0], ids[end] = ids[end], ids[0]
        _sift_down(keys, ids, 0, end)
    m = 0
    for r in range(h):
        if ids[r] == EMPTY_ID:
            keys[r] = -np.inf
            ids[r] = -1
        else:
            m += 1
    return m


@kernel
def flat_lut_one(
    q2, centroid, bits, iters, lam, euclidean, width, blocks, cols, planes, pairs,
    n, dim, cc, is_l2, allowed, k,
):  # fmt: skip
    """Top ``k`` docs of one query by the lookup-table scan: ``(keys, rows)`` best first
    (``-inf`` / ``-1`` padding).

    ``q2`` float32 [1, d] (prepared, transformed); the query is coded at ``bits`` against
    ``centroid`` (``iters`` optimizer steps) and its tables are made from the codes (no
    plane packing); the rest are :func:`bbqlib._kernels.lut.scan_lut`'s arguments.
    """
    codes2 = np.zeros((1, width), dtype=np.uint8)
    qf = np.empty((1, 4), dtype=np.float64)
    _osq_row(q2, centroid, bits, iters, lam, euclidean, codes2, qf[0])
    tables2 = np.empty((1, 2 * pairs * LANES), dtype=np.uint8)
    _build_tables(codes2, pairs, tables2)
    keys = np.full((1, k), -np.inf)
    ids = np.full((1, k), EMPTY_ID, dtype=np.int64)
    _scan_lut_range(
        tables2, qf, blocks, cols, planes, pairs, n, dim, cc, is_l2, allowed, _ZERO, keys, ids,
        _ZERO, np.int64(blocks.shape[0]),
    )  # fmt: skip
    _sort_heap(keys[0], ids[0])
    return keys[0], ids[0]


@kernel
def ivf_plan_one(q2, g, gg, codes, factors, cc, sizes, bits, iters, lam, is_l2, by_distance, need):
    """Lists one query visits, best first, until their entries reach ``need`` (int32 [P]).

    Lists are ranked as ``bbqlib.index.ivf.plan.rank_lists`` does without parents: the query
    coded at ``bits`` against the centroids' mean ``g``, the byte estimate of every centroid
    code, ``-d²`` (or ``2 <q, c> - ||c||²`` when ranking an inner-product index by distance),
    best first with the lower list id among ties; then ``plan_visits``' rule.
    """
    K = codes.shape[0]
    d = q2.shape[1]
    qb = np.zeros((1, d), dtype=np.uint8)
    qf = np.empty((1, 4), dtype=np.float64)
    _osq_row(q2, g, bits, iters, lam, is_l2, qb, qf[0])
    raw = np.empty((1, K), dtype=np.float64)
    _estimate_bytes(qb, qf, codes, factors, d, gg, is_l2, raw)
    keys = np.empty(K, dtype=np.float64)
    for j in range(K):
        key = -raw[0, j] if is_l2 else raw[0, j]
        if by_distance and not is_l2:
            key = 2.0 * key - cc[j]
        keys[j] = key
    # Best list first (the lower id among equal keys), one selection pass per visited list:
    # a query visits few of the K lists.
    taken = np.zeros(K, dtype=np.bool_)
    out_lists = np.empty(K, dtype=np.int32)
    total = 0
    count = 0
    while count < K:
        best = -1
        for j in range(K):
            if not taken[j] and (best < 0 or keys[j] > keys[best]):
                best = j
        taken[best] = True
        out_lists[count] = best
        count += 1
        total += sizes[best]
        if total >= need:
            break
    return out_lists[:count]


@kernel
def ivf_plan_two(
    q2, g, gg, codes, factors, cc, sizes, bits, iters, lam, is_l2, by_distance, need,
    pcodes, pfactors, pcc, pradius, child_order, child_offsets, want,
):  # fmt: skip
    """Lists one query visits when the lists have parent centroids (int32 [P]), the lists
    ``bbqlib.index.ivf.plan.plan_batch`` picks for it.

    Parents (7-bit codes ``pcodes`` / ``pfactors``, ``||p||²`` ``pcc``, radius ``pradius``)
    are ranked by ``rank_lists``' bound on their children's key (stable: lower parent among
    ties); their children (``child_order[child_offsets[p]:child_offsets[p + 1]]``) are
    scored best parent first into a heap of the ``want`` best lists, until the next bound
    cannot beat the heap's worst (``rank_children``); the lists then go best first (lower
    list among ties) until their entries reach ``need``. Where they do not, or without
    parents (``pcodes`` empty) or with ``want >= K``, every list is ranked
    (:func:`ivf_plan_one`).
    """
    K = codes.shape[0]
    n_par = pcodes.shape[0]
    if n_par == 0 or want >= K:
        return ivf_plan_one(
            q2, g, gg, codes, factors, cc, sizes, bits, iters, lam, is_l2, by_distance, need
        )
    d = q2.shape[1]
    qb = np.zeros((1, d), dtype=np.uint8)
    qf = np.empty((1, 4), dtype=np.float64)
    _osq_row(q2, g, bits, iters, lam, is_l2, qb, qf[0])
    praw = np.empty((1, n_par), dtype=np.float64)
    _estimate_bytes(qb, qf, pcodes, pfactors, d, gg, is_l2, praw)
    qq = lane_dots(q2[0], (q2[0],))[0]  # ``row_sq_norms``' arithmetic, as the batch plan's
    bound = np.empty(n_par, dtype=np.float64)
    for p in range(n_par):
        pkey = -praw[0, p] if is_l2 else praw[0, p]
        if by_distance:  # ||q - c|| >= ||q - p|| - r_p
            d2 = -pkey if is_l2 else qq + pcc[p] - 2.0 * pkey
            gap = max(np.sqrt(max(d2, 0.0)) - pradius[p], 0.0)
            bound[p] = -(gap * gap) if is_l2 else qq - gap * gap
        else:  # <q, c> <= <q, p> + ||q|| r_p
            bound[p] = pkey + np.sqrt(qq) * pradius[p]
    porder = np.argsort(-bound, kind="mergesort")  # stable, as the batch plan's argsort
    keys = np.full(want, -np.inf)
    ids = np.full(want, EMPTY_ID, dtype=np.int64)
    dots = np.empty(1, dtype=np.int64)
    key = np.empty(1, dtype=np.float64)
    to_distance = by_distance and not is_l2
    for r in range(n_par):
        p = porder[r]
        if keys[0] > -np.inf and bound[p] < keys[0]:
            break
        for t in range(child_offsets[p], child_offsets[p + 1]):
            c = child_order[t]
            dots[0] = byte_dot(qb[0], codes[c])
            _block_keys(dots, 1, c, factors, qf[0], d, gg, is_l2, key)
            value = key[0]
            if to_distance:
                value = 2.0 * value - cc[c]
            _offer(keys, ids, value, np.int64(c))
    found = _sort_heap(keys, ids)
    total = 0
    count = 0
    while count < found:
        total += sizes[ids[count]]
        count += 1
        if total >= need:
            return ids[:count].astype(np.int32)
    # the candidates ran out before the budget: every list ranked (``plan_batch``'s redo)
    return ivf_plan_one(
        q2, g, gg, codes, factors, cc, sizes, bits, iters, lam, is_l2, by_distance, need
    )


@kernel
def ivf_lut_one(
    q2, centroids, lists, bits, lam, euclidean, width, list_start, list_block_start, blocks,
    df, ids, list_cc, planes, pairs, dim, allowed, heap, depth,
):  # fmt: skip
    """Best distinct entries of one query's visited ``lists`` (int32 [P]): the query coded
    against each list's centre (one optimizer step, as ``query_pairs``), the lookup-table
    list scan into a heap of ``heap`` entries, the SOAR de-duplication to the best
    ``min(depth, heap)``. Returns ``(keys, rows, entries scored)``, best first (``-inf`` /
    ``-1`` padding)."""
    P = lists.shape[0]
    pair_query = np.zeros(P, dtype=np.int64)
    pair_list = lists.astype(np.int64)
    qcodes = np.zeros((P, width), dtype=np.uint8)
    qf = np.empty((P, 4), dtype=np.float64)
    _quantize_pairs(
        q2, centroids, pair_query, pair_list, bits, _ONE, lam, euclidean, _ZERO, qcodes, qf
    )
    pair_start = np.zeros(2, dtype=np.int64)
    pair_start[1] = P
    keys = np.full((1, heap), -np.inf)
    hids = np.full((1, heap), EMPTY_ID, dtype=np.int64)
    _ivf_scan_lut(
        qcodes, qf, lists, pair_start, list_start, list_block_start, blocks, df, ids, list_cc,
        planes, pairs, dim, euclidean, allowed, keys, hids,
    )  # fmt: skip
    out_keys = np.empty((1, min(depth, heap)), dtype=np.float64)
    out_ids = np.empty((1, min(depth, heap)), dtype=np.int64)
    _dedup_topk_rows(keys, hids, out_keys, out_ids)
    entries = 0
    for p in range(P):
        entries += list_start[lists[p] + 1] - list_start[lists[p]]
    return out_keys[0], out_ids[0], entries


@kernel(inline="always")
def _best_k(raw, cand, is_distance, k, pad):
    """The best ``k`` of exact values ``raw`` float64 [m] of candidate rows ``cand`` int64
    [m] (``-1``: none), by (key desc, row asc) with key ``-raw`` for distances and ``raw``
    otherwise, as ``rerank_keys`` then ``finish`` give them: ``(values float64 [1, k], rows
    int64 [1, k])``, missing ones ``pad`` / ``-1``."""
    m = cand.shape[0]
    h = min(k, m)
    keys = np.full(h, -np.inf)
    ids = np.full(h, EMPTY_ID, dtype=np.int64)
    for j in range(m):
        if cand[j] >= 0:
            _offer(keys, ids, -raw[j] if is_distance else raw[j], cand[j])
    found = _sort_heap(keys, ids)
    out_raw = np.empty((1, k), dtype=np.float64)
    out_rows = np.empty((1, k), dtype=np.int64)
    for r in range(k):
        if r < found:
            out_raw[0, r] = -keys[r] if is_distance else keys[r]
            out_rows[0, r] = ids[r]
        else:
            out_raw[0, r] = pad
            out_rows[0, r] = -1
    return out_raw, out_rows


@kernel
def best_k(raw, cand, is_distance, k, pad):
    """:func:`_best_k` on its own (exact values computed elsewhere)."""
    return _best_k(raw, cand, is_distance, k, pad)


@kernel
def rerank_dots(query2, vectors, cand, k, pad):
    """Exact inner products of the query [1, d] with candidate rows ``cand`` int64 [m]
    (``-1``: none) by the exact kernel's body, then :func:`_best_k`."""
    c2 = cand.reshape(1, cand.shape[0])
    raw = np.empty(c2.shape, dtype=np.float64)
    _dots_range(query2, vectors, c2, np.empty(c2.shape, dtype=np.int64), raw, _ZERO, _ONE)
    return _best_k(raw[0], cand, False, k, pad)


@kernel
def rerank_sqdists(query2, vectors, cand, k, pad):
    """:func:`rerank_dots` with exact squared distances."""
    c2 = cand.reshape(1, cand.shape[0])
    raw = np.empty(c2.shape, dtype=np.float64)
    _sqdists_range(query2, vectors, c2, np.empty(c2.shape, dtype=np.int64), raw, _ZERO, _ONE)
    return _best_k(raw[0], cand, True, k, pad)
