"""bbqlib codes stored list by list, with lists chosen by another engine (IVF-shaped adapters).

An engine (a faiss coarse quantizer, an hnswlib graph over centroids) routes each query to a
few lists; bbqlib scores every doc of those lists with its asymmetric estimate in one numba
kernel (the IVF list kernels of :data:`bbqlib.layouts.kernels.KERNELS`, every list coded against the
quantizer's one centre), keeps the best ``k' = ceil(k · oversample)`` and reranks them on
float vectors.
"""

from __future__ import annotations

import numpy as np

from .._params import check_int
from .._validation import check_vectors, owned_rows, prepare_for_similarity
from ..layouts.lists import scan_lists_of_codes
from ..quantizers import EncodedVectors, Quantizer
from ..search.rerank import check_oversample, exact_mode, exact_values, rerank_keys
from ..search.topk import EMPTY_ID, merge_topk
from .base import Index, index_quantizer
from .guard import IndexGuard
from .ids import RowIds


def check_positive_int(value, name: str) -> int:
    return check_int(value, name, 1)


def make_quantizer(quantizer, bits, query_bits, similarity, precondition, seed) -> Quantizer:
    """The quantizer of a lists index (:func:`bbqlib.index.base.index_quantizer`); ``seed``
    also seeds the engine's own training, so it goes to the default quantizer only."""
    extra = {"seed": seed} if quantizer is None else {}
    return index_quantizer(quantizer, "the lists index", bits=bits, query_bits=query_bits,
                           similarity=similarity, precondition=precondition, **extra)  # fmt: skip


