"""One IVF query in one compiled call, for every code layout: the index's steps around the
family's list scan.

Each kernel is :func:`ivf_front` (prepare the query, plan the lists, check their CRC32s),
the family's *middle* (the query coded against every visited list's centre and the list scan
into a heap, then the SOAR de-duplication), and :func:`ivf_back` (the exact rerank and the
results). One call, so a query releases the GIL once (what lets Python threads issuing single
queries scale). The middles call the same compiled bodies as the batch path
(:func:`bbqlib._kernels.ivf.quantize_pairs`, :mod:`bbqlib._kernels.pairs`, the list scans),
so a query searched alone gets its row of a batch.

Every kernel takes ``(x, qp, qt, front, middle, back, outs)``:

* ``x`` float32 [d], the caller's query; ``qp`` float32 [d] receives it prepared (normalized
  for cosine; it may be ``x`` itself otherwise); ``qt`` float32 [d], the prepared query
  transformed by the quantizer's transform (computed by the caller), or empty when there is
  none (the plan and the scan then read ``qp``);
* ``front``: ``(cosine, unit_only, max_sq, unit_tol)``, the plan's arguments
  (:func:`bbqlib._kernels.single.ivf_plan_two`), then the list checks' ``(lists_ok,
  list_crcs, list_start, block_start, check_bytes, check_width, factor_bytes, id_bytes)``
  (:func:`bbqlib._kernels.crc32.check_lists` over what the scan reads: lookup-table blocks,
  or the codes with ``block_start = list_start``);
* ``middle``: the family's arguments (each kernel's docstring);
* ``back``: ``(vectors, rerank, k, pad, is_l2, rows_ok, block_rows, row_data, row_crcs,
  rows_cold)``;
* ``outs``: ``(out_raw float64 [1, k], out_rows int64 [1, k], out_lists int32,
  out_cands int64)``.

They return ``(status, lists visited, entries scored)`` with the statuses of
:func:`ivf_back` / :func:`ivf_front`: 0 done; 1 the query breaks a rule (the caller's general
path raises); 2 a planned list fails or cannot be checked here (its lists in ``out_lists``
when it has room); 3 a candidate row's block fails its CRC32 (the rows in ``out_cands``).
"""

from __future__ import annotations

import numpy as np

from . import ivf as KI
from .crc32 import check_lists, check_rows
from .pairs import grid_pair_rows, residual_pair_rows, scaled_pair_rows
from .policy import kernel
from .saq_ivf import ivf_fastscan_saq, pair_terms
from .saq_query import fastscan_tables, rotate_block, segment_constants
from .scoring import EMPTY_ID
from .single import (
    _ONE,
    _ZERO,
    ivf_lut_one,
    ivf_plan_two,
    prepare_one,
    rerank_dots,
    rerank_sqdists,
)  # fmt: skip

__all__ = [
    "ivf_front",
    "ivf_back",
    "ivf_lut_fused",
    "ivf_planes_fused",
    "ivf_bytes_fused",
    "ivf_float_fused",
    "ivf_grid_fused",
    "ivf_saq_fused",
]

_quantize_pairs = KI.quantize_pairs.serial
_scan_planes = KI.ivf_scan_planes.serial
_scan_bytes = KI.ivf_scan_bytes.serial
_scan_float = KI.ivf_scan_float.serial
_dedup = KI.dedup_topk_rows.serial
_pair_terms = pair_terms.serial
_scan_saq = ivf_fastscan_saq.serial
_saq_tables = fastscan_tables.serial
_saq_constants = segment_constants.serial


@kernel
def ivf_front(x, qp, qt, front, out_lists):
    """Prepare ``x`` into ``qp``, plan the lists, check the CRC32s of those not checked yet:
    ``(status, lists int32 [P])`` (status 0, 1 or 2 of the module docstring)."""
    (cosine, unit_only, max_sq, unit_tol, g, gg, codes, factors, cc, sizes, plan_bits, iters,
     plan_lam, plan_l2, by_distance, need, pcodes, pfactors, pcc, pradius, child_order,
     child_offsets, want, lists_ok, list_crcs, list_start, block_start, check_bytes,
     check_width, factor_bytes, id_bytes) = front  # fmt: skip
    none = np.empty(0, dtype=np.int32)
    sq = prepare_one(x, cosine, qp)
    if not sq <= max_sq or (cosine and sq == 0.0) or (unit_only and abs(sq - 1.0) > unit_tol):
        return 1, none
    q2 = _rows(qp, qt)
    lists = ivf_plan_two(
        q2, g, gg, codes, factors, cc, sizes, plan_bits, iters, plan_lam, plan_l2, by_distance,
        need, pcodes, pfactors, pcc, pradius, child_order, child_offsets, want,
    )  # fmt: skip
    n_lists = lists.shape[0]
    if list_crcs.shape[0] > 0:
        check_lists(
            lists, lists_ok, list_crcs, list_start, block_start, check_bytes, check_width,
            factor_bytes, id_bytes,
        )  # fmt: skip
    for p in range(n_lists):
        if not lists_ok[lists[p]]:
            if out_lists.shape[0] >= n_lists:
                out_lists[:n_lists] = lists
            return 2, lists
    return 0, lists


