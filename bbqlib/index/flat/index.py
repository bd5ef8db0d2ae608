"""FlatIndex: every code scanned by the numba kernels, then an exact rerank."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..._validation import (
    NotFittedError,
    check_source,
    check_vectors,
    owned_rows,
    prepare_for_similarity,
)
from ...quantizers import EncodedVectors, Quantizer
from ...quantizers.data_checks import warn_about_data
from ...search.rerank import check_oversample, exact_mode, rerank_keys
from ...search.stored import check_store_vectors, stored_exact_values, stored_rows, to_stored
from ...storage.blocks import BlockChecksums
from ..base import Index, index_quantizer
from ..guard import IndexGuard
from ..ids import RowIds, filter_rows
from .files import FORMAT_VERSION, read_flat, write_flat
from .one import flat_search, flat_tiers, warm_saved_flat

__all__ = ["FlatIndex", "FORMAT_VERSION"]


class FlatIndex(Index):
    """Brute-force search over quantized codes with optional exact rerank.

    Parameters
    ----------
    quantizer : Quantizer, optional
        A quantizer (fitted or not). If not given, a :class:`~bbqlib.BBQQuantizer` is built
        from ``bits``, ``query_bits``, ``similarity``, ``precondition`` and ``seed``. An
        unfitted quantizer is fitted on the first :meth:`add` (its centroid stays fixed).
    bits, query_bits, similarity, precondition, seed
        Passed to :class:`~bbqlib.BBQQuantizer` when ``quantizer`` is None.
    store_vectors : {"float32", "float16", "int8"} or bool, default "float32"
        Keep the vectors for the exact rerank, as float32 (``True``), float16 or int8 with a
        per-vector scale (:mod:`bbqlib.search.stored`), or not at all (``False``: searches
        return quantized scores).
    oversample : float >= 1, optional
        Default rerank depth of :meth:`search` (``None``: the encoding's default).

    Notes
    -----
    :meth:`search` returns ``(scores, ids)`` like faiss's ``(D, I)``: float32 raw scores by
    default (the cosine, the inner product, or the squared L2 distance, ascending, padded with
    ``+inf``), or with ``scores="similarity"`` Lucene's higher-is-better mappings
    (``1 / (1 + d²)`` for euclidean, ``(1 + cos) / 2`` for cosine and dot_product, the
    max-inner-product mapping otherwise); int64 ids, padded with ``-1``. Ranking uses the raw
    estimate, ties broken by the earlier added vector.

    Ids are the caller's (``add(X, ids=...)``, int64 >= 0, unique among the vectors in the
    index) or, by default, continue from the largest id so far + 1 (row numbers ``0, 1, ...``
    when no id is ever given). :meth:`delete` marks vectors deleted (tombstones: they stay in
    the scan, masked, and in the file, until the index is rebuilt); a deleted id may be added
    again. :attr:`ntotal` counts every vector added, ``len(index)`` the live ones.

    Thread safety (``docs/concurrency.md``): any number of threads may :meth:`search` (and
    :meth:`save`) while one thread adds; a search sees the index before or after each
    :meth:`add`, never a mix. Writes are serialized. The index keeps its own copy of every
    batch it is given, so the caller may reuse its buffer.

    Examples
    --------
    >>> import numpy as np, bbqlib
    >>> X = np.random.default_rng(0).normal(size=(2000, 64)).astype(np.float32)
    >>> index = bbqlib.FlatIndex(bits=1, similarity="cosine")
    >>> index.add(X)
    >>> scores, ids = index.search(X[:3], k=5)
    >>> ids[:, 0].tolist()
    [0, 1, 2]
    """

    kind = "flat"
    file_kind = "flat_index"
    rerank_modes = (True, False, "bound")
    _DERIVED = ("_single_mask", "_fast_last")  # the one-query path's: made again on use

    def __init__(
        self,
        quantizer: Quantizer | None = None,
        *,
        bits: int = 1,
        query_bits="auto",
        similarity: str = "cosine",
        precondition=None,
        seed: int | None = None,
        store_vectors="float32",
        oversample: float | None = None,
    ):
        self.quantizer = index_quantizer(
            quantizer, "FlatIndex", bits=bits, query_bits=query_bits, similarity=similarity,
            precondition=precondition, seed=seed,
        )  # fmt: skip
        self.store_vectors = check_store_vectors(store_vectors)
        self.oversample = None if oversample is None else check_oversample(oversample, 1.0)
        self._codes: list[EncodedVectors] = []
        self._vectors: list[np.ndarray] = []
        self._joined: tuple | None = None
        self._ids = RowIds()
        self._deleted: np.ndarray | None = None  # bool [ntotal] once something is deleted
        self._vector_blocks: BlockChecksums | None = None  # a loaded file's, until joined
        self._guard = IndexGuard()

    def __getstate__(self):
        if self._vectors:  # pickling reads every row: check them first
            self._check_vector_rows(self._vectors[0], None)
        state = super().__getstate__()
        state["_vector_blocks"] = None
        return state

    # -- building ---------------------------------------------------------------------------
    def add(self, X, ids=None) -> None:
        """Encode and append vectors.

        Parameters
        ----------
        X : float array [n, d]
        ids : int array [n], optional
            The vectors' ids (int64 >= 0, unique, and not the id of a live vector already in
            the index); default: the largest id so far + 1, + 2, ... (row numbers when no id
            is ever given). Duplicates and negatives raise ``ValueError`` naming them.

        The first call fits the quantizer if it is not fitted yet. ``X`` is validated as
        every ``add`` of bbqlib validates (:func:`bbqlib._validation.check_source`, then
        the values) and copied: reusing the buffer afterwards does not change the index.
        Thread-safe: searches running meanwhile see the index before or after this batch.
        """
        with self._guard.writing:
            q = self.quantizer
            source = check_source(X, "X", dim=q.dim_ if q.is_fitted else None)
            new = self._ids.new_ids(ids, source.shape[0], self._deleted)
            if not q.is_fitted:
                with self._guard.swapping():  # no search may see a half-fitted quantizer
                    q.fit(source)
                warn_about_data(q, source, index="flat")  # DataWarning naming the fix
            rows = check_vectors(source, "X", dim=q.dim_)
            enc = q.encode(rows)  # validates the similarity's rules before anything is stored
            vectors = None
            if self.store_vectors:
                prepared = owned_rows(prepare_for_similarity(rows, q.similarity_, "X"), X)
                vectors = to_stored(prepared, self.store_vectors)
            n_new = rows.shape[0]
            row_ids = self._ids.appended(new, n_new)
            deleted = self._deleted
            if deleted is not None:
                deleted = np.concatenate([deleted, np.zeros(n_new, dtype=bool)])
            with self._guard.swapping(), self._guard.joining:
                self._codes = [*self._codes, enc]
                if vectors is not None:
                    self._vectors = [*self._vectors, vectors]
                self._ids = row_ids
                self._deleted = deleted
                self._joined = None

    def delete(self, ids) -> None:
        """Delete vectors by id (like faiss's ``remove_ids``); later searches skip them.

        Deleted vectors become tombstones: they stay in the codes and the file, masked in
        every scan, and their ids may be added again. Raises ``ValueError`` naming ids that
        are not in the index or already deleted (nothing is deleted then). Thread-safe:
        searches running meanwhile see the index before or after the whole call.
        """
        with self._guard.writing:
            if self.ntotal == 0:
                raise ValueError("this FlatIndex is empty; there is nothing to delete")
            deleted = self._tombstones_after(ids)
            if deleted is None:
                return
            with self._guard.swapping():  # a search sees the tombstones before or after
                self._deleted = deleted

    def _parts(self) -> tuple[EncodedVectors | None, np.ndarray | None]:
        joined = self._joined
        if joined is not None:
            return joined
        with self._guard.joining:  # one concatenation, shared by the searches that need it
            if self._joined is None:
                codes = EncodedVectors.concatenate(self._codes) if self._codes else None
                vectors = None
                if len(self._vectors) > 1:  # joining reads every row of a loaded file's
                    self._check_vector_rows(self._vectors[0], None)
                    self._vector_blocks = None  # the joined rows live in RAM
                if self._vectors:
                    vectors = (
                        self._vectors[0]
                        if len(self._vectors) == 1
                        else np.concatenate(self._vectors)
                    )
                self._codes = [codes] if codes is not None else []
                self._vectors = [vectors] if vectors is not None else []
                self._joined = (codes, vectors)
            return self._joined

    @property
    def ntotal(self) -> int:
        """Vectors added so far (deleted ones included)."""
        return sum(len(c) for c in self._codes)

    @property
    def codes(self) -> EncodedVectors | None:
        """All encoded vectors, in insertion order, deleted ones included (None before the
        first add)."""
        return self._parts()[0]

    @property
    def bytes_per_vector(self) -> int:
        """Code plus correction bytes per vector (float vectors for rerank not counted)."""
        return self.quantizer.bytes_per_vector

    # -- searching --------------------------------------------------------------------------
    def search(
        self,
        queries,
        k: int = 10,
        *,
        oversample=None,
        rerank=None,
        filter=None,
        scores: str = "raw",
        pad_to_k: bool | None = None,
    ):
        """Search: ``(scores, ids)`` [nq, k].

        Parameters
        ----------
        queries : float array [nq, d] or [d]
        k : number of results
        oversample : float >= 1, optional
            The quantized scan keeps ``min(ceil(k · oversample), 10,000, n)`` candidates for the
            exact rerank. ``None`` takes the index's ``oversample``, else the encoding's
            default (3.0 at 1 bit, 1.5 at 2, 1.0 above).
        rerank : bool, "bound" or None
            None (default): rerank when the index keeps vectors.
            True: rescore candidates on the stored vectors (scores are exact; with int8
            vectors, exact on the dequantized rows). False: quantized
            top ``k`` with estimated scores. ``"bound"`` (quantizers with error bounds): rescore
            exactly the candidates whose lower bound beats the current k-th exact score.
        filter : array of ids, or boolean mask [ntotal], optional
            Only these ids are returned. A boolean mask has one flag per vector added, in
            insertion order (deleted ones included).
        scores : {"raw", "similarity"}
            ``"raw"`` (default): squared L2 (ascending) or the inner product / cosine, as
            faiss returns them; ``"similarity"``: Lucene's mapping (higher is better).
        pad_to_k : bool, optional
            ``True``: exactly ``k`` columns, as faiss returns them, even when ``k`` exceeds
            :attr:`ntotal`. ``False``: ``min(k, ntotal)`` columns. ``None`` (the default until
            bbqlib 0.4, where it becomes ``True``): ``min(k, ntotal)`` columns, with a
            :class:`FutureWarning` when ``k > ntotal``.

        Returns
        -------
        scores : float32 [nq, k]
            Missing results (deletions, a filter, ``k > ntotal``) score the worst value of
            their kind: ``+inf`` for raw squared L2, ``-inf`` for raw inner products and
            cosines and for ``scores="similarity"``.
        ids : int64 [nq, k]
            The vectors' ids, ``-1`` where missing.

        ``k`` is checked before anything is allocated: results over half the machine's memory
        (``k=10**12`` with ``pad_to_k=True``, say) raise ``ValueError``. Thread-safe, also
        during an :meth:`add` or :meth:`delete` (the search sees the index before or after it).
        """
        with self._guard.reading():
            return self._search(queries, k, oversample, rerank, filter, scores, pad_to_k)

    def _search(self, queries, k, oversample, rerank, filter, scores, pad_to_k):
        # one query: the quantizer's one-query scan (index/single.py), else the batch path
        return flat_search(self, queries, k, oversample, rerank, filter, scores, pad_to_k)

    def warmup_tiers(self) -> tuple:
        """The tiers of the single-query kernels this index runs (``bbqlib.warmup``)."""
        return flat_tiers(self)

    single_query_tiers = warmup_tiers  # the name before Index.warmup_tiers

    @classmethod
    def warm_saved_kernels(cls, folder) -> None:
        warm_saved_flat(cls, folder)

    def _search_batch(self, queries, k, oversample, rerank, filter, scores, pad_to_k):
        q = self.quantizer
        if not q.is_fitted:
            raise NotFittedError("this FlatIndex is empty; call add(X) first")
        opts = self._search_options(k, oversample, rerank, scores, pad_to_k)
        Q = q._validated(queries, "queries", allow_1d=True)
        codes, vectors = self._parts()
        n = 0 if codes is None else len(codes)
        columns = opts.columns(n, len(Q))
        k = min(opts.k, n)  # the scan and rerank find at most n; finish pads to ``columns``
        allowed = self._allowed(filter)
        sim = q.similarity_
        scores = opts.scores
        if opts.rerank == "bound":
            keys, rows = self._search_bound(Q, k, codes, vectors, allowed)
            return self._finish(keys, rows, columns, scores)
        if n == 0:
            empty = np.empty((len(Q), 0))
            return self._finish(empty, np.empty((len(Q), 0), np.int64), columns, scores)
        keys, rows = q.topk_keys(Q, codes, opts.depth(n), allowed=allowed)
        if opts.rerank:
            self._check_vector_rows(vectors, rows)
            raw = stored_exact_values(Q, vectors, rows, exact_mode(sim))
            keys, rows = rerank_keys(raw, rows, k, sim)
        return self._finish(keys, rows, columns, scores)

    def _search_bound(self, Q, k, codes, vectors, allowed):
        q = self.quantizer
        if not q.has_error_bound:
            raise ValueError(
                f"rerank='bound' needs a quantizer with error bounds; {type(q).__name__} has "
                "none (use bbqlib.RaBitQQuantizer, or rerank=True with an oversample)"
            )
        if vectors is None:
            raise ValueError("rerank='bound' needs the float vectors (store_vectors=True)")
        self._check_vector_rows(vectors, None)  # the bound rerank reads rows as it goes
        if vectors.dtype.names is not None:  # int8 records: the bound rerank reads float rows
            vectors = stored_rows(vectors)
        keys, ids, reads = q.search_bound_rerank(Q, codes, vectors, k, allowed=allowed)
        self.last_vectors_read = reads
        return keys, ids

    def _allowed(self, filter) -> np.ndarray | None:
        """Boolean mask over rows: the filter and not deleted (None: every row)."""
        mask = filter_rows(filter, self._ids)
        if self._deleted is None or not self._deleted.any():
            return mask
        live = ~self._deleted
        return live if mask is None else mask & live

    # -- files ------------------------------------------------------------------------------
    def save(self, path) -> Path:
        """Write the index to one checksummed file, atomically (:mod:`bbqlib.storage.container`).

        Holds the path's advisory lock while writing (and removes temporary files that
        killed writers of ``path`` left). Thread-safe: a concurrent :meth:`add` waits. A
        symlink ``path`` is written through: its target is replaced, the link kept. Raises
        :class:`~bbqlib.LockError` when the lock cannot be taken (``errno`` says why) and
        :class:`~bbqlib.LockTimeoutError` when another process holds it past the lock
        timeout (:func:`bbqlib.set_lock_timeout`); nothing is written then.
        """
        with self._guard.reading():
            if not self.quantizer.is_fitted:
                raise NotFittedError("this FlatIndex is empty; call add(X) before save")
            return write_flat(self, path)

    @classmethod
    def load(cls, path, *, mmap: bool = True, verify: bool = True) -> FlatIndex:
        """Open a saved index; codes and vectors are memory-mapped unless ``mmap=False``.

        Temporary files that killed writers of ``path`` left are removed first (unless a live
        writer holds the path's lock). Every section's CRC32 is checked (``verify=False``
        skips that): at load, except the memory-mapped float vectors of files written since
        flat format 5, whose blocks of rows are each checked on first read (a search reads
        only its candidates' rows). A malformed file raises :class:`~bbqlib.CorruptFileError`.
        The file is opened once and every section mapped from that descriptor, so a load
        racing another process's save of ``path`` gets the old file or the new one, never a
        mix (``docs/concurrency.md``).
        """
        return read_flat(cls, path, mmap=mmap, verify=verify)

    @classmethod
    def open(cls, path, **kwargs) -> FlatIndex:
        """:meth:`load` (the name every index opens with: :func:`bbqlib.load`)."""
        return cls.load(path, **kwargs)

    @classmethod
    def check_saved(cls, path, *, verify: bool = True) -> None:
        cls.load(path, verify=verify)  # load checks every section's CRC32 (verify)

    def verify(self) -> dict:
        """Check now what a loaded file's searches would check on first read; raise if bad.

        The sections of a file are checked at :meth:`load`, except its memory-mapped float
        vectors (flat format 5 on), whose blocks of rows are checked as searches first read
        them; this reads and checks every block not checked yet. Returns a small summary.
        """
        with self._guard.reading():
            blocks = self._vector_blocks
            if blocks is not None and self._vectors:
                self._check_vector_rows(self._vectors[0], None)
            return {
                "vectors": self.ntotal,
                "vector_blocks": 0 if blocks is None else int(blocks.crcs.size),
            }

    def _check_vector_rows(self, vectors, rows) -> None:
        """Check the blocks of ``rows`` (None: all) of a loaded file's memory-mapped vectors
        before they are read. No-op for vectors in RAM or already checked."""
        blocks = self._vector_blocks  # set only while the loaded segment is the only one
        if blocks is None or blocks.all_checked:
            return
        if rows is None:
            blocks.check_all(vectors)
        else:
            rows = np.asarray(rows).reshape(-1)
            blocks.check(vectors, rows[rows >= 0])

    def __repr__(self) -> str:
        deleted = f", deleted={self.n_deleted}" if self.n_deleted else ""
        store = "" if self.store_vectors == "float32" else f", store_vectors={self.store_vectors!r}"
        return f"FlatIndex(vectors={len(self)}{deleted}, quantizer={self.quantizer!r}{store})"
