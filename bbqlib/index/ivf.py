"""IVFIndex: an inverted-file index over BBQ codes in the spirit of Elasticsearch's DiskBBQ.

Build: hierarchical k-means to ``cluster_size`` vectors per list, SOAR spill of every vector
to a second list, each copy OSQ-encoded against its own list's centroid (spec §6.2-6.6).
Search: rank lists by 7-bit centroid codes, visit them in order until the budget is spent,
re-quantize the query per list, score all visited lists of a batch in one numba kernel,
de-duplicate SOAR copies, rerank on the float vectors (§4, §6.7). Storage: a directory of
checksummed, memory-mapped files written atomically (:mod:`bbqlib.index.ivf_storage`,
``docs/ivf-format.md``).
"""

from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from .._kernels import ivf as KI
from .._kernels import scoring as KS
from .._kernels.policy import cap_threads, thread_scope, threads_for
from .._validation import NotFittedError, check_k, check_vectors, prepare_for_similarity
from ..encoding import Encoding, encoding_from_wire, get_encoding, padded_dim
from ..io.container import CorruptFileError
from ..packing import LUT_LANES, lut_block_starts, lut_list_blocks
from ..scoring import rerank_exact
from ..similarity import Similarity, resolve_similarity
from . import ivf_build as B
from . import ivf_search as S
from . import ivf_storage as ST
from .rerank import candidate_count, check_oversample, finish

__all__ = ["IVFIndex", "IVF_BITS", "CLUSTER_SIZE_RANGE"]

#: Doc bit widths of the IVF index (spec §4: 1, 2, 4, and 7 since ES PR #143611).
IVF_BITS = (1, 2, 4, 7)
#: Allowed ``cluster_size`` (spec §6.1).
CLUSTER_SIZE_RANGE = (64, 65_536)
#: A list is re-clustered when its primary vectors exceed this multiple of ``cluster_size``.
SPLIT_FACTOR = 2
#: (query, list) pairs per kernel call: bounds the re-quantized query buffers.
PAIR_BATCH = 16_384
#: Entries to visit per thread in a search (about 1 ms of work: ~25 ns per entry with the
#: ranking and rerank around it); fewer run every kernel of the search on one thread.
ENTRIES_PER_THREAD = 40_000
#: Ids are stored as int32 in the posting lists.
MAX_VECTORS = 2**31 - 1
#: Builds at least this large show a progress bar unless ``progress=False``.
AUTO_PROGRESS_ROWS = 1_000_000


def _check_bits(bits) -> int:
    if isinstance(bits, bool) or bits not in IVF_BITS:
        raise ValueError(f"bits must be one of {IVF_BITS}, got {bits!r}; use 1 (default) or 2")
    return int(bits)


def _check_cluster_size(value) -> int:
    lo, hi = CLUSTER_SIZE_RANGE
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= value <= hi:
        raise ValueError(
            f"cluster_size must be an integer in [{lo}, {hi}], got {value!r}; 384 is the default"
        )
    return int(value)


def _check_visit_percentage(value) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        raise TypeError(f"visit_percentage must be a number in (0, 100] or None, got {value!r}")
    value = float(value)
    if not (0.0 < value <= 100.0):
        raise ValueError(
            f"visit_percentage must be in (0, 100], got {value}; None picks the dynamic default"
        )
    return value


