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

from .policy import parallel_kernel, prange
from .scoring import BLOCK, _block_keys, _offer, byte_dot, plane_dot

__all__ = ["ivf_scan_planes", "ivf_scan_bytes", "score_selected_bytes", "pair_dots"]


@parallel_kernel
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
    use_mask = allowed.shape[0] > 0
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
                for j in range(m):
                    dots[j] = plane_dot(query, dw[b0 + j], qp, dp, words)
                _block_keys(dots, m, b0, df, qf[p], dim, cc, is_l2, block_keys)
                worst = keys[0]
                for j in range(m):
                    key = block_keys[j]
                    if key >= worst:
                        idx = ids[b0 + j]
                        if use_mask and allowed[idx] == 0:
                            continue
                        _offer(keys, heap_ids, key, np.int64(idx))
                        worst = keys[0]


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
    use_mask = allowed.shape[0] > 0
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
                worst = keys[0]
                for j in range(m):
                    key = block_keys[j]
                    if key >= worst:
                        idx = ids[b0 + j]
                        if use_mask and allowed[idx] == 0:
                            continue
                        _offer(keys, heap_ids, key, np.int64(idx))
                        worst = keys[0]


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
def pair_dots(X, C, rows, cols, out):
    """``out[i] = <X[rows[i]], C[cols[i]]>`` accumulated in float64 (``<v, c>`` corrections)."""
    d = X.shape[1]
    for i in prange(rows.shape[0]):
        r = rows[i]
        c = cols[i]
        acc = 0.0
        for t in range(d):
            acc += np.float64(X[r, t]) * np.float64(C[c, t])
        out[i] = acc
