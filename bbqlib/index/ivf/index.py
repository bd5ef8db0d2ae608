"""IVFIndex: an inverted-file index over any bbqlib quantizer, in the spirit of DiskBBQ.

Build (:mod:`.build`): hierarchical k-means to ``cluster_size`` vectors per list, SOAR spill
of every vector to a second list, each copy coded against its own list's centroid by the
quantizer. Search (:mod:`.plan`, :mod:`.scan`): rank lists by 7-bit centroid codes, visit
them in order until the budget is spent, code the query against each visited list, score all
visited lists of a batch in one numba kernel, de-duplicate SOAR copies, rerank on the float
vectors (:mod:`.batch` for a batch of queries, :mod:`.single` for one). Writes
(:mod:`.writes`, :mod:`.guarded`): ``add`` and ``delete`` replace state copy-on-write. Files
(:mod:`.files`, :mod:`.storage`): a directory of checksummed, memory-mapped files written
atomically (``docs/ivf-format.md``). The constructor's arguments: :mod:`.options`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..._kernels.policy import thread_scope
from ..._params import check_int
from ..._validation import NotFittedError
from ...quantizers import BBQQuantizer, Quantizer
from ...search.rerank import check_oversample
from ...search.stored import check_store_vectors
from ...similarity import Similarity
from ..base import Index
from ..guard import IndexGuard
from ..ids import RowIds
from . import batch as ivf_batch
from . import files as F
from . import plan as P
from . import storage as ST
from . import writes as W
from .batch import ENTRIES_PER_THREAD as ENTRIES_PER_THREAD  # re-exported: public here too
from .guarded import GuardedWrites
from .one import search_one as _one
from .one import single_query_tiers as _one_tiers
from .one import warm_saved_ivf
from .options import UNSET as _UNSET
from .options import resolve_quantizer
from .writes import AUTO_PROGRESS_ROWS as AUTO_PROGRESS_ROWS  # re-exported: public here too
from .writes import MAX_VECTORS

__all__ = ["IVFIndex", "CLUSTER_SIZE_RANGE", "MAX_VECTORS"]

#: Allowed ``cluster_size`` (spec §6.1).
CLUSTER_SIZE_RANGE = (64, 65_536)


def _check_new_path(path: Path) -> None:
    """A new index's ``path`` must not hold an index (it would be replaced silently)."""
    if (path / ST.MANIFEST).exists():
        raise FileExistsError(
            f"{path} already holds an IVF index; open it with IVFIndex.open(path) or "
            "bbqlib.load(path), or pass overwrite=True to replace it with this new index"
        )
    if path.exists() and not path.is_dir():
        raise FileExistsError(
            f"{path} is a file, not an IVF index directory; pass another path (a FlatIndex "
            "file opens with bbqlib.load)"
        )


