"""Recall@k against exact ground truth, with optional tie handling.

Recall@k of one query is ``|found[:k] ∩ gt[:k]| / k``: the share of the true top-k that the
search returned in its first k results. Returned ids of ``-1`` (the padding faiss and bbqlib
use when fewer than k results exist) never count, and an id returned twice counts once.

Ties. When several base vectors share the k-th best true score, the exact top-k is not
unique, and a search that returns a different member of the tie is not wrong. Given the
true scores, a returned id that is not in ``gt[:k]`` still counts as a hit when its true
score is at least as good as the k-th ground-truth score, within ``tie_tol``. This is
ann-benchmarks' rule (``ann_benchmarks/plotting/metrics.py``: a result counts when its true
distance is ``<= distances[k-1] + epsilon``, epsilon = 1e-3 there), applied only to ids that
are not already exact hits. The true score of a returned id comes from ``found_scores``
when given (they must be *exact* scores, e.g. after a float rerank, not estimates) or else
from the full ground-truth row (``gt_ids`` may be longer than k, e.g. the 100 columns of the
shared ``gt_*.npy`` files); an id found in neither is a miss.
"""

from __future__ import annotations

import numpy as np

__all__ = ["recall_at_k", "recall_per_query"]


def _as_ids(x, name: str) -> np.ndarray:
    x = np.asarray(x)
    if x.ndim == 1:
        x = x.reshape(1, -1)
    if x.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array [nq, k]; got shape {x.shape}.")
    if not np.issubdtype(x.dtype, np.integer):
        raise TypeError(
            f"{name} must hold integer ids; got dtype {x.dtype}. Pass the id array, not the "
            "scores (faiss returns (D, I); bbqlib returns (scores, ids))."
        )
    if x.dtype == np.uint64 and x.size and x.max() > np.iinfo(np.int64).max:
        raise ValueError(f"{name} holds ids above 2**63 - 1, which cannot be compared as int64.")
    return x.astype(np.int64, copy=False)


def _as_scores(x, like: np.ndarray, name: str, like_name: str) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 1:
        x = x.reshape(1, -1)
    if x.shape != like.shape:
        raise ValueError(f"{name} must have the shape of {like_name} {like.shape}; got {x.shape}.")
    return x


def _orientation(gt_scores: np.ndarray) -> bool:
    """True when higher scores are better (gt sorted descending), False for distances."""
    steps = np.diff(gt_scores, axis=1)
    if np.all(steps <= 0):
        return True
    if np.all(steps >= 0):
        return False
    raise ValueError(
        "gt_scores rows must all be sorted best first (descending similarities or ascending "
        "distances); they are neither. Pass the scores that go with gt_ids, in the same order."
    )