@kernel(inline="always")
def _rows(qp, qt):
    """The query the plan and the scan read, as [1, d]: ``qt`` unless it is empty."""
    q = qp if qt.shape[0] == 0 else qt
    return q.reshape((1, q.shape[0]))


@kernel
def ivf_back(qp, keys, rows, back, outs):
    """The results of the de-duplicated candidates ``rows`` (their estimated ``keys``):
    estimates, or with ``rerank`` the exact values (after the rows' CRC32 checks). Returns
    status 0 or 3 (module docstring)."""
    vectors, rerank, k, pad, is_l2, rows_ok, block_rows, row_data, row_crcs, rows_cold = back
    out_raw, out_rows, _, out_cands = outs
    if not rerank:
        m = min(k, rows.shape[0])
        for r in range(k):
            if r < m and rows[r] >= 0:
                out_raw[0, r] = -keys[r] if is_l2 else keys[r]
                out_rows[0, r] = rows[r]
            else:
                out_raw[0, r] = pad
                out_rows[0, r] = -1
        return 0
    m = rows.shape[0]
    if check_rows(row_data, rows, row_crcs, rows_ok, block_rows, rows_cold) >= 0:
        if out_cands.shape[0] >= m:
            out_cands[:m] = rows
            out_cands[m:] = -1
        return 3
    q2 = qp.reshape((1, qp.shape[0]))
    if is_l2:
        raw, best = rerank_sqdists(q2, vectors, rows, k, pad)
    else:
        raw, best = rerank_dots(q2, vectors, rows, k, pad)
    out_raw[:] = raw
    out_rows[:] = best
    return 0


@kernel(inline="always")
def _heap(heap):
    keys = np.full((1, heap), -np.inf)
    ids = np.full((1, heap), EMPTY_ID, dtype=np.int64)
    return keys, ids


@kernel(inline="always")
def _distinct(keys, hids, heap, depth, lists, list_start):
    """The SOAR de-duplication to the best ``min(depth, heap)`` and the entries scored."""
    out_keys = np.empty((1, min(depth, heap)), dtype=np.float64)
    out_ids = np.empty((1, min(depth, heap)), dtype=np.int64)
    _dedup(keys, hids, out_keys, out_ids)
    entries = 0
    for p in range(lists.shape[0]):
        entries += list_start[lists[p] + 1] - list_start[lists[p]]
    return out_keys[0], out_ids[0], entries


@kernel(inline="always")
def _one_query(lists):
    P = lists.shape[0]
    pair_start = np.zeros(2, dtype=np.int64)
    pair_start[1] = P
    return np.zeros(P, dtype=np.int64), lists.astype(np.int64), pair_start


@kernel
def ivf_lut_fused(x, qp, qt, front, middle, back, outs):
    """OSQ-coded queries (one optimizer step per list, as ``query_pairs``) and the
    lookup-table list scan (plane docs, queries of at most 4 bits):
    :func:`bbqlib._kernels.single.ivf_lut_one`. ``middle``: ``(centroids, bits, lam, is_l2,
    width, list_start, list_block_start, blocks, df, ids, list_cc, planes, pairs, dim,
    allowed, heap, depth)``."""
    status, lists = ivf_front(x, qp, qt, front, outs[2])
    if status != 0:
        return status, lists.shape[0], 0
    (C, bits, lam, is_l2, width, list_start, list_block_start, blocks, df, ids, list_cc,
     planes, pairs, dim, allowed, heap, depth) = middle  # fmt: skip
    best, rows, entries = ivf_lut_one(
        _rows(qp, qt), C, lists, bits, lam, is_l2, width, list_start, list_block_start, blocks,
        df, ids, list_cc, planes, pairs, dim, allowed, heap, depth,
    )  # fmt: skip
    return ivf_back(qp, best, rows, back, outs), lists.shape[0], entries


