"""Scorers any engine can call: estimates and exact values for a list of candidate ids.

A graph or IVF engine produces candidate ids between its own steps; these callables score
them with bbqlib's asymmetric estimate (:class:`CandidateScorer`, made by
:meth:`bbqlib.Quantizer.scorer`) and exactly on float vectors (:func:`exact_scorer`). The
query is quantized once, when the scorer is made; each call is one numba kernel over the ids.
"""

from __future__ import annotations

import numpy as np

from .._kernels import candidates as candidates_kernels
from .._validation import check_vectors, prepare_for_similarity
from ..layouts.codes import DocCodes, QueryCodes
from ..layouts.kernels import kernels_for, packed_args
from ..similarity import Similarity, resolve_similarity
from .rerank import exact_mode, exact_values

__all__ = [
    "CandidateScorer",
    "ExactScorer",
    "check_ids",
    "exact_candidates",
    "exact_scorer",
    "score_candidates",
]


def check_ids(ids, n: int, name: str = "ids") -> np.ndarray:
    """Candidate ids as a 1-D int64 array, every id in ``[0, n)``.

    Accepts any integer dtype (usearch and hnswlib return uint64 keys, faiss int64).
    """
    arr = np.asarray(ids)
    if arr.ndim == 1 and arr.size == 0:
        return np.empty(0, dtype=np.int64)
    if arr.dtype.kind not in "iu":
        raise TypeError(
            f"{name} must be an array of integer ids, got dtype {arr.dtype}; "
            f"convert with np.asarray({name}, dtype=np.int64)"
        )
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D (one id per candidate), got shape {arr.shape}")
    out = np.ascontiguousarray(arr, dtype=np.int64)
    if out.size:
        lo, hi = candidates_kernels.id_range(out)
        # uint64 ids above 2**63 wrap to negative values and are caught by lo < 0.
        if lo < 0 or hi >= n:
            bad = arr[(out < 0) | (out >= n)][0]
            raise ValueError(
                f"{name} must lie in [0, {n}) (rows of the encoded vectors), got {bad!r}; "
                "drop padding such as -1 before scoring"
            )
    return out


def score_candidates(query: QueryCodes, docs: DocCodes, ids) -> np.ndarray:
    """Estimates of each query against its own candidate ids, in parallel over queries.

    Parameters
    ----------
    query : QueryCodes
        ``nq`` quantized queries (:meth:`bbqlib.Quantizer.query_codes`).
    docs : DocCodes
        The docs as the kernels see them.
    ids : int array [nq, m]
        Candidate rows per query; ``-1`` marks padding (engines return short lists).

    Returns
    -------
    float32 [nq, m]
        Raw estimates (squared L2 or inner product); ``nan`` at padding.
    """
    ids = np.asarray(ids)
    if ids.ndim != 2 or ids.shape[0] != len(query):
        raise ValueError(
            f"ids must be [nq, m] with nq = {len(query)} (one row per query), got {ids.shape}"
        )
    ids = np.ascontiguousarray(ids, dtype=np.int64)
    if ids.size and ids.max() >= len(docs):
        raise ValueError(f"ids must be below {len(docs)} (the number of docs), got {ids.max()}")
    args = packed_args(query, docs)
    out = np.empty(ids.shape, dtype=np.float32)
    if ids.size:
        kernels_for(query, docs).ids_parallel(*args, ids, out)
    return out


class CandidateScorer:
    """``score_ids(ids)``: raw estimates of one quantized query against chosen docs.

    Made by :meth:`bbqlib.Quantizer.scorer`; calling it returns float32 estimates for ``ids``
    equal to ``quantizer.estimate(query, enc)[0, ids]`` (squared L2 for euclidean, the
    inner product otherwise): same factors, same kernel arithmetic.

    Parameters
    ----------
    query : QueryCodes
        One quantized query (``len(query) == 1``).
    docs : DocCodes
        The docs as the kernels see them.
    """

    __slots__ = ("_call", "_args", "n", "query", "docs")

    def __init__(self, query: QueryCodes, docs: DocCodes):
        if len(query) != 1:
            raise ValueError(f"a scorer takes exactly one query, got {len(query)}")
        self._args = packed_args(query, docs)
        self._call = kernels_for(query, docs).ids
        self.query = query
        self.docs = docs
        self.n = len(docs)

    def __call__(self, ids) -> np.ndarray:
        """Float32 raw estimates [len(ids)] of the query against docs ``ids``."""
        ids = check_ids(ids, self.n)
        out = np.empty((1, ids.shape[0]), dtype=np.float32)
        if ids.shape[0]:
            self._call(*self._args, ids.reshape(1, -1), out)
        return out[0]

    def __repr__(self) -> str:
        return f"CandidateScorer(n={self.n}, layout={self.docs.kind!r}, query={self.query.kind!r})"


