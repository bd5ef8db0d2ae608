"""Float query × bit-plane doc dots (``bbqlib._kernels.plane_float``) in plain NumPy.

The query goes into *lanes* (lane ``8j + b`` holds dimension ``8j + 7 - b``: bit ``b`` of byte
``j`` of a plane, :mod:`bbqlib.packing`'s MSB-first order), zero past the dimension. 64
float32 accumulators start at ``+0.0``; for each plane word ``w`` and each plane ``p`` in
order, accumulator ``l`` adds ``2^p y_(64w + l)`` (exact) where the bit of lane ``64w + l``
is set; the accumulators are folded in halves (``v[:32] + v[32:]``, ...) to one float32,
returned as float64.
"""

from __future__ import annotations

import numpy as np

__all__ = ["lane_query", "plane_float_dot"]

#: Accumulators of a sum (one plane word).
LANES = 64


def lane_query(y: np.ndarray, plane_bytes: int) -> np.ndarray:
    """float32 [plane_bytes · 8]: ``y`` in lane order, zero past its length."""
    out = np.zeros(plane_bytes * 8, dtype=np.float32)
    out[: len(y)] = np.asarray(y, dtype=np.float32)
    return out[np.arange(out.size) ^ 7]


def plane_float_dot(y: np.ndarray, packed_row: np.ndarray, planes: int) -> float:
    """The kernel's dot of float32 query ``y`` [d] and one packed doc (uint8 row of
    ``planes`` planes, as ``bbqlib.packing.pack_planes`` writes them)."""
    row = np.asarray(packed_row, dtype=np.uint8)
    plane_bytes = row.size // planes
    lanes = lane_query(y, plane_bytes)
    # bit b of byte j is lane 8j + b: little-endian bit order within each byte
    bits = np.unpackbits(row.reshape(planes, plane_bytes), axis=1, bitorder="little")
    acc = np.zeros(LANES, dtype=np.float32)
    for w in range(plane_bytes // 8):
        lane = slice(LANES * w, LANES * (w + 1))
        for p in range(planes):
            acc = np.where(bits[p, lane] == 1, acc + np.float32(2.0**p) * lanes[lane], acc)
    while acc.size > 1:
        acc = acc[: acc.size // 2] + acc[acc.size // 2 :]
    return float(acc[0])
