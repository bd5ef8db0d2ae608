"""SAQ in an IVF: the centre terms of residual codes, and the list scan over (query, list) pairs.

An IVF codes each entry's residual ``o = x - c`` (``c`` its list's centre, in SAQ's frame)
with :func:`bbqlib._kernels.saq.caq_encode_rows`. The segment estimate is linear in the query,
``est_s(y) = scale_s (<k_s, y_s> - (2^B_s - 1)/2 Σ y_s)``, so for the residual query
``y = q - c``

    Σ_s est_s(q - c) = Σ_s est_s(q) - g,     g = Σ_s est_s(c)

with ``g`` a constant of the entry (its code against its own list's centre). The IVF folds
``g`` into the entry's ``additional`` factor (``+ 2g`` for squared L2, ``- g`` for inner
products: :func:`entry_totals` computes it at encode time), so one set of lookup tables per
*query* (of ``q`` in the frame, not centred) serves every list the query visits; each pair
brings only its ``q_add`` (``‖q - c‖²`` or ``<q, c>``). Factor rows and code rows are those of
:mod:`bbqlib._kernels.saq`; ``tests/reference/saq.py`` is the NumPy twin.
"""

from __future__ import annotations

import numpy as np

from .lut import LANES
from .policy import parallel_kernel, prange
from .saq import _raw, _segment_dot
from .saq_fastscan import _block_keys, _gather, _rescore, block_dots

# The kernels below inline saq_fastscan's helpers: their disk cache entries are stamped with
# every module of this package (bbqlib._kernels.cache.folder_stamp), so they recompile when
# saq_fastscan.py changes.
from .scoring import _offer, _offer_entries

__all__ = ["entry_totals", "pair_terms", "ivf_scan_saq", "ivf_fastscan_saq"]


@parallel_kernel
def entry_totals(ctables, cconst, lists, codes, factors, start, dims, bits, msb_off, low_off, out):
    """``out[e] = Σ_s factors[e, 1 + s] (<k_s, c_s> - cconst[lists[e], s])``: the segment
    estimates of each entry's code against the centre ``c`` of its list ``lists[e]``.

    ``ctables`` float32 [L, P, 256]: lookup tables of the centres (the ``build_tables`` of
    :mod:`bbqlib._kernels.saq`); ``cconst`` float64 [L, S]: ``(2^B_s - 1)/2 Σ c_s``.
    """
    S_ = start.shape[0]
    for e in prange(codes.shape[0]):
        lst = lists[e]
        T = ctables[lst]
        total = 0.0
        for s in range(S_):
            dot = _segment_dot(codes[e], T, s, start, dims, bits, msb_off, low_off)
            total += np.float64(factors[e, 1 + s]) * (dot - cconst[lst, s])
        out[e] = total


@parallel_kernel
def pair_terms(Q, C, list_cc, pair_query, pair_list, is_l2, out):
    """``out[p]``: ``‖q - c‖² = ‖q‖² - 2 <q, c> + ‖c‖²`` (``is_l2``, ``list_cc[c] = ‖c‖²``)
    or ``<q, c>`` of each (query, list) pair ``q = Q[pair_query[p]]``, ``c = C[pair_list[p]]``
    (float64 sums over the rows as stored)."""
    d = Q.shape[1]
    for p in prange(pair_query.shape[0]):
        q = pair_query[p]
        c = pair_list[p]
        qc = 0.0
        qq = 0.0
        for i in range(d):
            x = np.float64(Q[q, i])
            qc += x * np.float64(C[c, i])
            qq += x * x
        out[p] = qq - 2.0 * qc + np.float64(list_cc[c]) if is_l2 else qc


@parallel_kernel
def ivf_scan_saq(
    tables,
    qconst,
    pair_add,
    pair_list,
    pair_start,
    list_start,
    codes,
    factors,
    ids,
    start,
    dims,
    bits,
    msb_off,
    low_off,
    is_l2,
    allowed,
    out_keys,
    out_ids,
):
    """Heap of the best entries per query over its visited lists (SAQ codes).

    ``tables`` float32 [nq, P, 256] and ``qconst`` float64 [nq, S]: one query's tables (of
    ``q`` in SAQ's frame) for all its pairs; ``pair_add`` float64 [P]: ``‖q - c‖²`` or
    ``<q, c>`` of each pair; ``factors`` float32 [E, 1 + 2S] with the centre term folded into
    column 0 (module doc). Other arguments and the heaps as in :mod:`bbqlib._kernels.ivf`:
    one thread per query, keys ``-d²`` or the inner product, ties to the lower id.
    """
    nq = pair_start.shape[0] - 1
    use_mask = allowed.shape[0] > 0
    for q in prange(nq):
        keys = out_keys[q]
        heap_ids = out_ids[q]
        T = tables[q]
        qc = qconst[q]
        for p in range(pair_start[q], pair_start[q + 1]):
            lst = pair_list[p]
            qa = pair_add[p]
            for e in range(list_start[lst], list_start[lst + 1]):
                idx = ids[e]
                if use_mask and allowed[idx] == 0:
                    continue
                raw = _raw(
                    codes[e], factors[e], T, qc, qa, start, dims, bits, msb_off, low_off, is_l2
                )
                key = -raw if is_l2 else raw
                if key >= keys[0]:
                    _offer(keys, heap_ids, key, np.int64(idx))


