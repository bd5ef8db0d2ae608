"""Posting lists: codes, factor rows and ids grouped by list, with their checksums.

Entries of list ``j`` are rows ``start[j]:start[j + 1]`` of every array (ids ascending within
a list). ``codes`` are packed as the encoding's registry row says; ``factors`` are the
correction algebra's rows ``(a_x, l_x, ΣX, add_x)`` (float32) that the quantizer made for
each entry against its list's centre; ``ids`` int32 (a vector appears twice with SOAR).
Plane codes also exist in blocks of 32 entries per list for the lookup-table scan.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ...packing import lut_list_blocks
from ...storage.container import CorruptFileError
from . import storage as ST

__all__ = ["Postings", "merge_postings"]


@dataclass
class Postings:
    """The posting arrays of an IVF index (in RAM or memory-mapped from a posting file).

    ``crc`` / ``lut_crc``: per-list CRC32 of the stored file (None in RAM); ``source``: the
    file they map; ``lut``: ``(blocks, block_starts)`` once made or mapped;
    ``section_crcs``: the posting file's section CRC32s (``assignments`` is checked by them).
    """

    codes: np.ndarray
    factors: np.ndarray
    ids: np.ndarray
    start: np.ndarray
    crc: np.ndarray | None = None
    lut_crc: np.ndarray | None = None
    source: Path | None = None
    lut: tuple[np.ndarray, np.ndarray] | None = None
    section_crcs: dict | None = None
    _verified: np.ndarray = field(init=False, repr=False)
    _verified_blocks: np.ndarray = field(init=False, repr=False)

    def __post_init__(self):
        self.start = np.ascontiguousarray(self.start, dtype=np.int64)
        k = self.n_lists
        self._verified = np.full(k, self.crc is None, dtype=bool)
        self._verified_blocks = np.full(k, self.lut_crc is None, dtype=bool)
        self._checked_sections: set[str] = set()

    def __getstate__(self):
        # SAQ's fast-scan blocks are made again on first use (keyed by the codes' identity,
        # which a pickle does not keep anyway).
        state = dict(self.__dict__)
        state.pop("_saq_fastscan", None)
        return state

    @property
    def n_lists(self) -> int:
        return self.start.shape[0] - 1

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.start)

    def __len__(self) -> int:
        return self.ids.shape[0]

    def lut_layout(self) -> tuple[np.ndarray, np.ndarray]:
        """``(blocks, block_starts)``: each list's codes in blocks of 32 (made once, kept)."""
        if self.lut is None:
            self.lut = lut_list_blocks(np.asarray(self.codes), self.start)
        return self.lut

    def arrays(self) -> dict:
        """The arrays as stored (``lut_codes`` when the blocks are mapped from the file)."""
        out = {"codes": self.codes, "factors": self.factors, "ids": self.ids}
        if self.lut is not None and self.source is not None:
            out["lut_codes"] = self.lut[0]
        return out

    def to_store(self, planes: bool) -> dict:
        """Arrays of a new posting file (plane codes also as blocks)."""
        out = {
            "codes": np.asarray(self.codes),
            "factors": np.asarray(self.factors),
            "ids": np.asarray(self.ids),
        }
        if planes:
            out["lut_codes"] = np.asarray(self.lut_layout()[0])
        return out

    def check(self, lists: np.ndarray, blocks: bool) -> None:
        """CRC32 of every list in ``lists`` read for the first time (files only), over what
        the scan reads: the lookup-table blocks (``blocks``) or the codes."""
        if self.crc is None:
            return
        blocks = blocks and self.lut_crc is not None
        crcs, verified = (
            (self.lut_crc, self._verified_blocks) if blocks else (self.crc, self._verified)
        )
        todo = np.unique(lists[~verified[lists]])
        if todo.size == 0:
            return
        bad = ST.bad_lists(self.arrays(), self.start, crcs, todo, blocks=blocks)
        if bad.size:
            raise CorruptFileError(
                f"posting list {int(bad[0])} of the IVF index at {self.source} fails its CRC32 "
                f"({bad.size} bad list(s) among those read): the file is corrupted; rebuild "
                "the index or restore the file"
            )
        verified[todo] = True

    def check_section(self, name: str, arr: np.ndarray | None = None) -> None:
        """The posting file's CRC32 of a whole section (``ids``, ``assignments``), checked
        once, before a reader uses all of it (files only; ``arr``: the section's array)."""
        crcs = self.section_crcs or {}
        if name not in crcs or name in self._checked_sections:
            return
        arr = getattr(self, name) if arr is None else arr
        if ST.crc32_of(arr) != crcs[name]:
            raise CorruptFileError(
                f"posting file {self.source} is corrupted (checksum mismatch in section "
                f"{name!r}); rebuild the index or restore the file"
            )
        self._checked_sections.add(name)

    def mark_verified(self) -> None:
        self._verified[:] = True
        self._verified_blocks[:] = True
        self._checked_sections.update(self.section_crcs or ())


def merge_postings(old: Postings, keep: np.ndarray, new: Postings, n_lists: int) -> Postings:
    """Entries ``keep`` of ``old`` plus all of ``new``, regrouped for ``n_lists`` lists.

    The result is grouped by list with ids ascending within each list (the order a fresh
    build gives).
    """
    old_labels = np.repeat(np.arange(old.n_lists), old.sizes)[keep]
    new_labels = np.repeat(np.arange(new.n_lists), new.sizes)
    labels = np.concatenate([old_labels, new_labels])
    ids = np.concatenate([np.asarray(old.ids)[keep], new.ids])
    order = np.lexsort((ids, labels))
    codes = np.concatenate([np.asarray(old.codes)[keep], new.codes])[order]
    factors = np.concatenate([np.asarray(old.factors)[keep], new.factors])[order]
    start = np.zeros(n_lists + 1, dtype=np.int64)
    np.cumsum(np.bincount(labels, minlength=n_lists), out=start[1:])
    return Postings(codes, factors, ids[order].astype(np.int32), start)
