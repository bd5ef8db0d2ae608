"""CRC32 (zlib's: IEEE polynomial, reflected, inverted in and out) of rows of bytes.

The stored float vectors of a file carry one CRC32 per row (:mod:`bbqlib.io.blocks`), so a
search checks exactly the rows it reranks, at their first read. Checking them in compiled
code lets the single-query kernels check their candidates in the same call (no return to
Python, no second call), and lets a save compute a million rows' checksums without a Python
step per row. The rows and lists to check are announced to the kernel first
(:mod:`bbqlib._kernels.prefetch`), so a cold search's reads go to the disk together.
Slicing by 8 (eight 256-entry tables, one table look-up per input byte, eight bytes per step)
is the classic software CRC32; ``zlib.crc32`` is the reference
(``tests/test_crc32.py``).
"""

from __future__ import annotations

import numpy as np

from .policy import kernel
from .prefetch import HAS_CYCLES, SLOW_CYCLES, cycles, willneed

__all__ = ["TABLES", "crc32_update", "row_crcs", "check_rows", "check_lists"]


def _tables() -> np.ndarray:
    """``T[s, b]``: the CRC of byte ``b`` followed by ``s`` zero bytes (slicing by 8)."""
    t = np.zeros((8, 256), dtype=np.int64)
    for b in range(256):
        c = b
        for _ in range(8):
            c = (c >> 1) ^ 0xEDB88320 if c & 1 else c >> 1
        t[0, b] = c
    for s in range(1, 8):
        t[s] = (t[s - 1] >> 8) ^ t[0, t[s - 1] & 0xFF]
    return t


#: int64 [8, 256]: values are 32-bit; int64 keeps numba's integer arithmetic in one type.
TABLES = _tables()


@kernel(inline="always")
def crc32_update(buf, crc):
    """``zlib.crc32(buf, crc)`` of a contiguous uint8 [m] ``buf`` (int64 in, int64 out)."""
    t = TABLES
    c = (crc ^ 0xFFFFFFFF) & 0xFFFFFFFF
    n = buf.shape[0]
    i = 0
    while i + 8 <= n:
        lo = c ^ (
            np.int64(buf[i]) | (np.int64(buf[i + 1]) << 8)
            | (np.int64(buf[i + 2]) << 16) | (np.int64(buf[i + 3]) << 24)
        )  # fmt: skip
        hi = (
            np.int64(buf[i + 4]) | (np.int64(buf[i + 5]) << 8)
            | (np.int64(buf[i + 6]) << 16) | (np.int64(buf[i + 7]) << 24)
        )  # fmt: skip
        c = (
            t[7, lo & 0xFF] ^ t[6, (lo >> 8) & 0xFF] ^ t[5, (lo >> 16) & 0xFF]
            ^ t[4, (lo >> 24) & 0xFF] ^ t[3, hi & 0xFF] ^ t[2, (hi >> 8) & 0xFF]
            ^ t[1, (hi >> 16) & 0xFF] ^ t[0, (hi >> 24) & 0xFF]
        )  # fmt: skip
        i += 8
    while i < n:
        c = t[0, (c ^ np.int64(buf[i])) & 0xFF] ^ (c >> 8)
        i += 1
    return c ^ 0xFFFFFFFF


@kernel
def row_crcs(rows, out):
    """``out[i] = zlib.crc32(rows[i])`` for the rows of a C-contiguous uint8 [n, m]."""
    for i in range(rows.shape[0]):
        out[i] = crc32_update(rows[i], 0)


@kernel(inline="always")
def check_rows(data, rows, crcs, checked, block_rows, cold):
    """Check the blocks of ``block_rows`` rows of ``data`` (uint8 [n, m], one stored row a
    line) holding ``rows`` (int64, ``-1`` skipped) whose ``checked`` flag is not set yet,
    against ``crcs`` (uint32, one per block); set the flag of each that matches.

    Returns the first block that does not match, or -1. A block's CRC32 chains its rows.
    Where ``cold[0]`` is set (the last check read from the disk), the blocks to check are
    first announced to the kernel (:func:`bbqlib._kernels.prefetch.willneed`), so that the
    reads of a memory-mapped file go to the disk together; where it is not, a block whose
    check takes disk time (:data:`~bbqlib._kernels.prefetch.SLOW_CYCLES`) announces the
    rest. ``cold[0]`` ends set when a block came from the disk, cleared when all came from
    memory (unchanged when nothing was checked).
    """
    n = data.shape[0]
    width = data.shape[1]
    base = data.ctypes.data
    announced = False
    if cold[0] or not HAS_CYCLES:  # without a cycle counter: always announce
        _announce_rows(base, width, n, rows, 0, checked, block_rows)
        announced = True
    slow = False
    seen = False
    for j in range(rows.shape[0]):
        r = rows[j]
        if r < 0:
            continue
        b = r // block_rows
        if checked[b]:
            continue
        lo = b * block_rows
        hi = min(lo + block_rows, n)
        t0 = cycles()
        c = np.int64(0)
        for i in range(lo, hi):
            c = crc32_update(data[i], c)
        seen = True
        if cycles() - t0 > SLOW_CYCLES:
            slow = True
            if not announced:
                _announce_rows(base, width, n, rows, j + 1, checked, block_rows)
                announced = True
        if c != np.int64(crcs[b]):
            return b
        checked[b] = True
    if seen:
        cold[0] = slow
    return -1


@kernel(inline="always")
def _announce_rows(base, width, n, rows, first, checked, block_rows):
    for j in range(first, rows.shape[0]):
        r = rows[j]
        if r >= 0 and not checked[r // block_rows]:
            lo = r // block_rows * block_rows
            willneed(base + lo * width, (min(lo + block_rows, n) - lo) * width)


@kernel(inline="always")
def check_lists(lists, ok, crcs, list_start, block_start, lut, lut_width, factors, ids):
    """Check the posting lists ``lists`` whose ``ok`` flag is not set yet against ``crcs``
    (uint32, one per list); set the flag of each that matches.

    A list's CRC32 chains what the lookup-table scan reads of it (as
    :func:`bbqlib.index.ivf.storage.list_crc` with ``blocks=True``): its blocks of codes,
    bytes ``block_start[j] * lut_width : block_start[j + 1] * lut_width`` of ``lut``, then
    its entries' factor rows and ids (``factors`` and ``ids``: uint8 views, one entry
    ``factors.size // n`` and 4 bytes wide). Returns the first list that does not match, or
    -1. The lists to check are first announced to the kernel, as in :func:`check_rows`.
    """
    n = list_start[list_start.shape[0] - 1]
    fw = factors.shape[0] // max(n, 1)
    for p in range(lists.shape[0]):
        j = lists[p]
        if not ok[j]:
            b0, b1 = block_start[j] * lut_width, block_start[j + 1] * lut_width
            willneed(lut.ctypes.data + b0, b1 - b0)
            e0, e1 = list_start[j], list_start[j + 1]
            willneed(factors.ctypes.data + e0 * fw, (e1 - e0) * fw)
            willneed(ids.ctypes.data + e0 * 4, (e1 - e0) * 4)
    for p in range(lists.shape[0]):
        j = lists[p]
        if ok[j]:
            continue
        c = crc32_update(lut[block_start[j] * lut_width : block_start[j + 1] * lut_width], 0)
        e0, e1 = list_start[j], list_start[j + 1]
        c = crc32_update(factors[e0 * fw : e1 * fw], c)
        c = crc32_update(ids[e0 * 4 : e1 * 4], c)
        if c != np.int64(crcs[j]):
            return j
        ok[j] = True
    return -1
