"""IVF kernels: score the visited posting lists of a batch of queries, and centroid subsets.

One kernel call scores every (query, list) pair of a search batch: threads take whole queries
(``prange`` over queries), each query walks its lists in visit order, each list in blocks of
``BLOCK`` entries (all integer dots of the block first, then all keys, then heap offers, the
pattern of :mod:`bbqlib._kernels.scoring`, whose inline helpers are reused). Pairs carry their
own quantized query, because the query is re-quantized against every list's centroid.

Inputs, for ``P`` pairs over ``E`` posting entries in ``K`` lists:

* ``qw`` (planes: uint64 [P, qp * words]) or ``qb`` (bytes: uint8 [P, d]) and ``qf`` float64
  [P, 4] rows ``(a_y, l_y, ΣY, add_y)``: the query of each pair;
* ``pair_list`` int32 [P], ``pair_start`` int64 [nq + 1]: pairs of query ``q`` are
  ``pair_start[q] : pair_start[q + 1]``, in visit order;
* ``list_start`` int64 [K + 1]: entries of list ``j`` are ``list_start[j] : list_start[j + 1]``;
* ``dw`` / ``db`` codes, ``df`` float32 [E, 4] rows ``(a_x, l_x, ΣX, add_x)``, ``ids`` int32
  [E] (the same id appears in two lists with SOAR), ``list_cc`` float64 [K] (``<c, c>``);
* ``allowed`` uint8 over ids (empty: all allowed): filters and tombstones.

Outputs ``out_keys`` float64 / ``out_ids`` int64 [nq, H]: a bounded heap per query (keys are
``-d²`` or the inner product, ties by lower id), preset by the caller to ``-inf`` /
``EMPTY_ID``. A SOAR duplicate may occupy two slots; with ``H = 2 k'`` the heap still holds the
best entry of each of the best ``k'`` ids (each id has at most two entries), and the caller
de-duplicates. Results do not depend on the thread count (one thread per query).
"""

from __future__ import annotations

import numpy as np

from .osq import _row_codes, _row_interval
from .plane_float import pad_query
from .policy import kernel, parallel_kernel, prange
from .scoring import (
    BLOCK,
    EMPTY_ID,
    _block_keys,
    _offer,
    _offer_entries,
    _plane_block_dots,
    byte_dot,
    float_dot,
    plane_dot,
    plane_dot_q4,
)

__all__ = [
    "ivf_scan_planes",
    "ivf_scan_bytes",
    "ivf_scan_float",
    "score_selected_bytes",
    "quantize_pairs",
    "rank_children",
    "spill_costs",
    "dedup_topk_rows",
    "topk_columns",
]


@kernel(inline="always")
def pack_row_planes(kbuf, planes, plane_bytes, out):
    """Codes ``kbuf`` (one per padded dimension) into ``out`` as ``planes`` bit planes of
    ``plane_bytes`` bytes, MSB first, one byte at a time, branch-free (the
    ``packing.pack_planes`` layout)."""
    for s in range(planes):
        base = s * plane_bytes
        for j in range(plane_bytes):
            byte = 0
            for t in range(8):
                byte = (byte << 1) | ((kbuf[8 * j + t] >> s) & 1)
            out[base + j] = byte


@parallel_kernel(vectorize=False)
def ivf_scan_planes(
    qw,
    qf,
    pair_list,
    pair_start,
    list_start,
    dw,
    df,
    ids,
    list_cc,
    qp,
    dp,
    words,
    dim,
    is_l2,
    allowed,
    out_keys,
    out_ids,
):
    """Heap of the best entries per query over its visited lists (plane layout)."""
    nq = pair_start.shape[0] - 1
    for q in prange(nq):
        dots = np.empty(BLOCK, dtype=np.int64)
        block_keys = np.empty(BLOCK, dtype=np.float64)
        keys = out_keys[q]
        heap_ids = out_ids[q]
        for p in range(pair_start[q], pair_start[q + 1]):
            lst = pair_list[p]
            query = qw[p]
            cc = list_cc[lst]
            stop = list_start[lst + 1]
            for b0 in range(list_start[lst], stop, BLOCK):
                m = min(stop - b0, BLOCK)
                if qp == 4:
                    for j in range(m):
                        dots[j] = plane_dot_q4(query, dw[b0 + j], dp, words)
                else:
                    for j in range(m):
                        dots[j] = plane_dot(query, dw[b0 + j], qp, dp, words)
                _block_keys(dots, m, b0, df, qf[p], dim, cc, is_l2, block_keys)
                _offer_entries(keys, heap_ids, block_keys, m, b0, ids, allowed)


