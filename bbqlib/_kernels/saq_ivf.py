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

from .policy import parallel_kernel, prange
from .saq import _raw, _segment_dot
from .scoring import _offer

__all__ = ["entry_totals", "ivf_scan_saq"]


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
