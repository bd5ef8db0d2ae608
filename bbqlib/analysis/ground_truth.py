"""Exact k-nearest-neighbour ground truth, computed in float64 blocks.

The shared evaluation data (``gt_ip.npy``, ``gt_l2.npy``) was produced the same way:
float64 matrix products over blocks of queries and base vectors, top-k kept per block
and merged, ties broken by the lower base id. :func:`exact_knn` reproduces those files,
so a user can make ground truth for their own vectors that agrees with ours.
"""

from __future__ import annotations

import warnings

import numpy as np

__all__ = ["exact_knn"]

_METRICS = {
    "ip": "ip",
    "inner_product": "ip",
    "dot_product": "ip",
    "max_inner_product": "ip",
    "mip": "ip",
    "l2": "l2",
    "euclidean": "l2",
    "l2_norm": "l2",
    "cosine": "cosine",
}


def _as_matrix(x, name: str) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim == 1:
        x = x.reshape(1, -1)
    if x.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array [n, d]; got shape {x.shape}. Reshape it.")
    if not np.issubdtype(x.dtype, np.floating):
        raise TypeError(
            f"{name} must hold floats; got dtype {x.dtype}. Convert with {name}.astype(np.float32)."
        )
    if x.shape[0] == 0:
        raise ValueError(f"{name} is empty (shape {x.shape}); pass at least one vector.")
    return x


def _normalized(x: np.ndarray, name: str) -> np.ndarray:
    norms = np.linalg.norm(x, axis=1, keepdims=True)
    if np.any(norms == 0):
        bad = int(np.flatnonzero(norms[:, 0] == 0)[0])
        raise ValueError(
            f"{name} row {bad} is a zero vector, which has no cosine similarity; "
            "drop zero rows or use metric='ip' or 'l2'."
        )
    return x / norms


