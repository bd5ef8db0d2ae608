"""SAQ lookup-table scans over blocks of 32 docs (``vpshufb``, as bbqlib's FastScan kernel).

Docs are the code rows of :mod:`bbqlib._kernels.saq` transposed into blocks of 32
(:func:`bbqlib.packing.lut_blocks`): byte ``p`` of the 32 docs is contiguous. A query is
rounded per segment to 4-bit codes ``y`` (``q̂_s = lo_s + step_s · y``) whose nibble tables
(:func:`bbqlib._kernels.lut.tables_from_codes`) serve every plane of a segment; one call of
:func:`bbqlib._kernels.lut._tables_avx2` adds a plane's integer dot for 32 docs. The scans read
the top ``keep_s`` planes of segment ``s`` (the level's top bits ``t_s = k_s >> r_s``, ``r_s =
B_s - keep_s``), so ``dots[s, j] = <t_s, y_s>`` exactly (integers), and estimate

    <k_s, q̂_s> ≈ 2^r_s (step_s <t_s, y_s> + lo_s Σ t_s) + (2^r_s - 1)/2 · Σ q̂_s
    est_s = scale_s (<k_s, q̂_s> - (2^B_s - 1)/2 · Σ q̂_s)

(``Σ t_s`` a per-doc column derived from the codes; exact when ``keep_s = B_s``): the dropped
low bits are replaced by their midpoint.

:func:`fastscan_scan` ranks by these estimates (``keep = bits``: the 4-bit query's estimate).
With ``refine`` it is the first pass of a two-pass search for float queries: the float
estimate differs from the pass-1 one by ``scale_s / 2 · <u_s, e_s>`` (``e_s`` the query's
rounding, ``u`` the odd-integer code; sd over docs ``g_s ‖e_s‖ / sqrt(d_s)``, ``g_s = scale_s
‖u_s‖ / 2``) plus, for truncated segments, ``scale_s <l_s - mid, q_s>`` (the dropped low bits
about their midpoint, modelled as uniform: sd ``scale_s ‖q_s‖ sqrt((4^r_s - 1) / 12)``). A doc
whose pass-1 key plus ``z`` such sds cannot reach the k-th best of the pass-1 keys minus theirs
is skipped; the others are re-scored with the float tables (:mod:`bbqlib._kernels.saq`) and
ranked by that.
"""

from __future__ import annotations

import numpy as np

from .lut import LANES, MAX_STEPS, _tables_avx2
from .policy import kernel, parallel_kernel, prange
from .saq import _offer, _raw, fill_tables

__all__ = ["block_dots", "fastscan_estimate", "fastscan_scan"]