class IVFIndex(GuardedWrites, Index):
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
        vectors are then served memory-mapped (only centroids stay in RAM). A directory
        that holds an index already raises ``FileExistsError`` (open it with
        :meth:`IVFIndex.open` or :func:`bbqlib.load`), unless ``overwrite=True``.
    overwrite : bool, default False
        Let this new index replace an index already at ``path`` (its first ``add`` writes
        a new generation over it; until then the old index stays as it was).
    soar : bool, default True
        Spill every vector to its best secondary list (SOAR, lambda = 1).
    store_vectors : {"float32", "float16", "int8"} or bool, default "float32"
        Keep the vectors for the exact rerank (and for re-clustering on growth) as float32
        (``True``, ``4·d`` bytes per vector), float16 (``2·d``) or int8 with a per-vector
        scale (``d + 4``; :mod:`bbqlib.search.stored`), or not at all (``False``: searches
        return quantized scores). The rerank scores the decoded rows exactly.
    visit_percentage, oversample : float, optional
        Defaults of :meth:`search` (``None``: the dynamic budget, the encoding's depth).
    target_recall : float, optional
        Measure those defaults at the first :meth:`add` for this recall@10 (:meth:`tune`).

    Notes
    -----
    ``IVFIndex(1, "cosine", 384)`` (``bits`` first, bbqlib 0.1) still works, with a
    ``FutureWarning`` (until 0.4). Ids are the caller's (``add(X, ids=...)``: int64 >= 0, unique
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

    kind = "ivf"
    directory = True

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
        overwrite: bool = False,
        target_recall: float | None = None,
    ):
        options = {"bits": bits, "query_bits": query_bits, "similarity": similarity,
                   "precondition": precondition}  # fmt: skip
        quantizer, cluster_size = resolve_quantizer(quantizer, legacy, options, seed, cluster_size)
        self.quantizer = quantizer
        self.cluster_size = check_int(cluster_size, "cluster_size", *CLUSTER_SIZE_RANGE)
        self.seed = check_int(seed, "seed", 0)
        self.path = None if path is None else Path(path)
        self.overwrite = bool(overwrite)
        if self.path is not None and not self.overwrite:
            _check_new_path(self.path)
        self.soar = bool(soar)
        self.store_vectors = check_store_vectors(store_vectors)
        self.visit_percentage = P.check_visit_percentage(visit_percentage)
        self.oversample = None if oversample is None else check_oversample(oversample, 1.0)
        if target_recall is not None and not 0.0 < target_recall <= 1.0:
            raise ValueError(f"target_recall must be in (0, 1], got {target_recall!r}")
        self.target_recall = target_recall
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
    def _ids(self) -> RowIds:
        """The caller's ids (:class:`~bbqlib.index.ids.RowIds`) as :class:`Index` reads
        them (``ids``, ``_finish``, tombstones); stored as ``_row_ids`` (files, pickles)."""
        return self._row_ids

    @property
    def n_deleted(self) -> int:
        return self._n_deleted if self._fitted else 0

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
        first = not self._fitted
        W.add_vectors(self, X, ids, progress)
        target = getattr(self, "target_recall", None)  # absent from older pickles
        if first and target is not None and self.store_vectors:
            self.tune(target_recall=target)

    def _set_centroids(self, C: np.ndarray) -> None:
        W.set_centroids(self, C)

    def _set_deleted(self, deleted: np.ndarray) -> None:
        W.set_deleted(self, deleted)

    def _primary_counts(self) -> np.ndarray:
        return W.primary_counts(self)

    def _vectors_rows(self, rows: np.ndarray) -> np.ndarray:
        """Stored vectors of ascending ``rows``, decoded as float32 (a copy)."""
        return W.vectors_rows(self, rows)

    def tune(self, queries=None, *, k: int = 10, target_recall: float = 0.9,
             n_queries: int = 200, seed: int = 0):  # fmt: skip
        """Measure and set this index's search defaults (``visit_percentage``,
        ``oversample``): the cheapest setting whose recall@k reaches ``target_recall`` plus
        a margin on ``queries`` (like the ones it will serve) or, by default, on a sample of
        its own stored vectors, each left out of its own answer
        (:mod:`bbqlib.index.ivf.tune`). Needs ``store_vectors``; ``save`` keeps the
        defaults. Returns a :class:`~bbqlib.index.ivf.tune.Tuning` (``recall``, ``grid``,
        ``seconds``)."""
        from .tune import tune

        with self._guard.reading():
            self._check_fitted()
            return tune(self, queries, k=k, target_recall=target_recall, n_queries=n_queries,
                        seed=seed)  # fmt: skip

    # ------------------------------------------------------------------ deleting
    def delete(self, ids) -> None:
        """Delete vectors by id (tombstones: they are skipped by every later search).

        Raises ``ValueError`` naming ids that are not in the index or already deleted.
        """
        W.delete_ids(self, ids)

    # ------------------------------------------------------------------ searching
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
        pad_to_k: bool | None = None,
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
        pad_to_k : bool, optional
            ``True``: exactly ``k`` columns, as faiss returns them, even when ``k`` exceeds
            :attr:`ntotal`. ``False``: ``min(k, ntotal)`` columns. ``None`` (the default until
            bbqlib 0.4, where it becomes ``True``): ``min(k, ntotal)`` columns, with a
            :class:`FutureWarning` when ``k > ntotal``.

        Missing results (deletions, a filter, ``k > ntotal``) have id ``-1`` and the worst
        score of their kind: ``+inf`` for raw squared L2, ``-inf`` for raw inner products and
        cosines and for ``scores="similarity"``. ``k`` is checked before anything is
        allocated: results over half the machine's memory (``k=10**12`` with
        ``pad_to_k=True``, say) raise ``ValueError``. Thread-safe, also during a write.
        """
        with self._guard.reading():  # one query: the single-query path (single.py)
            return _one(self, queries, k, visit_percentage, oversample, rerank, filter, scores,
                        pad_to_k)  # fmt: skip

    @thread_scope  # the batch path caps its kernels' threads by its amount of work
    def _search(self, queries, k, visit_percentage, oversample, rerank, filter, scores,
                pad_to_k=None):  # fmt: skip
        return ivf_batch.search_batch(self, queries, k, visit_percentage, oversample, rerank,
                                      filter, scores, pad_to_k)  # fmt: skip

    def warmup_tiers(self) -> tuple:
        """The tiers of the single-query kernels this index runs (``bbqlib.warmup``)."""
        return _one_tiers(self)

    single_query_tiers = warmup_tiers  # the name before Index.warmup_tiers

    @classmethod
    def warm_saved_kernels(cls, folder) -> None:
        warm_saved_ivf(cls, folder)

    def _allowed(self, filter) -> np.ndarray | None:
        """uint8 mask over rows (filter and not deleted), or None when everything is allowed."""
        return ivf_batch.allowed_rows(self, filter)

    # ------------------------------------------------------------------ files
    def save(self, path=None) -> Path:
        """Write the index as a new generation of the directory ``path`` (atomic).

        ``path`` defaults to the index's own ``path``. Vector files already in ``path`` are
        reused, not rewritten; an interrupted save leaves the previous generation openable,
        and its leftovers are removed by the next open or save (``docs/ivf-format.md``).
        Holds the directory's advisory lock throughout. Raises
        :class:`~bbqlib.index.ivf.storage.StaleIndexError` when saving over the directory
        this index was read from after another process saved a newer generation there.

        A save to another directory than the index's own writes the index as it was when
        the save started: searches, adds and deletes in other threads go on while it
        writes, and what they change is not in that save. A save to the index's own
        directory waits for them (and they for it): every write there commits a generation,
        in the order the directory's lock gives them.
        """
        self._check_fitted()
        if path is None:
            if self.path is None:
                raise ValueError("save() needs a path: this index has none (pass path=...)")
            path = self.path
        path = Path(path)
        if path.is_file():
            raise FileExistsError(
                f"cannot save an IVF index to {path}: a file is there, and an IVF index is a "
                "directory; choose another path, or remove the file first"
            )
        own = self.path is not None and path.resolve() == Path(self.path).resolve()
        if not own:  # the state as of now; adds and searches go on while it is written
            self._save_snapshot(path)
            return path
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
        the disk (:func:`bbqlib.storage.preload.preload_arrays`); with :func:`bbqlib.warmup` the
        first query then costs about what later ones do.

        Raises ``FileNotFoundError`` when ``path`` holds no index (after removing what a
        killed first build left there) and :class:`~bbqlib.CorruptFileError` when a file is
        missing, truncated, damaged or not the one the header records (IVF format 9: a file
        of another index, copy or generation; ``docs/ivf-format.md``).
        """
        path = Path(path)
        opened = ST.open_generation(path)
        meta = opened[0]
        store = ST.vector_kind_of(meta) if meta["store_vectors"] else False
        index = cls(BBQQuantizer(), cluster_size=meta["cluster_size"], seed=meta["seed"],
                    soar=meta["soar"], store_vectors=store,
                    visit_percentage=meta.get("visit_percentage"),
                    oversample=meta.get("oversample"))  # fmt: skip
        index.path = path  # the index it opens lives there (no new-path check)
        F.load_into(index, path, opened)  # the stored quantizer replaces BBQQuantizer()
        index._fitted = True
        if preload:
            from ...storage.preload import preload_arrays

            preload_arrays(index._postings.arrays().values())
        return index

    @classmethod
    def holds_saved(cls, path) -> bool:
        """Whether the directory ``path`` holds a saved index (its ``MANIFEST``)."""
        return (Path(path) / ST.MANIFEST).exists()

    @classmethod
    def saved_lock_path(cls, path) -> Path:
        """The advisory lock file of the index directory ``path``."""
        return ST.dir_lock_path(path)

    @classmethod
    def remove_leftovers(cls, path, *, blocking: bool, timeout: float):
        """Remove what killed writers left in ``path`` (:func:`.storage.clean_directory`):
        ``(file name, bytes)`` of each, or None when a live writer holds the lock."""
        return ST.clean_directory(path, blocking=blocking, timeout=timeout)

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
