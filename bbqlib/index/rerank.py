"""Proxy-then-rerank: how many candidates to keep, and exact rescoring on float vectors."""

from __future__ import annotations

import math

import numpy as np

from ..scoring import merge_topk, rerank_exact
from ..similarity import Similarity, scores_from_raw

__all__ = [
    "OVERSAMPLE_LIMIT",
    "candidate_count",
    "check_oversample",
    "exact_rerank",
    "finish",
]

#: Elasticsearch's cap on rescored candidates.
OVERSAMPLE_LIMIT = 10_000


def check_oversample(oversample, default: float) -> float:
    """``None`` takes ``default``; otherwise a finite number >= 1."""
    if oversample is None:
        return float(default)
    if isinstance(oversample, bool) or not isinstance(oversample, (int, float, np.number)):
        raise ValueError(f"oversample must be a number >= 1 or None, got {oversample!r}")
    if not math.isfinite(oversample) or oversample < 1.0:
        raise ValueError(
            f"oversample must be a finite number >= 1 (1 = no extra), got {oversample}"
        )
    return float(oversample)


def candidate_count(k: int, oversample: float, n: int) -> int:
    """``k' = min(ceil(k · oversample), 10,000, n)``, never below ``min(k, n)``."""
    kk = min(math.ceil(k * oversample - 1e-9), OVERSAMPLE_LIMIT, n)
    return max(kk, min(k, n))


def exact_rerank(
    queries: np.ndarray,
    vectors: np.ndarray,
    candidates: np.ndarray,
    k: int,
    similarity: Similarity,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact raw values of the candidates, best ``k`` per query: ``(raw, ids)``.

    ``queries`` and ``vectors`` are the prepared float vectors (normalized for cosine);
    ``candidates`` int64 [nq, m] with ``-1`` padding. Ties break by the lower id.
    """
    raw = rerank_exact(queries, vectors, candidates, similarity.is_distance)
    keys = -raw if similarity.is_distance else raw
    keys = np.where(candidates < 0, -np.inf, keys)
    ids = np.where(candidates < 0, np.iinfo(np.int64).max, candidates)
    keys, ids = merge_topk(keys, ids, min(k, candidates.shape[1]))
    raw = -keys if similarity.is_distance else keys
    ids = np.where(ids == np.iinfo(np.int64).max, -1, ids)
    return raw, ids


def finish(raw: np.ndarray, ids: np.ndarray, k: int, similarity: Similarity):
    """Map raw values to scores and pad to ``k`` columns: ``(scores float32, ids int64)``."""
    nq = raw.shape[0]
    scores = np.full((nq, k), -np.inf, dtype=np.float32)
    out_ids = np.full((nq, k), -1, dtype=np.int64)
    m = min(k, ids.shape[1])
    valid = ids[:, :m] >= 0
    scores[:, :m] = np.where(valid, scores_from_raw(similarity, np.nan_to_num(raw[:, :m])), -np.inf)
    out_ids[:, :m] = np.where(valid, ids[:, :m], -1)
    return scores, out_ids