class ExactScorer:
    """``score_ids(ids)``: exact raw values (float64) of one query against float vectors.

    Made by :func:`exact_scorer`.
    """

    __slots__ = ("query", "vectors", "similarity", "_mode", "n")

    def __init__(self, query: np.ndarray, vectors: np.ndarray, similarity: Similarity, mode: int):
        self.query = query
        self.vectors = vectors
        self.similarity = similarity
        self._mode = mode
        self.n = vectors.shape[0]

    def __call__(self, ids) -> np.ndarray:
        """Float64 exact values [len(ids)]: squared L2 (euclidean) or inner product / cosine."""
        ids = check_ids(ids, self.n)
        return exact_values(
            self.query[None, :], self.vectors, ids[None, :], self._mode, parallel=False
        )[0]

    def __repr__(self) -> str:
        return f"ExactScorer(n={self.n}, similarity={self.similarity.value!r})"


def exact_scorer(query, vectors, similarity="cosine") -> ExactScorer:
    """A callable scoring one query exactly against the float vectors at candidate ids.

    The float half of proxy-then-rerank for engines that bring their own candidates: pair it
    with :meth:`bbqlib.Quantizer.scorer` (estimates) to rescore a shortlist.

    Parameters
    ----------
    query : float array [d]
        One query (normalized here for cosine; the caller's array is not modified).
    vectors : float array [n, d]
        The docs, float16/32/64; a memory-mapped array is read only at the candidate rows.
        Not copied: it must not change while the scorer is used.
    similarity : str or Similarity
        ``"euclidean"`` gives squared L2; ``"cosine"`` divides each inner product by the
        doc's norm (docs need not be normalized); ``"dot_product"`` and
        ``"max_inner_product"`` give the inner product.

    Returns
    -------
    ExactScorer
        ``score_ids(ids) -> float64 [len(ids)]`` raw values, summed in float64.

    Examples
    --------
    >>> import numpy as np
    >>> from bbqlib.integrations import exact_scorer
    >>> X = np.eye(3, dtype=np.float32)
    >>> exact_scorer(X[0], X, "euclidean")([0, 1]).tolist()
    [0.0, 2.0]
    """
    sim = resolve_similarity(similarity)
    q = check_vectors(query, "query", allow_1d=True)
    if q.shape[0] != 1:
        raise ValueError(f"query must be one vector [d], got shape {np.shape(query)}")
    vec = vectors if isinstance(vectors, np.ndarray) else np.asarray(vectors)
    if isinstance(vec, np.memmap):  # numba takes the plain ndarray view of the same pages
        vec = vec.view(np.ndarray)
    if vec.ndim != 2 or vec.dtype.kind != "f":
        raise TypeError(
            f"vectors must be a 2-D float array [n, d], got {vec.dtype} of shape {vec.shape}"
        )
    if vec.shape[1] != q.shape[1]:
        raise ValueError(
            f"query has dimension {q.shape[1]} but vectors have {vec.shape[1]}; "
            "pass matching arrays"
        )
    if sim is Similarity.COSINE:
        q = prepare_for_similarity(q, sim, "query")
    return ExactScorer(q[0], vec, sim, exact_mode(sim, normalized=False))


def exact_candidates(queries, vectors, ids, similarity, *, normalized: bool = False):
    """Exact raw values of each query against its candidate rows of float vectors.

    Parameters
    ----------
    queries : float32 [nq, d]
        Prepared queries (unit length for cosine).
    vectors : float array [n, d]
        Memory-mapped arrays are read only at the candidate rows; float16 rows are gathered.
    ids : int array [nq, m]
        Candidate rows, ``-1`` padding (gives ``nan``).
    similarity : Similarity
    normalized : bool
        For cosine: the vectors are unit length already (skip the per-doc norm).

    Returns
    -------
    float64 [nq, m]
    """
    sim = resolve_similarity(similarity)
    return exact_values(queries, vectors, ids, exact_mode(sim, normalized=normalized))