class ListsIndex(Index):
    """Codes grouped by list; subclasses provide ``_route(Q, nprobe)`` and the lists.

    State after :meth:`_store`: ``_codes`` (EncodedVectors in list order), ``_rows``
    (insertion row of each entry: what the kernels return), ``_assign`` (list of each entry),
    ``_list_ptr`` (entry range of each list), ``_vectors`` (prepared float vectors in
    insertion order, or None), ``_ids`` (the caller's id of each row, :class:`RowIds`).
    """

    kind = "lists"
    pad_default = True  # exactly k columns, as faiss returns them

    def __init__(self, quantizer: Quantizer, nprobe: int, oversample, store_vectors: bool):
        self.quantizer = quantizer
        self.nprobe = check_positive_int(nprobe, "nprobe")
        self.oversample = None if oversample is None else check_oversample(oversample, 1.0)
        self.store_vectors = bool(store_vectors)
        self._codes: EncodedVectors | None = None
        self._rows = np.empty(0, dtype=np.int64)
        self._ids = RowIds()
        self._assign = np.empty(0, dtype=np.int64)
        self._list_ptr = np.zeros(1, dtype=np.int64)
        self._vectors: np.ndarray | None = None
        self._guard = IndexGuard()  # subclasses' add runs under self._exclusive()

    # -- to implement ---------------------------------------------------------------------
    def _route(self, Q: np.ndarray, nprobe: int) -> np.ndarray:  # pragma: no cover
        """Lists to visit per prepared query: int64 [nq, nprobe] (``-1``: none)."""
        raise NotImplementedError

    # -- shared -----------------------------------------------------------------------------
    @property
    def ntotal(self) -> int:
        return 0 if self._codes is None else len(self._codes)

    @property
    def nlist(self) -> int:
        return len(self._list_ptr) - 1

    @property
    def list_sizes(self) -> np.ndarray:
        return np.diff(self._list_ptr)

    def _prepare_add(self, X, ids=None) -> tuple[np.ndarray, np.ndarray | None]:
        """Validated float32 rows and ids (:meth:`RowIds.new_ids`); fits the quantizer on
        the first call, after both were checked."""
        q = self.quantizer
        X = owned_rows(check_vectors(X, "X", dim=q.dim_ if q.is_fitted else None), X)
        new = self._ids.new_ids(ids, X.shape[0], None)
        if not q.is_fitted:
            q.fit(X)
        return X, new

    def _store(self, X: np.ndarray, assign: np.ndarray, nlist: int, new_ids=None) -> None:
        """Append encoded ``X`` with list ``assign`` of each row; regroup rows by list.

        ``new_ids``: the rows' ids from :meth:`_prepare_add` (None: the defaults).
        """
        q = self.quantizer
        assign = np.asarray(assign, dtype=np.int64).reshape(-1)
        if assign.shape[0] != X.shape[0] or (assign.size and assign.min() < 0):
            raise ValueError("the router left vectors without a list (empty coarse quantizer?)")
        start = self.ntotal
        enc = q.encode(X)
        if self.store_vectors:
            Xp = prepare_for_similarity(X, q.similarity_, "X")
            self._vectors = Xp if self._vectors is None else np.concatenate([self._vectors, Xp])
        if self._codes is not None:
            enc = EncodedVectors.concatenate([self._codes, enc])
        rows = np.concatenate([self._rows, np.arange(start, start + len(X), dtype=np.int64)])
        rows_assign = np.concatenate([self._assign, assign])
        order = np.argsort(rows_assign, kind="stable")  # earlier rows first
        self._codes = enc[order]
        self._rows = rows[order]
        self._ids = self._ids.appended(new_ids, len(X))
        self._assign = rows_assign[order]
        counts = np.bincount(self._assign, minlength=nlist)
        self._list_ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)

    def search(
        self, queries, k: int = 10, *, nprobe=None, oversample=None, rerank=True,
        scores: str = "raw", pad_to_k: bool | None = True,
    ):  # fmt: skip
        """Search: ``(scores, ids)`` [nq, k] like :meth:`bbqlib.FlatIndex.search`.

        Parameters
        ----------
        queries : float array [nq, d] or [d]
        k : int
        nprobe : int, optional
            Lists visited per query (default: the constructor's).
        oversample : float >= 1, optional
            Candidates kept for the float rerank: ``ceil(k · oversample)``.
        rerank : bool, default True
            Rerank on the float vectors (needs ``store_vectors=True``); ``None``: when the
            index keeps them.
        scores : {"raw", "similarity"}
            As :meth:`bbqlib.FlatIndex.search`: raw cosine / inner product / squared L2 by
            default, Lucene's mapping with ``"similarity"``.
        pad_to_k : bool
            ``True`` (the default; ``None`` means the same): exactly ``k`` columns, as faiss
            returns them, even when ``k`` exceeds :attr:`ntotal`. ``False``:
            ``min(k, ntotal)`` columns, as :meth:`bbqlib.FlatIndex.search` returns them
            until bbqlib 0.4.

        Returns
        -------
        scores : float32 [nq, k]
            Missing results score ``+inf`` (raw squared L2) or ``-inf`` (raw inner products
            and cosines, ``scores="similarity"``).
        ids : int64 [nq, k]
            The ids given to ``add`` (row numbers by default), ``-1`` padding.

        ``k`` is checked before anything is allocated: results over half the machine's
        memory (``k=10**12``, say) raise ``ValueError``. Thread-safe, also during an
        ``add`` (the search sees the index before or after it).
        """
        with self._guard.reading():
            return self._search(queries, k, nprobe, oversample, rerank, scores, pad_to_k)

    def _search(self, queries, k, nprobe, oversample, rerank, scores, pad_to_k):
        q = self.quantizer
        q._check_fitted()
        opts = self._search_options(k, oversample, rerank, scores, pad_to_k)
        nprobe = self.nprobe if nprobe is None else check_positive_int(nprobe, "nprobe")
        Q = q._validated(queries, "queries", allow_1d=True)
        n = self.ntotal
        columns = opts.columns(n, len(Q))
        k = min(opts.k, n)  # the scan and rerank find at most n; finish pads to ``columns``
        sim = q.similarity_
        if n == 0:
            empty = np.empty((len(Q), 0))
            return self._finish(empty, np.empty((len(Q), 0), np.int64), columns, opts.scores)
        probes = np.ascontiguousarray(self._route(Q, min(nprobe, self.nlist)), dtype=np.int64)
        keys, rows = self._scan(Q, probes, opts.depth(n))
        if opts.rerank:
            raw = exact_values(Q, self._vectors, rows, exact_mode(sim))
            keys, rows = rerank_keys(raw, rows, k, sim)
        return self._finish(keys, rows, columns, opts.scores)

    def _scan(self, Q: np.ndarray, probes: np.ndarray, depth: int):
        """Best ``depth`` per query over the probed lists: keys (``-d²`` or ip), rows."""
        q = self.quantizer
        docs = q._cached_doc_codes(self._codes)
        qc = q._query_codes(Q)
        nq = len(Q)
        valid = probes >= 0
        counts = valid.sum(axis=1)
        pair_list = np.ascontiguousarray(probes[valid], dtype=np.int32)
        pair_query = np.repeat(np.arange(nq), counts)
        pair_start = np.zeros(nq + 1, dtype=np.int64)
        np.cumsum(counts, out=pair_start[1:])
        list_cc = np.full(self.nlist, docs.centroid_dot)  # one centre for every list
        keys = np.full((nq, depth), -np.inf)
        ids = np.full((nq, depth), EMPTY_ID, dtype=np.int64)
        scan_lists_of_codes(qc, docs, (pair_query, pair_list, pair_start), self._list_ptr,
                            self._rows, list_cc, keys, ids)  # fmt: skip
        keys, ids = merge_topk(keys, ids, depth)  # the kernel leaves heaps
        return keys, np.where(ids == EMPTY_ID, -1, ids)

    @property
    def memory_usage(self) -> int:
        """RAM bytes of codes, corrections, rows, ids and list offsets (float vectors
        excluded)."""
        if self._codes is None:
            return 0
        custom = 0 if self._ids.is_identity else self._ids.ids.nbytes
        return self._codes.nbytes + self._rows.nbytes + custom + self._list_ptr.nbytes
