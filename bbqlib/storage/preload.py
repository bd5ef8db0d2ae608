"""Read memory-mapped arrays into the page cache before the first query needs them.

Elasticsearch's answer to the slow first query on a cold file system cache is
``index.store.preload``: the listed files are read when the index opens. bbqlib's
:meth:`bbqlib.IVFIndex.open` with ``preload=True`` does the same for the posting lists: each
mapped array gets a ``MADV_WILLNEED`` hint (the kernel starts reading ahead at once) and then
one byte of every page is read through the mapping, which waits for the data and maps the
pages into the process, so the first search neither reads the disk nor takes page faults.
"""

from __future__ import annotations

import mmap

import numpy as np

__all__ = ["preload_arrays"]

#: Page size used to touch mappings (one read per page).
PAGE = mmap.PAGESIZE


def _mapping(arr):
    while arr is not None:
        m = getattr(arr, "_mmap", None)
        if m is not None:
            return m
        arr = getattr(arr, "base", None)
    return None


def preload_arrays(arrays) -> int:
    """Bring every array of ``arrays`` into memory; returns the bytes touched.

    In-memory arrays are left alone; memory maps are hinted (``MADV_WILLNEED``) and read one
    byte per page. Nothing is copied and nothing is written.
    """
    maps = [a for a in arrays if a is not None and _mapping(a) is not None and a.size]
    for a in maps:
        m = _mapping(a)
        if hasattr(m, "madvise") and hasattr(mmap, "MADV_WILLNEED"):
            try:
                m.madvise(mmap.MADV_WILLNEED)
            except (OSError, ValueError):  # a closed or unusual mapping: touching still works
                pass
    touched = 0
    for a in maps:
        flat = np.asarray(a).reshape(-1).view(np.uint8)
        if flat.size:
            int(flat[::PAGE].sum(dtype=np.uint64))
            touched += flat.size
    return touched