@kernel(inline="always")
def block_dots(block, tables, start, dims, keep, msb_off, low_off, dots, tmp):
    """``dots[s, j] = <t_s, y_s>`` (int32 [S, 32]) of the 32 docs of ``block``, over the top
    ``keep[s]`` planes; ``tmp``: int32 [32] scratch (each plane's dot, shifted into place,
    rather than Horner's rule, which chains every plane on the previous one)."""
    for s in range(start.shape[0]):
        out = dots[s]
        out[:] = 0
        pb = dims[s] // 8
        steps = dims[s] // 16
        toff = (start[s] // 8) * 64
        off = msb_off[s]
        for t in range(keep[s]):
            tmp[:] = 0
            for s0 in range(0, steps, MAX_STEPS):
                n_steps = min(MAX_STEPS, steps - s0)
                _tables_avx2(block, (off + 2 * s0) * LANES, tables, toff + 128 * s0, n_steps, tmp)
            shift = keep[s] - 1 - t
            for j in range(LANES):
                out[j] += tmp[j] << shift
            off = low_off[s] + t * pb


@kernel(inline="always")
def _block_keys(dots, r0, m, cols, ksum, qlo, qstep, qw, qconst, q_add, is_l2, out):
    """Pass-1 keys (``-d²`` or inner products) of the ``m`` docs from row ``r0``."""
    S_ = dots.shape[0]
    add = cols[0]
    for j in range(m):
        out[j] = 0.0
    for s in range(S_):
        lo = qlo[s]
        step = qstep[s]
        w = qw[s]
        c = qconst[s]
        scale = cols[1 + s]
        ks = ksum[s]
        d = dots[s]
        for j in range(m):
            kq = w * (step * np.float64(d[j]) + lo * np.float64(ks[r0 + j])) + c
            out[j] += np.float64(scale[r0 + j]) * kq
    if is_l2:
        for j in range(m):
            out[j] = 2.0 * out[j] - q_add - np.float64(add[r0 + j])
    else:
        for j in range(m):
            out[j] = out[j] + np.float64(add[r0 + j]) + q_add


@kernel(inline="always")
def _half(row, cols, gnorm, qerr, qtrunc, scale2):
    """Half-width ``scale2 · sqrt(Σ_s (g_s e_s)² + (scale_s t_s)²)`` of one doc (row)."""
    acc = 0.0
    for s in range(gnorm.shape[0]):
        x = np.float64(gnorm[s, row]) * qerr[s]
        y = np.float64(cols[1 + s, row]) * qtrunc[s]
        acc += x * x + y * y
    return scale2 * np.sqrt(acc)


@kernel(inline="always")
def _gather(bkeys, m, r0, hmax, cols, gnorm, qerr, qtrunc, scale2, ids, allowed, pess, pess_ids,
            cand, cand_key, cand_add, cm, add):  # fmt: skip
    """Second-pass candidates of a block (two-pass scans): rows ``r0 .. r0 + m`` whose
    optimistic key ``bkeys + half`` reaches the bar ``pess[0]`` (the worst of the best
    pessimistic keys ``bkeys - half``, a heap updated here) join ``cand`` (row), ``cand_key``
    (optimistic key) and ``cand_add`` (``add``: the pair's ``q_add``); returns the arrays
    (grown when full) and their count. A row's half-width (:func:`_half`) is computed only
    when its key plus ``hmax``, the largest half-width of the query, reaches the bar.
    ``ids``: row ids (empty: the row is the id) for the uint8 mask ``allowed`` (empty: all)
    and the heap."""
    use_mask = allowed.shape[0] > 0
    use_ids = ids.shape[0] > 0
    for j in range(m):
        key = bkeys[j]
        if key + hmax < pess[0]:
            continue
        half = _half(r0 + j, cols, gnorm, qerr, qtrunc, scale2)
        if key + half < pess[0]:
            continue
        idx = np.int64(ids[r0 + j]) if use_ids else np.int64(r0 + j)
        if use_mask and allowed[idx] == 0:
            continue
        if key - half >= pess[0]:
            _offer(pess, pess_ids, key - half, idx)
        if cm == cand.shape[0]:  # drop what fell below the bar, else grow
            w = 0
            for i in range(cm):
                if cand_key[i] >= pess[0]:
                    cand[w] = cand[i]
                    cand_key[w] = cand_key[i]
                    cand_add[w] = cand_add[i]
                    w += 1
            cm = w
            if cm > cand.shape[0] // 2:
                size = 2 * cand.shape[0]
                bigger = np.empty(size, dtype=np.int64)
                bigger_key = np.empty(size, dtype=np.float64)
                bigger_add = np.empty(size, dtype=np.float64)
                # Element loops, not slice copies: inlined into the prange kernels, the
                # slice copies got a size assertion from numba's array analysis that failed
                # at run time ("Sizes of bigger, ... do not match": 1M clustered vectors,
                # SAQ 6 bits, float queries, two-pass IVF scan).
                for i in range(cm):
                    bigger[i] = cand[i]
                    bigger_key[i] = cand_key[i]
                    bigger_add[i] = cand_add[i]
                cand = bigger
                cand_key = bigger_key
                cand_add = bigger_add
        cand[cm] = r0 + j
        cand_key[cm] = key + half
        cand_add[cm] = add
        cm += 1
    return cand, cand_key, cand_add, cm


@kernel(inline="always")
def _rescore(cand, cand_key, cand_add, cm, bar, codes, fac, fq, FT, fconst, ids, id_base, start,
             dims, bits, msb_off, low_off, is_l2, keys, out_ids):  # fmt: skip
    """Second pass: the float estimate of every candidate still reaching ``bar``, offered to
    the heap ``keys`` / ``out_ids`` (id ``ids[row]``, or ``id_base + row`` when ``ids`` is
    empty); returns how many were re-scored. ``fq``: the float query row (coded dimensions);
    its tables are filled into the scratch ``FT`` float32 [P, 256] here, once there is a
    candidate, so they are in cache for the candidates' lookups."""
    use_ids = ids.shape[0] > 0
    used = 0
    for i in range(cm):
        if cand_key[i] < bar:
            continue
        if used == 0:
            fill_tables(fq, FT)
        row = cand[i]
        used += 1
        raw = _raw(codes[row], fac[row], FT, fconst, cand_add[i], start, dims, bits, msb_off,
                   low_off, is_l2)  # fmt: skip
        key = -raw if is_l2 else raw
        if key >= keys[0]:
            idx = np.int64(ids[row]) if use_ids else np.int64(id_base + row)
            _offer(keys, out_ids, key, idx)
    return used


@parallel_kernel
def fastscan_estimate(
    tables,
    qlo,
    qstep,
    qw,
    qconst,
    q_add,
    blocks,
    n,
    cols,
    ksum,
    start,
    dims,
    keep,
    msb_off,
    low_off,
    is_l2,
    out,
):
    """Raw pass-1 estimates [nq, n] (squared L2 or inner products); ``cols`` and ``ksum``
    are the factor and top-level-sum columns (float32 [1 + 2S, n], [S, n])."""
    S_ = start.shape[0]
    for q in prange(tables.shape[0]):
        dots = np.empty((S_, LANES), dtype=np.int32)
        tmp = np.empty(LANES, dtype=np.int32)
        keys = np.empty(LANES, dtype=np.float64)
        for b in range(blocks.shape[0]):
            block_dots(blocks[b], tables[q], start, dims, keep, msb_off, low_off, dots, tmp)
            m = min(LANES, n - b * LANES)
            _block_keys(
                dots,
                b * LANES,
                m,
                cols,
                ksum,
                qlo[q],
                qstep[q],
                qw[q],
                qconst[q],
                q_add[q],
                is_l2,
                keys,
            )
            for j in range(m):
                out[q, b * LANES + j] = -keys[j] if is_l2 else keys[j]


@parallel_kernel
def fastscan_scan(
    tables,
    qlo,
    qstep,
    qw,
    qconst,
    q_add,
    qerr,
    qtrunc,
    fq,
    fconst,
    blocks,
    codes,
    fac,
    cols,
    ksum,
    gnorm,
    gmax,
    smax,
    start,
    dims,
    bits,
    keep,
    msb_off,
    low_off,
    is_l2,
    refine,
    allowed,
    id_base,
    out_keys,
    out_ids,
    rescored,
):
    """Top-k per query (keys: ``-d²`` or inner products; ties to the lower id).

    ``refine`` False: by the pass-1 estimates. True: two passes (module doc); ``qerr`` and
    ``qtrunc`` [nq, S] hold ``z ‖e_s‖ / sqrt(d_s)`` and ``z ‖q_s‖ sqrt((4^r_s - 1) / 12)``,
    ``fq`` / ``fconst`` the float query rows (coded dimensions, float32) and constants;
    ``rescored[q]`` counts the docs of the second pass. ``cols``, ``ksum``, ``gnorm``: factor,
    top-level-sum and rounding-scale columns ([1 + 2S, n], [S, n], [S, n]); ``gmax`` and
    ``smax`` [S] the
    largest ``gnorm`` and ``scale`` of each segment (a block that cannot reach the bar even
    with them is skipped whole).
    """
    n = codes.shape[0]
    S_ = start.shape[0]
    k = out_keys.shape[1]
    use_mask = allowed.shape[0] > 0
    scale2 = 2.0 if is_l2 else 1.0
    no_ids = np.empty(0, dtype=np.int64)  # ids are rows (+ id_base)
    for q in prange(tables.shape[0]):
        dots = np.empty((S_, LANES), dtype=np.int32)
        tmp = np.empty(LANES, dtype=np.int32)
        bkeys = np.empty(LANES, dtype=np.float64)
        keys = out_keys[q]
        ids = out_ids[q]
        pess = np.full(k, -np.inf)  # refine: k best pessimistic keys
        pess_ids = np.full(k, np.iinfo(np.int64).max, dtype=np.int64)
        cand = np.empty(1024, dtype=np.int64)
        cand_key = np.empty(1024, dtype=np.float64)
        cand_add = np.empty(1024, dtype=np.float64)
        FT = np.empty((fq.shape[1] // 8 if refine else 0, 256), dtype=np.float32)
        cm = 0
        T = tables[q]
        hmax = 0.0  # the largest half-width any doc can have for this query
        for s in range(S_):
            x = gmax[s] * qerr[q, s]
            y = smax[s] * qtrunc[q, s]
            hmax += x * x + y * y
        hmax = scale2 * np.sqrt(hmax)
        for b in range(blocks.shape[0]):
            r0 = b * LANES
            m = min(LANES, n - r0)
            block_dots(blocks[b], T, start, dims, keep, msb_off, low_off, dots, tmp)
            _block_keys(
                dots,
                r0,
                m,
                cols,
                ksum,
                qlo[q],
                qstep[q],
                qw[q],
                qconst[q],
                q_add[q],
                is_l2,
                bkeys,
            )
            top = bkeys[0]
            for j in range(1, m):
                top = max(top, bkeys[j])
            if not refine:
                worst = keys[0]
                if top < worst:
                    continue
                for j in range(m):
                    if bkeys[j] >= worst and not (use_mask and allowed[r0 + j] == 0):
                        _offer(keys, ids, bkeys[j], id_base + r0 + j)
                        worst = keys[0]
                continue
            if top + hmax < pess[0]:  # no doc of the block can reach the bar
                continue
            cand, cand_key, cand_add, cm = _gather(
                bkeys, m, r0, hmax, cols, gnorm, qerr[q], qtrunc[q], scale2, no_ids, allowed,
                pess, pess_ids, cand, cand_key, cand_add, cm, q_add[q],
            )  # fmt: skip
        if not refine:
            continue
        rescored[q] = _rescore(
            cand, cand_key, cand_add, cm, pess[0], codes, fac, fq[q], FT, fconst[q], no_ids,
            id_base, start, dims, bits, msb_off, low_off, is_l2, keys, ids,
        )  # fmt: skip
