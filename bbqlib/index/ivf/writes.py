"""``IVFIndex.add`` and ``IVFIndex.delete``, and the state they replace.

Both run the copy-on-write protocol of :mod:`.guarded`: the work happens on a clone whose
attributes are replaced (centroids and their 7-bit table, tombstones, posting lists, vector
segments, row ids), then the clone is saved (for an index with a ``path``) and published.
"""

from __future__ import annotations

import os

import numpy as np

from ..._validation import check_source
from ...formats.vectors import read_vectors
from ...search.stored import stored_rows
from . import build as B
from . import files as F
from . import plan as P

__all__ = [
    "MAX_VECTORS",
    "AUTO_PROGRESS_ROWS",
    "add_vectors",
    "delete_ids",
    "set_centroids",
    "set_deleted",
    "primary_counts",
    "vectors_rows",
]

#: Posting lists store int32 row numbers (the caller's int64 ids are mapped at the edges).
MAX_VECTORS = 2**31 - 1
#: Builds at least this large show a progress bar unless ``progress=False``.
AUTO_PROGRESS_ROWS = 1_000_000


def add_vectors(index, X, ids, progress) -> None:
    """The body of :meth:`bbqlib.IVFIndex.add`."""
    source = read_vectors(X, mmap=True) if isinstance(X, (str, os.PathLike)) else X
    source = check_source(source, "X", dim=index.dim_ if index._fitted else None)
    n = source.shape[0]
    show = (n >= AUTO_PROGRESS_ROWS) if progress is None else bool(progress)
    with index._writing(index.path):
        if index.ntotal + n > MAX_VECTORS:
            raise ValueError(f"an IVFIndex holds at most {MAX_VECTORS} vectors (int32 rows)")
        F.check_row_ids(index)
        new = index._row_ids.new_ids(ids, n, index._deleted if index._fitted else None)
        work = index._clone()
        if not work._fitted:
            try:
                B.build(work, source, show)
                work._fitted = True
                work._row_ids = work._row_ids.appended(new, n)
                index._commit(work)
            except BaseException:
                _remove_failed_first_build(index.path)
                raise
            return
        F.check_before_rewrite(work)  # damage must not get fresh checksums
        B.add_more(work, source, show)
        work._row_ids = work._row_ids.appended(new, n)
        index._commit(work)


def _remove_failed_first_build(path) -> None:
    """After a first build that failed (an error, ENOSPC, Ctrl-C) at ``path``: remove the
    vector segments and working copy it wrote, unless a generation was committed. The
    caller holds the directory's lock; a killed build's files go at the next open or repair.
    """
    from . import storage as ST

    if path is not None and path.is_dir() and not (path / ST.MANIFEST).exists():
        ST.remove_first_build_files(path)


def delete_ids(index, ids) -> None:
    """The body of :meth:`bbqlib.IVFIndex.delete`."""
    index._check_fitted()
    with index._writing(index.path):
        F.check_row_ids(index)
        deleted = index._tombstones_after(ids)
        if deleted is None:
            return
        work = index._clone()
        set_deleted(work, deleted)
        index._commit(work)


def set_centroids(index, C: np.ndarray) -> None:
    """New list centroids and the 7-bit centroid table (with parents when there are many)."""
    from ..clustering import parent_level

    index._C = np.ascontiguousarray(C, dtype=np.float32)
    parents = None
    if index._C.shape[0] > P.PARENT_THRESHOLD:
        parents = parent_level(
            index._C, centroids_per_parent=P.CENTROIDS_PER_PARENT, seed=index.seed
        )
    index._table = P.centroid_table(index._C, index.similarity_.is_distance, parents=parents)
    index._list_cc = index._table.cc


def set_deleted(index, deleted: np.ndarray) -> None:
    """New tombstones (bool [ntotal]); drops the caches derived from the old ones."""
    index._deleted = deleted
    index._n_deleted = int(deleted.sum())
    index._live_cache = None
    index._live_per_list = None


def primary_counts(index) -> np.ndarray:
    """Primary (non-SOAR) entries per list (int64 [K])."""
    return np.bincount(np.asarray(index._assign)[:, 0], minlength=index._C.shape[0])


def vectors_rows(index, rows: np.ndarray) -> np.ndarray:
    """Stored vectors of ascending ``rows``, decoded as float32 (a copy)."""
    out = np.empty((rows.size, index.dim_), dtype=np.float32)
    start = 0
    for seg in index._segments:
        stop = start + len(seg)
        lo, hi = np.searchsorted(rows, [start, stop])
        seg.check_rows(rows[lo:hi] - start)  # block CRC32s, on the first read
        out[lo:hi] = stored_rows(seg.array, rows[lo:hi] - start)
        start = stop
    return out