@parallel_kernel
def ivf_fastscan_saq(
    tables,
    qlo,
    qstep,
    qw,
    qconst,
    qerr,
    fq,
    fconst,
    pair_add,
    pair_list,
    pair_start,
    list_start,
    block_starts,
    blocks,
    codes,
    factors,
    cols,
    ksum,
    gnorm,
    gmax,
    ids,
    start,
    dims,
    bits,
    msb_off,
    low_off,
    is_l2,
    refine,
    allowed,
    out_keys,
    out_ids,
    rescored,
):
    """:func:`ivf_scan_saq` with 4-bit queries: the lookup-table scan of
    :mod:`bbqlib._kernels.saq_fastscan` over each visited list's blocks of 32 entries.

    ``tables`` uint8 [nq, 2 · coded/8 · 32] and ``qlo``, ``qstep``, ``qw``, ``qconst`` [nq, S]:
    one query's 4-bit nibble tables and constants (of ``q`` in SAQ's frame: the centre term
    is folded into ``factors[:, 0]``, so they serve every list; every plane is read); each
    pair adds its ``pair_add``. ``refine`` False: the heaps rank by the 4-bit estimates.
    True: two passes, as :func:`bbqlib._kernels.saq_fastscan.fastscan_scan` (``qerr`` [nq, S]:
    ``z ‖e_s‖ / sqrt(d_s)``; ``fq`` / ``fconst`` the float query rows, float32 [nq,
    coded dims], and constants): an entry
    whose 4-bit key widened by its rounding half-width reaches the heap's bar of
    pessimistic keys is re-scored with the float tables at the end; ``rescored[q]`` counts
    them. ``block_starts`` / ``blocks``: :func:`bbqlib.packing.lut_list_blocks` of the codes;
    ``cols``, ``ksum``, ``gnorm`` [., E] and ``gmax`` [S] as in ``fastscan_scan`` (all bits).
    Heaps, ids, mask and SOAR duplicates as :func:`ivf_scan_saq`.
    """
    nq = pair_start.shape[0] - 1
    S_ = start.shape[0]
    H = out_keys.shape[1]
    scale2 = 2.0 if is_l2 else 1.0
    zero = np.zeros(S_)  # no truncated planes
    for q in prange(nq):
        dots = np.empty((S_, LANES), dtype=np.int32)
        tmp = np.empty(LANES, dtype=np.int32)
        bkeys = np.empty(LANES, dtype=np.float64)
        keys = out_keys[q]
        heap_ids = out_ids[q]
        pess = np.full(H, -np.inf)
        pess_ids = np.full(H, np.iinfo(np.int64).max, dtype=np.int64)
        cand = np.empty(1024, dtype=np.int64)
        cand_key = np.empty(1024, dtype=np.float64)
        cand_add = np.empty(1024, dtype=np.float64)
        FT = np.empty((fq.shape[1] // 8 if refine else 0, 256), dtype=np.float32)
        cm = 0
        T = tables[q]
        hmax = 0.0
        for s in range(S_):
            x = gmax[s] * qerr[q, s]
            hmax += x * x
        hmax = scale2 * np.sqrt(hmax)
        for p in range(pair_start[q], pair_start[q + 1]):
            lst = pair_list[p]
            qa = pair_add[p]
            e0 = list_start[lst]
            size = list_start[lst + 1] - e0
            b0 = block_starts[lst]
            for t in range((size + LANES - 1) // LANES):
                r0 = e0 + t * LANES
                m = min(LANES, size - t * LANES)
                block_dots(blocks[b0 + t], T, start, dims, bits, msb_off, low_off, dots, tmp)
                _block_keys(dots, r0, m, cols, ksum, qlo[q], qstep[q], qw[q], qconst[q], qa,
                            is_l2, bkeys)  # fmt: skip
                if not refine:
                    _offer_entries(keys, heap_ids, bkeys, m, r0, ids, allowed)
                    continue
                top = bkeys[0]
                for j in range(1, m):
                    top = max(top, bkeys[j])
                if top + hmax < pess[0]:  # no entry of the block can reach the bar
                    continue
                cand, cand_key, cand_add, cm = _gather(
                    bkeys, m, r0, hmax, cols, gnorm, qerr[q], zero, scale2, ids, allowed, pess,
                    pess_ids, cand, cand_key, cand_add, cm, qa,
                )  # fmt: skip
        if refine:
            rescored[q] = _rescore(
                cand, cand_key, cand_add, cm, pess[0], codes, factors, fq[q], FT, fconst[q],
                ids, 0, start, dims, bits, msb_off, low_off, is_l2, keys, heap_ids,
            )  # fmt: skip