@kernel
def ivf_planes_fused(x, qp, qt, front, middle, back, outs):
    """OSQ-coded queries packed in ``qplanes`` bit planes and the popcount list scan (plane
    docs: 5 and 6-bit docs with 7-bit queries, or any plane docs without AVX2). ``middle``:
    ``(centroids, bits, lam, is_l2, qplanes, qwidth, list_start, dw, df, ids, list_cc, dp,
    words, dim, allowed, heap, depth)`` with ``qwidth`` the packed query's bytes."""
    status, lists = ivf_front(x, qp, qt, front, outs[2])
    if status != 0:
        return status, lists.shape[0], 0
    (C, bits, lam, is_l2, qplanes, qwidth, list_start, dw, df, ids, list_cc, dp, words, dim,
     allowed, heap, depth) = middle  # fmt: skip
    pair_query, pair_list, pair_start = _one_query(lists)
    P = lists.shape[0]
    qcodes = np.zeros((P, qwidth), dtype=np.uint8)
    qf = np.empty((P, 4), dtype=np.float64)
    _quantize_pairs(
        _rows(qp, qt), C, pair_query, pair_list, bits, _ONE, lam, is_l2, qplanes, qcodes, qf
    )
    keys, hids = _heap(heap)
    _scan_planes(
        qcodes.view(np.uint64), qf, lists, pair_start, list_start, dw, df, ids, list_cc,
        qplanes, dp, words, dim, is_l2, allowed, keys, hids,
    )  # fmt: skip
    best, rows, entries = _distinct(keys, hids, heap, depth, lists, list_start)
    return ivf_back(qp, best, rows, back, outs), P, entries


@kernel
def ivf_bytes_fused(x, qp, qt, front, middle, back, outs):
    """OSQ-coded queries, one byte per dimension, and the byte list scan (7 and 8-bit docs,
    int8 ``osq``). ``middle``: ``(centroids, bits, lam, is_l2, list_start, db, df, ids,
    list_cc, dim, allowed, heap, depth)``."""
    status, lists = ivf_front(x, qp, qt, front, outs[2])
    if status != 0:
        return status, lists.shape[0], 0
    C, bits, lam, is_l2, list_start, db, df, ids, list_cc, dim, allowed, heap, depth = middle
    pair_query, pair_list, pair_start = _one_query(lists)
    P = lists.shape[0]
    qcodes = np.zeros((P, dim), dtype=np.uint8)
    qf = np.empty((P, 4), dtype=np.float64)
    _quantize_pairs(
        _rows(qp, qt), C, pair_query, pair_list, bits, _ONE, lam, is_l2, _ZERO, qcodes, qf
    )
    keys, hids = _heap(heap)
    _scan_bytes(
        qcodes, qf, lists, pair_start, list_start, db, df, ids, list_cc, dim, is_l2, allowed,
        keys, hids,
    )  # fmt: skip
    best, rows, entries = _distinct(keys, hids, heap, depth, lists, list_start)
    return ivf_back(qp, best, rows, back, outs), P, entries


@kernel
def ivf_float_fused(x, qp, qt, front, middle, back, outs):
    """Float queries and the float list scan over plane or byte docs (RaBitQ and BBQ float
    queries: residuals, :func:`bbqlib._kernels.pairs.residual_pairs`; int8 ``per_dim``:
    scaled, :func:`bbqlib._kernels.pairs.scaled_pairs`). ``middle``: ``(centroids, scaled,
    scale, offset, is_l2, list_start, codes, df, ids, list_cc, planes, plane_bytes, dim,
    allowed, heap, depth)``."""
    status, lists = ivf_front(x, qp, qt, front, outs[2])
    if status != 0:
        return status, lists.shape[0], 0
    (C, scaled, scale, offset, is_l2, list_start, codes, df, ids, list_cc, planes, plane_bytes,
     dim, allowed, heap, depth) = middle  # fmt: skip
    pair_query, pair_list, pair_start = _one_query(lists)
    P = lists.shape[0]
    y = np.empty((P, dim), dtype=np.float32)
    qf = np.empty((P, 4), dtype=np.float64)
    q2 = _rows(qp, qt)
    if scaled:
        scaled_pair_rows(q2, C, pair_query, pair_list, scale, offset, is_l2, y, qf, _ZERO, P)
    else:
        residual_pair_rows(q2, C, pair_query, pair_list, is_l2, y, qf, _ZERO, P)
    keys, hids = _heap(heap)
    _scan_float(
        y, qf, lists, pair_start, list_start, codes, df, ids, list_cc, planes, plane_bytes, dim,
        is_l2, allowed, keys, hids,
    )  # fmt: skip
    best, rows, entries = _distinct(keys, hids, heap, depth, lists, list_start)
    return ivf_back(qp, best, rows, back, outs), P, entries


