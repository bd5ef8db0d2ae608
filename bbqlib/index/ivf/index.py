"""IVFIndex: an inverted-file index over any bbqlib quantizer, in the spirit of DiskBBQ.

Build (:mod:`.build`): hierarchical k-means to ``cluster_size`` vectors per list, SOAR spill
of every vector to a second list, each copy coded against its own list's centroid by the
quantizer. Search (:mod:`.plan`, :mod:`.scan`): rank lists by 7-bit centroid codes, visit
them in order until the budget is spent, code the query against each visited list, score all
visited lists of a batch in one numba kernel, de-duplicate SOAR copies, rerank on the float
vectors. Files (:mod:`.files`, :mod:`.storage`): a directory of checksummed, memory-mapped
files written atomically (``docs/ivf-format.md``).
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

import numpy as np

from ..._kernels.policy import cap_threads, thread_scope, threads_for
from ..._params import check_int
from ..._validation import NotFittedError, cap_k, check_source
from ...encoding import ENCODINGS
from ...io.vectors import read_vectors
from ...quantizers import BBQQuantizer, Quantizer
from ...scoring import candidate_count, check_oversample, check_scores, dedup_topk, finish
from ...scoring.stored import check_store_vectors
from ...similarity import Similarity
from .._locks import IndexGuard
from ..ids import RowIds, filter_rows
from . import build as B
from . import files as F
from . import plan as P
from . import storage as ST
from .filters import allowed_mask, allowed_per_list
from .guarded import GuardedWrites
from .scan import rerank_segments, scan_lists
from .single import search_one as _one

__all__ = ["IVFIndex", "CLUSTER_SIZE_RANGE", "MAX_VECTORS"]

#: Allowed ``cluster_size`` (spec §6.1).
CLUSTER_SIZE_RANGE = (64, 65_536)
#: Posting lists store int32 row numbers (the caller's int64 ids are mapped at the edges).
MAX_VECTORS = 2**31 - 1
#: Entries to visit per thread in a search (about 1 ms of work: ~25 ns per entry with the
#: ranking and rerank around it); fewer run every kernel of the search on one thread.
ENTRIES_PER_THREAD = 40_000
#: Builds at least this large show a progress bar unless ``progress=False``.
AUTO_PROGRESS_ROWS = 1_000_000
_UNSET = object()


class IVFIndex(GuardedWrites):
    """Inverted-file index over quantized codes with SOAR spilling (DiskBBQ style).

    Parameters
    ----------
    quantizer : Quantizer, optional
        Any bbqlib quantizer (fitted or not): :class:`~bbqlib.BBQQuantizer` (the default,
        built from ``bits``, ``query_bits``, ``similarity``, ``precondition`` and ``seed``),
        :class:`~bbqlib.RaBitQQuantizer` or a :class:`~bbqlib.ScalarQuantizer`. Docs are
        coded as residuals to their list's centroid through it; it is (re)fitted on a sample
        of the first :meth:`add` and, for grids that depend on the data range, on residuals.
    bits : int in 1..8, default 1
        OSQ doc bits of the default quantizer.
    query_bits : {"auto", 4, 7, 8, None}, default "auto"
        Query bits of the default quantizer (4 up to 4-bit docs, 7 for 5-7, 8 for 8).
    similarity : str, default "cosine"
        ``cosine`` (normalizes), ``dot_product`` (unit vectors), ``euclidean``,
        ``max_inner_product``, or an alias.
    cluster_size : int, default 384
        Target vectors per list (primary assignments), in [64, 65536].
    precondition : None, True, "block", "dense", "hadamard" or a Transform
        Random orthogonal transform of the default quantizer (ES 9.4 ``precondition``),
        applied before clustering and quantization; the stored float vectors stay untransformed.
    seed : int, default 42
        Seed of the clustering samples (and of the default quantizer's transform).
    path : str or Path, optional
        Directory the index lives in. The first :meth:`add` streams the float vectors there,
        every ``add`` / ``delete`` saves a new generation there, and codes, factors and
        vectors are then served memory-mapped (only centroids stay in RAM).
    soar : bool, default True
        Spill every vector to its best secondary list (SOAR, lambda = 1).
    store_vectors : "float32" or bool, default "float32"
        Keep the float32 vectors for the exact rerank (and for re-clustering on growth).
    visit_percentage, oversample : float, optional
        Defaults of :meth:`search` (``None``: the dynamic budget, the encoding's depth).

    Notes
    -----
    ``IVFIndex(1, "cosine", 384)`` (``bits`` first, bbqlib 0.1) still works, with a
    ``DeprecationWarning``. Ids are the caller's (``add(X, ids=...)``: int64 >= 0, unique
    among live vectors) or, by default, the largest id so far + 1, + 2, ... (row numbers
    ``0 .. ntotal - 1`` when no id is ever given); the posting lists hold int32 row numbers
    and a sorted copy of the ids maps between the two. Deleted vectors are tombstones; their
    ids may be added again. The visit budget (spec §6.7) counts posting entries:
    ``visit_percentage = p`` visits lists in centroid order until ``2 · p / 100 · N`` entries
    were seen (the factor 2 pays for SOAR copies); ``None`` uses
    ``p / 100 = round(log10(N)² · k') / N`` with ``k'`` the rerank depth. Where bbqlib departs
    from Elasticsearch, and why: ``docs/ivf-format.md`` and the module docstrings of
    :mod:`.plan` and :mod:`.build`.

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
        quantizer: Quantizer | None = None,
        *legacy,
        bits=_UNSET,
        query_bits=_UNSET,
        similarity=_UNSET,
        cluster_size: int = 384,
        precondition=_UNSET,
        seed: int = 42,
        path=None,
        soar: bool = True,
        store_vectors="float32",
        visit_percentage: float | None = None,
        oversample: float | None = None,
    ):
        if isinstance(quantizer, (int, np.integer)) and not isinstance(quantizer, bool):
            warnings.warn(
                "IVFIndex(bits, similarity, cluster_size) is deprecated; pass "
                "IVFIndex(bits=..., similarity=..., cluster_size=...) or a quantizer",
                DeprecationWarning,
                stacklevel=2,
            )
            if bits is not _UNSET:
                raise TypeError("IVFIndex got bits both positionally and by keyword")
            bits, quantizer = quantizer, None
            if len(legacy) > 2:
                raise TypeError("IVFIndex takes at most three positional arguments")
            if legacy:
                similarity = legacy[0]
            if len(legacy) > 1:
                cluster_size = legacy[1]
        elif legacy:
            raise TypeError("IVFIndex takes the quantizer as its only positional argument")
        options = {"bits": bits, "query_bits": query_bits, "similarity": similarity,
                   "precondition": precondition}  # fmt: skip
        given = sorted(k for k, v in options.items() if v is not _UNSET)
        if quantizer is None:
            defaults = {"bits": 1, "query_bits": "auto", "similarity": "cosine",
                        "precondition": None}  # fmt: skip
            opts = {k: (defaults[k] if v is _UNSET else v) for k, v in options.items()}
            quantizer = BBQQuantizer(seed=seed, **opts)
            # A wrong bits / query_bits / similarity fails now, not after a long add().
            quantizer._encoding_for_params()
            quantizer.similarity_kind  # noqa: B018
        elif not isinstance(quantizer, Quantizer):
            raise TypeError(f"quantizer must be a bbqlib Quantizer, got {type(quantizer).__name__}")
        elif "ivf" not in ENCODINGS.family(quantizer.family).indexes:
            raise ValueError(
                f"{type(quantizer).__name__} codes are served by FlatIndex only (their registry "
                "rows list no 'ivf'); use bbqlib.FlatIndex"
            )
        elif given:
            raise ValueError(
                f"pass either a quantizer or {', '.join(given)}, not both: the quantizer "
                "already sets them"
            )
        self.quantizer = quantizer
        self.cluster_size = check_int(cluster_size, "cluster_size", *CLUSTER_SIZE_RANGE)
        self.seed = check_int(seed, "seed", 0)
        self.path = None if path is None else Path(path)
        self.soar = bool(soar)
        self.store_vectors = check_store_vectors(store_vectors, kinds=("float32",))
        self.visit_percentage = P.check_visit_percentage(visit_percentage)
        self.oversample = None if oversample is None else check_oversample(oversample, 1.0)
        self._fitted = False
        self._generation = None  # (directory, generation) this index was read from
        self._row_ids = RowIds()
        self.last_search_stats: dict = {}
        self._guard = IndexGuard()

    # ------------------------------------------------------------------ properties
    @property
    def is_fitted(self) -> bool:
        return self._fitted

    def _check_fitted(self) -> None:
        if not self._fitted:
            raise NotFittedError("this IVFIndex is empty; call add(X) first")

    @property
    def ntotal(self) -> int:
        """Vectors added so far (deleted ones included)."""
        return self._ntotal if self._fitted else 0

    @property
    def ids(self) -> np.ndarray:
        """The id of every vector added, in insertion order (int64 [ntotal])."""
        return self._row_ids.array()

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
    def dim_(self) -> int:
        return self.quantizer.dim_

    @property
    def similarity_(self) -> Similarity:
        return self.quantizer.similarity_

    @property
    def transform_(self):
        return self.quantizer.transform_

    @property
    def centroids_(self) -> np.ndarray:
        """List centroids (float32 [K, d], in the quantizer's transformed space if any)."""
        self._check_fitted()
        return self._C

    @property
    def list_sizes(self) -> np.ndarray:
        """Posting entries per list (int64 [K]; SOAR copies included)."""
        self._check_fitted()
        return self._postings.sizes

    @property
    def encoding_(self):
        """The registry row of the codes (the quantizer's)."""
        return self.quantizer.encoding_

    @property
    def bytes_per_entry(self) -> int:
        """Bytes of one posting entry: packed code + factors (16 bytes) + a 4-byte row."""
        self._check_fitted()
        return self.encoding_.doc_bytes(self.dim_) + 4 * self.quantizer.pair_factor_width + 4

    # ------------------------------------------------------------------ building
    def add(self, X, ids=None, *, progress: bool | None = None) -> None:
        """Add vectors.

        Parameters
        ----------
        X : array_like [n, d], np.memmap, or a path to ``.npy`` / ``.fvecs`` / ``.fbin``
            Read in blocks of 65,536 rows, so a memory-mapped file larger than RAM works
            (give the index a ``path`` so that the float vectors go to disk too).
        ids : int array [n], optional
            The vectors' ids (int64 >= 0, unique, not the id of a live vector in the index);
            default: the largest id so far + 1, + 2, ... Duplicates and negatives raise
            ``ValueError`` naming them, before any work is done.
        progress : bool, optional
            tqdm progress bars; default: on for builds of at least 1,000,000 vectors.

        Notes
        -----
        The first call fits the quantizer (on a seeded sample of at most 65,536 rows) and
        clusters. Later calls assign each vector to its nearest centroid and its SOAR list; a
        list whose primary vectors then exceed ``2 · cluster_size`` is re-clustered into
        several lists (needs ``store_vectors``). ``X`` is validated as every ``add`` of
        bbqlib validates (floats only, finite, squared norms within float32's range) and
        copied. On an index read from files, every posting list's CRC32 is checked before
        the lists are rewritten (once per open). Thread-safe (see the class notes).
        """
        source = read_vectors(X, mmap=True) if isinstance(X, (str, os.PathLike)) else X
        source = check_source(source, "X", dim=self.dim_ if self._fitted else None)
        n = source.shape[0]
        show = (n >= AUTO_PROGRESS_ROWS) if progress is None else bool(progress)
        with self._writing(self.path):
            if self.ntotal + n > MAX_VECTORS:
                raise ValueError(f"an IVFIndex holds at most {MAX_VECTORS} vectors (int32 rows)")
            F.check_row_ids(self)
            new = self._row_ids.new_ids(ids, n, self._deleted if self._fitted else None)
            work = self._clone()
            if not work._fitted:
                B.build(work, source, show)
                work._fitted = True
            else:
                F.check_before_rewrite(work)  # damage must not get fresh checksums
                B.add_more(work, source, show)
            work._row_ids = work._row_ids.appended(new, n)
            self._commit(work)

    def _set_centroids(self, C: np.ndarray) -> None:
        from ..clustering import parent_level

        self._C = np.ascontiguousarray(C, dtype=np.float32)
        parents = None
        if self._C.shape[0] > P.PARENT_THRESHOLD:
            parents = parent_level(
                self._C, centroids_per_parent=P.CENTROIDS_PER_PARENT, seed=self.seed
            )
        self._table = P.centroid_table(self._C, self.similarity_.is_distance, parents=parents)
        self._list_cc = self._table.cc

    def _set_deleted(self, deleted: np.ndarray) -> None:
        self._deleted = deleted
        self._n_deleted = int(deleted.sum())
        self._live_cache = None
        self._live_per_list = None

    def _primary_counts(self) -> np.ndarray:
        return np.bincount(np.asarray(self._assign)[:, 0], minlength=self._C.shape[0])

    def _vectors_rows(self, rows: np.ndarray) -> np.ndarray:
        """Stored float vectors of ascending ``rows`` (float32 copy)."""
        out = np.empty((rows.size, self.dim_), dtype=np.float32)
        start = 0
        for seg in self._segments:
            stop = start + len(seg)
            lo, hi = np.searchsorted(rows, [start, stop])
            seg.check_rows(rows[lo:hi] - start)  # block CRC32s, on the first read
            out[lo:hi] = seg.array[rows[lo:hi] - start]
            start = stop
        return out

    # ------------------------------------------------------------------ deleting
    def delete(self, ids) -> None:
        """Delete vectors by id (tombstones: they are skipped by every later search).

        Raises ``ValueError`` naming ids that are not in the index or already deleted.
        """
        self._check_fitted()
        with self._writing(self.path):
            F.check_row_ids(self)
            rows = self._row_ids.rows_of(ids, self._deleted)
            if rows.size == 0:
                return
            deleted = self._deleted.copy()
            deleted[rows] = True
            work = self._clone()
            work._set_deleted(deleted)
            self._commit(work)

    # ------------------------------------------------------------------ searching
    @thread_scope
    def search(
        self,
        queries,
        k: int = 10,
        *,
        visit_percentage: float | None = None,
        oversample: float | None = None,
        rerank: bool | None = None,
        filter=None,
        scores: str = "raw",
    ):
        """Approximate top-``k``: ``(scores float32 [nq, k], ids int64 [nq, k])``.

        Parameters
        ----------
        queries : float array [nq, d] or [d]
        k : int
        visit_percentage : float in (0, 100], optional
            Share of the vectors to visit (SOAR copies counted as half); ``None``: the
            index's ``visit_percentage``, else the dynamic default ``round(log10(N)² · k') / N``.
        oversample : float >= 1, optional
            Rerank depth ``k' = min(ceil(k · oversample), 10,000)``; ``None``: the index's
            ``oversample``, else the encoding's (3.0 at 1 bit, 1.5 at 2 bits, 1.0 above).
        rerank : bool, optional
            Rescore the ``k'`` candidates on the stored vectors (exact scores); ``None``
            (default): when the index keeps vectors.
        filter : array of ids, or boolean mask [ntotal], optional
            Only these ids are returned; lists are visited until enough allowed entries
            were scored. A boolean mask has one flag per vector added, in insertion order
            (deleted ones included).
        scores : {"raw", "similarity"}
            ``"raw"`` (default): squared L2 (ascending) or the inner product / cosine, as
            faiss returns them; ``"similarity"``: Lucene's mapping (higher is better).

        Results have ``min(k, ntotal)`` columns (``k`` capped before allocating), padded with
        ``-1`` ids where deletions or a filter leave fewer. Thread-safe, also during a write.
        """
        with self._guard.reading():  # one query: the single-query path (single.py)
            return _one(self, queries, k, visit_percentage, oversample, rerank, filter, scores)

    def _search(self, queries, k, visit_percentage, oversample, rerank, filter, scores):
        self._check_fitted()
        F.check_row_ids(self)  # once per map: results are mapped through them
        k = cap_k(k, self._ntotal)
        check_scores(scores)
        vp = P.check_visit_percentage(visit_percentage)
        vp = self.visit_percentage if vp is None else vp
        if rerank is None:
            rerank = bool(self.store_vectors)
        if rerank not in (True, False):
            raise ValueError(f"rerank must be True or False, got {rerank!r}")
        if rerank and not self.store_vectors:
            raise ValueError(
                "this index keeps no float vectors (store_vectors=False); search with rerank=False"
            )
        q = self.quantizer
        sim = q.similarity_
        Qp = q._validated(queries, "queries", allow_1d=True)
        Qt = q.transform_rows(Qp)
        nq = Qp.shape[0]
        oversample = self.oversample if oversample is None else oversample
        oversample = check_oversample(oversample, q.encoding_.default_oversample)
        n_live = len(self)
        depth = candidate_count(k, oversample, n_live) if rerank else min(k, n_live)
        if depth == 0:
            return self._finish(np.empty((nq, 0)), np.empty((nq, 0), np.int64), k, scores)
        ratio = vp / 100.0 if vp is not None else P.dynamic_visit_ratio(self._ntotal, depth)
        heap = 2 * depth
        need = max(2.0 * ratio * self._ntotal, heap)
        cap_threads(threads_for(nq * need, ENTRIES_PER_THREAD))  # small searches: one thread
        allowed = self._allowed(filter)
        sizes = self._postings.sizes
        allowed_sizes = None
        if allowed is not None:
            if filter is None:  # tombstones only: per-list live counts change on delete/add
                if self._live_per_list is None:
                    self._live_per_list = allowed_per_list(self._postings, allowed)
                allowed_sizes = self._live_per_list
            else:
                allowed_sizes = allowed_per_list(self._postings, allowed)
        by_distance = sim is not Similarity.MAX_INNER_PRODUCT
        plan = P.plan_batch(Qt, self._table, sizes, sim.is_distance, by_distance, ratio, need,
                            heap, allowed_sizes)  # fmt: skip
        keys, ids = scan_lists(q, self._postings, self._C, self._list_cc, Qt, plan, heap, allowed)
        keys, ids = dedup_topk(keys, ids, depth)
        entries = int(sizes[plan[0]].sum())
        self.last_search_stats = {
            "lists_visited": plan[0].size / nq,
            "entries_scored": entries / nq,
            "visited_fraction": entries / nq / max(1, 2 * self._ntotal),
            "depth": depth,
        }
        if rerank:
            keys, ids = rerank_segments(Qp, self._segments, ids, k, sim)
        return self._finish(keys, ids, k, scores)

    def _finish(self, keys, rows, k, scores):
        out, rows = finish(keys, rows, k, self.similarity_, scores)
        return out, self._row_ids.of_rows(rows)

    def _allowed(self, filter) -> np.ndarray | None:
        """uint8 mask over rows (filter and not deleted), or None when everything is allowed."""
        live = None
        if self._n_deleted:
            if self._live_cache is None:
                self._live_cache = (~self._deleted).view(np.uint8)
            live = self._live_cache
        return allowed_mask(filter_rows(filter, self._row_ids), self._ntotal, live)

    # ------------------------------------------------------------------ files
    def save(self, path=None) -> Path:
        """Write the index as a new generation of the directory ``path`` (atomic).

        ``path`` defaults to the index's own ``path``. Vector files already in ``path`` are
        reused, not rewritten; an interrupted save leaves the previous generation openable,
        and its leftovers are removed by the next open or save (``docs/ivf-format.md``).
        Holds the directory's advisory lock throughout. Raises
        :class:`~bbqlib.index.ivf.storage.StaleIndexError` when saving over the directory
        this index was read from after another process saved a newer generation there.
        """
        self._check_fitted()
        if path is None:
            if self.path is None:
                raise ValueError("save() needs a path: this index has none (pass path=...)")
            path = self.path
        path = Path(path)
        with self._writing(path):
            work = self._clone()
            work._store(path)
            self._publish(work)
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
        index = cls(BBQQuantizer(), cluster_size=meta["cluster_size"], seed=meta["seed"],
                    path=path, soar=meta["soar"], store_vectors=meta["store_vectors"])  # fmt: skip
        F.load_into(index, path)  # the stored quantizer replaces BBQQuantizer()
        index._fitted = True
        if preload:
            from ...io.preload import preload_arrays

            preload_arrays(index._postings.arrays().values())
        return index

    def verify(self) -> dict:
        """Check every checksum (disk-backed) or the structure (in memory); raise if bad.

        On disk: every posting list's CRC32, every section of the posting file and every
        vector file's CRC32 (and its blocks'), over the files this index serves (the header
        was checked whole when it was opened). Returns a small summary.
        """
        self._check_fitted()
        with self._guard.reading():
            return F.verify(self)

    def __repr__(self) -> str:
        deleted = f", deleted={self.n_deleted}" if self.n_deleted else ""
        state = f"vectors={len(self)}{deleted}, lists={self.n_lists}" if self._fitted else "empty"
        return f"IVFIndex(quantizer={self.quantizer!r}, cluster_size={self.cluster_size}, {state})"
