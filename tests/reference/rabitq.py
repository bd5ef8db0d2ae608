"""Readable, paper-faithful NumPy RaBitQ (spec ``../shared/spec/rabitq.md``), the slow twin of
:mod:`bbqlib.quantizers.rabitq` and :mod:`bbqlib._kernels.rabitq`.

Everything works in the rotated frame on centred vectors: ``R = P(o_r - c)`` for data,
``y = P(q_r - c)`` for queries (the rotation and centre are the caller's). Python loops are
fine here; speed is not the point.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "levels_at",
    "best_levels",
    "fixed_levels",
    "quantize",
    "quantize_query",
    "query_pairs",
    "estimate_centred",
    "error_factor",
    "raw_estimate",
    "bound_rerank",
]


def levels_at(a: np.ndarray, t: float, M: int) -> np.ndarray:
    """``m_i = #{k in 1..M : k / a_i <= t}`` (spec §2.2 step 2: rescaled rounding, clipped)."""
    m = np.zeros(len(a), dtype=np.int64)
    for i, ai in enumerate(np.asarray(a, dtype=np.float64)):
        if ai <= 0 or t <= 0:
            continue
        m[i] = sum(1 for k in range(1, M + 1) if k / ai <= t)
    return m


def best_levels(a: np.ndarray, bits: int) -> tuple[np.ndarray, float, float]:
    """Spec §2.2 step 3: walk every critical value ``t = k / a_i`` in increasing order.

    Returns ``(m, t*, f*)``: the magnitude levels maximizing
    ``f = Σ (m_i + 1/2) a_i / sqrt(Σ (m_i + 1/2)^2)``, the smallest maximizing ``t`` and ``f``.
    ``f`` is evaluated after every group of equal event times.
    """
    a = np.asarray(a, dtype=np.float64)
    M = 2 ** (bits - 1) - 1
    if len(a) == 1:  # every level gives the same cosine: keep level 0
        return np.zeros(1, dtype=np.int64), 0.0, float(a[0])
    events = sorted(
        (k / float(ai), i, k) for i, ai in enumerate(a) if ai > 0 for k in range(1, M + 1)
    )
    num = 0.5 * float(a.sum())
    sq = 0.25 * len(a)
    best_f, best_t = num / math.sqrt(sq), 0.0
    for p, (t, i, k) in enumerate(events):
        num += a[i]
        sq += 2 * k  # (k + 1/2)^2 - (k - 1/2)^2
        if p + 1 < len(events) and events[p + 1][0] == t:
            continue
        f = num / math.sqrt(sq)
        if f > best_f:
            best_f, best_t = f, t
    return levels_at(a, best_t, M), best_t, best_f


def fixed_levels(a_unit: np.ndarray, t: float, bits: int) -> np.ndarray:
    """Spec §2.2 step 4 (fast variant): ``min(floor(t |o'_i|), M)`` at one fixed ``t``."""
    M = 2 ** (bits - 1) - 1
    return np.minimum(np.floor(t * np.asarray(a_unit, np.float64)), M).astype(np.int64)


def quantize(R: np.ndarray, bits: int, *, t_fixed: float | None = None) -> dict:
    """Quantize centred rotated rows ``R`` [n, d] to ``bits`` (spec §2.1-2.3).

    Returns a dict of arrays: ``x_u`` (unsigned codes, ``y = x_u + c_B``), ``y`` (grid
    point), ``r_o``, ``a_o = <ō, o>``, ``delta = r_o / ||y||``.
    """
    R = np.asarray(R, dtype=np.float64)
    n, d = R.shape
    c_B = -(2**bits - 1) / 2
    half = 2 ** (bits - 1)
    M = half - 1
    out = {k: [] for k in ("x_u", "y", "r_o", "a_o", "delta")}
    for row in R:
        r_o = float(np.linalg.norm(row))
        a = np.abs(row)
        if t_fixed is None:
            m, _, _ = best_levels(a, bits)
        else:
            m = fixed_levels(a / r_o if r_o > 0 else a, t_fixed, bits)
        sign = row > 0
        y = np.where(sign, m + 0.5, -(m + 0.5))
        x_u = np.where(sign, half + m, M - m)  # ex-bits flipped for negative coordinates
        assert np.array_equal(x_u + c_B, y)
        o_bar = y / np.linalg.norm(y)
        a_o = float(o_bar @ (row / r_o)) if r_o > 0 else 0.8  # 0.8: the reference repo's value
        out["x_u"].append(x_u)
        out["y"].append(y)
        out["r_o"].append(r_o)
        out["a_o"].append(a_o)
        out["delta"].append(r_o / np.linalg.norm(y))
    return {k: np.array(v) for k, v in out.items()}


