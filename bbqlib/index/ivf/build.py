"""Building IVF posting lists: clustering, SOAR, streamed encoding through the quantizer.

Posting entries are made block by block from a (possibly memory-mapped) matrix: every row
gets its primary entry and, with SOAR, a second entry, each coded against its own list's
centroid by the quantizer (:meth:`bbqlib.Quantizer.encode_pairs`); entries land directly at
their final position (grouped by list, ids ascending within a list), so nothing larger than
one block of rows plus the finished codes is held in RAM.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..._kernels import ivf as KI
from ...quantizers.data_checks import warn_about_data
from ...storage.atomic import temp_path
from .postings import Postings

__all__ = [
    "BUILD_BATCH",
    "progress_bar",
    "work_file",
    "encode_postings",
    "residual_sample",
    "cap_spills",
    "drop_weakest_spills",
    "split_oversized",
    "split_lists",
    "oversized_lists",
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
    path = temp_path(directory / "work.f32")  # removed at the next open if we are killed
    blocks = (
        source
        if not isinstance(source, np.ndarray)
        else (source[i : i + BUILD_BATCH] for i in range(0, source.shape[0], BUILD_BATCH))
    )
    rows = 0
    try:
        with open(path, "wb") as f:
            for block in blocks:
                out = np.ascontiguousarray(fn(np.ascontiguousarray(block)), dtype=np.float32)
                f.write(out.tobytes())
                rows += out.shape[0]
    except BaseException:  # e.g. ENOSPC: no partial working copy left behind
        path.unlink(missing_ok=True)
        raise
    W = np.memmap(path, dtype=np.float32, mode="r", shape=(rows, d)).view(np.ndarray)
    return W, path


def encode_postings(W, ids, C, primary, secondary, quantizer, show) -> Postings:
    """Posting entries of rows ``W`` (ids ``ids``): a primary and (if >= 0) a SOAR entry each.

    Every entry is coded against its list's centroid by ``quantizer.encode_pairs``. Returns
    the postings grouped by list, ids ascending within a list. Rows of ``W`` are read in
    blocks (``W`` may be a memory map).
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
    codes = np.empty((E, quantizer.encoding_.doc_bytes(C.shape[1])), dtype=np.uint8)
    factors = np.empty((E, quantizer.pair_factor_width), dtype=np.float32)
    bar = progress_bar(show, n, "encoding")
    for r0 in range(0, n, BUILD_BATCH):
        r1 = min(n, r0 + BUILD_BATCH)
        Wb = np.ascontiguousarray(W[r0:r1], dtype=np.float32)
        hb = has[r0:r1]
        rows = np.concatenate([np.arange(r1 - r0), np.flatnonzero(hb)])
        lists = np.concatenate([primary[r0:r1], secondary[r0:r1][hb]])
        entries = np.concatenate([np.arange(r0, r1), sec_index[r0:r1][hb]])
        c, f = quantizer.encode_pairs(Wb, rows, C, lists)
        dest = pos[entries]
        codes[dest] = c
        factors[dest] = f
        bar.update(r1 - r0)
    bar.close()
    start = np.zeros(K + 1, dtype=np.int64)
    np.cumsum(np.bincount(labels, minlength=K), out=start[1:])
    return Postings(codes, factors, entry_ids[order].astype(np.int32), start)


def residual_sample(W, C, primary, size: int = 65_536, seed: int = 0) -> np.ndarray:
    """Residuals ``W[i] - C[primary[i]]`` of a seeded sample of rows (float32)."""
    n = W.shape[0]
    rows = (
        np.arange(n)
        if n <= size
        else np.sort(np.random.default_rng(seed).choice(n, size, replace=False))
    )
    return np.asarray(W[rows], dtype=np.float32) - C[primary[rows]]


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
    return drop_weakest_spills(secondary, cost, room)


def drop_weakest_spills(secondary, cost, room) -> np.ndarray:
    """``secondary`` with each list ``j`` keeping its ``room[j]`` spills of lowest ``cost``.

    Ties go to the lower row. The ranking step of :func:`cap_spills`, for callers that
    computed the SOAR losses themselves (a distributed build, partition by partition).
    """
    rows = np.flatnonzero(secondary >= 0)
    lab = secondary[rows].astype(np.int64)
    counts = np.bincount(lab, minlength=len(room))
    order = np.lexsort((rows, cost[rows], lab))  # by list, then loss, then id
    starts = np.zeros(len(room) + 1, dtype=np.int64)
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
    from ..clustering import hierarchical_kmeans

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


def oversized_lists(primary_counts: np.ndarray, cluster_size: int) -> np.ndarray:
    """Lists (ascending) whose primary vectors exceed ``SPLIT_FACTOR · cluster_size``: the
    ones :func:`split_lists` re-clusters (after a build's clustering and after adds)."""
    return np.flatnonzero(np.asarray(primary_counts) > SPLIT_FACTOR * cluster_size)


