"""Building IVF posting lists: streamed encoding, working copies, progress bars.

Posting entries are made block by block from a (possibly memory-mapped) matrix: every row
gets its primary entry and, with SOAR, a second entry, each OSQ-encoded against its own
list's centroid by one fused kernel call per block
(:func:`bbqlib.index.ivf_search.encode_residuals`); entries land directly at their final
position (grouped by list, ids ascending within a list), so nothing larger than one block of
rows plus the finished codes is held in RAM.
"""

from __future__ import annotations

import secrets
from pathlib import Path

import numpy as np

from ..encoding import Encoding
from ..quantizers.osq import DEFAULT_ITERS
from . import ivf_search as S

__all__ = ["BUILD_BATCH", "progress_bar", "work_file", "encode_postings", "merge_postings"]

#: Rows per streamed block at build time (65,536 x 384 float32 = 96 MiB).
BUILD_BATCH = 65_536


class _NoBar:
    def update(self, n):
        pass

    def close(self):
        pass


def progress_bar(show: bool, total: int, desc: str):
    if not show:
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="vec")


def work_file(directory: Path, source, fn, d: int):
    """A temporary float32 memmap in ``directory`` holding ``fn`` of each block of ``source``."""
    path = directory / f".work.{secrets.token_hex(6)}.f32"
    blocks = (
        source
        if not isinstance(source, np.ndarray)
        else (source[i : i + BUILD_BATCH] for i in range(0, source.shape[0], BUILD_BATCH))
    )
    rows = 0
    with open(path, "wb") as f:
        for block in blocks:
            out = np.ascontiguousarray(fn(np.ascontiguousarray(block)), dtype=np.float32)
            f.write(out.tobytes())
            rows += out.shape[0]
    W = np.memmap(path, dtype=np.float32, mode="r", shape=(rows, d)).view(np.ndarray)
    return W, path


def encode_postings(W, ids, C, primary, secondary, encoding: Encoding, is_l2, show):
    """Posting entries of rows ``W`` (ids ``ids``): a primary and (if >= 0) a SOAR entry each.

    Returns ``(codes uint8 [E, doc_bytes], factors float32 [E, 4], ids int32 [E],
    list_start int64 [K + 1])`` grouped by list, ids ascending within a list. Rows of ``W``
    are read in blocks (``W`` may be a memory map).
    """
    n = W.shape[0]
    K = C.shape[0]
    has = secondary >= 0
    labels = np.concatenate([primary, secondary[has]]).astype(np.int64)
    entry_ids = np.concatenate([ids, ids[has]])
    order = np.lexsort((entry_ids, labels))
    pos = np.empty(order.size, dtype=np.int64)
    pos[order] = np.arange(order.size)
    sec_index = n + np.cumsum(has) - 1  # entry index of each row's SOAR copy
    E = labels.size
    codes = np.empty((E, encoding.doc_bytes(C.shape[1])), dtype=np.uint8)
    factors = np.empty((E, 4), dtype=np.float32)
    bar = progress_bar(show, n, "encoding")
    for r0 in range(0, n, BUILD_BATCH):
        r1 = min(n, r0 + BUILD_BATCH)
        Wb = np.ascontiguousarray(W[r0:r1], dtype=np.float32)
        hb = has[r0:r1]
        rows = np.concatenate([np.arange(r1 - r0), np.flatnonzero(hb)])
        lists = np.concatenate([primary[r0:r1], secondary[r0:r1][hb]])
        entries = np.concatenate([np.arange(r0, r1), sec_index[r0:r1][hb]])
        planes = encoding.doc_bits if encoding.layout == "planes" else 0
        c, f = S.encode_residuals(
            Wb, rows, C, lists, encoding.doc_bits, is_l2, DEFAULT_ITERS, planes=planes
        )
        dest = pos[entries]
        codes[dest] = c
        factors[dest] = f
        bar.update(r1 - r0)
    bar.close()
    start = np.zeros(K + 1, dtype=np.int64)
    np.cumsum(np.bincount(labels, minlength=K), out=start[1:])
    return codes, factors, entry_ids[order].astype(np.int32), start


def merge_postings(old, keep: np.ndarray, new, n_lists: int):
    """Entries ``keep`` of ``old`` plus all of ``new``, regrouped for ``n_lists`` lists.

    ``old`` and ``new`` are ``(codes, factors, ids, list_start)`` grouped by list; the result
    is grouped by list with ids ascending within each list (the order a fresh build gives).
    """
    codes_o, factors_o, ids_o, start_o = old
    codes_n, factors_n, ids_n, start_n = new
    old_labels = np.repeat(np.arange(start_o.shape[0] - 1), np.diff(start_o))[keep]
    new_labels = np.repeat(np.arange(start_n.shape[0] - 1), np.diff(start_n))
    labels = np.concatenate([old_labels, new_labels])
    ids = np.concatenate([np.asarray(ids_o)[keep], ids_n])
    order = np.lexsort((ids, labels))
    codes = np.concatenate([np.asarray(codes_o)[keep], codes_n])[order]
    factors = np.concatenate([np.asarray(factors_o)[keep], factors_n])[order]
    start = np.zeros(n_lists + 1, dtype=np.int64)
    np.cumsum(np.bincount(labels, minlength=n_lists), out=start[1:])
    return codes, factors, ids[order].astype(np.int32), start