def recall_per_query(
    found_ids,
    gt_ids,
    k: int = 10,
    *,
    gt_scores=None,
    found_scores=None,
    tie_tol: float = 0.0,
) -> np.ndarray:
    """Recall@k of each query.

    Parameters
    ----------
    found_ids : array_like, int [nq, m]
        Ids returned by a search, best first; only the first ``k`` columns are used (fewer
        than ``k`` columns is allowed and caps recall). ``-1`` marks padding.
    gt_ids : array_like, int [nq, g]
        Exact neighbours, best first, ``g >= k`` (more columns help the tie look-up).
    k : int
        Cut-off, ``k >= 1``.
    gt_scores : array_like, float [nq, g], optional
        True scores of ``gt_ids``: similarities sorted descending or distances sorted
        ascending (the orientation is read from the data). Enables tie handling.
    found_scores : array_like, float [nq, m], optional
        Exact scores of ``found_ids`` on the same scale as ``gt_scores``; used for ties when
        given (requires ``gt_scores``).
    tie_tol : float
        Tolerance on the comparison with the k-th true score (ann-benchmarks uses 1e-3 on
        distances). 0 counts only exact ties.

    Returns
    -------
    ndarray, float64 [nq]
        Hits divided by ``k``, in [0, 1].

    See Also
    --------
    recall_at_k : the mean over queries.
    """
    found = _as_ids(found_ids, "found_ids")
    gt = _as_ids(gt_ids, "gt_ids")
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive int; got {k!r}.")
    if found.shape[0] != gt.shape[0]:
        raise ValueError(
            f"found_ids has {found.shape[0]} queries but gt_ids has {gt.shape[0]}; slice the "
            "ground truth to the queries you searched (e.g. gt[:nq])."
        )
    if gt.shape[1] < k:
        raise ValueError(
            f"gt_ids has {gt.shape[1]} columns, fewer than k={k}; compute at least k exact "
            "neighbours (bbqlib.analysis.ground_truth.exact_knn)."
        )
    tie_tol = float(tie_tol)
    if not np.isfinite(tie_tol) or tie_tol < 0:
        raise ValueError(f"tie_tol must be a finite number >= 0; got {tie_tol}.")
    if found_scores is not None and gt_scores is None:
        raise ValueError(
            "found_scores needs gt_scores (the k-th true score is the tie threshold); "
            "pass gt_scores too, or drop found_scores."
        )
    g_scores = None if gt_scores is None else _as_scores(gt_scores, gt, "gt_scores", "gt_ids")
    f_scores = (
        None
        if found_scores is None
        else _as_scores(found_scores, found, "found_scores", "found_ids")
    )

    nq = found.shape[0]
    cols = min(k, found.shape[1])
    found = found[:, :cols]
    if f_scores is not None:
        f_scores = f_scores[:, :cols]
    if nq == 0 or cols == 0:
        return np.zeros(nq, dtype=np.float64)

    # Encode (query, id) pairs as one int64 so set operations run over all queries at once.
    big = max(int(found.max(initial=0)), int(gt.max(initial=0))) + 2
    if big > np.iinfo(np.int64).max // max(nq, 1):
        raise ValueError("ids are too large to encode per query; renumber them below 2**40.")
    rows = np.arange(nq, dtype=np.int64)[:, None]
    valid = found >= 0
    f_keys = (rows * big + found)[valid]
    f_pos = np.flatnonzero(valid.ravel())  # flat position of each valid found entry
    f_keys, first = np.unique(f_keys, return_index=True)  # an id returned twice counts once
    f_pos = f_pos[first]
    f_rows = f_pos // cols

    gt_k = gt[:, :k]
    g_keys = np.unique((rows * big + gt_k)[gt_k >= 0])
    hit = np.isin(f_keys, g_keys, assume_unique=True)

    if g_scores is not None:
        higher_better = _orientation(g_scores[:, :k])
        kth = g_scores[:, k - 1]
        miss = ~hit
        if f_scores is not None:
            true = f_scores.ravel()[f_pos[miss]]
            known = np.ones(true.shape, dtype=bool)
        else:
            # Look the missed ids up in the whole ground-truth row (it may extend past k).
            all_keys = (rows * big + gt).ravel()
            order = np.argsort(all_keys, kind="stable")
            sorted_keys = all_keys[order]
            at = np.searchsorted(sorted_keys, f_keys[miss])
            at_c = np.minimum(at, sorted_keys.size - 1)
            known = sorted_keys[at_c] == f_keys[miss]
            true = g_scores.ravel()[order[at_c]]
        limit = kth[f_rows[miss]]
        if higher_better:
            ties = known & (true >= limit - tie_tol)
        else:
            ties = known & (true <= limit + tie_tol)
        hit[np.flatnonzero(miss)[ties]] = True

    hits = np.bincount(f_rows[hit], minlength=nq)
    return np.minimum(hits, k) / k


def recall_at_k(
    found_ids,
    gt_ids,
    k: int = 10,
    *,
    gt_scores=None,
    found_scores=None,
    tie_tol: float = 0.0,
) -> float:
    """Mean recall@k over queries: ``mean_q |found_q[:k] ∩ gt_q[:k]| / k``.

    Parameters are those of :func:`recall_per_query`: ``found_ids`` [nq, m] (``-1`` =
    padding), ``gt_ids`` [nq, g >= k], and optionally ``gt_scores`` (true scores of
    ``gt_ids``, best first), ``found_scores`` (exact scores of ``found_ids``) and
    ``tie_tol`` for ties at the k-th place, as ann-benchmarks counts them.

    Returns
    -------
    float
        Recall in [0, 1].

    Examples
    --------
    >>> import numpy as np
    >>> from bbqlib.analysis.recall import recall_at_k
    >>> gt = np.array([[0, 1, 2, 3]])
    >>> recall_at_k(np.array([[1, 0, 7, -1]]), gt, k=4)
    0.5
    >>> gt_scores = np.array([[0.9, 0.8, 0.7, 0.7]])   # ids 3 and 7 tie at the 4th place
    >>> recall_at_k(np.array([[0, 1, 2, 7]]), gt, k=4, gt_scores=gt_scores,
    ...             found_scores=np.array([[0.9, 0.8, 0.7, 0.7]]))
    1.0
    """
    per_query = recall_per_query(
        found_ids, gt_ids, k, gt_scores=gt_scores, found_scores=found_scores, tie_tol=tie_tol
    )
    return float(per_query.mean()) if per_query.size else 0.0