def split_lists(C, big, members_W, members_list, cluster_size: int, seed: int):
    """Re-cluster the lists ``big`` of centroid table ``C`` from their members' rows.

    ``members_W``: the rows (float32, the quantizer's space) of every vector whose primary
    list is in ``big``, ``members_list`` their lists. Each list is clustered by
    :func:`split_oversized` at ``cluster_size``; the first new centroid takes the list's slot,
    the others are appended after ``C``'s last. Used by the single-process build, by
    ``add`` and by the distributed build (:mod:`bbqlib.distributed`), so that all of them
    make the same lists. Returns ``(C, new_list)``: a new table and each member's new list.
    """
    big = np.asarray(big, dtype=np.int64)
    local = np.searchsorted(big, np.asarray(members_list))
    limit = SPLIT_FACTOR * cluster_size
    C_local, sub, _ = split_oversized(members_W, C[big], local, limit, cluster_size, seed)
    K = C.shape[0]
    slots = np.concatenate([big, np.arange(K, K + C_local.shape[0] - big.size)])
    out = np.concatenate([C, C_local[big.size :]])
    out[big] = C_local[: big.size]
    return out, slots[sub].astype(np.int32)


# --------------------------------------------------------------------------- orchestration
#: Rows the quantizer is fitted on (its transform, centre and grids; a seeded sample).
FIT_SAMPLE = 65_536
#: A list is re-clustered when its primary vectors exceed this multiple of ``cluster_size``.
SPLIT_FACTOR = 2


def fit_sample(source: np.ndarray, seed: int) -> np.ndarray:
    """A seeded sample of at most :data:`FIT_SAMPLE` rows of ``source`` (in row order)."""
    n = source.shape[0]
    if n <= FIT_SAMPLE:
        return np.asarray(source)
    rows = np.sort(np.random.default_rng(seed).choice(n, FIT_SAMPLE, replace=False))
    return np.asarray(source[rows])


def cluster_and_encode(index, W, ids, show: bool):
    """First build: clusters, SOAR spills, residual fit, postings (sets them on ``index``)."""
    from ..clustering import SOAR_LAMBDA, centroid_neighbourhoods, hierarchical_kmeans
    from ..clustering.assign import settle_assignment
    from ..clustering.soar import soar_with_graph

    n = W.shape[0]
    C, primary = hierarchical_kmeans(W, index.cluster_size, seed=index.seed, progress=show)
    # The refinement can leave lists far above the target: same rule as for adds.
    C, primary, _ = split_oversized(
        W, C, primary, SPLIT_FACTOR * index.cluster_size, index.cluster_size, index.seed
    )
    secondary = np.full(n, -1, dtype=np.int32)
    if C.shape[0] > 1:
        # k-means' last pass assigns each row, then moves every centroid to its members'
        # mean: a few percent of the rows (3.8% at 1M rows of clustered data) end outside
        # their nearest list, and are coded against a farther centroid. One walk of the
        # centroid graph (the distributed build's workers use the same) settles them.
        neigh = centroid_neighbourhoods(C)
        primary = settle_assignment(W, C, primary, neigh)
        if index.soar:
            secondary = soar_with_graph(W, C, primary, SOAR_LAMBDA, neigh)
            room = np.bincount(primary, minlength=C.shape[0])  # spills <= primaries
            secondary = cap_spills(W, C, primary, secondary, room)
    index.quantizer.fit_residuals(residual_sample(W, C, primary, seed=index.seed))
    index._set_centroids(C)
    index._postings = encode_postings(W, ids, C, primary, secondary, index.quantizer, show)
    return np.stack([primary, secondary], axis=1).astype(np.int32)


def assign_new(index, W: np.ndarray, ids: np.ndarray) -> Postings:
    """Postings of new rows against the existing lists (nearest centroid + capped SOAR)."""
    from ..clustering import nearest_centroid, soar_assign

    C = index._C
    primary = nearest_centroid(W, C)
    if index.soar and C.shape[0] > 1:
        secondary = soar_assign(W, C, primary)
        before = index._primary_counts()
        after = before + np.bincount(primary, minlength=C.shape[0])
        room = np.maximum(after - (index._postings.sizes - before), 0)
        secondary = cap_spills(W, C, primary, secondary, room)
    else:
        secondary = np.full(W.shape[0], -1, dtype=np.int32)
    new = encode_postings(W, ids, C, primary, secondary, index.quantizer, False)
    return new, np.stack([primary, secondary], axis=1).astype(np.int32)