class IVFIndex:
    """Inverted-file index over BBQ codes with SOAR spilling (Elasticsearch DiskBBQ style).

    Parameters
    ----------
    bits : {1, 2, 4, 7}, default 1
        Bits per dimension of the doc codes.
    similarity : str, default "cosine"
        ``cosine`` (normalizes), ``dot_product`` (unit vectors), ``euclidean``,
        ``max_inner_product``, or an alias.
    cluster_size : int, default 384
        Target vectors per list (primary assignments), in [64, 65536].
    query_bits : {"auto", 4, 7, 8}, default "auto"
        Query bits (4 for 1/2/4-bit docs, 7 for 7-bit). Float queries are not supported.
    precondition : None, True, "block", "dense", "hadamard" or a Transform
        Random orthogonal transform applied before clustering and quantization (ES 9.4
        ``precondition``); the stored float vectors stay untransformed.
    seed : int, default 42
        Seed of the clustering samples and of the transform.
    path : str or Path, optional
        Directory the index lives in. The first :meth:`add` streams the float vectors there,
        every ``add`` / ``delete`` saves a new generation there, and codes, corrections and
        vectors are then served memory-mapped (only centroids stay in RAM).
    soar : bool, default True
        Spill every vector to its best secondary list (SOAR, lambda = 1).
    store_vectors : bool, default True
        Keep the float vectors for the exact rerank (and for re-clustering on growth).

    Notes
    -----
    Ids are ``0 .. ntotal - 1`` in insertion order (deleted ids are not reused). Search results
    are ``(scores, ids)`` like :class:`~bbqlib.FlatIndex`: float32 Lucene scores (higher is
    better), int64 ids, padded with ``-inf`` / ``-1``.

    The visit budget (spec §6.7) counts posting entries: ``visit_percentage = p`` visits lists
    in centroid order until ``2 · p / 100 · N`` entries were seen (the factor 2 pays for SOAR
    copies); ``None`` uses ``p / 100 = round(log10(N)² · k') / N`` with ``k'`` the rerank depth.

    Where bbqlib departs from Elasticsearch, and why:

    * lists are ranked by the estimated distance from the query to their centroid (inner
      product only for ``max_inner_product``): the lists are Voronoi cells of squared-L2
      k-means, and on unit vectors ranking by inner product favours tight clusters over the
      cell that holds the query (debian-minilm-384, 1 bit: recall 0.835 vs 0.783 at 1 %);
    * with parents (more than 256 lists) the children come from a best-first walk bounded by
      each parent's radius, so they are exactly the dense ranking's best lists;
    * a list takes at most as many SOAR spills as it has primary vectors (the cheapest by
      SOAR loss): plain SOAR sends a large share of all spills to a few "hub" lists whose
      small-norm centroids are near everything, and those lists then eat every budget
      (4x fewer entries scored at equal recall on the clustered synthetic data);
    * lists above ``2 · cluster_size`` primaries are split right after the first clustering
      too (the neighbourhood refinement can grow lists well past the split threshold).

    Examples
    --------
    >>> import numpy as np, bbqlib
    >>> X = np.random.default_rng(0).normal(size=(5000, 32)).astype(np.float32)
    >>> index = bbqlib.IVFIndex(bits=1, similarity="euclidean", cluster_size=128)
    >>> index.add(X)
    >>> scores, ids = index.search(X[:2], k=3, visit_percentage=20)
    >>> ids[:, 0].tolist()
    [0, 1]
    """

    def __init__(
        self,
        bits: int = 1,
        similarity: str = "cosine",
        cluster_size: int = 384,
        *,
        query_bits="auto",
        precondition=None,
        seed: int = 42,
        path=None,
        soar: bool = True,
        store_vectors: bool = True,
    ):
        self.bits = bits
        self.similarity = similarity
        self.cluster_size = cluster_size
        self.query_bits = query_bits
        self.precondition = precondition
        self.seed = seed
        self.path = None if path is None else Path(path)
        self.soar = bool(soar)
        self.store_vectors = bool(store_vectors)
        self._fitted = False
        self.last_search_stats: dict = {}
        # Check everything now: a wrong parameter should not wait for a long add().
        self._encoding = self._resolve_encoding()
        self._similarity = resolve_similarity(similarity)
        _check_cluster_size(cluster_size)
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed!r}")

    def _resolve_encoding(self) -> Encoding:
        bits = _check_bits(self.bits)
        if self.query_bits is None:
            raise ValueError(
                "query_bits=None (float queries) is not supported by IVFIndex; use 'auto'"
            )
        return get_encoding(bits, self.query_bits)

    # ------------------------------------------------------------------ properties
    @property
    def is_fitted(self) -> bool:
        return self._fitted

    def _check_fitted(self) -> None:
        if not self._fitted:
            raise NotFittedError("this IVFIndex is empty; call add(X) first")

    @property
    def ntotal(self) -> int:
        """Ids issued so far (deleted ones included)."""
        return self._ntotal if self._fitted else 0

    @property
    def n_deleted(self) -> int:
        return self._n_deleted if self._fitted else 0

    def __len__(self) -> int:
        """Live (not deleted) vectors."""
        return self.ntotal - self.n_deleted

    @property
    def n_lists(self) -> int:
        return self._C.shape[0] if self._fitted else 0

    @property
    def centroids_(self) -> np.ndarray:
        """List centroids (float32 [K, d], in the preconditioned space if any)."""
        self._check_fitted()
        return self._C

    @property
    def list_sizes(self) -> np.ndarray:
        """Posting entries per list (int64 [K]; SOAR copies included)."""
        self._check_fitted()
        return np.diff(self._list_start)

    @property
    def encoding_(self) -> Encoding:
        return self._encoding

    @property
    def bytes_per_entry(self) -> int:
        """Bytes of one posting entry: packed code + 16 bytes of factors + a 4-byte id."""
        self._check_fitted()
        return self._encoding.doc_bytes(self.dim_) + 16 + 4

    # ------------------------------------------------------------------ building
    def add(self, X, *, progress: bool | None = None) -> None:
        """Add vectors; their ids continue from :attr:`ntotal`.

        Parameters
        ----------
        X : array_like [n, d], np.memmap, or a path to ``.npy`` / ``.fvecs`` / ``.fbin``
            Read in blocks of 65,536 rows, so a memory-mapped file larger than RAM works
            (give the index a ``path`` so that the float vectors go to disk too).
        progress : bool, optional
            tqdm progress bars; default: on for builds of at least 1,000,000 vectors.

        Notes
        -----
        The first call clusters (hierarchical k-means, SOAR). Later calls assign each vector to
        its nearest centroid and its SOAR list; a list whose primary vectors then exceed
        ``2 · cluster_size`` is re-clustered into several lists (needs ``store_vectors``).
        """
        from ..io.vectors import read_vectors

        source = read_vectors(X, mmap=True) if isinstance(X, (str, os.PathLike)) else X
        if isinstance(source, np.memmap):
            source = source.view(np.ndarray)
        elif not isinstance(source, np.ndarray):
            source = np.asarray(source)
        if source.ndim != 2:
            raise ValueError(f"X must be 2-D (n, d), got shape {source.shape}")
        n = source.shape[0]
        if n == 0:
            raise ValueError("X is empty (0 rows); pass at least one vector")
        if self.ntotal + n > MAX_VECTORS:
            raise ValueError(f"an IVFIndex holds at most {MAX_VECTORS} vectors (int32 ids)")
        show = (n >= AUTO_PROGRESS_ROWS) if progress is None else bool(progress)
        if not self._fitted:
            self._build(source, show)
        else:
            check_vectors(source[:1], "X", dim=self.dim_)
            self._add_more(source, show)
        if self.path is not None:
            self.save(self.path)

    def _prepared_batches(self, source, show: bool, desc: str):
        """Validated, similarity-prepared float32 blocks of ``source``."""
        from ..io.vectors import iter_vector_batches

        dim = source.shape[1]
        bar = B.progress_bar(show, source.shape[0], desc)
        for block in iter_vector_batches(source, B.BUILD_BATCH):
            block = check_vectors(block, "X", dim=dim)
            yield prepare_for_similarity(block, self._similarity, "X")
            bar.update(block.shape[0])
        bar.close()

    def _transformed(self, block: np.ndarray) -> np.ndarray:
        return block if self.transform_ is None else self.transform_.transform(block)

    def _build(self, source: np.ndarray, show: bool) -> None:
        from ..transforms import make_transform
        from .clustering import hierarchical_kmeans, soar_assign

        n, d = source.shape
        if d > self._encoding.max_dim:
            raise ValueError(
                f"{self._encoding.doc_bits}-bit codes support at most {self._encoding.max_dim} "
                f"dimensions, got {d}; use bits=7"
            )
        self.dim_ = int(d)
        self.similarity_ = self._similarity
        self.transform_ = (
            None
            if self.precondition is None or self.precondition is False
            else make_transform(self.precondition, d, seed=self.seed)
        )
        # Pass 1: validate + prepare (normalize) into the stored vectors; working copy in the
        # preconditioned space for clustering and encoding.
        batches = self._prepared_batches(source, show, "vectors")
        work_file = None
        if self.path is not None:
            self.path.mkdir(parents=True, exist_ok=True)
            if self.store_vectors:
                seg = ST.write_segment(self.path, batches, d)
                segments = [seg]
                stored = seg.array
                if self.transform_ is None:
                    W = stored
                else:
                    W, work_file = B.work_file(self.path, stored, self._transformed, d)
            else:
                W, work_file = B.work_file(self.path, batches, self._transformed, d)
                segments = []
        else:
            stored = np.empty((n, d), dtype=np.float32)
            start = 0
            for block in batches:
                stored[start : start + block.shape[0]] = block
                start += block.shape[0]
            W = stored if self.transform_ is None else self.transform_.transform(stored)
            segments = [ST.Segment(stored)] if self.store_vectors else []
        try:
            C, primary = hierarchical_kmeans(W, self.cluster_size, seed=self.seed, progress=show)
            # The refinement can leave lists far above the target: same rule as for adds.
            C, primary, _ = B.split_oversized(
                W, C, primary, SPLIT_FACTOR * self.cluster_size, self.cluster_size, self.seed
            )
            if self.soar and C.shape[0] > 1:
                secondary = soar_assign(W, C, primary)
                room = np.bincount(primary, minlength=C.shape[0])  # spills <= primaries
                secondary = B.cap_spills(W, C, primary, secondary, room)
            else:
                secondary = np.full(n, -1, dtype=np.int32)
            self._ntotal = n
            self._segments = segments
            self._set_deleted(np.zeros(n, dtype=bool))
            self._set_centroids(C)
            codes, factors, ids, start = B.encode_postings(
                W,
                np.arange(n, dtype=np.int64),
                C,
                primary,
                secondary,
                self._encoding,
                self._similarity.is_distance,
                show,
            )
            self._set_postings(codes, factors, ids, start)
            self._assign = np.stack([primary, secondary], axis=1).astype(np.int32)
            self._fitted = True
        finally:
            if work_file is not None:
                del W
                work_file.unlink(missing_ok=True)

    def _set_centroids(self, C: np.ndarray) -> None:
        from .clustering import parent_level

        self._C = np.ascontiguousarray(C, dtype=np.float32)
        parents = None
        if self._C.shape[0] > S.PARENT_THRESHOLD:
            parents = parent_level(
                self._C, centroids_per_parent=S.CENTROIDS_PER_PARENT, seed=self.seed
            )
        self._table = S.centroid_table(self._C, self._similarity.is_distance, parents=parents)
        self._list_cc = self._table.cc

    def _set_deleted(self, deleted: np.ndarray) -> None:
        self._deleted = deleted
        self._n_deleted = int(deleted.sum())
        self._live_cache = None
        self._live_per_list = None

    def _set_postings(
        self,
        codes,
        factors,
        ids,
        list_start,
        *,
        crc=None,
        source=None,
        lut=None,
        lut_crc=None,
    ) -> None:
        self._codes = codes
        self._factors = factors
        self._ids = ids
        self._list_start = np.ascontiguousarray(list_start, dtype=np.int64)
        # The lookup-table scan's copy of the codes: mapped from format-2 files, else made
        # from the codes on first use (``_lut_layout``).
        self._lut = lut  # (blocks, block_starts)
        self._list_crc = crc
        self._list_lut_crc = lut_crc  # format 2: over each list's blocks, factors and ids
        self._postings_source = source  # the posting file these arrays map, if unchanged
        k = self._list_start.shape[0] - 1
        self._verified = np.full(k, crc is None, dtype=bool)
        self._verified_blocks = np.full(k, lut_crc is None, dtype=bool)
        self._entry_list = None
        self._live_cache = None
        self._live_per_list = None

    def _add_more(self, source: np.ndarray, show: bool) -> None:
        from .clustering import nearest_centroid, soar_assign

        n0 = self._ntotal
        blocks = list(self._prepared_batches(source, show, "vectors"))
        prepared = blocks[0] if len(blocks) == 1 else np.concatenate(blocks)
        del blocks
        W = self._transformed(prepared)
        n = prepared.shape[0]
        primary = nearest_centroid(W, self._C)
        if self.soar and self._C.shape[0] > 1:
            secondary = soar_assign(W, self._C, primary)
            before = self._primary_counts()
            after = before + np.bincount(primary, minlength=self._C.shape[0])
            room = np.maximum(after - (self.list_sizes - before), 0)
            secondary = B.cap_spills(W, self._C, primary, secondary, room)
        else:
            secondary = np.full(n, -1, dtype=np.int32)
        ids = np.arange(n0, n0 + n, dtype=np.int64)
        new = B.encode_postings(
            W,
            ids,
            self._C,
            primary,
            secondary,
            self._encoding,
            self._similarity.is_distance,
            False,
        )
        self._merge_postings(np.ones(self._ids.shape[0], dtype=bool), new)
        self._assign = np.concatenate(
            [np.asarray(self._assign), np.stack([primary, secondary], axis=1).astype(np.int32)]
        )
        self._set_deleted(np.concatenate([self._deleted, np.zeros(n, dtype=bool)]))
        if self.store_vectors:
            self._segments.append(ST.Segment(prepared))
        self._ntotal = n0 + n
        self._split_large_lists()

    def _merge_postings(self, keep: np.ndarray, new) -> None:
        """Keep the entries ``keep`` and insert ``new`` (grouped by list, ids ascending)."""
        old = (self._codes, self._factors, self._ids, self._list_start)
        self._set_postings(*B.merge_postings(old, keep, new, self._C.shape[0]))

    def _primary_counts(self) -> np.ndarray:
        return np.bincount(np.asarray(self._assign)[:, 0], minlength=self._C.shape[0])

    def _split_large_lists(self) -> None:
        """Re-cluster every list whose primary vectors exceed ``2 · cluster_size``."""
        from .clustering import soar_assign

        if not self.store_vectors:
            return  # nothing to re-cluster from; lists keep growing (documented)
        counts = self._primary_counts()
        limit = SPLIT_FACTOR * self.cluster_size
        if counts.max() <= limit:
            return
        assign = np.array(self._assign)
        big = np.flatnonzero(counts > limit)
        members = np.flatnonzero(np.isin(assign[:, 0], big))
        Wm = self._transformed(self._vectors_rows(members))
        local = np.searchsorted(big, assign[members, 0])  # list j -> row of a small table
        C_local, sub, _ = B.split_oversized(
            Wm, self._C[big], local, limit, self.cluster_size, self.seed
        )
        if C_local.shape[0] == big.size:
            return  # nothing could be split
        slots = np.concatenate(
            [big, np.arange(self._C.shape[0], self._C.shape[0] + C_local.shape[0] - big.size)]
        )
        C = np.concatenate([self._C, C_local[big.size :]])
        C[big] = C_local[: big.size]
        assign[members, 0] = slots[sub]
        affected = np.zeros(self._ntotal, dtype=bool)
        affected[members] = True
        affected[np.isin(assign[:, 1], big)] = True  # their spill list moved or split
        rows = np.flatnonzero(affected)
        W = self._transformed(self._vectors_rows(rows))
        primary = assign[rows, 0]
        if self.soar:
            secondary = soar_assign(W, C, primary)
            kept = assign[~affected, 1]
            room = np.bincount(assign[:, 0], minlength=C.shape[0]) - np.bincount(
                kept[kept >= 0], minlength=C.shape[0]
            )
            secondary = B.cap_spills(W, C, primary, secondary, np.maximum(room, 0))
        else:
            secondary = np.full(rows.size, -1, np.int32)
        assign[rows, 1] = secondary
        self._set_centroids(C)
        new = B.encode_postings(
            W,
            rows.astype(np.int64),
            C,
            primary,
            secondary,
            self._encoding,
            self._similarity.is_distance,
            False,
        )
        keep = ~affected[np.asarray(self._ids)]
        self._merge_postings(keep, new)
        self._assign = assign

    def _vectors_rows(self, rows: np.ndarray) -> np.ndarray:
        """Stored float vectors of ascending ``rows`` (float32 copy)."""
        out = np.empty((rows.size, self.dim_), dtype=np.float32)
        start = 0
        for seg in self._segments:
            stop = start + len(seg)
            lo, hi = np.searchsorted(rows, [start, stop])
            out[lo:hi] = seg.array[rows[lo:hi] - start]
            start = stop
        return out

    # ------------------------------------------------------------------ deleting
    def delete(self, ids) -> None:
        """Delete vectors by id (tombstones: they are skipped by every later search).

        Raises ``ValueError`` for ids that were never issued or are already deleted.
        """
        self._check_fitted()
        ids = np.asarray(ids)
        if ids.ndim == 0:
            ids = ids[None]
        if ids.size == 0:
            return
        if ids.dtype.kind not in "iu":
            raise TypeError(f"ids must be integers, got dtype {ids.dtype}")
        unknown = ids[(ids < 0) | (ids >= self._ntotal)]
        if unknown.size:
            raise ValueError(
                f"cannot delete unknown ids {unknown[:5].tolist()}"
                f"{' ...' if unknown.size > 5 else ''}: ids are in [0, {self._ntotal - 1}]"
            )
        gone = ids[self._deleted[ids]]
        if gone.size:
            raise ValueError(
                f"ids {gone[:5].tolist()}{' ...' if gone.size > 5 else ''} were already deleted"
            )
        deleted = self._deleted.copy()
        deleted[ids] = True
        self._set_deleted(deleted)
        if self.path is not None:
            self.save(self.path)

    # ------------------------------------------------------------------ searching
    @thread_scope
    def search(
        self,
        queries,
        k: int = 10,
        *,
        visit_percentage: float | None = None,
        oversample: float | None = None,
        rerank: bool = True,
        filter=None,
    ):
        """Approximate top-``k``: ``(scores float32 [nq, k], ids int64 [nq, k])``.

        Parameters
        ----------
        queries : float array [nq, d] or [d]
        k : int
        visit_percentage : float in (0, 100], optional
            Share of the vectors to visit (SOAR copies counted as half); ``None``: the
            dynamic default ``round(log10(N)² · k') / N``.
        oversample : float >= 1, optional
            Rerank depth ``k' = min(ceil(k · oversample), 10,000)``; default from the encoding
            (3.0 at 1 bit, 1.5 at 2 bits, 1.0 above).
        rerank : bool
            Rescore the ``k'`` candidates on the float vectors (exact scores).
        filter : boolean mask [ntotal] or array of ids, optional
            Only these ids are returned; lists are visited until enough allowed entries
            were scored.
        """
        self._check_fitted()
        k = check_k(k)
        vp = _check_visit_percentage(visit_percentage)
        if rerank not in (True, False):
            raise ValueError(f"rerank must be True or False, got {rerank!r}")
        if rerank and not self.store_vectors:
            raise ValueError(
                "this index keeps no float vectors (store_vectors=False); search with rerank=False"
            )
        Q = check_vectors(queries, "queries", dim=self.dim_, allow_1d=True)
        Qp = prepare_for_similarity(Q, self._similarity, "queries")
        Qt = np.ascontiguousarray(self._transformed(Qp), dtype=np.float32)
        nq = Qp.shape[0]
        oversample = check_oversample(oversample, self._encoding.default_oversample)
        n_live = len(self)
        depth = candidate_count(k, oversample, n_live) if rerank else min(k, n_live)
        if depth == 0:
            empty = np.empty((nq, 0))
            return finish(empty, empty.astype(np.int64), k, self._similarity)
        ratio = vp / 100.0 if vp is not None else S.dynamic_visit_ratio(self._ntotal, depth)
        heap = 2 * depth
        need = max(2.0 * ratio * self._ntotal, heap)
        cap_threads(threads_for(nq * need, ENTRIES_PER_THREAD))  # small searches: one thread
        allowed = self._allowed(filter)
        sizes = np.diff(self._list_start)
        if allowed is None:
            lists_needed = math.ceil(need / max(1.0, sizes.mean()))
            K = self._C.shape[0]
            want = max(2 * lists_needed + 8, 32)
            if self._table.has_parents:
                # ES's candidate buffer: visit ratio x (K / 2P) x K children ("centroid
                # oversampling" of about centroids-per-parent / 2).
                n_parents = self._table.parent_codes.shape[0]
                want = max(want, math.ceil(ratio * K / (2 * n_parents) * K))
            ranked = self._rank(Qt, want)
            plan = S.plan_visits(ranked, sizes, need)
            if not plan[3].all() and ranked.shape[1] < K:
                ranked = _pad_cols(ranked, K)
                redo = ~plan[3]
                ranked[redo] = self._rank(Qt[redo], K, dense=True)
                plan = S.plan_visits(ranked, sizes, need)
        else:
            if filter is None:  # tombstones only: per-list live counts change on delete/add
                if self._live_per_list is None:
                    self._live_per_list = self._allowed_per_list(allowed)
                allowed_sizes = self._live_per_list
            else:
                allowed_sizes = self._allowed_per_list(allowed)
            n_allowed = int(allowed_sizes.sum())
            need_allowed = max(heap, need * n_allowed / max(1, self._ids.shape[0]))
            ranked = self._rank(Qt, 0, dense=True)
            plan = S.plan_visits(ranked, sizes, need, allowed_sizes, need_allowed)
        pair_list, pair_query, pair_start, _ = plan
        self._check_lists(pair_list)
        keys, ids = self._scan(Qt, pair_list, pair_query, pair_start, heap, allowed)
        keys, ids = S.dedup_topk(keys, ids, depth)
        entries = int(sizes[pair_list].sum())
        self.last_search_stats = {
            "lists_visited": pair_list.size / nq,
            "entries_scored": entries / nq,
            "visited_fraction": entries / nq / max(1, 2 * self._ntotal),
            "depth": depth,
        }
        if rerank:
            raw, ids = self._rerank(Qp, ids, k)
        else:
            raw = -keys if self._similarity.is_distance else keys
        return finish(raw, ids, k, self._similarity)

    def _rank(self, Qt: np.ndarray, want: int, *, dense: bool = False) -> np.ndarray:
        """Lists by centroid distance (inner product for max_inner_product)."""
        return S.rank_lists(
            Qt,
            self._table,
            self._similarity.is_distance,
            want,
            dense=dense,
            by_distance=self._similarity is not Similarity.MAX_INNER_PRODUCT,
        )

    def _allowed(self, filter) -> np.ndarray | None:
        """uint8 mask over ids (filter and not deleted), or None when everything is allowed."""
        live = None
        if self._n_deleted:
            if self._live_cache is None:
                self._live_cache = (~self._deleted).view(np.uint8)
            live = self._live_cache
        if filter is None:
            return live
        n = self._ntotal
        f = np.asarray(filter)
        if f.dtype == bool:
            if f.shape != (n,):
                raise ValueError(
                    f"a boolean filter must have shape ({n},) (one flag per id), got {f.shape}"
                )
            mask = f.view(np.uint8)
        else:
            if not np.issubdtype(f.dtype, np.integer):
                raise TypeError("filter must be a boolean mask or an array of integer ids")
            f = f.reshape(-1)
            if f.size and (f.min() < 0 or f.max() >= n):
                raise ValueError(
                    f"filter ids must be in [0, {n}), got range [{f.min()}, {f.max()}]"
                )
            mask = np.zeros(n, dtype=np.uint8)
            mask[f] = 1
        if live is not None:
            mask = mask & live
        return np.ascontiguousarray(mask, dtype=np.uint8)

    def _allowed_per_list(self, allowed: np.ndarray) -> np.ndarray:
        if self._entry_list is None:
            self._entry_list = np.repeat(
                np.arange(self._C.shape[0], dtype=np.int32), np.diff(self._list_start)
            )
        weights = allowed[np.asarray(self._ids)].astype(np.float64)
        return np.bincount(self._entry_list, weights=weights, minlength=self._C.shape[0])

    def _postings(self) -> dict:
        """The posting arrays as stored: codes, factors, ids (and ``lut_codes`` if mapped)."""
        out = {"codes": self._codes, "factors": self._factors, "ids": self._ids}
        if self._lut is not None and self._postings_source is not None:
            out["lut_codes"] = self._lut[0]
        return out

    def _postings_to_store(self) -> dict:
        """Posting arrays of a new posting file (format 2: plane codes also as blocks)."""
        out = {
            "codes": np.asarray(self._codes),
            "factors": np.asarray(self._factors),
            "ids": np.asarray(self._ids),
        }
        if self._encoding.layout == "planes":
            out["lut_codes"] = np.asarray(self._lut_layout()[0])
        return out

    def _lut_layout(self) -> tuple[np.ndarray, np.ndarray]:
        """``(blocks, block_starts)``: each list's codes in blocks of 32 (made once, kept)."""
        if self._lut is None:
            self._lut = lut_list_blocks(np.asarray(self._codes), self._list_start)
        return self._lut

    def _uses_lut(self) -> bool:
        from .._kernels.lut import avx2_available

        enc = self._encoding
        return enc.layout == "planes" and enc.query_planes <= 4 and avx2_available()

    def _check_lists(self, pair_list: np.ndarray) -> None:
        """CRC32 of every list read for the first time (disk-backed indexes): of the data the
        scan reads, the mapped lookup-table blocks or the codes."""
        if self._list_crc is None:
            return
        blocks = self._list_lut_crc is not None and self._uses_lut()
        crcs, verified = (
            (self._list_lut_crc, self._verified_blocks)
            if blocks
            else (self._list_crc, self._verified)
        )
        todo = np.unique(pair_list[~verified[pair_list]])
        if todo.size == 0:
            return
        bad = ST.bad_lists(self._postings(), self._list_start, crcs, todo, blocks=blocks)
        if bad.size:
            raise CorruptFileError(
                f"posting list {int(bad[0])} of the IVF index at {self._postings_source} fails "
                f"its CRC32 ({bad.size} bad list(s) among those read): the file is corrupted; "
                "rebuild the index or restore the file"
            )
        verified[todo] = True

    def _scan(self, Qt, pair_list, pair_query, pair_start, heap, allowed):
        nq = Qt.shape[0]
        keys = np.full((nq, heap), -np.inf)
        ids = np.full((nq, heap), KS.EMPTY_ID, dtype=np.int64)
        mask = np.empty(0, np.uint8) if allowed is None else allowed
        enc = self._encoding
        is_l2 = self._similarity.is_distance
        # Query chunks of about PAIR_BATCH pairs bound the re-quantized query buffers.
        cuts = np.searchsorted(pair_start, np.arange(PAIR_BATCH, pair_start[-1], PAIR_BATCH))
        bounds = np.unique(np.concatenate([[0], cuts, [nq]]))
        for q0, q1 in zip(bounds[:-1], bounds[1:], strict=True):
            p0, p1 = pair_start[q0], pair_start[q1]
            if p1 == p0:
                continue
            lut = self._uses_lut()
            qdata, qf = S.query_pair_codes(
                Qt, self._C, pair_query[p0:p1], pair_list[p0:p1], enc, is_l2, lut=lut
            )
            local_start = pair_start[q0 : q1 + 1] - p0
            if lut:
                from .._kernels.lut import ivf_scan_lut

                blocks, block_starts = self._lut_layout()
                ivf_scan_lut(
                    qdata,
                    qf,
                    pair_list[p0:p1],
                    local_start,
                    self._list_start,
                    block_starts,
                    blocks,
                    self._factors,
                    self._ids,
                    self._list_cc,
                    enc.doc_planes,
                    padded_dim(self.dim_) // 8,
                    self.dim_,
                    is_l2,
                    mask,
                    keys[q0:q1],
                    ids[q0:q1],
                )
            elif enc.layout == "planes":
                words = enc.words_per_plane(self.dim_)
                KI.ivf_scan_planes(
                    qdata,
                    qf,
                    pair_list[p0:p1],
                    local_start,
                    self._list_start,
                    self._codes.view(np.uint64),
                    self._factors,
                    self._ids,
                    self._list_cc,
                    enc.query_planes,
                    enc.doc_planes,
                    words,
                    self.dim_,
                    is_l2,
                    mask,
                    keys[q0:q1],
                    ids[q0:q1],
                )
            else:
                KI.ivf_scan_bytes(
                    qdata,
                    qf,
                    pair_list[p0:p1],
                    local_start,
                    self._list_start,
                    self._codes,
                    self._factors,
                    self._ids,
                    self._list_cc,
                    self.dim_,
                    is_l2,
                    mask,
                    keys[q0:q1],
                    ids[q0:q1],
                )
        return keys, ids

    def _rerank(self, Qp: np.ndarray, cand: np.ndarray, k: int):
        """Exact raw values of the candidates over the vector segments; best ``k``."""
        from ..scoring import merge_topk

        is_l2 = self._similarity.is_distance
        raw = np.full(cand.shape, np.nan)
        start = 0
        for seg in self._segments:
            stop = start + len(seg)
            inside = (cand >= start) & (cand < stop)
            if inside.any():
                local = np.where(inside, cand - start, -1)
                part = rerank_exact(Qp, seg.array, local, is_l2)
                raw = np.where(inside, part, raw)
            start = stop
        keys = np.where(cand < 0, -np.inf, -raw if is_l2 else raw)
        ids = np.where(cand < 0, KS.EMPTY_ID, cand)
        keys, ids = merge_topk(keys, ids, min(k, cand.shape[1]))
        ids = np.where(ids == KS.EMPTY_ID, -1, ids)
        return (-keys if is_l2 else keys), ids

    # ------------------------------------------------------------------ files
    def _meta(self) -> dict:
        from .. import __version__ as bbqlib_version

        meta = {
            "format": ST.MAGIC,
            "format_version": ST.FORMAT_VERSION,
            "bbqlib_version": bbqlib_version,
            "encoding_wire": self._encoding.wire,
            "doc_bits": self._encoding.doc_bits,
            "query_bits": self._encoding.query_bits,
            "dim": self.dim_,
            "similarity": self._similarity.value,
            "similarity_code": self._similarity.code,
            "cluster_size": self.cluster_size,
            "seed": int(self.seed),
            "soar": self.soar,
            "store_vectors": self.store_vectors,
            "ntotal": self._ntotal,
            "n_lists": int(self._C.shape[0]),
            "n_entries": int(self._ids.shape[0]),
            "n_deleted": self.n_deleted,
            "centroid_bits": S.CENTROID_BITS,
            "has_parents": self._table.has_parents,
            "transform": None,
        }
        return meta

    def _header_arrays(self, crc: np.ndarray, lut_crc: np.ndarray | None) -> tuple[dict, dict]:
        t = self._table
        arrays = {
            "centroids": self._C,
            "centroid_codes": t.codes,
            "centroid_factors": t.factors,
            "global_centroid": t.g,
            "list_start": self._list_start,
            "list_crc": crc,
            "deleted": np.packbits(self._deleted, bitorder="little"),
        }
        if lut_crc is not None:
            arrays["list_lut_crc"] = lut_crc
        if t.has_parents:
            arrays.update(
                parent_codes=t.parent_codes,
                parent_factors=t.parent_factors,
                parent_cc=t.parent_cc,
                parent_radius=t.parent_radius,
                child_order=t.child_order,
                child_offsets=t.child_offsets,
            )
        t_params = None
        if self.transform_ is not None:
            t_params, t_arrays = self.transform_.get_state()
            arrays.update({f"transform.{k}": v for k, v in t_arrays.items()})
        return t_params, arrays

    def save(self, path=None) -> Path:
        """Write the index as a new generation of the directory ``path`` (atomic).

        ``path`` defaults to the index's own ``path``. Vector files already in ``path`` are
        reused, not rewritten; an interrupted save leaves the previous generation openable.
        """
        self._check_fitted()
        if path is None:
            if self.path is None:
                raise ValueError("save() needs a path: this index has none (pass path=...)")
            path = self.path
        path = Path(path)
        if self._list_crc is not None and self._postings_source is not None:
            crc, lut_crc = self._list_crc, self._list_lut_crc
            postings = Path(self._postings_source)
        else:
            postings = self._postings_to_store()
            crc = ST.list_crcs(postings, self._list_start)
            lut_crc = None
            if "lut_codes" in postings:
                lut_crc = ST.list_crcs(postings, self._list_start, blocks=True)
            postings["assignments"] = np.asarray(self._assign)
        t_params, arrays = self._header_arrays(crc, lut_crc)
        meta = self._meta()
        meta["transform"] = t_params
        _, stored = ST.save_generation(path, meta, arrays, postings, self._segments)
        if self.path is not None and path.resolve() == self.path.resolve():
            # The index lives here: serve from the new files, drop the RAM copies.
            self._load_files(path)
        return path

    @classmethod
    def open(cls, path, *, preload: bool = False) -> IVFIndex:
        """Open a saved index; only centroids are read into RAM, the rest is memory-mapped.

        ``preload=True`` reads the posting lists into the page cache now (as
        Elasticsearch's ``index.store.preload``), so that the first searches do not wait for
        the disk (:func:`bbqlib.io.preload.preload_arrays`); with :func:`bbqlib.warmup` the
        first query then costs about what later ones do.

        Raises ``FileNotFoundError`` when ``path`` holds no index and
        :class:`~bbqlib.CorruptFileError` when a file is missing, truncated or damaged.
        """
        path = Path(path)
        meta, _, _, _ = ST.open_generation(path)
        enc = encoding_from_wire(meta["encoding_wire"])
        index = cls(
            bits=enc.doc_bits,
            similarity=meta["similarity"],
            cluster_size=meta["cluster_size"],
            query_bits=enc.query_bits,
            seed=meta["seed"],
            path=path,
            soar=meta["soar"],
            store_vectors=meta["store_vectors"],
        )
        index._load_files(path)
        if preload:
            from ..io.preload import preload_arrays

            preload_arrays(index._postings().values())
        return index

    def _load_files(self, path: Path) -> None:
        meta, h, postings, segments = ST.open_generation(path)
        self._encoding = encoding_from_wire(meta["encoding_wire"])
        self._similarity = resolve_similarity(meta["similarity"])
        self.similarity_ = self._similarity
        self.dim_ = int(meta["dim"])
        self._ntotal = int(meta["ntotal"])
        self.transform_ = None
        if meta.get("transform"):
            from ..transforms import transform_from_state

            t_arrays = {k.split(".", 1)[1]: v for k, v in h.items() if k.startswith("transform.")}
            self.transform_ = transform_from_state(meta["transform"], t_arrays)
            self.precondition = self.transform_
        self._C = np.ascontiguousarray(h["centroids"], dtype=np.float32)
        self._list_cc = np.einsum("ij,ij->i", self._C.astype(np.float64), self._C)
        parents = {}
        if meta["has_parents"]:
            parents = dict(
                parent_codes=h["parent_codes"],
                parent_factors=h["parent_factors"],
                parent_cc=h["parent_cc"],
                parent_radius=h["parent_radius"],
                child_order=h["child_order"],
                child_offsets=h["child_offsets"],
            )
        g = np.asarray(h["global_centroid"], dtype=np.float32)
        self._table = S.CentroidTable(
            g,
            float(np.dot(g.astype(np.float64), g)),
            h["centroid_codes"],
            h["centroid_factors"],
            self._list_cc,
            **parents,
        )
        n_entries = int(meta["n_entries"])
        codes, factors, ids = postings["codes"], postings["factors"], postings["ids"]
        if codes.shape[0] != n_entries or factors.shape != (n_entries, 4):
            raise CorruptFileError(
                f"posting file of {path} holds {codes.shape[0]} entries, the header records "
                f"{n_entries}; the files do not belong together"
            )
        lut_codes = postings.get("lut_codes")
        lut = None
        if lut_codes is not None:
            if "list_lut_crc" not in h:
                raise CorruptFileError(
                    f"the header of {path} has no CRC32s for the lookup-table blocks of its "
                    "posting file; the files do not belong together"
                )
            block_starts = lut_block_starts(h["list_start"])
            need = (int(block_starts[-1]), codes.shape[1] * LUT_LANES)
            if lut_codes.shape != need:
                raise CorruptFileError(
                    f"posting file of {path} holds lookup-table blocks of shape "
                    f"{lut_codes.shape}, the lists need {need}; the files do not belong together"
                )
            lut = (lut_codes, block_starts)
        self._set_postings(
            codes,
            factors,
            ids,
            h["list_start"],
            crc=np.asarray(h["list_crc"]),
            source=path / meta["postings_file"],
            lut=lut,
            lut_crc=None if lut is None else np.asarray(h["list_lut_crc"]),
        )
        self._assign = postings["assignments"]
        self._set_deleted(
            np.unpackbits(h["deleted"], count=self._ntotal, bitorder="little").astype(bool)
        )
        self._segments = segments
        self._fitted = True

    def verify(self) -> dict:
        """Check every checksum (disk-backed) or the structure (in memory); raise if bad.

        On disk: the header, every posting list's CRC32 and every vector file's CRC32.
        Returns a small summary.
        """
        self._check_fitted()
        if self._list_crc is not None and self._postings_source is not None:
            out = ST.verify_generation(Path(self._postings_source).parent)
            self._verified[:] = True
            self._verified_blocks[:] = True
            return out
        start = self._list_start
        if start[0] != 0 or np.any(np.diff(start) < 0) or start[-1] != self._ids.shape[0]:
            raise CorruptFileError("IVF index in memory has inconsistent list offsets")
        ids = np.asarray(self._ids)
        if ids.size and (ids.min() < 0 or ids.max() >= self._ntotal):
            raise CorruptFileError("IVF index in memory holds ids out of range")
        return {"generation": None, "lists": int(start.size - 1), "vector_segments": 0}

    def __repr__(self) -> str:
        state = f"ntotal={self.ntotal}, lists={self.n_lists}" if self._fitted else "empty"
        return (
            f"IVFIndex(bits={self._encoding.doc_bits}, similarity={self._similarity.value!r}, "
            f"cluster_size={self.cluster_size}, {state})"
        )


def _pad_cols(a: np.ndarray, width: int) -> np.ndarray:
    out = np.full((a.shape[0], width), -1, dtype=a.dtype)
    out[:, : a.shape[1]] = a
    return out
