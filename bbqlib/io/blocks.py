"""CRC32 per block of rows of a stored float matrix, each block checked on its first read.

A file-level CRC catches damage only when somebody reads the whole file (``verify()``); a
search that reads a few rows of a memory-mapped matrix would serve a damaged row silently.
:class:`BlockChecksums` records one CRC32 per block of :data:`BLOCK_ROWS` rows; a reader calls
:meth:`BlockChecksums.check` with the rows it is about to read, which checks every block among
them not checked before (reading those blocks once) and raises
:class:`~bbqlib.CorruptFileError` naming the file and the block on a mismatch.
"""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np

from .errors import CorruptFileError

__all__ = ["BLOCK_ROWS", "BlockChecksums", "BlockCRCWriter"]

#: Rows per checksummed block (256 rows of 384 float32 = 384 KiB). A first search reads
#: (and checks) the blocks of its few dozen rerank candidates: at 4,096 rows (6 MiB) that was
#: ~60 MB of CRC32 in an index's first query (~30 ms); the cost of small blocks is the list
#: of CRCs in the header (5M rows: 19,532 numbers) and one Python step per block in verify().
#: Files record their own block size, so files written with 4,096 read as before.
BLOCK_ROWS = 256


def _crc(arr: np.ndarray, crc: int = 0) -> int:
    return zlib.crc32(np.ascontiguousarray(arr).reshape(-1).view(np.uint8), crc)


class BlockCRCWriter:
    """Accumulates the block CRC32s of rows streamed in batches of any size."""

    def __init__(self, block_rows: int = BLOCK_ROWS):
        self.block_rows = int(block_rows)
        self._crcs: list[int] = []
        self._crc = 0
        self._fill = 0

    def update(self, batch: np.ndarray) -> None:
        start = 0
        n = batch.shape[0]
        while start < n:
            take = min(self.block_rows - self._fill, n - start)
            self._crc = _crc(batch[start : start + take], self._crc)
            self._fill += take
            start += take
            if self._fill == self.block_rows:
                self._crcs.append(self._crc)
                self._crc, self._fill = 0, 0

    def finish(self) -> np.ndarray:
        out = self._crcs + ([self._crc] if self._fill else [])
        return np.asarray(out, dtype=np.uint32)


class BlockChecksums:
    """The block CRC32s of one stored matrix, and which blocks were checked already.

    Parameters
    ----------
    crcs : uint32 [ceil(rows / block_rows)]
    block_rows : rows per block.
    file : the file the rows come from (named in errors).

    Notes
    -----
    Thread-safe in the only way that matters: two threads checking the same block both read
    it and both mark it checked; nothing is ever unmarked.
    """

    def __init__(self, crcs, block_rows: int, file: Path | None = None):
        self.crcs = np.asarray(crcs, dtype=np.uint32)
        self.block_rows = int(block_rows)
        self.file = file
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

    def to_meta(self) -> dict:
        return {"block_rows": self.block_rows, "block_crc32": [int(c) for c in self.crcs]}

    @classmethod
    def from_meta(cls, entry: dict, rows: int, file=None) -> BlockChecksums | None:
        """From a segment entry of a header (None when the entry has none: older files)."""
        if "block_crc32" not in entry:
            return None
        try:
            out = cls(entry["block_crc32"], int(entry["block_rows"]), file)
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
        blocks = np.unique(np.asarray(rows, dtype=np.int64) // self.block_rows)
        todo = blocks[~self._checked[blocks]]
        for b in todo:  # once per block over the life of the map: not a per-search loop
            lo = int(b) * self.block_rows
            if _crc(arr[lo : lo + self.block_rows]) != int(self.crcs[b]):
                raise CorruptFileError(
                    f"vector file {self.file} is corrupted: rows {lo} to "
                    f"{min(lo + self.block_rows, arr.shape[0]) - 1} fail their CRC32 (block "
                    f"{int(b)}); restore the file or rebuild the index"
                )
            self._checked[b] = True
        if todo.size and self._checked.all():
            self._all = True

    def check_all(self, arr: np.ndarray) -> None:
        self.check(arr, np.arange(0, arr.shape[0], self.block_rows))
