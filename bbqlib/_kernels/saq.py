"""SAQ kernels: CAQ encoding with bit-plane packing, lookup tables, estimates and scans.

Layout of one code row (``tests/reference/saq.py`` is the NumPy twin):

* the top plane of every coded segment, in plan order (``msb_off[s]``, ``dims[s] / 8`` bytes
  each), so a prefix of the row holds the leading segments' top planes;
* then each segment's lower planes, highest first (``low_off[s] + (bits[s] - 2 - t) · dims[s]
  / 8`` for plane ``t``);
* dimension ``8p + t`` of a plane is bit ``7 - t`` of byte ``p``.

Factor rows (float32 ``[n, 1 + 2S]``): ``additional`` (``‖o‖²`` for squared L2, ``<x - c, c>``
for inner products), then ``scale_s`` (``2‖o_s‖² / (max|o_s| Σ õ u)``), then ``norm_s``
(``‖o_s‖``). The segment estimate is ``<o_s, q_s> ≈ scale_s (<k, q_s> - (2^B - 1)/2 Σ q_s)``.

Queries become one lookup table per byte of the coded frame: ``T[p, v] = Σ_t bit(v, 7 - t)
q[8p + t]`` (float32), shared by every plane of the segment holding byte ``p``; a plane's dot
with the query is ``Σ_p T[p, byte_p]``, the code's is Horner's sum over its planes.
"""

from __future__ import annotations

import numpy as np

from .policy import kernel, parallel_kernel, prange
from .scoring import _offer

__all__ = [
    "plan_dp",
    "caq_encode_rows",
    "build_tables",
    "fill_tables",
    "estimate_rows",
    "scan_rows",
]


# ----------------------------------------------------------------------------- plan
@kernel
def plan_dp(table, bu, fu, max_bits, f, par, done, done_i):
    """The segment dynamic program (:func:`bbqlib.quantizers.saq_plan.plan_segments`).

    ``f[n, i, u]`` (inf-filled, ``f[0, 0, 0]`` set here): least error of ``n`` coded segments
    over blocks ``0 .. i-1`` using ``u`` budget units; ``par[:, n, i, u]`` its parent block,
    parent units and bits. A coded segment of blocks ``i .. j-1`` at ``b`` bits costs ``b bu
    (j - i) + fu`` units. ``done[n, u]``: least error of a whole plan of ``n`` segments (a 0-bit
    tail counts as one) using ``u`` units, ``done_i[n, u]`` where its tail starts (``nb``: no
    tail). ``table[i, j, b]``: error of blocks ``i .. j-1`` at ``b`` bits (``b = 0``: tail).
    """
    max_segs = f.shape[0] - 1
    nb = f.shape[1] - 1
    U = f.shape[2] - 1
    f[0, 0, 0] = 0.0
    for n in range(max_segs):
        for i in range(nb):
            for u in range(U + 1):
                base = f[n, i, u]
                if base == np.inf:
                    continue
                if i > 0:  # close with a 0-bit tail over blocks i .. nb-1
                    cand = base + table[i, nb, 0]
                    if cand < done[n + 1, u]:
                        done[n + 1, u] = cand
                        done_i[n + 1, u] = i
                for j in range(i + 1, nb + 1):
                    for b in range(1, max_bits + 1):
                        dst = u + b * bu * (j - i) + fu
                        if dst > U:
                            break
                        cand = base + table[i, j, b]
                        if cand < f[n + 1, j, dst]:
                            f[n + 1, j, dst] = cand
                            par[0, n + 1, j, dst] = i
                            par[1, n + 1, j, dst] = u
                            par[2, n + 1, j, dst] = b
        for u in range(U + 1):
            if f[n + 1, nb, u] < done[n + 1, u]:
                done[n + 1, u] = f[n + 1, nb, u]
                done_i[n + 1, u] = nb


