"""usearch's HNSW graph over BBQ codes: usearch walks, bbqlib scores.

usearch (``pip install usearch``, or ``bbqlib[test]``) builds and searches its graph with a
metric compiled by numba (:func:`bbqlib._kernels.candidates.doc_doc_metric`) over byte records
(:mod:`bbqlib.integrations.records`: packed codes + correction factors). Its metric is symmetric,
so the graph is built and searched with the doc × doc estimate (the query is encoded as a doc);
bbqlib then rescores usearch's candidates with its asymmetric estimate (4-bit query against
the codes) and reranks the best of those on float vectors, which may be memory-mapped.

Pitfall (usearch 2.26): ``dtype="u8"`` rewrites arbitrary byte records; records are handed to
usearch as ``i8`` views, which it stores untouched (tested).
"""

from __future__ import annotations

import numpy as np

from .._validation import check_vectors, owned_rows, prepare_for_similarity
from ..index.base import Index, index_quantizer
from ..index.guard import IndexGuard
from ..index.ids import RowIds
from ..quantizers import Quantizer
from ..search.candidates import score_candidates
from ..search.rerank import check_oversample, exact_mode, exact_values, rerank_keys
from .records import RecordLayout, make_records

__all__ = ["USearchIndex"]


def _usearch():
    try:
        import usearch.index as usearch_index
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "bbqlib.integrations.usearch needs usearch: pip install usearch (or bbqlib[test])"
        ) from exc
    return usearch_index


