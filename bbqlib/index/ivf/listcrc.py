"""CRC32s of IVF posting lists (``docs/ivf-format.md``: List CRC32).

A list's CRC32 chains its codes (or, format 2, its lookup-table blocks), factors and ids, in
that order: what a search reads of the list, checked the first time it reads it.
"""

from __future__ import annotations

import numpy as np

from ...packing import lut_block_starts
from ...storage.container import crc32_of

__all__ = ["list_crc", "list_crcs", "bad_lists"]


def list_crc(
    postings: dict, list_start: np.ndarray, j: int, block_starts=None, *, blocks: bool = False
) -> int:
    """CRC32 of posting list ``j``: its codes, factors and ids, chained in that order.

    ``blocks=True``: over its lookup-table blocks (format 2, ``lut_codes``) instead of its
    codes, the data a lookup-table search reads. ``block_starts``: ``lut_block_starts``.
    """
    start, stop = int(list_start[j]), int(list_start[j + 1])
    if blocks:
        if block_starts is None:
            block_starts = lut_block_starts(list_start)
        crc = crc32_of(postings["lut_codes"][int(block_starts[j]) : int(block_starts[j + 1])])
    else:
        crc = crc32_of(postings["codes"][start:stop])
    crc = crc32_of(postings["factors"][start:stop], crc)
    return crc32_of(postings["ids"][start:stop], crc)


def list_crcs(postings: dict, list_start: np.ndarray, *, blocks: bool = False) -> np.ndarray:
    """CRC32 of every list (uint32 [K]); ``blocks`` as in :func:`list_crc`."""
    k = list_start.shape[0] - 1
    block_starts = lut_block_starts(list_start)
    out = np.empty(k, dtype=np.uint32)
    for j in range(k):  # once per list at save time, not on a search path
        out[j] = list_crc(postings, list_start, j, block_starts, blocks=blocks)
    return out


def bad_lists(
    postings: dict, list_start: np.ndarray, crcs: np.ndarray, which=None, *, blocks=False
) -> np.ndarray:
    """Ids of the lists (all, or ``which``) whose CRC32 does not match."""
    which = np.arange(crcs.size) if which is None else np.asarray(which)
    block_starts = lut_block_starts(list_start)
    bad = [
        j
        for j in which  # first read of each list only (callers remember verified lists)
        if list_crc(postings, list_start, j, block_starts, blocks=blocks) != int(crcs[j])
    ]
    return np.asarray(bad, dtype=np.int64)
