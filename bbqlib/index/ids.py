"""Caller ids of an index's rows: validation, row -> id and id -> row lookups.

Indexes keep rows internally (row ``r`` is the ``r``-th vector added, deleted ones included;
kernels, posting lists and tombstones speak rows) and translate at their edges: ``add(X,
ids=...)`` records the caller's ids, ``search`` returns them, ``delete`` and ``filter`` take
them. :class:`RowIds` holds the translation:

* **identity** (every id so far was the default): id = row, nothing stored;
* **custom**: an int64 array ``ids[row]`` (may be memory-mapped from a file) and, built on
  the first id -> row lookup, its stable argsort, so that a lookup is one
  :func:`numpy.searchsorted` (``O(log n)`` per id, no Python loop per id).

Ids are unique among live rows. A deleted id may be added again: the rows of one id are then
sorted by row, and only the last (newest) of them can be live, which is the one a lookup
returns.
"""

from __future__ import annotations

import numpy as np

__all__ = ["MAX_ID", "RowIds", "check_ids", "filter_rows"]

#: The largest id (int64); ``-1`` pads search results, so ids are ``0 .. MAX_ID``.
MAX_ID = int(np.iinfo(np.int64).max)
_SHOW = 5


def _listed(values: np.ndarray) -> str:
    """The first few values of an array, for an error message."""
    head = [int(v) for v in values[:_SHOW]]
    more = f" ... ({values.size} in all)" if values.size > _SHOW else ""
    return f"{head}{more}"


def check_ids(ids, n: int, name: str = "ids") -> np.ndarray:
    """``ids`` as a new int64 array [n]: integers, ``0 <= id <= MAX_ID``, no duplicates.

    Raises ``TypeError`` for a non-integer dtype and ``ValueError`` for a wrong shape,
    negative ids or ids repeated within the array, naming the first offenders.
    """
    arr = np.asarray(ids)
    if arr.dtype == bool or arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must be integers (int64), got dtype {arr.dtype}")
    if arr.ndim != 1 or arr.shape[0] != n:
        raise ValueError(f"{name} must have shape ({n},) (one id per row of X), got {arr.shape}")
    if arr.dtype.kind == "u":
        too_big = arr[arr > MAX_ID]
        if too_big.size:
            raise ValueError(f"{name} must be at most {MAX_ID} (int64); got {_listed(too_big)}")
    out = arr.astype(np.int64)  # a copy: the caller's array is never kept
    negative = out[out < 0]
    if negative.size:
        raise ValueError(
            f"{name} must be >= 0 (-1 pads search results); got negative ids {_listed(negative)}"
        )
    if n > 1:
        s = np.sort(out)
        dup = np.unique(s[1:][s[1:] == s[:-1]])
        if dup.size:
            raise ValueError(f"{name} must be unique; repeated in this call: {_listed(dup)}")
    return out


