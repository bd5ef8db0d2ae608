"""faiss as the candidate generator: its coarse quantizer routes, bbqlib lists score.

For a user who already runs faiss: keep (or train) a faiss coarse quantizer — an
``IndexFlatL2`` / ``IndexFlatIP`` of centroids, an ``IndexHNSWFlat`` over many centroids, or
the quantizer of a trained ``IndexIVF*`` — and let bbqlib hold the lists as BBQ codes: faiss
picks ``nprobe`` lists per query, bbqlib scans them with its asymmetric estimate (numba) and
reranks the best on float vectors. faiss is the ``faiss-cpu`` package (``bbqlib[test]``).
"""

from __future__ import annotations

import numpy as np

from .._validation import check_vectors, prepare_for_similarity
from ..index.lists import ListsIndex, check_positive_int, make_quantizer

__all__ = ["FaissIVFIndex"]


def _faiss():
    try:
        import faiss
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "bbqlib.integrations.faiss needs faiss: pip install faiss-cpu (or bbqlib[test])"
        ) from exc
    return faiss


class FaissIVFIndex(ListsIndex):
    """IVF with a faiss coarse quantizer and bbqlib-scored lists of BBQ codes.

    Parameters
    ----------
    nlist : int
        Lists (k-means centroids) when faiss trains the coarse quantizer on the first
        :meth:`add`; ignored when ``coarse`` is given.
    nprobe : int
        Lists visited per query (can be changed per search).
    bits, similarity, oversample
        Code bits, similarity and rerank oversample, as :class:`~bbqlib.FlatIndex`.
    coarse : faiss.Index, optional
        A trained faiss index whose stored vectors are the centroids (``IndexFlatL2``,
        ``IndexFlatIP``, ``IndexHNSWFlat``...) or a trained ``faiss.IndexIVF`` (its
        ``quantizer`` is used). It routes both the added vectors and the queries, in the
        similarity's space (normalized vectors for cosine).
    quantizer : Quantizer, optional
        A bbqlib quantizer instead of ``bits`` / ``query_bits`` / ``precondition`` / ``seed``.
    niter, seed
        faiss k-means iterations and seed (``seed`` also seeds a preconditioner).
    store_vectors : bool
        Keep float vectors for the rerank.

    Examples
    --------
    >>> import numpy as np
    >>> from bbqlib.integrations.faiss import FaissIVFIndex
    >>> X = np.random.default_rng(0).normal(size=(5000, 32)).astype(np.float32)
    >>> index = FaissIVFIndex(nlist=32, nprobe=8, bits=1, similarity="euclidean")
    >>> index.add(X)
    >>> scores, ids = index.search(X[:2], k=3)
    >>> ids[:, 0].tolist()
    [0, 1]
    """

    def __init__(
        self,
        nlist: int = 1024,
        nprobe: int = 16,
        bits: int = 1,
        similarity: str = "cosine",
        oversample: float | None = None,
        *,
        coarse=None,
        quantizer=None,
        query_bits="auto",
        precondition=None,
        niter: int = 20,
        seed: int = 1234,
        store_vectors: bool = True,
    ):
        q = make_quantizer(quantizer, bits, query_bits, similarity, precondition, seed)
        super().__init__(q, nprobe, oversample, store_vectors)
        self.nlist_param = check_positive_int(nlist, "nlist")
        self.niter = check_positive_int(niter, "niter")
        self.seed = seed
        self.coarse = None if coarse is None else self._coarse_from(coarse)

    @staticmethod
    def _coarse_from(index):
        faiss = _faiss()
        if not isinstance(index, faiss.Index):
            raise TypeError(f"coarse must be a faiss Index, got {type(index).__name__}")
        ivf = faiss.try_extract_index_ivf(index)
        if ivf is not None:
            index = ivf.quantizer
        if not index.is_trained or index.ntotal == 0:
            raise ValueError(
                "coarse must hold the centroids (a trained index with ntotal > 0); "
                f"got ntotal={index.ntotal}"
            )
        return index

    def _train_coarse(self, Xp: np.ndarray):
        faiss = _faiss()
        q = self.quantizer
        nlist = min(self.nlist_param, len(Xp))
        ip = not q.similarity_.is_distance
        km = faiss.Kmeans(
            Xp.shape[1],
            nlist,
            niter=self.niter,
            seed=int(self.seed) if self.seed is not None else 1234,
            spherical=q.similarity_.value == "cosine",
            verbose=False,
        )
        km.train(Xp)
        coarse = faiss.IndexFlatIP(Xp.shape[1]) if ip else faiss.IndexFlatL2(Xp.shape[1])
        coarse.add(km.centroids)
        return coarse

    def add(self, X, ids=None) -> None:
        """Encode vectors into the lists faiss assigns them to (like ``add_with_ids``).

        ``ids``: int64 >= 0, unique (default: the largest id so far + 1, + 2, ...);
        :meth:`search` returns them.
        """
        with self._exclusive():  # searches see the index before or after this add
            X, new = self._prepare_add(X, ids)
            Xp = prepare_for_similarity(X, self.quantizer.similarity_, "X")
            if self.coarse is None:
                self.coarse = self._train_coarse(Xp)
            if self.coarse.d != Xp.shape[1]:
                raise ValueError(
                    f"coarse has dimension {self.coarse.d} but X has {Xp.shape[1]}; pass a "
                    "coarse quantizer trained on these vectors"
                )
            _, assign = self.coarse.search(Xp, 1)
            self._store(X, assign[:, 0], self.coarse.ntotal, new)

    def _route(self, Q: np.ndarray, nprobe: int) -> np.ndarray:
        _, lists = self.coarse.search(check_vectors(Q, "queries"), nprobe)
        return lists

    def __repr__(self) -> str:
        return (
            f"FaissIVFIndex(ntotal={self.ntotal}, nlist={self.nlist}, nprobe={self.nprobe}, "
            f"quantizer={self.quantizer!r})"
        )
