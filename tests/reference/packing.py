"""Bit packing (spec §3) by its definition, without ``np.packbits``.

Bit order everywhere: dimension ``8j + t`` of a plane lives in byte ``j``, bit ``7 - t``
(most significant first, Lucene's ``packAsBinary``). A ``B``-bit code is stored as ``B``
planes, plane ``s`` holding bit ``s`` of every code (least significant plane first); each plane
is padded with zero bits to a multiple of ``align`` dimensions (64 in bbqlib, 8 in the
upstream byte-aligned examples).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "pack_as_binary",
    "pack_planes_reference",
    "unpack_planes_reference",
    "transpose_half_byte",
    "pack_dibit",
]

# Weight of dimension 8j + t inside byte j.
_BIT_WEIGHTS = np.array([1 << (7 - t) for t in range(8)], dtype=np.int64)


def _round_up(n: int, align: int) -> int:
    return -(-n // align) * align


def pack_as_binary(bits01, align: int = 64) -> np.ndarray:
    """Pack 0/1 values [n, d] MSB-first into uint8 [n, round_up(d, align) / 8]."""
    bits01 = np.atleast_2d(np.asarray(bits01, dtype=np.int64))
    n, d = bits01.shape
    if not np.isin(bits01, (0, 1)).all():
        raise ValueError("pack_as_binary takes 0/1 values")
    padded = np.zeros((n, _round_up(d, align)), dtype=np.int64)
    padded[:, :d] = bits01
    grouped = padded.reshape(n, -1, 8)
    return (grouped * _BIT_WEIGHTS).sum(axis=2).astype(np.uint8)


def pack_planes_reference(codes, planes: int, align: int = 64) -> np.ndarray:
    """``planes`` bit planes of integer codes [n, d], least significant plane first."""
    codes = np.atleast_2d(np.asarray(codes, dtype=np.int64))
    if codes.size and (codes.min() < 0 or codes.max() >= 1 << planes):
        raise ValueError(f"codes must be in [0, {1 << planes})")
    return np.concatenate([pack_as_binary((codes >> s) & 1, align) for s in range(planes)], axis=1)


def unpack_planes_reference(packed, planes: int, dim: int, align: int = 64) -> np.ndarray:
    """Inverse of :func:`pack_planes_reference`: int64 codes [n, dim]."""
    packed = np.atleast_2d(np.asarray(packed, dtype=np.int64))
    plane_bytes = _round_up(dim, align) // 8
    codes = np.zeros((packed.shape[0], dim), dtype=np.int64)
    for s in range(planes):
        plane = packed[:, s * plane_bytes : (s + 1) * plane_bytes]
        # bit (7 - t) of byte j is dimension 8j + t
        bits = (plane[:, :, None] >> (7 - np.arange(8))) & 1
        codes |= bits.reshape(packed.shape[0], -1)[:, :dim] << s
    return codes


def transpose_half_byte(Y, align: int = 8) -> np.ndarray:
    """Lucene's ``transposeHalfByte``: 4-bit query codes as 4 stripes (planes), LSB first."""
    return pack_planes_reference(Y, 4, align)


def pack_dibit(codes, align: int = 8) -> np.ndarray:
    """ES940 ``packDibit`` / Lucene ``transposeDibit``: low bit plane, then high bit plane."""
    return pack_planes_reference(codes, 2, align)