class RowIds:
    """The caller id of every row of an index (see the module docstring).

    Parameters
    ----------
    n : int
        Rows so far.
    ids : int64 array [n], optional
        Custom ids (kept, not copied: it may be a read-only memory map); None: id = row.
    next_id : int, optional
        The default id of the next row (largest id ever issued + 1); default
        ``max(ids) + 1`` (or ``n`` for identity).
    """

    def __init__(self, n: int = 0, ids: np.ndarray | None = None, next_id: int | None = None):
        self.n = int(n)
        if ids is not None and ids.shape != (self.n,):
            raise ValueError(f"ids of {ids.shape[0]} rows for an index of {self.n}")
        self.ids = ids
        if next_id is None:
            next_id = self.n if ids is None else (int(ids.max()) + 1 if ids.size else 0)
        self.next_id = int(next_id)
        self._sorted: tuple[np.ndarray, np.ndarray] | None = None
        #: Block CRC32s of ``ids`` mapped from a file (:class:`bbqlib.storage.blocks.
        #: BlockChecksums`), checked block by block as results are mapped; None in RAM.
        self.checks = None

    @property
    def is_identity(self) -> bool:
        return self.ids is None

    def __len__(self) -> int:
        return self.n

    def array(self) -> np.ndarray:
        """int64 [n]: the id of every row."""
        return np.arange(self.n, dtype=np.int64) if self.ids is None else np.asarray(self.ids)

    def of_rows(self, rows: np.ndarray) -> np.ndarray:
        """Ids of ``rows`` (int64, any shape); ``-1`` stays ``-1``."""
        rows = np.asarray(rows, dtype=np.int64)
        if self.ids is None:
            return rows
        valid = rows >= 0
        if self.checks is not None and not self.checks.all_checked:
            self.checks.check(self.ids, rows[valid])  # the blocks of these ids, first read
        out = np.full(rows.shape, -1, dtype=np.int64)
        out[valid] = np.asarray(self.ids)[rows[valid]]
        return out

    # -- id -> row --------------------------------------------------------------------------
    def _lookup(self, ids: np.ndarray) -> np.ndarray:
        """Row of each id (the newest row holding it), ``-1`` for ids never added."""
        if self.ids is None:
            return np.where((ids >= 0) & (ids < self.n), ids, -1)
        if self._sorted is None:
            order = np.argsort(np.asarray(self.ids), kind="stable")  # equal ids: by row
            self._sorted = (np.asarray(self.ids)[order], order)
        values, order = self._sorted
        if values.size == 0:
            return np.full(ids.shape, -1, dtype=np.int64)
        pos = np.searchsorted(values, ids, side="right") - 1
        safe = np.maximum(pos, 0)
        return np.where((pos >= 0) & (values[safe] == ids), order[safe], -1)

    def rows_of(self, ids, deleted: np.ndarray | None, name: str = "ids") -> np.ndarray:
        """Rows of live ``ids`` (int64 [m]) for ``delete``.

        Raises ``ValueError`` naming ids that are not in the index or already deleted.
        """
        arr = np.asarray(ids).reshape(-1)
        if arr.dtype == bool or arr.dtype.kind not in "iu":
            raise TypeError(f"{name} must be integers, got dtype {arr.dtype}")
        arr = _as_int64(arr)
        rows = self._lookup(arr)
        unknown = arr[rows < 0]
        if unknown.size:
            raise ValueError(f"{name} not in the index: {_listed(unknown)}")
        if deleted is not None:
            gone = arr[deleted[rows]]
            if gone.size:
                raise ValueError(f"{name} already deleted: {_listed(gone)}")
        return rows

    # -- adding -----------------------------------------------------------------------------
    def new_ids(self, ids, m: int, deleted: np.ndarray | None) -> np.ndarray | None:
        """Validated ids of ``m`` new rows (None: the defaults ``next_id ...``).

        Raises ``ValueError`` for duplicates, negatives, and ids of live rows.
        """
        if ids is None:
            if self.next_id + m - 1 > MAX_ID:
                raise ValueError(
                    f"default ids would exceed {MAX_ID}; pass ids=... for these {m} rows"
                )
            return None
        new = check_ids(ids, m)
        rows = self._lookup(new)
        live = rows >= 0
        if deleted is not None:
            live &= ~deleted[np.maximum(rows, 0)]
        taken = new[live]
        if taken.size:
            raise ValueError(
                f"ids must be unique in the index; already there: {_listed(taken)} "
                "(delete them first to replace their vectors)"
            )
        return new

    def appended(self, new: np.ndarray | None, m: int) -> RowIds:
        """The ids after appending ``m`` rows with ids ``new`` (from :meth:`new_ids`)."""
        start = self.next_id
        if new is None:
            new = np.arange(start, start + m, dtype=np.int64)
            if self.ids is None and start == self.n:
                return RowIds(self.n + m)
        elif self.ids is None and start == self.n and _is_range(new, start):
            return RowIds(self.n + m)
        ids = np.concatenate([self.array(), new])
        next_id = max(self.next_id, int(new.max()) + 1 if m else 0)
        return RowIds(self.n + m, ids, next_id)


def _is_range(ids: np.ndarray, start: int) -> bool:
    return bool(ids.size == 0 or (ids[0] == start and np.all(np.diff(ids) == 1)))


def _as_int64(arr: np.ndarray) -> np.ndarray:
    """Integer ids as int64; unsigned values above :data:`MAX_ID` become -1 (never an id)."""
    out = arr.astype(np.int64)
    if arr.dtype.kind == "u":
        out[arr > MAX_ID] = -1
    return out


def filter_rows(filter, ids: RowIds) -> np.ndarray | None:
    """A search filter as a boolean mask over rows (None: no filter).

    ``filter`` is a boolean mask with one flag per row in insertion order (deleted rows
    included, length :attr:`RowIds.n`), or an array of ids. Ids not in the index raise
    ``ValueError`` naming them.
    """
    if filter is None:
        return None
    f = np.asarray(filter)
    n = ids.n
    if f.size == 0:  # an empty list of ids (NumPy makes [] float64): nothing is allowed
        return np.zeros(n, dtype=bool)
    if f.dtype == bool:
        if f.shape != (n,):
            raise ValueError(
                f"a boolean filter must have shape ({n},) (one flag per vector added, in "
                f"insertion order), got {f.shape}; or pass an array of ids"
            )
        return f
    if f.dtype.kind not in "iu":
        raise TypeError(
            f"filter must be a boolean mask or an array of integer ids (of added vectors), "
            f"got an array of {f.dtype}"
        )
    f = f.reshape(-1)
    f = _as_int64(f)
    rows = ids._lookup(f)
    unknown = f[rows < 0]
    if unknown.size:
        raise ValueError(f"filter ids not in the index: {_listed(unknown)}")
    mask = np.zeros(n, dtype=bool)
    mask[rows] = True
    return mask