def split_large_lists(index) -> None:
    """Re-cluster every list whose primary vectors exceed ``2 · cluster_size``."""
    from ..clustering import soar_assign
    from .postings import merge_postings

    if not index.store_vectors:
        return  # nothing to re-cluster from; lists keep growing (documented)
    big = oversized_lists(index._primary_counts(), index.cluster_size)
    if big.size == 0:
        return
    q = index.quantizer
    assign = np.array(index._assign)
    members = np.flatnonzero(np.isin(assign[:, 0], big))
    Wm = q.transform_rows(index._vectors_rows(members))
    C, new_list = split_lists(index._C, big, Wm, assign[members, 0], index.cluster_size,
                              index.seed)  # fmt: skip
    if C.shape[0] == index._C.shape[0]:
        return  # nothing could be split
    assign[members, 0] = new_list
    affected = np.zeros(index._ntotal, dtype=bool)
    affected[members] = True
    affected[np.isin(assign[:, 1], big)] = True  # their spill list moved or split
    rows = np.flatnonzero(affected)
    W = q.transform_rows(index._vectors_rows(rows))
    primary = assign[rows, 0]
    if index.soar:
        secondary = soar_assign(W, C, primary)
        kept = assign[~affected, 1]
        room = np.bincount(assign[:, 0], minlength=C.shape[0]) - np.bincount(
            kept[kept >= 0], minlength=C.shape[0]
        )
        secondary = cap_spills(W, C, primary, secondary, np.maximum(room, 0))
    else:
        secondary = np.full(rows.size, -1, np.int32)
    assign[rows, 1] = secondary
    index._set_centroids(C)
    new = encode_postings(W, rows.astype(np.int64), C, primary, secondary, q, False)
    keep = ~affected[np.asarray(index._postings.ids)]
    index._postings = merge_postings(index._postings, keep, new, C.shape[0])
    index._assign = assign


def prepared_batches(index, source, show: bool, desc: str):
    """Validated, similarity-prepared float32 blocks of ``source``."""
    from ..._validation import check_vectors, prepare_for_similarity
    from ...formats.vectors import iter_vector_batches

    dim = source.shape[1]
    bar = progress_bar(show, source.shape[0], desc)
    for block in iter_vector_batches(source, BUILD_BATCH):
        block = check_vectors(block, "X", dim=dim)
        yield prepare_for_similarity(block, index.similarity_, "X")
        bar.update(block.shape[0])
    bar.close()


def build(index, source: np.ndarray, show: bool) -> None:
    """First ``add``: fit the quantizer on a sample, store the vectors, cluster and encode.

    Pass 1 validates and prepares (normalizes) the rows into the stored vectors; the working
    copy in the quantizer's space (a temporary file next to an index with a ``path``) is what
    is clustered and encoded.
    """
    from ...search.stored import to_stored
    from . import storage as ST

    n, d = source.shape
    q = index.quantizer
    kind = index.store_vectors
    q.fit(fit_sample(source, index.seed))
    warn_about_data(q, source, index="ivf", stacklevel=5)  # to the caller of IVFIndex.add
    batches = prepared_batches(index, source, show, "vectors")
    work = None
    if index.path is not None:
        index.path.mkdir(parents=True, exist_ok=True)
        if kind == "float32":
            seg = ST.write_segment(index.path, batches, d)
            segments = [seg]
            if q.transform_ is None:
                W = seg.array
            else:
                W, work = work_file(index.path, seg.array, q.transform_rows, d)
        elif kind:  # a float16 / int8 segment, then a float32 working copy (a second pass)
            segments = [ST.write_segment(index.path, batches, d, kind=kind)]
            again = prepared_batches(index, source, False, "vectors")
            W, work = work_file(index.path, again, q.transform_rows, d)
        else:
            W, work = work_file(index.path, batches, q.transform_rows, d)
            segments = []
    else:
        stored = np.empty((n, d), dtype=np.float32)
        start = 0
        for block in batches:
            stored[start : start + block.shape[0]] = block
            start += block.shape[0]
        W = q.transform_rows(stored)
        segments = [ST.Segment(to_stored(stored, kind))] if kind else []
    try:
        index._ntotal = n
        index._segments = segments
        index._set_deleted(np.zeros(n, dtype=bool))
        index._assign = cluster_and_encode(index, W, np.arange(n, dtype=np.int64), show)
    finally:
        if work is not None:
            del W
            work.unlink(missing_ok=True)


def add_more(index, source: np.ndarray, show: bool) -> None:
    """Later ``add``: new rows join the nearest lists; oversized lists are re-clustered."""
    from . import storage as ST
    from .postings import merge_postings

    n0 = index._ntotal
    blocks = list(prepared_batches(index, source, show, "vectors"))
    prepared = blocks[0] if len(blocks) == 1 else np.concatenate(blocks)
    del blocks
    n = prepared.shape[0]
    W = index.quantizer.transform_rows(prepared)
    new, assign = assign_new(index, W, np.arange(n0, n0 + n, dtype=np.int64))
    keep = np.ones(len(index._postings), dtype=bool)
    index._postings = merge_postings(index._postings, keep, new, index._C.shape[0])
    index._assign = np.concatenate([np.asarray(index._assign), assign])
    index._set_deleted(np.concatenate([index._deleted, np.zeros(n, dtype=bool)]))
    if index.store_vectors:
        from ...search.stored import to_stored

        index._segments.append(ST.Segment(to_stored(prepared, index.store_vectors)))
    index._ntotal = n0 + n
    split_large_lists(index)