def quantize_query(y: np.ndarray, query_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Spec §1.3 with deterministic nearest rounding: ``(codes, dequantized)`` per row."""
    y = np.asarray(y, dtype=np.float64)
    lo = y.min(axis=1, keepdims=True)
    step = (y.max(axis=1, keepdims=True) - lo) / (2**query_bits - 1)
    safe = np.where(step > 0, step, 1.0)
    codes = np.clip(np.rint((y - lo) / safe), 0, 2**query_bits - 1)
    codes = np.where(step > 0, codes, 0.0)
    return codes.astype(np.int64), lo + step * codes


def query_pairs(Q, C, pair_query, pair_list, query_bits: int, is_l2: bool):
    """IVF queries against list centres, per pair: ``(codes int64 [P, d], factors [P, 4])``.

    ``y = float32(q - c)`` (float64 difference of the float32 rows), codes on
    :func:`quantize_query`'s grid, factor rows ``(lo, step, ΣY, add_y)`` with ``add_y`` the
    float64 sum in coordinate order of ``y_j²`` (squared L2) or ``q_j c_j``.
    """
    Q64 = np.asarray(Q, np.float32)[pair_query].astype(np.float64)
    C64 = np.asarray(C, np.float32)[pair_list].astype(np.float64)
    y = (Q64 - C64).astype(np.float32).astype(np.float64)
    codes, _ = quantize_query(y, query_bits)
    lo = y.min(axis=1)
    factors = np.empty((len(y), 4))
    factors[:, 0] = lo
    factors[:, 1] = (y.max(axis=1) - lo) / (2**query_bits - 1)
    factors[:, 2] = codes.sum(axis=1)
    terms = y * y if is_l2 else Q64 * C64
    for p in range(len(y)):
        acc = 0.0
        for v in terms[p]:
            acc += float(v)
        factors[p, 3] = acc
    return codes, factors


def estimate_centred(quant: dict, Y: np.ndarray) -> np.ndarray:
    """Unbiased estimate of ``<o_r - c, q_r - c>``: ``r_o <ō, y> / <ō, o>`` [nq, n].

    ``Y`` holds the centred rotated queries (float, or dequantized).
    """
    o_bar = quant["y"] / np.linalg.norm(quant["y"], axis=1, keepdims=True)
    return np.asarray(Y, np.float64) @ o_bar.T * (quant["r_o"] / quant["a_o"])[None, :]


def error_factor(quant: dict, d: int) -> np.ndarray:
    """``r_o sqrt(1 - a_o^2) / a_o / sqrt(D - 1)`` per vector (the bound is ``eps0`` times
    this times ``r_q``; twice that for squared L2)."""
    a = quant["a_o"]
    return quant["r_o"] * np.sqrt(np.maximum(1 - a**2, 0)) / a / math.sqrt(max(d - 1, 1))


def raw_estimate(
    quant: dict, R_plus_c: np.ndarray, c: np.ndarray, Qr: np.ndarray, Y: np.ndarray, is_l2: bool
) -> np.ndarray:
    """Raw estimate (d² or inner product) from the centred estimate (spec §1.2).

    ``R_plus_c``: rotated data rows; ``c``: rotated centre; ``Qr``: rotated queries; ``Y``: the
    query vectors the estimate uses (centred, float or dequantized).
    """
    ip_c = estimate_centred(quant, Y)
    if is_l2:
        r_q2 = np.einsum("ij,ij->i", Qr - c, Qr - c)
        return quant["r_o"][None, :] ** 2 + r_q2[:, None] - 2 * ip_c
    c = np.asarray(c, np.float64)
    return ip_c + (np.asarray(R_plus_c, np.float64) @ c)[None, :] + (Qr @ c)[:, None] - c @ c


def bound_rerank(keys, opt, exact_keys, k: int, cap: int = 10_000, allowed=None):
    """Spec §1.4 for one query, sequentially: visit by estimate (ties by lower id); rescore
    the first ``k`` and every later candidate whose optimistic key beats the k-th exact key.

    ``keys``, ``opt``, ``exact_keys``: [n] (higher is better). Returns ``(ids, reads)`` with
    ``ids`` the best ``k`` rescored ids by (exact key desc, id asc).
    """
    n = len(keys)
    ids = [j for j in range(n) if allowed is None or allowed[j]]
    ids.sort(key=lambda j: (-keys[j], j))
    kept: list[tuple[float, int]] = []
    reads = 0
    for rank, j in enumerate(ids):
        if reads >= max(cap, k):
            break
        if rank >= k and len(kept) >= k:
            kth = sorted(kept, key=lambda e: (-e[0], e[1]))[k - 1][0]
            if not opt[j] > kth:
                continue
        kept.append((exact_keys[j], j))
        reads += 1
    kept.sort(key=lambda e: (-e[0], e[1]))
    return [j for _, j in kept[:k]], reads
