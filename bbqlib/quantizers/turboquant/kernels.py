"""TurboQuant's compiled scans: lookup-table sums over its packed codes.

A doc's estimate is ``dot = f0 · A + f1 · B`` with ``A = Σ_j y_j c[k_j]`` (the MSE codes
against the query's table, :func:`bbqlib.quantizers.turboquant.codebook.lut_tables`) and for
``prod`` ``B = Σ_j (S y)_j z_j`` (the QJL signs ``z_j = ±1`` against the projected query's
table); ``f0 = ‖x‖``, ``f1 = ‖x‖ γ sqrt(π/2) / d`` and ``f2`` (``‖x‖²`` or, in a list, the
centre's terms) come from the factor rows float32 [n, 4]. Keys (higher is better) are
``-(add + f2 - 2 dot)`` under euclidean and ``add + f2 + dot`` otherwise, ``add`` the query's
(or the (query, list) pair's) term.

Every table sum reads a group of 8 coordinates as one little-endian word of ``bits`` bytes
and looks up ``8 bits / w`` chunks of ``w`` bits (``w = lut_width(bits)``), in float64. The
NumPy references are in ``tests/reference/turboquant.py``.
"""

from __future__ import annotations

import numpy as np

from ..._kernels.fused import _distinct, _heap, _one_query, _rows, ivf_back, ivf_front
from ..._kernels.policy import kernel, parallel_kernel, prange
from ..._kernels.saq_ivf import pair_terms
from ..._kernels.scoring import BLOCK, _offer_block, _offer_entries

__all__ = ["lut_sum", "estimate_rows", "scan_flat", "scan_lists", "ivf_turboquant_fused"]

_pair_terms = pair_terms.serial


@kernel(inline="always")
def lut_sum(row, off, bits, w, groups, table):
    """``Σ`` of ``table[chunk, code of chunk]`` over the ``groups`` groups of ``row`` from
    byte ``off`` (``bits`` bytes per group, chunks of ``w`` bits): one partial sum per chunk
    of a group, added in order at the end (eight independent sums instead of one chain of
    dependent additions; the order is fixed, so one query gives its row of a batch)."""
    part = np.zeros(8, dtype=np.float64)
    mask = (1 << w) - 1
    per = (8 * bits) // w
    for g in range(groups):
        base = off + g * bits
        word = 0
        for t in range(bits):
            word |= np.int64(row[base + t]) << (8 * t)
        c0 = g * per
        for t in range(per):
            part[t] += table[c0 + t, (word >> (t * w)) & mask]
    acc = 0.0
    for t in range(per):
        acc += part[t]
    return acc


@kernel(inline="always")
def _key(row, f, tm, tq, add, bits, w, groups, prod, is_l2):
    dot = np.float64(f[0]) * lut_sum(row, 0, bits, w, groups, tm)
    if prod:
        dot += np.float64(f[1]) * lut_sum(row, bits * groups, 1, 8, groups, tq)
    if is_l2:
        return -(add + np.float64(f[2]) - 2.0 * dot)
    return add + np.float64(f[2]) + dot


@parallel_kernel(vectorize=False)
def estimate_rows(tm, tq, add, codes, df, bits, w, groups, prod, is_l2, out):
    """Raw estimates ``out`` [nq, n] (``d²`` or the inner product) of every doc."""
    for i in prange(codes.shape[0]):
        for q in range(tm.shape[0]):
            key = _key(codes[i], df[i], tm[q], tq[q], add[q], bits, w, groups, prod, is_l2)
            out[q, i] = -key if is_l2 else key


@parallel_kernel(vectorize=False)
def scan_flat(tm, tq, add, codes, df, bits, w, groups, prod, is_l2, allowed, id_base,
              out_keys, out_ids):  # fmt: skip
    """Per-chunk heaps ``out_keys`` / ``out_ids`` [chunks, nq, k] of the best docs
    (``allowed``: uint8 mask over docs, empty: all; ids are ``id_base + row``)."""
    n = codes.shape[0]
    chunks = out_keys.shape[0]
    per = (n + chunks - 1) // chunks
    for c in prange(chunks):
        block_keys = np.empty(BLOCK, dtype=np.float64)
        stop = min(n, (c + 1) * per)
        for b0 in range(c * per, stop, BLOCK):
            m = min(stop - b0, BLOCK)
            for q in range(tm.shape[0]):
                for j in range(m):
                    block_keys[j] = _key(codes[b0 + j], df[b0 + j], tm[q], tq[q], add[q], bits,
                                         w, groups, prod, is_l2)  # fmt: skip
                _offer_block(out_keys[c, q], out_ids[c, q], block_keys, m, b0, allowed, id_base)


@parallel_kernel(vectorize=False)
def scan_lists(tm, tq, pair_add, pair_list, pair_start, list_start, codes, df, ids, bits, w,
               groups, prod, is_l2, allowed, out_keys, out_ids):  # fmt: skip
    """Heap ``out_keys`` / ``out_ids`` [nq, H] of the best entries of each query's visited
    lists: pairs ``pair_start[q] .. pair_start[q + 1]`` with their lists and ``pair_add``;
    ``tm`` / ``tq`` one table set per query for all its lists."""
    nq = pair_start.shape[0] - 1
    for q in prange(nq):
        block_keys = np.empty(BLOCK, dtype=np.float64)
        keys = out_keys[q]
        heap_ids = out_ids[q]
        for p in range(pair_start[q], pair_start[q + 1]):
            lst = pair_list[p]
            add = pair_add[p]
            stop = list_start[lst + 1]
            for b0 in range(list_start[lst], stop, BLOCK):
                m = min(stop - b0, BLOCK)
                for j in range(m):
                    block_keys[j] = _key(codes[b0 + j], df[b0 + j], tm[q], tq[q], add, bits, w,
                                         groups, prod, is_l2)  # fmt: skip
                _offer_entries(keys, heap_ids, block_keys, m, b0, ids, allowed)


_scan_lists = scan_lists.serial


@kernel
def ivf_turboquant_fused(x, qp, qt, front, middle, back, outs):
    """One IVF query (:mod:`bbqlib._kernels.fused`'s front and back): the visited lists'
    ``‖q - c‖²`` or ``<q, c>`` (:func:`bbqlib._kernels.saq_ivf.pair_terms`) and
    :func:`scan_lists` with the query's tables (made by the caller). ``middle``: ``(tm, tq,
    centroids, list_cc, list_start, codes, df, ids, bits, w, groups, prod, is_l2, allowed,
    heap, depth)``."""
    status, lists = ivf_front(x, qp, qt, front, outs[2])
    if status != 0:
        return status, lists.shape[0], 0
    (tm, tq, C, list_cc, list_start, codes, df, ids, bits, w, groups, prod, is_l2, allowed,
     heap, depth) = middle  # fmt: skip
    pair_query, pair_list, pair_start = _one_query(lists)
    P = lists.shape[0]
    add = np.empty(P, dtype=np.float64)
    _pair_terms(_rows(qp, qt), C, list_cc, pair_query, pair_list, is_l2, add)
    keys, hids = _heap(heap)
    _scan_lists(tm, tq, add, pair_list, pair_start, list_start, codes, df, ids, bits, w, groups,
                prod, is_l2, allowed, keys, hids)  # fmt: skip
    best, rows, entries = _distinct(keys, hids, heap, depth, lists, list_start)
    return ivf_back(qp, best, rows, back, outs), P, entries