@parallel_kernel
def ivf_scan_bytes(
    qb,
    qf,
    pair_list,
    pair_start,
    list_start,
    db,
    df,
    ids,
    list_cc,
    dim,
    is_l2,
    allowed,
    out_keys,
    out_ids,
):
    """Heap of the best entries per query over its visited lists (byte layout, 7/8-bit)."""
    nq = pair_start.shape[0] - 1
    for q in prange(nq):
        dots = np.empty(BLOCK, dtype=np.int64)
        block_keys = np.empty(BLOCK, dtype=np.float64)
        keys = out_keys[q]
        heap_ids = out_ids[q]
        for p in range(pair_start[q], pair_start[q + 1]):
            lst = pair_list[p]
            query = qb[p]
            cc = list_cc[lst]
            stop = list_start[lst + 1]
            for b0 in range(list_start[lst], stop, BLOCK):
                m = min(stop - b0, BLOCK)
                for j in range(m):
                    dots[j] = byte_dot(query, db[b0 + j])
                _block_keys(dots, m, b0, df, qf[p], dim, cc, is_l2, block_keys)
                _offer_entries(keys, heap_ids, block_keys, m, b0, ids, allowed)


@parallel_kernel
def ivf_scan_float(
    qv,
    qf,
    pair_list,
    pair_start,
    list_start,
    codes,
    df,
    ids,
    list_cc,
    planes,
    plane_bytes,
    dim,
    is_l2,
    allowed,
    out_keys,
    out_ids,
):
    """Heap of the best entries per query over its visited lists (float queries).

    ``qv`` float32 [P, dim]; ``codes`` uint8 rows: ``planes`` bit planes of ``plane_bytes``
    each (dots straight from the planes, :func:`~bbqlib._kernels.plane_float.plane_float_dot`),
    or one byte per dimension when ``planes`` is 0 (``float_dot``'s float32 sums).
    """
    nq = pair_start.shape[0] - 1
    for q in prange(nq):
        dots = np.empty(BLOCK, dtype=np.float64)
        block_keys = np.empty(BLOCK, dtype=np.float64)
        qpad = np.empty(plane_bytes * 8, dtype=np.float32)
        keys = out_keys[q]
        heap_ids = out_ids[q]
        for p in range(pair_start[q], pair_start[q + 1]):
            lst = pair_list[p]
            query = qv[p]
            if planes > 0:
                pad_query(query, qpad)
            cc = list_cc[lst]
            stop = list_start[lst + 1]
            for b0 in range(list_start[lst], stop, BLOCK):
                m = min(stop - b0, BLOCK)
                if planes == 0:
                    for j in range(m):
                        dots[j] = float_dot(query, codes[b0 + j, :dim])
                else:
                    _plane_block_dots(qpad, codes, b0, m, planes, plane_bytes, dots)
                _block_keys(dots, m, b0, df, qf[p], dim, cc, is_l2, block_keys)
                _offer_entries(keys, heap_ids, block_keys, m, b0, ids, allowed)


