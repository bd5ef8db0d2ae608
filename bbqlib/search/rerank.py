"""Proxy-then-rerank: how many candidates to keep, and exact rescoring on float vectors."""

from __future__ import annotations

import math

import numpy as np

from .._kernels import rerank as KR
from ..similarity import Similarity
from .topk import EMPTY_ID, merge_topk

__all__ = [
    "OVERSAMPLE_LIMIT",
    "candidate_count",
    "check_oversample",
    "exact_values",
    "exact_mode",
    "rerank_keys",
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


def exact_mode(similarity: Similarity, *, normalized: bool = True) -> int:
    """The exact kernel's mode: squared L2, inner product, or cosine over raw docs."""
    if similarity.is_distance:
        return KR.SQUARED_L2
    if similarity is Similarity.COSINE and not normalized:
        return KR.COSINE
    return KR.INNER_PRODUCT


def exact_values(queries, vectors, candidates, mode: int, *, parallel: bool = True) -> np.ndarray:
    """Exact raw values float64 [nq, m] of each query with its candidate rows (``-1``: nan).

    The one exact kernel of bbqlib (:func:`bbqlib._kernels.rerank.exact_candidates`): float64
    lane sums in a fixed order. ``vectors`` may be float16/32/64 and memory-mapped; float16
    rows are read in place and widened exactly (the values equal float32 copies' values).
    """
    ids = np.ascontiguousarray(candidates, dtype=np.int64)
    out = np.empty(ids.shape, dtype=np.float64)
    if ids.size == 0:
        return out
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    vec = vectors.view(np.ndarray) if isinstance(vectors, np.memmap) else np.asarray(vectors)
    if vec.dtype.kind != "f":
        raise TypeError(f"vectors must be float16/32/64 for the exact rerank, got {vec.dtype}")
    if vec.dtype == np.float16:  # numba has no float16: the kernel widens the bit patterns
        vec = vec.view(np.uint16)
    KR.exact_candidates(queries, vec, ids, mode, out, parallel=parallel)
    return out


def rerank_keys(raw: np.ndarray, candidates: np.ndarray, k: int, similarity: Similarity):
    """Best ``k`` of exact raw values per row: ``(keys, ids)`` by (key desc, id asc).

    ``candidates`` int64 [nq, m] with ``-1`` padding; missing results are ``-inf`` / ``-1``.
    """
    keys = np.where(candidates < 0, -np.inf, similarity.key(raw))
    ids = np.where(candidates < 0, EMPTY_ID, candidates)
    keys, ids = merge_topk(keys, ids, min(k, candidates.shape[1]))
    return keys, np.where(ids == EMPTY_ID, -1, ids)
