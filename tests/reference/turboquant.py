"""Readable NumPy TurboQuant, the slow twin of :mod:`bbqlib.quantizers.turboquant.kernels`.

Works on the codes as stored (the packed MSE stream, then the QJL sign bits) and the
factor rows ``(f0, f1, f2, 0)``: decode each row's codes one coordinate at a time, form
``dot = f0 <y, c[k]> + f1 <s, z>`` in float64 (``s = S y``, ``z = ±1``) and the key
``-(add + f2 - 2 dot)`` (euclidean) or ``add + f2 + dot``. Top-k by a full sort (key
descending, id ascending).
"""

from __future__ import annotations

import numpy as np

__all__ = ["unpack_row", "dots", "keys", "topk"]


def unpack_row(row: np.ndarray, off: int, bits: int, dim: int) -> np.ndarray:
    """The ``bits``-bit codes of coordinates ``0 .. dim`` from byte ``off`` of ``row``
    (a little-endian bit stream: coordinate ``j`` in bits ``j·bits .. j·bits + bits``)."""
    out = np.zeros(dim, dtype=np.int64)
    for j in range(dim):
        for t in range(bits):
            bit = j * bits + t
            if (int(row[off + bit // 8]) >> (bit % 8)) & 1:
                out[j] |= 1 << t
    return out


def dots(Y, S_Y, codes, factors, values, bits: int, prod: bool) -> np.ndarray:
    """``dot`` [nq, n] of queries ``Y`` (rotated) and ``S_Y`` (their QJL projections)."""
    nq, dim = Y.shape
    groups = -(-dim // 8)
    out = np.zeros((nq, len(codes)))
    for i, row in enumerate(codes):
        xm = np.asarray(values, dtype=np.float64)[unpack_row(row, 0, bits, dim)]
        out[:, i] = float(factors[i, 0]) * (Y.astype(np.float64) @ xm)
        if prod:
            z = 2.0 * unpack_row(row, bits * groups, 1, dim) - 1.0
            out[:, i] += float(factors[i, 1]) * (S_Y.astype(np.float64) @ z)
    return out


def keys(dot: np.ndarray, factors, add, is_l2: bool) -> np.ndarray:
    """Ranking keys [nq, n] from ``dots`` and each query's (or pair's) ``add``."""
    f2 = np.asarray(factors, dtype=np.float64)[:, 2][None, :]
    add = np.asarray(add, dtype=np.float64)[:, None]
    return -(add + f2 - 2.0 * dot) if is_l2 else add + f2 + dot


def topk(key: np.ndarray, k: int, allowed=None, id_base: int = 0):
    """Best ``k`` per row: ``(keys, ids)``, ``-inf`` / ``-1`` padding."""
    nq, n = key.shape
    out_k = np.full((nq, k), -np.inf)
    out_i = np.full((nq, k), -1, dtype=np.int64)
    for q in range(nq):
        rows = [r for r in range(n) if allowed is None or allowed[r]]
        rows.sort(key=lambda r: (-key[q, r], r))
        for t, r in enumerate(rows[:k]):
            out_k[q, t] = key[q, r]
            out_i[q, t] = id_base + r
    return out_k, out_i