@parallel_kernel
def score_selected_bytes(qb, qf, cb, cf, sel, dim, cc, is_l2, out):
    """Raw estimates of query ``q`` against the byte-coded rows ``sel[q, :]`` (``-1``: skip).

    Used for the children of the best parent centroids; ``out`` [nq, M] keeps ``nan`` where
    ``sel`` is ``-1``. Keys follow ``_block_keys`` (``-d²`` or the inner product).
    """
    nq, m = sel.shape
    for q in prange(nq):
        dots = np.empty(1, dtype=np.int64)
        key = np.empty(1, dtype=np.float64)
        for j in range(m):
            c = sel[q, j]
            if c < 0:
                out[q, j] = np.nan
                continue
            dots[0] = byte_dot(qb[q], cb[c])
            _block_keys(dots, 1, c, cf, qf[q], dim, cc, is_l2, key)
            out[q, j] = key[0]


@parallel_kernel
def quantize_pairs(X, C, rows, cols, bits, iters, lam, euclidean, planes, codes_out, factors_out):
    """OSQ of ``X[rows[p]]`` against ``C[cols[p]]`` for every pair ``p``, written packed.

    The row body of :func:`bbqlib._kernels.osq.osq_quantize`: the same inline
    ``_row_interval`` (float32 centring, statistics, interval optimization) and ``_row_codes``
    (final codes), so the result is bit for bit ``quantize_rows(X[rows[p]][None], C[cols[p]],
    bits, iters=iters)``; here the centroid changes per row, no residual matrix is formed, and
    the codes are written packed.

    ``planes`` > 0: ``codes_out`` uint8 [P, planes * padded_dim / 8] receives the bit planes
    (least significant first, MSB-first bytes, as ``bbqlib.packing.pack_planes``); ``planes`` = 0:
    ``codes_out`` uint8 [P, d] receives one code per byte. ``factors_out`` float64 [P, 4] gets
    ``(a, (b - a) / (2^bits - 1), Σk, add)`` with ``add = ||x - c||²`` or ``<x, c>``.
    """
    n_pairs = rows.shape[0]
    levels = float((1 << bits) - 1)
    plane_bytes = codes_out.shape[1] // planes if planes > 0 else 0
    for p in prange(n_pairs):
        v = X[rows[p]]
        c = C[cols[p]]
        a, b, norm2, cdot = _row_interval(v, c, bits, iters, lam)
        out = codes_out[p]
        # planes == 0 writes the codes straight out; padded dims of planes keep code 0
        kbuf = out if planes == 0 else np.zeros(plane_bytes * 8, dtype=np.uint8)
        ksum = _row_codes(v, c, a, b, levels, kbuf)
        if planes > 0:
            pack_row_planes(kbuf, planes, plane_bytes, out)
        # The float32 interval ends, as quantize_rows stores them.
        lo = np.float32(a)
        hi = np.float32(b)
        factors_out[p, 0] = lo
        factors_out[p, 1] = (np.float64(hi) - lo) / levels
        factors_out[p, 2] = ksum
        factors_out[p, 3] = np.float32(norm2) if euclidean else np.float32(cdot)


@parallel_kernel
def rank_children(
    qb,
    qf,
    codes,
    factors,
    cc,
    porder,
    pbound,
    child_order,
    child_offsets,
    dim,
    gg,
    is_l2,
    to_distance,
    out_keys,
    out_ids,
):
    """Best-first expansion of parents: the best ``H`` lists per query by 7-bit estimate.

    Parents are visited in ``porder[q]`` order (``pbound[q]`` descending: an upper bound on
    the key of any of the parent's children); a parent's children (byte codes ``codes``) are
    scored and offered to the bounded heap ``out_keys[q]`` / ``out_ids[q]`` (preset to
    ``-inf`` / ``EMPTY_ID``), and the walk stops once the heap is full and the next parent's
    bound cannot beat its worst entry. Child keys are the raw estimate (``-d²`` for
    euclidean, else the inner product), or ``2 <q, c> - ||c||²`` (``to_distance``: minus the
    squared distance up to the query's own norm).
    """
    nq = porder.shape[0]
    n_parents = porder.shape[1]
    for q in prange(nq):
        dots = np.empty(1, dtype=np.int64)
        key = np.empty(1, dtype=np.float64)
        keys = out_keys[q]
        ids = out_ids[q]
        for r in range(n_parents):
            if keys[0] > -np.inf and pbound[q, r] < keys[0]:
                break
            p = porder[q, r]
            for t in range(child_offsets[p], child_offsets[p + 1]):
                c = child_order[t]
                dots[0] = byte_dot(qb[q], codes[c])
                _block_keys(dots, 1, c, factors, qf[q], dim, gg, is_l2, key)
                value = key[0]
                if to_distance:
                    value = 2.0 * value - cc[c]
                _offer(keys, ids, value, np.int64(c))