@kernel
def ivf_grid_fused(x, qp, qt, front, middle, back, outs):
    """Residual queries on int8 ``global``'s grid (:func:`bbqlib._kernels.pairs.grid_pairs`)
    and the byte list scan. ``middle``: ``(centroids, lower, upper, alpha, inv_alpha,
    levels, is_l2, list_start, db, df, ids, list_cc, dim, allowed, heap, depth)``."""
    status, lists = ivf_front(x, qp, qt, front, outs[2])
    if status != 0:
        return status, lists.shape[0], 0
    (C, lower, upper, alpha, inv_alpha, levels, is_l2, list_start, db, df, ids, list_cc, dim,
     allowed, heap, depth) = middle  # fmt: skip
    pair_query, pair_list, pair_start = _one_query(lists)
    P = lists.shape[0]
    qcodes = np.empty((P, dim), dtype=np.uint8)
    qf = np.empty((P, 4), dtype=np.float64)
    grid_pair_rows(
        _rows(qp, qt), C, pair_query, pair_list, lower, upper, alpha, inv_alpha, levels, is_l2,
        qcodes, qf, _ZERO, P,
    )  # fmt: skip
    keys, hids = _heap(heap)
    _scan_bytes(
        qcodes, qf, lists, pair_start, list_start, db, df, ids, list_cc, dim, is_l2, allowed,
        keys, hids,
    )  # fmt: skip
    best, rows, entries = _distinct(keys, hids, heap, depth, lists, list_start)
    return ivf_back(qp, best, rows, back, outs), P, entries


@kernel(inline="always")
def _saq_query(q2, frame, start, dims, bits, keep, z, refine):
    """The query's arrays of SAQ's list scan, as the batch path makes them
    (:meth:`bbqlib.quantizers.saq.scanner.SAQScanner.scan_pairs`, the same kernels): the
    query in SAQ's frame, its 4-bit tables and constants, and for two passes the float rows
    and their constants."""
    S = start.shape[0]
    coded = frame.shape[1]
    yc = np.empty((1, coded), dtype=np.float32)
    rotate_block(q2, 0, 1, frame, yc)
    tables = np.empty((1, 2 * (coded // 8) * 32), dtype=np.uint8)
    lo = np.empty((1, S))
    step = np.empty((1, S))
    w = np.empty((1, S))
    const = np.empty((1, S))
    rounding = np.empty((1, S))
    trunc = np.empty((1, S))
    _saq_tables(yc, start, dims, bits, keep, tables, lo, step, w, const, rounding, trunc)
    qerr = z * rounding
    if refine:
        frows = yc
        fconst = np.empty((1, S))
        _saq_constants(yc, start, dims, bits, fconst)
    else:
        frows = np.zeros((1, 8), dtype=np.float32)
        fconst = np.zeros((1, 1))
    return tables, lo, step, w, const, qerr, frows, fconst


@kernel
def ivf_saq_fused(x, qp, qt, front, middle, back, outs):
    """SAQ: the query in SAQ's frame (:func:`bbqlib._kernels.saq_query.rotate_block`), its
    4-bit nibble tables (:func:`bbqlib._kernels.saq_query.fastscan_tables`: they serve every
    list), each visited list's ``‖q - c‖²`` or ``<q, c>``
    (:func:`bbqlib._kernels.saq_ivf.pair_terms`) and the lookup-table list scan, one pass or
    two (:func:`bbqlib._kernels.saq_ivf.ivf_fastscan_saq`). ``middle``: ``(refine, z, frame,
    keep, centroids, list_cc, list_start, block_starts, blocks, codes, factors, cols, ksum,
    gnorm, gmax, ids, start, dims, bits, msb_off, low_off, is_l2, allowed, heap, depth)``
    with ``frame`` float32 [d, coded] (the coded columns of SAQ's frame), ``keep`` the
    planes per segment the first pass reads and ``z`` the rounding's z-score."""
    status, lists = ivf_front(x, qp, qt, front, outs[2])
    if status != 0:
        return status, lists.shape[0], 0
    (refine, z, frame, keep, C, list_cc, list_start, block_starts, blocks, codes, factors,
     cols, ksum, gnorm, gmax, ids, start, dims, bits, msb_off, low_off, is_l2, allowed, heap,
     depth) = middle  # fmt: skip
    q2 = _rows(qp, qt)
    tables, lo, step, w, const, qerr, frows, fconst = _saq_query(
        q2, frame, start, dims, bits, keep, z, refine
    )
    pair_query, pair_list, pair_start = _one_query(lists)
    P = lists.shape[0]
    add = np.empty(P, dtype=np.float64)
    _pair_terms(q2, C, list_cc, pair_query, pair_list, is_l2, add)
    keys, hids = _heap(heap)
    rescored = np.zeros(1, dtype=np.int64)
    _scan_saq(
        tables, lo, step, w, const, qerr, frows, fconst, add, lists, pair_start, list_start,
        block_starts, blocks, codes, factors, cols, ksum, gnorm, gmax, ids, start, dims, bits,
        msb_off, low_off, is_l2, refine, allowed, keys, hids, rescored,
    )  # fmt: skip
    best, rows, entries = _distinct(keys, hids, heap, depth, lists, list_start)
    return ivf_back(qp, best, rows, back, outs), P, entries