# ----------------------------------------------------------------------------- CAQ encode
@kernel(inline="always")
def _caq_segment(o, d, bits, rounds, ot, u):
    """CAQ of ``o[:d]`` (float32) into odd integers ``u[:d]``; returns ``(S, v, sq)``:
    ``S = Σ õ u`` (``õ = o / v``, ``v = max|o|``) and ``sq = ‖o‖²``. ``ot`` is scratch."""
    v = 0.0
    sq = 0.0
    for i in range(d):
        x = np.float64(o[i])
        sq += x * x
        a = abs(x)
        if a > v:
            v = a
    top = (1 << bits) - 1
    if v == 0.0:
        for i in range(d):
            u[i] = 1
        return 0.0, 0.0, sq
    half = np.float64(1 << (bits - 1))
    inv = 1.0 / v
    S = 0.0
    L = 0.0
    for i in range(d):
        t = np.float64(o[i]) * inv
        ot[i] = t
        k = int(np.floor((t + 1.0) * half))
        if k > top:
            k = top
        ui = 2 * k + 1 - (1 << bits)
        u[i] = ui
        S += t * ui
        L += np.float64(ui * ui)
    thr = 1e-8 * L
    r = 0
    while True:
        r += 1
        moved = 0
        for j in range(d):
            oj = ot[j]
            uj = u[j]
            while uj < top:
                S2 = S + 2.0 * oj
                L2 = L + 4.0 * uj + 4.0
                if not (S2 > 0.0 and S2 * S2 * L > (S * S + thr) * L2):
                    break
                uj += 2
                S = S2
                L = L2
                moved += 1
            while uj > -top:
                S2 = S - 2.0 * oj
                L2 = L - 4.0 * uj + 4.0
                if not (S2 > 0.0 and S2 * S2 * L > (S * S + thr) * L2):
                    break
                uj -= 2
                S = S2
                L = L2
                moved += 1
            u[j] = uj
        S = 0.0
        for i in range(d):
            S += ot[i] * u[i]
        if moved == 0 or (rounds > 0 and r >= rounds):
            break
    return S, v, sq


