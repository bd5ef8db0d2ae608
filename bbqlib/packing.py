"""Bit packing: codes to bit planes and back.

Bit order (Lucene's ``packAsBinary``): dimension ``8j + t`` lives in byte ``j``, bit ``7 - t``.
Planes are padded with zero bits to a multiple of 64 dimensions so kernels can read them as
uint64 words; plane ``s`` holds bit ``s`` of every code (least significant plane first).
"""

from __future__ import annotations

import numpy as np

from .encoding import LUT_LANES, padded_dim

__all__ = [
    "pack_codes",
    "kernel_codes",
    "pack_planes",
    "unpack_planes",
    "pack_bits",
    "plane_words",
    "LUT_LANES",
    "lut_blocks",
    "lut_list_blocks",
    "lut_block_starts",
]


def pack_bits(bits01: np.ndarray) -> np.ndarray:
    """Pack a 0/1 uint8 matrix [n, d] MSB-first into [n, padded_dim(d) / 8] bytes."""
    n, d = bits01.shape
    padded = np.zeros((n, padded_dim(d)), dtype=np.uint8)
    padded[:, :d] = bits01
    return np.packbits(padded, axis=1, bitorder="big")


def pack_planes(codes: np.ndarray, planes: int) -> np.ndarray:
    """Pack integer codes [n, d] into ``planes`` bit planes, least significant first.

    Returns uint8 [n, planes * padded_dim(d) / 8]; row ``i`` is plane 0 bytes, plane 1 bytes...
    """
    codes = np.asarray(codes, dtype=np.uint8)
    n, d = codes.shape
    plane_bytes = padded_dim(d) // 8
    out = np.empty((n, planes * plane_bytes), dtype=np.uint8)
    for s in range(planes):
        out[:, s * plane_bytes : (s + 1) * plane_bytes] = pack_bits((codes >> s) & 1)
    return out


def unpack_planes(packed: np.ndarray, planes: int, dim: int) -> np.ndarray:
    """Inverse of :func:`pack_planes`: uint8 codes [n, dim]."""
    packed = np.asarray(packed, dtype=np.uint8)
    n = packed.shape[0]
    plane_bytes = padded_dim(dim) // 8
    codes = np.zeros((n, dim), dtype=np.uint8)
    for s in range(planes):
        bits = np.unpackbits(packed[:, s * plane_bytes : (s + 1) * plane_bytes], axis=1)
        codes |= bits[:, :dim] << s
    return codes


def pack_codes(levels: np.ndarray, layout: str, bits: int) -> np.ndarray:
    """Integer levels [n, d] (``bits`` each) stored as a registry row's ``layout`` says:
    uint8 bit planes for ``"planes"``, the levels themselves for ``"bytes"``."""
    if layout == "planes":
        return pack_planes(levels, bits)
    return np.ascontiguousarray(levels, dtype=np.uint8)


def kernel_codes(packed: np.ndarray, layout: str) -> np.ndarray:
    """Packed codes as the kernels read them: uint64 words for planes, uint8 bytes else."""
    if layout == "planes":
        return plane_words(packed)
    return np.ascontiguousarray(packed, dtype=np.uint8)


def plane_words(packed: np.ndarray) -> np.ndarray:
    """View packed plane rows [n, bytes] as uint64 words [n, bytes / 8] (no copy if contiguous)."""
    packed = np.ascontiguousarray(packed, dtype=np.uint8)
    return packed.view(np.uint64)


def lut_blocks(packed: np.ndarray) -> np.ndarray:
    """Packed plane rows [n, m] as blocks of ``LUT_LANES`` docs: uint8 [n_blocks, m * 32].

    Byte ``i * 32 + j`` of a block is byte ``i`` of its ``j``-th doc, zero past the last doc:
    the layout of the lookup-table scan (:mod:`bbqlib._kernels.lut`).
    """
    n = np.asarray(packed).shape[0]
    return lut_list_blocks(packed, np.array([0, n]))[0]


def lut_list_blocks(packed: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`lut_blocks` per group of consecutive rows (e.g. posting lists), each group
    starting a new block: ``(blocks, block_starts)``, group ``j`` in blocks
    ``block_starts[j] : block_starts[j + 1]`` (``starts``: int [K + 1] row offsets)."""
    packed = np.asarray(packed, dtype=np.uint8)
    n, m = packed.shape
    starts = np.asarray(starts, dtype=np.int64)
    block_starts = lut_block_starts(starts)
    n_blocks = int(block_starts[-1])
    sizes = np.diff(starts)
    group = np.repeat(np.arange(sizes.size), sizes)
    padded = np.zeros((n_blocks * LUT_LANES, m), dtype=np.uint8)
    padded[block_starts[group] * LUT_LANES + (np.arange(n) - starts[group])] = packed
    blocks = np.ascontiguousarray(padded.reshape(n_blocks, LUT_LANES, m).transpose(0, 2, 1))
    return blocks.reshape(n_blocks, m * LUT_LANES), block_starts


def lut_block_starts(starts: np.ndarray) -> np.ndarray:
    """First block of each group of rows (int64 [K + 1]) when every group starts a block."""
    sizes = np.diff(np.asarray(starts, dtype=np.int64))
    out = np.zeros(sizes.size + 1, dtype=np.int64)
    np.cumsum(-(-sizes // LUT_LANES), out=out[1:])
    return out
