"""hnswlib as the candidate generator: an HNSW graph over centroids routes to bbqlib lists.

For a user who already runs hnswlib: the graph holds a few thousand k-means centroids instead
of every vector (float32 stays affordable there), finds the ``nprobe`` nearest centroids of a
query, and bbqlib scans those lists of BBQ codes with its asymmetric estimate, then reranks on
float vectors. The centroids come from bbqlib's hierarchical k-means
(:func:`bbqlib.index.clustering.hierarchical_kmeans`) unless given. hnswlib is the
``bbqlib[bench]`` extra (``pip install hnswlib``).
"""

from __future__ import annotations

import numpy as np

from .._validation import check_vectors, prepare_for_similarity
from ..index.lists import ListsIndex, check_positive_int, make_quantizer

__all__ = ["HnswlibIVFIndex"]


def _hnswlib():
    try:
        import hnswlib
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "bbqlib.integrations.hnswlib needs hnswlib: pip install hnswlib (or bbqlib[bench])"
        ) from exc
    return hnswlib


class HnswlibIVFIndex(ListsIndex):
    """IVF whose centroids live in an hnswlib graph; the lists are bbqlib BBQ codes.

    Parameters
    ----------
    cluster_size : int
        Target vectors per list for the k-means run on the first :meth:`add` (64..65536).
    nprobe : int
        Lists visited per query (can be changed per search).
    bits, similarity, oversample
        Code bits, similarity and rerank oversample, as :class:`~bbqlib.FlatIndex`.
    M, ef_construction, ef
        hnswlib graph parameters; ``ef`` (search) is raised to ``nprobe`` when smaller.
    centroids : float array [c, d], optional
        Your own centroids (in the similarity's space: normalized data for cosine).
    quantizer : Quantizer, optional
        A bbqlib quantizer instead of ``bits`` / ``query_bits`` / ``precondition`` / ``seed``.
    seed : int
        Seed of the k-means run and of hnswlib's level generator.
    store_vectors : bool
        Keep float vectors for the rerank.

    Notes
    -----
    The graph uses hnswlib's ``l2`` space for euclidean and cosine (unit vectors) and ``ip``
    for dot_product and max_inner_product; vectors go to the list of the graph's nearest
    centroid, so adding and searching route the same way.

    Examples
    --------
    >>> import numpy as np
    >>> from bbqlib.integrations.hnswlib import HnswlibIVFIndex
    >>> X = np.random.default_rng(0).normal(size=(5000, 32)).astype(np.float32)
    >>> index = HnswlibIVFIndex(cluster_size=128, nprobe=8, similarity="euclidean")
    >>> index.add(X)
    >>> scores, ids = index.search(X[:2], k=3)
    >>> ids[:, 0].tolist()
    [0, 1]
    """

    def __init__(
        self,
        cluster_size: int = 384,
        nprobe: int = 16,
        bits: int = 1,
        similarity: str = "cosine",
        oversample: float | None = None,
        *,
        M: int = 16,
        ef_construction: int = 200,
        ef: int = 64,
        centroids=None,
        quantizer=None,
        query_bits="auto",
        precondition=None,
        seed: int = 42,
        store_vectors: bool = True,
        threads: int = 1,
    ):
        q = make_quantizer(quantizer, bits, query_bits, similarity, precondition, seed)
        super().__init__(q, nprobe, oversample, store_vectors)
        self.cluster_size = check_positive_int(cluster_size, "cluster_size")
        self.M = check_positive_int(M, "M")
        self.ef_construction = check_positive_int(ef_construction, "ef_construction")
        self.ef = check_positive_int(ef, "ef")
        self.seed = int(seed)
        self.threads = check_positive_int(threads, "threads")
        self.centroids = None if centroids is None else check_vectors(centroids, "centroids")
        self.graph = None

    def _build_graph(self, Xp: np.ndarray) -> None:
        hnswlib = _hnswlib()
        C = self.centroids
        if C is None:
            from ..index.clustering import hierarchical_kmeans

            target = min(max(self.cluster_size, 64), 65536)
            C, _ = hierarchical_kmeans(Xp, target_size=target, seed=self.seed)
        elif C.shape[1] != Xp.shape[1]:
            raise ValueError(
                f"centroids have dimension {C.shape[1]} but X has {Xp.shape[1]}; "
                "pass centroids of these vectors"
            )
        space = "l2" if self.quantizer.similarity_.value in ("euclidean", "cosine") else "ip"
        graph = hnswlib.Index(space=space, dim=C.shape[1])
        graph.init_index(
            max_elements=len(C),
            ef_construction=self.ef_construction,
            M=self.M,
            random_seed=self.seed,
        )
        graph.add_items(C, np.arange(len(C)), num_threads=self.threads)
        self.centroids = np.asarray(C, dtype=np.float32)
        self.graph = graph

    def add(self, X, ids=None) -> None:
        """Encode vectors into the list of their nearest centroid.

        ``ids``: int64 >= 0, unique (default: the largest id so far + 1, + 2, ...);
        :meth:`search` returns them.
        """
        with self._exclusive():  # searches see the index before or after this add
            X, new = self._prepare_add(X, ids)
            Xp = prepare_for_similarity(X, self.quantizer.similarity_, "X")
            if self.graph is None:
                self._build_graph(Xp)
            self.graph.set_ef(max(self.ef, 1))
            labels, _ = self.graph.knn_query(Xp, k=1, num_threads=self.threads)
            self._store(X, labels[:, 0], len(self.centroids), new)

    def _route(self, Q: np.ndarray, nprobe: int) -> np.ndarray:
        self.graph.set_ef(max(self.ef, nprobe))
        labels, _ = self.graph.knn_query(Q, k=nprobe, num_threads=self.threads)
        return labels.astype(np.int64)

    def __repr__(self) -> str:
        return (
            f"HnswlibIVFIndex(ntotal={self.ntotal}, nlist={self.nlist}, nprobe={self.nprobe}, "
            f"quantizer={self.quantizer!r})"
        )