def _merge_topk(keys: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` of each row by ``keys`` (higher first), ties broken by the lower id.

    ``keys`` and ``ids`` are [m, c] with c >= k. Partitioning finds the k-th key; rows where
    more than k entries reach it (a tie straddling the cut) are resolved by a full sort of
    that row's candidates, so the result is exact whatever ``argpartition`` picked.
    """
    m, c = keys.shape
    rows = np.arange(m)[:, None]
    if c > k:
        part = np.argpartition(-keys, k - 1, axis=1)[:, :k]
        kth = keys[rows, part].min(axis=1)
        at_least = (keys >= kth[:, None]).sum(axis=1)
        sel_keys = keys[rows, part]
        sel_ids = ids[rows, part]
        for r in np.flatnonzero(at_least > k):  # rare: only rows with a tie at the cut
            cand = np.flatnonzero(keys[r] >= kth[r])
            order = np.lexsort((ids[r, cand], -keys[r, cand]))[:k]
            sel_keys[r] = keys[r, cand[order]]
            sel_ids[r] = ids[r, cand[order]]
    else:
        sel_keys, sel_ids = keys, ids
    order = np.lexsort((sel_ids, -sel_keys), axis=1)
    return sel_keys[rows, order], sel_ids[rows, order]


def exact_knn(
    base,
    queries,
    k: int,
    metric: str = "ip",
    block: int = 16_384,
    query_block: int = 256,
    *,
    scores_first: bool | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-``k`` neighbours of every query, in float64, ties broken by the lower id.

    Parameters
    ----------
    base : array_like, float [n, d]
        Vectors to search (may be a memory-mapped array; it is read one block at a time).
    queries : array_like, float [nq, d]
        Query vectors.
    k : int
        Neighbours per query; ``1 <= k <= n``.
    metric : {"ip", "l2", "cosine"}
        ``"ip"``: largest inner product first (aliases ``dot_product``, ``max_inner_product``,
        ``mip``). ``"l2"``: smallest squared euclidean distance first (aliases ``euclidean``,
        ``l2_norm``). ``"cosine"``: largest cosine similarity first (both sides normalized
        in float64; zero vectors raise).
    block : int
        Base vectors per block; memory is about ``8 * query_block * block`` bytes.
    query_block : int
        Queries per block.
    scores_first : bool, optional
        ``True``: return ``(scores, ids)``, the order of every ``search`` in bbqlib (and of
        faiss). ``False``: the old order ``(ids, scores)``. ``None`` (the default until the
        change): the old order with a :class:`FutureWarning`; the default becomes ``True`` in
        bbqlib 0.4 (see the deprecation policy in ``CHANGELOG.md``). Pass ``True`` now.

    Returns
    -------
    scores : ndarray, float64 [nq, k]
        Inner products (``ip``), squared distances (``l2``) or cosine similarities
        (``cosine``) of the neighbours. The shared data's ``gt_*`` files hold these scores
        rounded to float32.
    ids : ndarray, int64 [nq, k]
        Base row numbers, best first (the ``gt_*`` files hold the same ids as int32).

    Notes
    -----
    The tuple is ``(scores, ids)`` with ``scores_first=True`` and ``(ids, scores)`` otherwise
    (deprecated).

    Squared distances are expanded as ``|x|^2 - 2<x, q> + |q|^2`` in float64, which loses
    no ranking information for float32 inputs of ordinary magnitude.

    Examples
    --------
    >>> import numpy as np
    >>> from bbqlib.analysis.ground_truth import exact_knn
    >>> X = np.eye(4, dtype=np.float32)
    >>> scores, ids = exact_knn(X, X[:2] + 0.1, k=2, metric="l2", scores_first=True)
    >>> ids.tolist()
    [[0, 1], [1, 0]]
    """
    if scores_first is None:
        warnings.warn(
            "exact_knn returns (ids, scores) by default; from bbqlib 0.4 it returns "
            "(scores, ids) like every search in bbqlib. Pass scores_first=True to get "
            "(scores, ids) now, or scores_first=False to keep (ids, scores) and silence "
            "this warning.",
            FutureWarning,
            stacklevel=2,
        )
    elif not isinstance(scores_first, (bool, np.bool_)):
        raise TypeError(
            f"scores_first must be True, False or None; got {type(scores_first).__name__}."
        )
    if metric not in _METRICS:
        raise ValueError(
            f"metric must be one of {sorted(_METRICS)}; got {metric!r}. Use 'ip', 'l2' or 'cosine'."
        )
    kind = _METRICS[metric]
    base = _as_matrix(base, "base")
    queries = _as_matrix(queries, "queries")
    n, d = base.shape
    if queries.shape[1] != d:
        raise ValueError(
            f"queries have dimension {queries.shape[1]} but base has {d}; they must match."
        )
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
        raise TypeError(f"k must be an int; got {type(k).__name__}.")
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, {n}] (the number of base vectors); got {k}.")
    for name, value in (("block", block), ("query_block", query_block)):
        if not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{name} must be a positive int; got {value!r}.")

    q64 = queries.astype(np.float64)
    if kind == "cosine":
        q64 = _normalized(q64, "queries")
    nq = q64.shape[0]
    out_ids = np.empty((nq, k), dtype=np.int64)
    out_scores = np.empty((nq, k), dtype=np.float64)

    for q0 in range(0, nq, query_block):
        qb = q64[q0 : q0 + query_block]
        q_sq = np.einsum("ij,ij->i", qb, qb)[:, None] if kind == "l2" else None
        best_keys = np.empty((qb.shape[0], 0))
        best_ids = np.empty((qb.shape[0], 0), dtype=np.int64)
        for b0 in range(0, n, block):
            xb = np.asarray(base[b0 : b0 + block], dtype=np.float64)
            if kind == "cosine":
                xb = _normalized(xb, "base")
            ip = qb @ xb.T
            if kind == "l2":
                # Negated distance so that "higher key is better" for every metric.
                keys = -((q_sq - 2.0 * ip) + np.einsum("ij,ij->i", xb, xb)[None, :])
            else:
                keys = ip
            ids = np.broadcast_to(np.arange(b0, b0 + xb.shape[0], dtype=np.int64), keys.shape)
            keys = np.concatenate([best_keys, keys], axis=1)
            ids = np.concatenate([best_ids, ids], axis=1)
            best_keys, best_ids = _merge_topk(keys, ids, min(k, keys.shape[1]))
        out_ids[q0 : q0 + qb.shape[0]] = best_ids
        out_scores[q0 : q0 + qb.shape[0]] = -best_keys if kind == "l2" else best_keys
    if scores_first:
        return out_scores, out_ids
    return out_ids, out_scores
