"""CRC32 per row (or block of rows) of a stored float matrix, checked on its first read.

A file-level CRC catches damage only when somebody reads the whole file (``verify()``); a
search that reads a few rows of a memory-mapped matrix would serve a damaged row silently.
:class:`BlockChecksums` records one CRC32 per block of ``block_rows`` rows; a reader calls
:meth:`BlockChecksums.check` with the rows it is about to read, which checks every block among
them not checked before and raises :class:`~bbqlib.CorruptFileError` naming the file and the
rows on a mismatch.

Files written now use blocks of one row (:data:`BLOCK_ROWS`): a check then reads exactly the
rows the search reads anyway, where a block of many rows makes a cold search that reranks a
few rows read whole blocks around each of them until the whole file has been read once
(``benchmarks/results/ivf_memory.md``, per-row checks). IVF formats 5-7 and flat files
written before per-row blocks use blocks of 256 rows; files record their own block size, so
they read as written.
"""

from __future__ import annotations

import mmap
from pathlib import Path

import numpy as np

from .._kernels import crc32 as crc32_kernels
from .container import crc32_of
from .errors import CorruptFileError

__all__ = [
    "BLOCK_ROWS", "BlockChecksums", "BlockCRCWriter", "advise_random", "file_map", "row_bytes",
    "row_crcs",
]  # fmt: skip

#: Rows per checksummed block: one, so that checking a row reads nothing but that row. The
#: price is 4 bytes per row for the table of CRCs (0.26% of a float32 row at d = 384), which
#: files keep in binary sections, not in JSON.
BLOCK_ROWS = 1


def file_map(arr) -> mmap.mmap | None:
    """The ``mmap.mmap`` an array is a view of (through any chain of views), or None."""
    base = arr
    while base is not None:
        if isinstance(base, mmap.mmap):
            return base
        below = getattr(base, "_mmap", None)  # np.memmap keeps its map there
        base = below if below is not None else getattr(base, "base", None)
    return None


def advise_random(arr) -> None:
    """Tell the kernel that reads of this memory map are random (no read-around).

    A rerank touches ``k'`` scattered rows per query; with the default read-around every page
    fault pulls in the neighbouring pages (up to the device's read-ahead, megabytes on some
    disks) that nobody asked for, which under a memory cap also evicts the pages that matter.
    Maps read whole (a flat file's codes, checked at load) keep their read-ahead. ``arr`` may
    be a view of part of a larger map (a section of a container): only its pages are advised.
    """
    m = file_map(arr)
    if m is None or not hasattr(m, "madvise") or not hasattr(mmap, "MADV_RANDOM"):
        return
    arr = np.asarray(arr)
    if arr.nbytes == 0:
        return
    start = arr.ctypes.data - np.frombuffer(m, dtype=np.uint8).ctypes.data
    first = start - start % mmap.PAGESIZE  # madvise takes page-aligned starts
    m.madvise(mmap.MADV_RANDOM, first, start + arr.nbytes - first)


def row_bytes(arr: np.ndarray) -> np.ndarray:
    """``arr`` (C-contiguous, one stored row per first-axis entry) as uint8 [n, bytes per row]:
    a view, no copy (float32 / float16 [n, d], or int8 records [n])."""
    arr = np.ascontiguousarray(arr)
    return arr.view(np.uint8).reshape(arr.shape[0], -1)


def row_crcs(arr: np.ndarray) -> np.ndarray:
    """uint32 [n]: ``zlib.crc32`` of each row of ``arr`` (compiled; no Python step per row)."""
    out = np.empty(arr.shape[0], dtype=np.uint32)
    if arr.shape[0]:
        crc32_kernels.row_crcs(row_bytes(arr), out)
    return out


class BlockCRCWriter:
    """Accumulates the block CRC32s of rows streamed in batches of any size."""

    def __init__(self, block_rows: int = BLOCK_ROWS):
        self.block_rows = int(block_rows)
        self._crcs: list[int] = []
        self._rows: list[np.ndarray] = []  # blocks of one row: the CRCs of each batch
        self._crc = 0
        self._fill = 0

    def update(self, batch: np.ndarray) -> None:
        if self.block_rows == 1:
            self._rows.append(row_crcs(batch))
            return
        start = 0
        n = batch.shape[0]
        while start < n:
            take = min(self.block_rows - self._fill, n - start)
            self._crc = crc32_of(batch[start : start + take], self._crc)
            self._fill += take
            start += take
            if self._fill == self.block_rows:
                self._crcs.append(self._crc)
                self._crc, self._fill = 0, 0

    def finish(self) -> np.ndarray:
        if self.block_rows == 1:
            return np.concatenate([np.empty(0, np.uint32), *self._rows])
        out = self._crcs + ([self._crc] if self._fill else [])
        return np.asarray(out, dtype=np.uint32)