@parallel_kernel
def spill_costs(X, C, primary, secondary, lam, out):
    """SOAR loss of each row's spill: ``||x - c2||² + lam <r, x - c2>² / ||r||²``.

    ``r = x - c1`` with ``c1 = C[primary[i]]``, ``c2 = C[secondary[i]]`` (float64 sums);
    ``||x - c2||²`` alone when ``||r||² <= 1e-16`` (spec §6.3). Rows without a spill
    (``secondary < 0``) get ``inf``.
    """
    d = X.shape[1]
    for i in prange(X.shape[0]):
        c2 = secondary[i]
        if c2 < 0:
            out[i] = np.inf
            continue
        c1 = primary[i]
        rr = 0.0
        re = 0.0
        ee = 0.0
        for t in range(d):
            x = np.float64(X[i, t])
            r = x - C[c1, t]
            e = x - C[c2, t]
            rr += r * r
            re += r * e
            ee += e * e
        out[i] = ee + lam * re * re / rr if rr > 1e-16 else ee


@parallel_kernel
def dedup_topk_rows(keys, ids, out_keys, out_ids):
    """Best distinct ids per row of heaps that may hold an id twice (SOAR copies).

    ``keys`` / ``ids`` [nq, H] (empty slots ``EMPTY_ID``); ``out_keys`` / ``out_ids``
    [nq, k] receive the best ``k`` distinct ids by (key desc, id asc), each with its best
    key, padded with ``-inf`` / ``-1``.
    """
    nq, h = keys.shape
    k = out_keys.shape[1]
    for q in prange(nq):
        by_id = np.argsort(ids[q], kind="mergesort")
        best = np.empty(h, dtype=np.float64)
        uniq = np.empty(h, dtype=np.int64)
        m = 0
        i = 0
        while i < h:
            idx = ids[q, by_id[i]]
            top = keys[q, by_id[i]]
            i += 1
            while i < h and ids[q, by_id[i]] == idx:
                top = max(top, keys[q, by_id[i]])
                i += 1
            if idx != EMPTY_ID:
                best[m] = top
                uniq[m] = idx
                m += 1
        # uniq is ascending, so a stable sort on -key breaks ties by the lower id.
        order = np.argsort(-best[:m], kind="mergesort")
        for r in range(k):
            if r < m:
                out_keys[q, r] = best[order[r]]
                out_ids[q, r] = uniq[order[r]]
            else:
                out_keys[q, r] = -np.inf
                out_ids[q, r] = -1


@parallel_kernel
def topk_columns(keys, out_ids):
    """The ``want = out_ids.shape[1]`` best columns of each row, best first (lower column
    among equal keys); ``keys`` float64 [nq, K] with ``want <= K``."""
    nq, n = keys.shape
    want = out_ids.shape[1]
    for q in prange(nq):
        hk = np.full(want, -np.inf)
        hi = np.full(want, EMPTY_ID, dtype=np.int64)
        row = keys[q]
        for c in range(n):
            _offer(hk, hi, row[c], np.int64(c))
        by_id = np.argsort(hi, kind="mergesort")
        sk = np.empty(want, dtype=np.float64)
        for r in range(want):
            sk[r] = -hk[by_id[r]]
        order = np.argsort(sk, kind="mergesort")
        for r in range(want):
            out_ids[q, r] = hi[by_id[order[r]]]
