"""Readable NumPy SAQ (spec ``../shared/spec/saq.md``), the slow twin of
:mod:`bbqlib.quantizers.saq` and :mod:`bbqlib._kernels.saq`.

Works in the quantizer's frame: rows already projected on the PCA axes, rotated per segment and
centred (coded dimensions only). Python loops on purpose; speed is not the point.

Conventions shared with the kernels:

* CAQ works on ``õ = o / max|o|`` and odd integers ``u ∈ {-(2^B - 1), ..., 2^B - 1}`` (the
  grid ``x̃ = u / 2^B``; level ``k = (u + 2^B - 1) / 2``), so ``L = Σ u²`` is exact;
* a code row holds every segment's top plane (in plan order), then each segment's lower
  planes, highest first; dimension ``8p + t`` of a plane is bit ``7 - t`` of byte ``p``;
* factors per segment: ``scale = 2 ‖o‖² / (max|o| · Σ õ u)`` and ``norm = ‖o‖``, so that
  ``<o, q> ≈ scale · (<k, q> - (2^B - 1)/2 · Σ q)``.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

__all__ = [
    "initial_u",
    "caq_encode",
    "cosine",
    "pack_row",
    "unpack_row",
    "encode_rows",
    "estimate",
    "brute_force_plan",
    "entry_totals",
    "ivf_scan",
    "quantize_query",
    "fastscan_queries",
    "segment_constants",
    "rotate_rows",
]


def initial_u(o: np.ndarray, bits: int) -> np.ndarray:
    """Nearest-level rounding on the grid of ``max|o|`` (spec §3 step 2), as odd integers."""
    v = float(np.max(np.abs(o)))
    top = 2**bits - 1
    if v == 0.0:
        return np.ones(len(o), dtype=np.int64)
    k = np.minimum(np.floor((np.asarray(o, np.float64) / v + 1.0) * 2 ** (bits - 1)), top)
    return (2 * k.astype(np.int64) + 1 - 2**bits).astype(np.int64)


def caq_encode(o: np.ndarray, bits: int, rounds: int = 6, eps: float = 1e-8):
    """CAQ of one segment (spec §3): ``(u, S, L)`` with ``S = Σ õ u`` and ``L = Σ u²``.

    Coordinate descent: each coordinate steps up while ``S'² L > (S² + eps L₀) L'`` and
    ``S' > 0``, then down likewise; ``S`` is recomputed after every round; stop after
    ``rounds`` rounds (0: until nothing moves) or a round without a move.
    """
    o = np.asarray(o, dtype=np.float64)
    v = float(np.max(np.abs(o))) if len(o) else 0.0
    u = initial_u(o, bits)
    if v == 0.0:
        return u, 0.0, float(len(o))
    ot = o / v
    top = 2**bits - 1
    S = 0.0
    L = 0.0
    for i in range(len(o)):
        S += ot[i] * u[i]
        L += float(u[i] * u[i])
    thr = eps * L
    r = 0
    while True:
        r += 1
        moved = 0
        for j in range(len(o)):
            oj = ot[j]
            while u[j] < top:
                S2 = S + 2.0 * oj
                L2 = L + 4.0 * u[j] + 4.0
                if not (S2 > 0.0 and S2 * S2 * L > (S * S + thr) * L2):
                    break
                u[j] += 2
                S, L = S2, L2
                moved += 1
            while u[j] > -top:
                S2 = S - 2.0 * oj
                L2 = L - 4.0 * u[j] + 4.0
                if not (S2 > 0.0 and S2 * S2 * L > (S * S + thr) * L2):
                    break
                u[j] -= 2
                S, L = S2, L2
                moved += 1
        S = 0.0
        for i in range(len(o)):
            S += ot[i] * u[i]
        if moved == 0 or (rounds and r >= rounds):
            break
    return u, S, L


def cosine(o: np.ndarray, u: np.ndarray) -> float:
    """``cos(o, u)`` (1 for a zero ``o``)."""
    o = np.asarray(o, np.float64)
    no = np.linalg.norm(o)
    if no == 0:
        return 1.0
    return float(o @ u / (no * np.linalg.norm(u)))


def _plane_bytes(bitplane: np.ndarray) -> np.ndarray:
    out = np.zeros(len(bitplane) // 8, dtype=np.uint8)
    for i, b in enumerate(bitplane):
        if b:
            out[i // 8] |= 1 << (7 - i % 8)
    return out


def pack_row(levels: list[np.ndarray], bits: list[int]) -> np.ndarray:
    """One code row from each segment's levels ``k`` (module doc layout)."""
    tops = [_plane_bytes((k >> (b - 1)) & 1) for k, b in zip(levels, bits, strict=True)]
    lows = []
    for k, b in zip(levels, bits, strict=True):
        for t in range(b - 2, -1, -1):
            lows.append(_plane_bytes((k >> t) & 1))
    return np.concatenate(tops + lows) if tops else np.zeros(0, np.uint8)