@kernel(inline="always")
def _pack_plane(u, d, bits, plane, row, off):
    """Bit ``plane`` of the levels ``k = (u + 2^B - 1) / 2`` into ``row[off : off + d/8]``."""
    shift = (1 << bits) - 1
    for p in range(d // 8):
        b = 0
        for t in range(8):
            k = (u[8 * p + t] + shift) >> 1
            b |= ((k >> plane) & 1) << (7 - t)
        row[off + p] = b


@parallel_kernel
def caq_encode_rows(Y, start, dims, bits, msb_off, low_off, rounds, codes, factors):
    """Encode rows ``Y`` float32 [n, coded dims] (centred, rotated) segment by segment.

    Writes ``codes`` uint8 [n, code bytes] and columns ``1 .. 2S`` of ``factors`` float32
    [n, 1 + 2S] (scale, then norm); column 0 is the caller's.
    """
    n = Y.shape[0]
    S_ = start.shape[0]
    dmax = 0
    for s in range(S_):
        if dims[s] > dmax:
            dmax = dims[s]
    for i in prange(n):
        ot = np.empty(dmax, dtype=np.float64)
        u = np.empty(dmax, dtype=np.int32)
        row = codes[i]
        for s in range(S_):
            d = dims[s]
            b = bits[s]
            Sv, v, sq = _caq_segment(Y[i, start[s] :], d, b, rounds, ot, u)
            scale = 0.0
            if v > 0.0 and Sv > 0.0:
                scale = 2.0 * sq / (v * Sv)
            factors[i, 1 + s] = scale
            factors[i, 1 + S_ + s] = np.sqrt(sq)
            pb = d // 8
            _pack_plane(u, d, b, b - 1, row, msb_off[s])
            for t in range(b - 2, -1, -1):
                _pack_plane(u, d, b, t, row, low_off[s] + (b - 2 - t) * pb)


# ----------------------------------------------------------------------------- tables
@kernel(inline="always")
def fill_tables(y, out):
    """``out[p, v] = Σ_t bit(v, 7 - t) y[8p + t]`` (float32 [P, 256]) of one query row ``y``.

    ``T[v] = T[v - 2^b] + y[8p + 7 - b]`` with ``2^b`` the lowest set bit of ``v``: every
    ``v`` whose lowest set bit is ``b`` is ``w + 2^b`` with ``w`` a multiple of ``2^(b + 1)``,
    filled before it (bits from the highest down), so no bit search per entry.
    """
    for p in range(out.shape[0]):
        T = out[p]
        T[0] = 0.0
        for b in range(7, -1, -1):
            yb = y[8 * p + 7 - b]
            low = 1 << b
            for w in range(0, 256, 2 * low):
                T[w + low] = T[w] + yb


@parallel_kernel
def build_tables(Qc, out):
    """``out[q, p, v] = Σ_t bit(v, 7 - t) Qc[q, 8p + t]`` (float32 [nq, P, 256])."""
    for q in prange(Qc.shape[0]):
        fill_tables(Qc[q], out[q])


# ----------------------------------------------------------------------------- scoring
@kernel(inline="always")
def _plane_sum(row, off, T, p0, nbytes):
    """``Σ_p T[p0 + p, row[off + p]]`` with four float32 accumulators."""
    a0 = np.float32(0.0)
    a1 = np.float32(0.0)
    a2 = np.float32(0.0)
    a3 = np.float32(0.0)
    p = 0
    while p + 4 <= nbytes:
        a0 += T[p0 + p, row[off + p]]
        a1 += T[p0 + p + 1, row[off + p + 1]]
        a2 += T[p0 + p + 2, row[off + p + 2]]
        a3 += T[p0 + p + 3, row[off + p + 3]]
        p += 4
    while p < nbytes:
        a0 += T[p0 + p, row[off + p]]
        p += 1
    return np.float64((a0 + a1) + (a2 + a3))


@kernel(inline="always")
def _segment_dot(row, T, s, start, dims, bits, msb_off, low_off):
    """``<k_s, q_s>`` of one code row's segment ``s`` (Horner over its planes)."""
    pb = dims[s] // 8
    p0 = start[s] // 8
    b = bits[s]
    acc = _plane_sum(row, msb_off[s], T, p0, pb)
    off = low_off[s]
    for _ in range(b - 1):
        acc = 2.0 * acc + _plane_sum(row, off, T, p0, pb)
        off += pb
    return acc


@kernel(inline="always")
def _raw(row, fac, T, qconst, q_add, start, dims, bits, msb_off, low_off, is_l2):
    S_ = start.shape[0]
    total = 0.0
    for s in range(S_):
        dot = _segment_dot(row, T, s, start, dims, bits, msb_off, low_off)
        total += np.float64(fac[1 + s]) * (dot - qconst[s])
    if is_l2:
        return q_add + np.float64(fac[0]) - 2.0 * total
    return total + np.float64(fac[0]) + q_add


@parallel_kernel
def estimate_rows(
    tables, qconst, q_add, codes, factors, start, dims, bits, msb_off, low_off, is_l2, out
):
    """Raw estimates [nq, n]: squared L2 (``is_l2``) or inner products.

    ``qconst`` [nq, S]: ``(2^B_s - 1)/2 · Σ q_s``; ``q_add`` [nq]: ``‖q - c‖²`` or ``<q, c>``.
    """
    for j in prange(codes.shape[0]):
        for q in range(tables.shape[0]):
            out[q, j] = _raw(
                codes[j],
                factors[j],
                tables[q],
                qconst[q],
                q_add[q],
                start,
                dims,
                bits,
                msb_off,
                low_off,
                is_l2,
            )


@parallel_kernel
def scan_rows(
    tables,
    qconst,
    q_add,
    codes,
    factors,
    start,
    dims,
    bits,
    msb_off,
    low_off,
    is_l2,
    allowed,
    id_base,
    out_keys,
    out_ids,
):
    """Top-k of every query over all rows (keys: ``-d²`` or the inner product, higher is
    better; ties to the lower id). ``out_keys`` [chunks, nq, k] starts at ``-inf``; each chunk
    of rows is one task. ``allowed``: uint8 mask over rows (empty: all)."""
    n = codes.shape[0]
    chunks = out_keys.shape[0]
    per = (n + chunks - 1) // chunks
    use_mask = allowed.shape[0] > 0
    for c in prange(chunks):
        r0 = c * per
        r1 = min(n, r0 + per)
        for q in range(tables.shape[0]):
            keys = out_keys[c, q]
            ids = out_ids[c, q]
            T = tables[q]
            qc = qconst[q]
            qa = q_add[q]
            for j in range(r0, r1):
                if use_mask and allowed[j] == 0:
                    continue
                raw = _raw(
                    codes[j], factors[j], T, qc, qa, start, dims, bits, msb_off, low_off, is_l2
                )
                key = -raw if is_l2 else raw
                if key >= keys[0]:
                    _offer(keys, ids, key, id_base + j)
