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

from .._kernels import ivf as KI
from ..encoding import Encoding
from ..quantizers.osq import DEFAULT_ITERS
from . import ivf_search as S

__all__ = [
    "BUILD_BATCH",
    "progress_bar",
    "work_file",
    "encode_postings",
    "merge_postings",
    "cap_spills",
    "split_oversized",
]

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


def cap_spills(W, C, primary, secondary, room, *, lam: float = 1.0) -> np.ndarray:
    """Drop the weakest SOAR spills of lists that would receive more than ``room[j]``.

    Each list ``j`` keeps at most ``room[j]`` spilled entries, those with the lowest SOAR
    loss; the other vectors keep only their primary entry (``secondary = -1``). On data
    with "hub" centroids (near many vectors, e.g. small-norm means of unit vectors) plain
    SOAR sends a large share of all spills to a few lists, which then dominate every visit
    budget; a posting cap in the manner of SPANN (an Elasticsearch variant does the same,
    spec §6.3) bounds them. ``W`` is read in blocks. Returns a new ``secondary``.
    """
    rows = np.flatnonzero(secondary >= 0)
    if rows.size == 0:
        return secondary
    K = C.shape[0]
    lab = secondary[rows].astype(np.int64)
    counts = np.bincount(lab, minlength=K)
    if np.all(counts <= room):
        return secondary
    cost = np.empty(W.shape[0], dtype=np.float64)
    for r0 in range(0, W.shape[0], BUILD_BATCH):
        r1 = min(W.shape[0], r0 + BUILD_BATCH)
        Wb = np.ascontiguousarray(W[r0:r1], dtype=np.float32)
        KI.spill_costs(
            Wb,
            C,
            np.ascontiguousarray(primary[r0:r1], dtype=np.int64),
            np.ascontiguousarray(secondary[r0:r1], dtype=np.int64),
            float(lam),
            cost[r0:r1],
        )
    order = np.lexsort((rows, cost[rows], lab))  # by list, then loss, then id
    starts = np.zeros(K + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    rank = np.empty(rows.size, dtype=np.int64)
    rank[order] = np.arange(rows.size) - starts[lab[order]]
    out = secondary.copy()
    out[rows[rank >= room[lab]]] = -1
    return out


def split_oversized(W, C, primary, limit: int, target: int, seed: int):
    """Re-cluster every list with more than ``limit`` primary vectors.

    The list's members (rows of ``W``, gathered one list at a time) are clustered with
    :func:`~bbqlib.index.clustering.hierarchical_kmeans` at ``target``; the first new
    centroid takes the list's slot, the others are appended. Returns ``(C, primary,
    changed)`` with ``changed`` the list ids whose centroid moved or is new.
    """
    from .clustering import hierarchical_kmeans

    primary = np.array(primary, dtype=np.int32)
    big = np.flatnonzero(np.bincount(primary, minlength=C.shape[0]) > limit)
    changed = []
    for j in big:  # one k-means per oversized list (a handful at most)
        members = np.flatnonzero(primary == j)
        Cs, sub = hierarchical_kmeans(np.asarray(W[members], dtype=np.float32), target, seed=seed)
        if Cs.shape[0] == 1:
            continue  # identical vectors: cannot split
        slots = np.concatenate([[j], np.arange(C.shape[0], C.shape[0] + Cs.shape[0] - 1)])
        C = np.concatenate([C, Cs[1:]])
        C[j] = Cs[0]
        primary[members] = slots[sub]
        changed.extend(slots.tolist())
    return C, primary, np.asarray(changed, dtype=np.int64)