def unpack_row(row: np.ndarray, dims: list[int], bits: list[int]) -> list[np.ndarray]:
    """Levels of each segment from a code row (inverse of :func:`pack_row`)."""
    bitsarr = np.unpackbits(np.asarray(row, np.uint8))  # MSB first per byte
    pos = 0
    levels = [np.zeros(d, dtype=np.int64) for d in dims]
    for s, d in enumerate(dims):
        levels[s] += bitsarr[pos : pos + d].astype(np.int64) << (bits[s] - 1)
        pos += d
    for s, d in enumerate(dims):
        for t in range(bits[s] - 2, -1, -1):
            levels[s] += bitsarr[pos : pos + d].astype(np.int64) << t
            pos += d
    return levels


def encode_rows(Y: np.ndarray, dims: list[int], bits: list[int], rounds: int = 6):
    """Codes [n, bytes], scale [n, S], norm [n, S] of centred, rotated rows ``Y`` [n, Σ dims]."""
    n = len(Y)
    rows, scale, norm = [], np.zeros((n, len(dims))), np.zeros((n, len(dims)))
    for i in range(n):
        levels, pos = [], 0
        for s, (d, b) in enumerate(zip(dims, bits, strict=True)):
            o = np.asarray(Y[i, pos : pos + d], np.float64)
            pos += d
            u, S, _ = caq_encode(o, b, rounds)
            levels.append((u + 2**b - 1) // 2)
            v = float(np.max(np.abs(o)))
            sq = float(o @ o)
            scale[i, s] = 2.0 * sq / (v * S) if v > 0 and S > 0 else 0.0
            norm[i, s] = math.sqrt(sq)
        rows.append(pack_row(levels, bits))
    return np.array(rows, dtype=np.uint8).reshape(n, -1), scale, norm


def estimate(
    Qc: np.ndarray,
    codes: np.ndarray,
    scale: np.ndarray,
    additional: np.ndarray,
    q_add: np.ndarray,
    dims: list[int],
    bits: list[int],
    is_l2: bool,
) -> np.ndarray:
    """Raw estimates [nq, n] (spec §5): squared L2 or inner product.

    ``Qc`` [nq, Σ dims]: centred, rotated queries (coded dimensions). ``additional``: ``‖o‖²``
    (euclidean) or ``<x - c, c>``; ``q_add``: ``‖q - c‖²`` (euclidean, all dimensions) or
    ``<q, c>``.
    """
    nq, n = len(Qc), len(codes)
    out = np.zeros((nq, n))
    for j in range(n):
        levels = unpack_row(codes[j], dims, bits)
        for i in range(nq):
            total, pos = 0.0, 0
            for s, (d, b) in enumerate(zip(dims, bits, strict=True)):
                q = np.asarray(Qc[i, pos : pos + d], np.float64)
                pos += d
                total += scale[j, s] * (levels[s] @ q - (2**b - 1) / 2.0 * q.sum())
            if is_l2:
                out[i, j] = q_add[i] + additional[j] - 2.0 * total
            else:
                out[i, j] = total + additional[j] + q_add[i]
    return out


def brute_force_plan(
    table: np.ndarray, block: int, budget: int, factor_bits: int, max_segs: int, max_bits: int
) -> float:
    """Least total error over every segmentation and bit assignment (spec §2's constraints).

    Coded segments tile blocks ``0 .. i-1`` (``i >= 1``) contiguously; blocks ``i .. nb-1``
    form a 0-bit tail (if ``i < nb``), which counts as a segment. Returns ``inf`` if nothing
    fits.
    """
    nb = table.shape[0] - 1
    best = math.inf
    for end in range(1, nb + 1):
        tail = end < nb
        for cuts in itertools.chain.from_iterable(
            itertools.combinations(range(1, end), r) for r in range(end)
        ):
            edges = (0, *cuts, end)
            nseg = len(edges) - 1
            if nseg + tail > max_segs:
                continue
            for bs in itertools.product(range(1, max_bits + 1), repeat=nseg):
                cost = sum(
                    b * block * (edges[s + 1] - edges[s]) + factor_bits for s, b in enumerate(bs)
                )
                if cost > budget:
                    continue
                err = sum(table[edges[s], edges[s + 1], b] for s, b in enumerate(bs))
                if tail:
                    err += table[end, nb, 0]
                best = min(best, err)
    return best


def entry_totals(centres, lists, codes, scale, dims, bits) -> np.ndarray:
    """``Σ_s scale[e, s] (<k_s, c_s> - (2^B_s - 1)/2 Σ c_s)`` of each entry's code against
    the centre ``centres[lists[e]]`` (rows in SAQ's frame, coded dimensions): the term an IVF
    folds into the entry's ``additional`` (:mod:`bbqlib._kernels.saq_ivf`)."""
    out = np.zeros(len(codes))
    for e in range(len(codes)):
        c = np.asarray(centres[lists[e]], np.float64)[None]
        out[e] = estimate(c, codes[e : e + 1], scale[e : e + 1], np.zeros(1), np.zeros(1),
                          dims, bits, False)[0, 0]  # fmt: skip
    return out


def ivf_scan(Qr, pair_add, pair_list, pair_start, list_start, codes, factors, ids, dims, bits,
             is_l2, allowed, heap):  # fmt: skip
    """Best ``heap`` entries per query over its visited lists: ``(keys, ids)`` [nq, heap]
    sorted best first (keys ``-d²`` or the inner product, ties to the lower id; ``-inf`` / -1
    padding). ``Qr``: queries in SAQ's frame (coded dimensions, not centred); ``factors``
    ``(additional with the centre term folded in, scale_s..., norm_s...)``."""
    S = len(dims)
    nq = len(pair_start) - 1
    out_k = np.full((nq, heap), -np.inf)
    out_i = np.full((nq, heap), -1, dtype=np.int64)
    for q in range(nq):
        found = []
        for p in range(pair_start[q], pair_start[q + 1]):
            e = np.arange(list_start[pair_list[p]], list_start[pair_list[p] + 1])
            e = e[[len(allowed) == 0 or allowed[ids[i]] != 0 for i in e]]
            if e.size == 0:
                continue
            f = factors[e].astype(np.float64)
            raw = estimate(Qr[q : q + 1], codes[e], f[:, 1 : 1 + S], f[:, 0],
                           np.array([pair_add[p]]), dims, bits, is_l2)[0]  # fmt: skip
            found += [(-r if is_l2 else r, int(ids[i])) for r, i in zip(raw, e, strict=True)]
        found.sort(key=lambda t: (-t[0], t[1]))
        for j, (key, idx) in enumerate(found[:heap]):
            out_k[q, j], out_i[q, j] = key, idx
    return out_k, out_i


def _segments(dims):
    pos = 0
    for d in dims:
        yield pos, pos + d
        pos += d


def quantize_query(Qc: np.ndarray, dims: list[int], qb: int):
    """Per-segment uniform rounding of query rows to ``qb`` bits (the NumPy loop
    :func:`bbqlib.quantizers.saq.search.quantize_query` ran before its kernel):
    ``(q̂ float32, err, codes, lo, step)``, ``err = ‖q̂_s - q_s‖`` and ``lo``, ``step``
    [nq, S]; ``q̂`` and the codes cover the coded dimensions ``Σ dims``."""
    coded = sum(dims)
    nq, S = len(Qc), len(dims)
    out = np.zeros((nq, coded), dtype=np.float32)
    codes = np.zeros((nq, coded), dtype=np.uint16 if qb > 8 else np.uint8)
    lo_all, step_all, err = (np.empty((nq, S)) for _ in range(3))
    for s, (p0, p1) in enumerate(_segments(dims)):
        y = np.asarray(Qc[:, p0:p1], np.float64)
        lo = y.min(axis=1, keepdims=True)
        step = (y.max(axis=1, keepdims=True) - lo) / (2**qb - 1)
        c = np.clip(np.rint((y - lo) / np.where(step > 0, step, 1.0)), 0, 2**qb - 1)
        yq = lo + step * c
        out[:, p0:p1] = yq
        codes[:, p0:p1] = c
        lo_all[:, s], step_all[:, s] = lo[:, 0], step[:, 0]
        err[:, s] = np.sqrt(((yq - y) ** 2).sum(axis=1))
    return out, err, codes, lo_all, step_all


def nibble_tables(codes: np.ndarray) -> np.ndarray:
    """The 4-bit scan's tables uint8 [nq, 2 P 32] of query codes [nq, 8 P] (layout of
    :mod:`bbqlib._kernels.lut`): table ``2p`` holds, for nibble ``v``, ``Σ_u bit(v, 3 - u)
    y[8p + 4 + u]``, table ``2p + 1`` the same of ``y[8p + u]``; 16 entries, stored twice."""
    nq, coded = codes.shape
    out = np.zeros((nq, 2 * (coded // 8) * 32), dtype=np.uint8)
    for t in range(2 * (coded // 8)):
        first = 8 * (t // 2) + (4 if t % 2 == 0 else 0)
        for v in range(32):
            bits = [((v % 16) >> (3 - u)) & 1 for u in range(4)]
            val = sum(b * codes[:, first + u].astype(np.int64) for u, b in enumerate(bits))
            out[:, 32 * t + v] = val
    return out


def fastscan_queries(Qc: np.ndarray, dims: list[int], bits: list[int], keep: list[int]):
    """``(tables, lo, step, w, const, rounding, trunc)`` of the 4-bit scans (module doc of
    :mod:`bbqlib._kernels.saq_query`): the NumPy code of
    :func:`bbqlib.quantizers.saq.search.fastscan_queries` before its kernel (NumPy's pairwise
    sums)."""
    Qq, err, codes, lo, step = quantize_query(Qc, dims, 4)
    tables = nibble_tables(codes)
    w, const, rounding, trunc = (np.empty_like(lo) for _ in range(4))
    for s, (p0, p1) in enumerate(_segments(dims)):
        r = bits[s] - int(keep[s])
        total = Qq[:, p0:p1].sum(1, dtype=np.float64)
        w[:, s] = 2.0**r
        const[:, s] = ((2**r - 1) / 2.0 - (2 ** bits[s] - 1) / 2.0) * total
        rounding[:, s] = err[:, s] / np.sqrt(p1 - p0)
        qn = np.linalg.norm(np.asarray(Qc[:, p0:p1], np.float64), axis=1)
        trunc[:, s] = qn * np.sqrt((4.0**r - 1) / 12.0)
    return tables, lo, step, w, const, rounding, trunc


def segment_constants(rows: np.ndarray, dims: list[int], bits: list[int]) -> np.ndarray:
    """``(2^B_s - 1)/2 · Σ q_s`` [nq, S] of float query rows (the float tables' constants)."""
    return np.stack(
        [(2**b - 1) / 2.0 * np.asarray(rows[:, p0:p1]).sum(1, dtype=np.float64)
         for (p0, p1), b in zip(_segments(dims), bits, strict=True)],
        axis=1,
    )  # fmt: skip


def rotate_rows(X: np.ndarray, F: np.ndarray) -> np.ndarray:
    """``X @ F`` of float32 query rows in :func:`bbqlib._kernels.saq_query.rotate_rows`'
    order: float32 products added in float32, input dimension after input dimension."""
    X = np.asarray(X, dtype=np.float32)
    F = np.asarray(F, dtype=np.float32)
    out = np.zeros((X.shape[0], F.shape[1]), dtype=np.float32)
    for i in range(F.shape[0]):
        out = out + X[:, i : i + 1] * F[i]
    return out
