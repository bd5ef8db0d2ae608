"""Scoring by the textbook: integer dots of unpacked codes, the correction algebra, full sorts.

* :func:`int_dot` — ``⟨X, Y⟩`` of unpacked integer codes, exact in int64.
* :func:`plane_popcount_dot` — the same from packed planes by the spec's §3.4 formula
  ``Σ_t Σ_s 2^(s+t) popcount(q_s AND d_t)`` (``np.bitwise_count``), a second route.
* :func:`estimate_reference` — the affine correction algebra of spec §2.1/§2.2 in float64:
  ``S = D a_x a_y + a_y l_x ΣX + a_x l_y ΣY + l_x l_y ⟨X, Y⟩``;
  euclidean ``d² = add_q + add_x − 2S``, otherwise ``ip = S + add_q + add_x − ⟨c, c⟩``.
* :func:`dequantized_dot` — ``S`` directly as ``⟨a_x + l_x X, a_y + l_y Y⟩`` (checks the algebra).
* :func:`topk_reference` — best ``k`` per row by a full sort on (key desc, id asc).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "int_dot",
    "plane_popcount_dot",
    "estimate_reference",
    "dequantized_dot",
    "topk_reference",
]


def int_dot(Y, X) -> np.ndarray:
    """``⟨X_j, Y_q⟩`` [nq, n] of query codes ``Y`` [nq, d] and doc codes ``X`` [n, d] (int64)."""
    return np.asarray(Y, dtype=np.int64) @ np.asarray(X, dtype=np.int64).T


def plane_popcount_dot(q_packed, d_packed, q_planes: int, d_planes: int) -> np.ndarray:
    """``Σ_t Σ_s 2^(s+t) popcount(q_s & d_t)`` [nq, n] from packed uint8 plane rows."""
    q = np.atleast_2d(np.asarray(q_packed, dtype=np.uint8))
    d = np.atleast_2d(np.asarray(d_packed, dtype=np.uint8))
    qb = q.shape[1] // q_planes
    db = d.shape[1] // d_planes
    if qb != db:
        raise ValueError(f"plane lengths differ: {qb} vs {db} bytes")
    out = np.zeros((q.shape[0], d.shape[0]), dtype=np.int64)
    for s in range(q_planes):
        qs = q[:, s * qb : (s + 1) * qb]
        for t in range(d_planes):
            dt = d[:, t * db : (t + 1) * db]
            both = qs[:, None, :] & dt[None, :, :]
            out += np.bitwise_count(both).sum(axis=2, dtype=np.int64) << (s + t)
    return out


def estimate_reference(qf, df, dot, dim: int, centroid_dot: float, is_l2: bool) -> np.ndarray:
    """Raw estimates [nq, n] from factor rows and integer (or float) dots.

    ``qf`` [nq, 4] rows ``(a_y, l_y, ΣY, add_y)``; ``df`` [n, 4] rows ``(a_x, l_x, ΣX, add_x)``.
    """
    qf = np.asarray(qf, dtype=np.float64)
    df = np.asarray(df, dtype=np.float64)
    dot = np.asarray(dot, dtype=np.float64)
    ay, ly, sy, addy = (qf[:, i, None] for i in range(4))
    ax, lx, sx, addx = (df[None, :, i] for i in range(4))
    S = dim * ax * ay + ay * lx * sx + ax * ly * sy + lx * ly * dot
    if is_l2:
        return addy + addx - 2.0 * S
    return S + addy + addx - centroid_dot


def dequantized_dot(Y, ay, ly, X, ax, lx) -> np.ndarray:
    """``⟨a_y + l_y Y, a_x + l_x X⟩`` [nq, n] in float64 from unpacked codes."""
    yh = np.asarray(ay, np.float64)[:, None] + np.asarray(ly, np.float64)[:, None] * Y
    xh = np.asarray(ax, np.float64)[:, None] + np.asarray(lx, np.float64)[:, None] * X
    return yh @ xh.T


def topk_reference(keys, k: int, *, allowed=None, id_base: int = 0):
    """Best ``k`` of each row of ``keys`` [nq, n] (larger first, ties by lower id).

    Returns ``(keys, ids)`` [nq, k] float64 / int64, padded with ``-inf`` / ``-1``; ``allowed``
    is a boolean mask over the columns; ids are ``id_base + column``.
    """
    keys = np.asarray(keys, dtype=np.float64)
    nq, n = keys.shape
    cols = np.arange(n)
    if allowed is not None:
        cols = cols[np.asarray(allowed, dtype=bool)]
    out_k = np.full((nq, k), -np.inf)
    out_i = np.full((nq, k), -1, dtype=np.int64)
    for r in range(nq):
        row = keys[r, cols]
        order = np.lexsort((cols, -row))[:k]  # last key sorts first: key desc, then id asc
        out_k[r, : order.size] = row[order]
        out_i[r, : order.size] = id_base + cols[order]
    return out_k, out_i
