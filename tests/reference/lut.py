"""The lookup-table scan (``bbqlib._kernels.lut``) in plain NumPy.

Doc blocks: the packed plane bytes of 32 docs transposed, byte ``(t·P + p)·32 + j`` = byte ``p``
of plane ``t`` of doc ``j``. Query tables: for every byte position ``p`` two tables of 16
entries, ``T_2p`` for the low nibble (dimensions ``8p+4 .. 8p+7``) and ``T_2p+1`` for the high
nibble (``8p .. 8p+3``), entry ``v`` = ``Σ_u bit(v, 3-u) · y[first + u]`` (the packing is MSB
first, so nibble bit 3 is the nibble's first dimension). Each table is stored twice (32 bytes).
"""

from __future__ import annotations

import numpy as np

__all__ = ["blocks_reference", "tables_reference", "block_dots_reference"]

LANES = 32


def blocks_reference(packed: np.ndarray) -> np.ndarray:
    """uint8 [n_blocks, m · 32] from packed rows [n, m], zero past the last doc."""
    n, m = packed.shape
    n_blocks = -(-n // LANES)
    out = np.zeros((n_blocks, m * LANES), dtype=np.uint8)
    for doc in range(n):
        b, j = divmod(doc, LANES)
        out[b, j::LANES] = packed[doc]
    return out


def tables_reference(codes: np.ndarray) -> np.ndarray:
    """uint8 [nq, 2 · P · 32] from integer query codes [nq, 8 · P] (P byte positions)."""
    nq, dim64 = codes.shape
    pairs = dim64 // 8
    bits = (np.arange(16)[:, None] >> (3 - np.arange(4))[None, :]) & 1  # [16 patterns, 4]
    out = np.zeros((nq, 2 * pairs, 32), dtype=np.uint8)
    y = codes.astype(np.int64).reshape(nq, pairs, 2, 4)  # [.., p, (high dims, low dims), u]
    low = y[:, :, 1, :] @ bits.T  # [nq, P, 16]
    high = y[:, :, 0, :] @ bits.T
    out[:, 0::2, :16] = low
    out[:, 1::2, :16] = high
    out[:, :, 16:] = out[:, :, :16]
    return out.reshape(nq, -1)


def block_dots_reference(blocks, tables, planes: int, pairs: int) -> np.ndarray:
    """int64 [nq, n_blocks · 32]: ``Σ_t 2^t Σ_p T_2p[b & 15] + T_2p+1[b >> 4]`` per doc."""
    nb = blocks.shape[0]
    b = blocks.reshape(nb, planes, pairs, LANES).astype(np.int64)
    t = tables.reshape(tables.shape[0], pairs, 2, 32)[:, :, :, :16].astype(np.int64)
    p_idx = np.arange(pairs)[:, None]
    out = np.zeros((tables.shape[0], nb, LANES), dtype=np.int64)
    for q in range(tables.shape[0]):
        for s in range(planes):
            part = t[q, p_idx, 0, b[:, s] & 15] + t[q, p_idx, 1, b[:, s] >> 4]  # [nb, P, 32]
            out[q] += part.sum(axis=1) << s
    return out.reshape(tables.shape[0], -1)