class BlockChecksums:
    """The block CRC32s of one stored matrix, and which blocks were checked already.

    Parameters
    ----------
    crcs : uint32 [ceil(rows / block_rows)]
    block_rows : rows per block.
    file : the file the rows come from (named in errors).
    what : what the rows are, for errors (``"vector file"``; e.g. the ids of a posting file).

    Notes
    -----
    Thread-safe in the only way that matters: two threads checking the same block both read
    it and both mark it checked; nothing is ever unmarked.
    """

    def __init__(self, crcs, block_rows: int, file: Path | None = None, what: str = "vector file"):
        self.crcs = np.asarray(crcs, dtype=np.uint32)
        self.block_rows = int(block_rows)
        self.file = file
        self.what = what
        #: Whether the last check read from the disk (then the next announces its reads
        #: first: :func:`bbqlib._kernels.crc32.check_rows`); a fresh map starts cold.
        self.cold = np.ones(1, dtype=np.bool_)
        self._checked = np.zeros(self.crcs.size, dtype=bool)
        self._all = self.crcs.size == 0

    @property
    def all_checked(self) -> bool:
        """Whether every block was checked (then :meth:`check` costs nothing)."""
        return self._all

    @classmethod
    def of(cls, arr: np.ndarray, block_rows: int = BLOCK_ROWS, file=None) -> BlockChecksums:
        w = BlockCRCWriter(block_rows)
        w.update(arr)
        return cls(w.finish(), block_rows, file)

    def matches(self, rows: int) -> bool:
        """Whether these checksums can describe a matrix of ``rows`` rows."""
        return self.block_rows > 0 and self.crcs.size == -(-rows // self.block_rows)

    def to_meta(self, section: str | None = None) -> dict:
        """The header entry: the CRCs in the JSON itself (blocks of many rows, older
        formats), or the name of the binary ``section`` that holds them."""
        if section is not None:
            return {"block_rows": self.block_rows, "block_crc32_section": section}
        return {"block_rows": self.block_rows, "block_crc32": [int(c) for c in self.crcs]}

    @classmethod
    def from_meta(
        cls, entry: dict, rows: int, file=None, arrays: dict | None = None
    ) -> BlockChecksums | None:
        """From a segment entry of a header (None when the entry has none: older files);
        ``arrays``: the header's sections, where an entry names the one holding its CRCs."""
        if "block_crc32" not in entry and "block_crc32_section" not in entry:
            return None
        try:
            if "block_crc32_section" in entry:
                crcs = (arrays or {})[entry["block_crc32_section"]]
                if crcs.dtype != np.uint32:
                    raise TypeError(f"{crcs.dtype} block checksums")
            else:
                crcs = entry["block_crc32"]
            out = cls(crcs, int(entry["block_rows"]), file)
        except (KeyError, TypeError, ValueError, OverflowError) as err:
            raise CorruptFileError(f"the block checksums of {file} are malformed ({err})") from None
        if not out.matches(rows):
            raise CorruptFileError(
                f"the header records {out.crcs.size} block checksums of {out.block_rows} rows "
                f"for {file}, which holds {rows} rows: the files do not belong together"
            )
        return out

    def check(self, arr: np.ndarray, rows: np.ndarray) -> None:
        """Check every not yet checked block holding one of ``rows`` (valid, >= 0) of ``arr``."""
        if rows.size == 0 or self._all:
            return
        rows = np.ascontiguousarray(rows, dtype=np.int64).reshape(-1)
        bad = crc32_kernels.check_rows(
            row_bytes(arr), rows, self.crcs, self._checked, self.block_rows, self.cold
        )
        if bad >= 0:
            lo = int(bad) * self.block_rows
            hi = min(lo + self.block_rows, arr.shape[0]) - 1
            what = (
                f"row {lo} fails its CRC32" if self.block_rows == 1
                else f"rows {lo} to {hi} fail their CRC32 (block {int(bad)})"
            )  # fmt: skip
            raise CorruptFileError(
                f"{self.what} {self.file} is corrupted: {what}; restore the file or rebuild "
                "the index"
            )

    def check_all(self, arr: np.ndarray) -> None:
        self.check(arr, np.arange(0, arr.shape[0], self.block_rows))
        self._all = True