def _check_int(value, name: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


class USearchIndex(Index):
    """HNSW (usearch) over BBQ codes, with asymmetric rescoring and float rerank.

    Parameters
    ----------
    bits : {1, 2, 4, 7, 8}
        Bits per dimension of the codes (passed to :class:`~bbqlib.BBQQuantizer`).
    similarity : str
        ``"cosine"``, ``"dot_product"``, ``"euclidean"`` or ``"max_inner_product"``.
    connectivity, expansion_add, expansion_search : int
        usearch's HNSW parameters (``M``, ``efConstruction``, ``ef``); ``expansion_search``
        can be changed after building.
    oversample : float >= 1, optional
        The asymmetric rescoring keeps ``ceil(k · oversample)`` candidates for the float
        rerank; ``None`` takes the encoding's default (3.0 at 1 bit, 1.5 at 2, 1.0 above).
    quantizer : Quantizer, optional
        A (fitted or unfitted) bbqlib quantizer instead of the BBQ parameters above.
    query_bits, precondition, seed
        Passed to :class:`~bbqlib.BBQQuantizer`.
    store_vectors : bool
        Keep the (normalized for cosine) float vectors in RAM for the rerank. With False,
        :meth:`attach_vectors` gives a memory-mapped array instead, or search with
        ``rerank=False``.
    threads : int
        usearch threads for add and search (0: all cores). numba's kernels follow
        ``numba.set_num_threads``.

    Attributes
    ----------
    quantizer : Quantizer
    layout_ : RecordLayout
        Record layout (set by the first :meth:`add`).

    Notes
    -----
    ``search`` asks usearch for ``max(expansion_search, candidates, k')`` neighbours by the
    symmetric estimate, rescores them with the quantizer's asymmetric estimate
    (:func:`~bbqlib.integrations.score_candidates`), keeps the best ``k' = ceil(k · oversample)``
    and reranks those exactly. Records live in arrays owned by this object and are handed to
    usearch without copying (``copy=False``), so the graph and the rescoring share one copy.

    Examples
    --------
    >>> import numpy as np
    >>> from bbqlib.integrations.usearch import USearchIndex
    >>> X = np.random.default_rng(0).normal(size=(2000, 64)).astype(np.float32)
    >>> index = USearchIndex(bits=1, similarity="cosine")
    >>> index.add(X)
    >>> scores, ids = index.search(X[:3], k=5)
    >>> ids[:, 0].tolist()
    [0, 1, 2]
    """

    kind = "usearch"
    pad_default = True  # exactly k columns, as faiss returns them
    no_vectors_message = (
        "no float vectors for the rerank (store_vectors=False): call "
        "attach_vectors(vectors) or search with rerank=False"
    )

    def __init__(
        self,
        bits: int = 1,
        similarity: str = "cosine",
        connectivity: int = 16,
        expansion_add: int = 128,
        expansion_search: int = 64,
        oversample: float | None = None,
        *,
        quantizer: Quantizer | None = None,
        query_bits="auto",
        precondition=None,
        seed: int | None = None,
        store_vectors: bool = True,
        threads: int = 1,
    ):
        self.quantizer = index_quantizer(
            quantizer, "USearchIndex", bits=bits, query_bits=query_bits, similarity=similarity,
            precondition=precondition, seed=seed,
        )  # fmt: skip
        self.connectivity = _check_int(connectivity, "connectivity", 2)
        self.expansion_add = _check_int(expansion_add, "expansion_add", 1)
        self._expansion_search = _check_int(expansion_search, "expansion_search", 1)
        self.oversample = None if oversample is None else check_oversample(oversample, 1.0)
        self.store_vectors = bool(store_vectors)
        self.threads = _check_int(threads, "threads", 0)
        self._blocks: list[np.ndarray] = []  # records, kept alive: usearch points into them
        self._vectors: list[np.ndarray] = []
        self._attached: np.ndarray | None = None
        self._index = None
        self._metric = None
        self._ids = RowIds()  # usearch's keys are rows; the caller's ids are mapped here
        self._guard = IndexGuard()

    # -- building ---------------------------------------------------------------------------
    def _make_index(self):
        ui = _usearch()
        from .._kernels.candidates import doc_doc_metric

        q = self.quantizer
        self.layout_ = RecordLayout.for_quantizer(q)
        is_l2 = q.similarity_.is_distance
        self._metric = doc_doc_metric(self.layout_.planes, is_l2)  # keep the callback alive
        metric = ui.CompiledMetric(
            pointer=self._metric.address,
            kind=ui.MetricKind.L2sq if is_l2 else ui.MetricKind.IP,
            signature=ui.MetricSignature.ArrayArraySize,
        )
        return ui.Index(
            ndim=self.layout_.record_bytes,
            metric=metric,
            dtype="i8",
            connectivity=self.connectivity,
            expansion_add=self.expansion_add,
            expansion_search=self._expansion_search,
        )

    def add(self, X, ids=None) -> None:
        """Encode vectors and insert them into the graph.

        ``ids``: int64 >= 0, unique (default: the largest id so far + 1, + 2, ...);
        :meth:`search` returns them (usearch's own keys stay row numbers). The first call
        fits the quantizer if it is not fitted yet (its centroid stays fixed). Searches
        running meanwhile see the index before or after this add.
        """
        with self._exclusive():
            self._add(X, ids)

    def _add(self, X, ids) -> None:
        q = self.quantizer
        X = owned_rows(check_vectors(X, "X", dim=q.dim_ if q.is_fitted else None), X)
        if self._attached is not None:
            raise ValueError(
                "attach_vectors() fixed the float vectors; attach after the last add()"
            )
        new = self._ids.new_ids(ids, X.shape[0], None)
        if not q.is_fitted:
            q.fit(X)
        enc = q.encode(X)
        records = make_records(q, enc)
        if self._index is None:
            self._index = self._make_index()
        start = self.ntotal
        keys = np.arange(start, start + len(records), dtype=np.uint64)
        self._index.add(keys, records.view(np.int8), copy=False, threads=self.threads)
        self._blocks.append(records)
        if self.store_vectors:
            self._vectors.append(prepare_for_similarity(X, q.similarity_, "X"))
        self._ids = self._ids.appended(new, X.shape[0])

    def attach_vectors(self, vectors) -> None:
        """Use ``vectors`` [ntotal, d] (e.g. ``np.load(path, mmap_mode="r")``) for the rerank,
        one row per vector in insertion order.

        The array is kept, not copied (do not modify it); for cosine it need not be
        normalized. Replaces vectors stored by :meth:`add`.
        """
        with self._exclusive():
            self._attach(vectors)

    def _attach(self, vectors) -> None:
        q = self.quantizer
        q._check_fitted()
        v = vectors if isinstance(vectors, np.ndarray) else np.asarray(vectors)
        if v.ndim != 2 or v.shape != (self.ntotal, q.dim_) or v.dtype.kind != "f":
            raise ValueError(
                f"vectors must be a float array of shape ({self.ntotal}, {q.dim_}) (one row "
                f"per indexed vector), got {v.dtype} {v.shape}"
            )
        self._attached = v
        self._vectors = []

    @property
    def ntotal(self) -> int:
        return sum(len(b) for b in self._blocks)

    @property
    def expansion_search(self) -> int:
        return self._expansion_search

    @expansion_search.setter
    def expansion_search(self, value: int) -> None:
        self._expansion_search = _check_int(value, "expansion_search", 1)
        if self._index is not None:
            self._index.expansion_search = self._expansion_search

    @property
    def records(self) -> np.ndarray:
        """All records ``uint8 [ntotal, record_bytes]`` (a copy when added in batches)."""
        if not self._blocks:
            raise ValueError("the index is empty; call add(X) first")
        return self._blocks[0] if len(self._blocks) == 1 else np.concatenate(self._blocks)

    # -- memory -----------------------------------------------------------------------------
    @property
    def graph_bytes(self) -> int:
        """usearch's own allocation (graph, key table; the records are not copied into it)."""
        return 0 if self._index is None else int(self._index.memory_usage)

    @property
    def records_bytes(self) -> int:
        return sum(b.nbytes for b in self._blocks)

    @property
    def vectors_bytes(self) -> int:
        """Float vectors held in RAM for the rerank (0 when attached / memory-mapped)."""
        return sum(v.nbytes for v in self._vectors)

    @property
    def serialized_bytes(self) -> int:
        """Bytes of the index as usearch serializes it: records + graph, no allocation slack.

        A tighter per-vector figure than :attr:`memory_usage` on small indexes, where
        usearch's initial reservation dominates.
        """
        return 0 if self._index is None else int(self._index.serialized_length)

    @property
    def memory_usage(self) -> int:
        """RAM bytes of the index: graph + records (float vectors for the rerank excluded)."""
        return self.graph_bytes + self.records_bytes

    # -- searching --------------------------------------------------------------------------
    def search(
        self, queries, k: int = 10, *, oversample=None, rerank=True, candidates=None,
        scores: str = "raw", pad_to_k: bool | None = True,
    ):  # fmt: skip
        """Search: ``(scores, ids)`` [nq, k] like :meth:`bbqlib.FlatIndex.search`.

        Parameters
        ----------
        queries : float array [nq, d] or [d]
        k : int
        oversample : float >= 1, optional
            Overrides the constructor's ``oversample`` for this call.
        rerank : bool, default True
            True: rerank on float vectors (exact scores). False: the asymmetric estimates.
            ``None``: when the index has float vectors to read.
        candidates : int, optional
            usearch neighbours to rescore (at least ``expansion_search`` and ``k'``).
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
            Raw values (squared L2 ascending with ``+inf`` padding, else descending with
            ``-inf``), or Lucene-mapped scores (higher is better, ``-inf`` padding).
        ids : int64 [nq, k]
            The ids given to :meth:`add`, ``-1`` padding.

        ``k`` is checked before anything is allocated: results over half the machine's
        memory (``k=10**12``, say) raise ``ValueError``. Thread-safe, also during an
        :meth:`add` (the search sees the index before or after it).
        """
        with self._guard.reading():
            return self._search(queries, k, oversample, rerank, candidates, scores, pad_to_k)

    def _search(self, queries, k, oversample, rerank, candidates, scores, pad_to_k):
        q = self.quantizer
        q._check_fitted()
        opts = self._search_options(k, oversample, rerank, scores, pad_to_k)
        rerank = opts.rerank
        Q = q._validated(queries, "queries", allow_1d=True)
        n = self.ntotal
        columns = opts.columns(n, len(Q))
        k = min(opts.k, n)  # usearch and the rerank find at most n; finish pads to ``columns``
        if n == 0:
            return self._finish(np.empty((len(Q), 0)), np.empty((len(Q), 0), np.int64), columns,
                                opts.scores)  # fmt: skip
        vectors = self._rerank_vectors() if rerank else None
        depth = opts.depth(n)
        count = max(self._expansion_search, depth)
        if candidates is not None:
            count = max(count, _check_int(candidates, "candidates", 1))
        count = min(count, n)
        ids = self._graph_candidates(Q, count)
        sim = q.similarity_
        keys, top = rerank_keys(self._rescore(Q, ids), ids, depth, sim)
        if rerank:
            normalized = self._attached is None  # stored vectors were normalized for cosine
            exact = exact_values(Q, vectors, top, exact_mode(sim, normalized=normalized))
            keys, top = rerank_keys(exact, top, k, sim)
        return self._finish(keys, top, columns, opts.scores)

    def _rerank_ready(self) -> bool:
        # attached vectors serve too; an empty index searches without reading any
        return self.ntotal == 0 or self._attached is not None or bool(self._vectors)

    def _rerank_vectors(self):
        if self._attached is not None:
            return self._attached
        if not self._vectors:
            return None
        if len(self._vectors) > 1:
            self._vectors = [np.concatenate(self._vectors)]
        return self._vectors[0]

    def _graph_candidates(self, Q: np.ndarray, count: int) -> np.ndarray:
        """usearch's neighbours by the symmetric estimate: int64 [nq, count], -1 padding."""
        q = self.quantizer
        qrec = make_records(q, q.encode(Q))  # each query as a doc-shaped record
        found = self._index.search(qrec.view(np.int8), count, threads=self.threads)
        keys = np.atleast_2d(np.asarray(found.keys))
        counts = np.atleast_1d(np.asarray(getattr(found, "counts", [keys.shape[1]])))
        ids = np.full((len(Q), count), -1, dtype=np.int64)
        width = min(count, keys.shape[1])
        valid = np.arange(width)[None, :] < counts[:, None]
        ids[:, :width] = np.where(valid, keys[:, :width].astype(np.int64), -1)
        return ids

    def _rescore(self, Q: np.ndarray, ids: np.ndarray) -> np.ndarray:
        """Asymmetric estimates (float64 [nq, m], nan at padding) of the graph's candidates."""
        q = self.quantizer
        qc = q._query_codes(Q)
        if len(self._blocks) == 1:
            return score_candidates(qc, self.layout_.docs(self._blocks[0], q), ids)
        out = np.full(ids.shape, np.nan, dtype=np.float32)
        start = 0
        for block in self._blocks:
            local = ids - start
            inside = (ids >= start) & (local < len(block))
            got = score_candidates(qc, self.layout_.docs(block, q), np.where(inside, local, -1))
            out = np.where(inside, got, out)
            start += len(block)
        return out

    def __repr__(self) -> str:
        return (
            f"USearchIndex(ntotal={self.ntotal}, connectivity={self.connectivity}, "
            f"expansion_search={self._expansion_search}, quantizer={self.quantizer!r})"
        )
