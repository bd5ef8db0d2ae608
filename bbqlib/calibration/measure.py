"""Measuring one configuration: recall@k per held-out query with a bootstrap bound, time.

Recall@k of a query is the share of its exact top-k that the search returned
(:func:`bbqlib.analysis.recall.recall_per_query`, ties at the k-th exact score counted as
hits). The mean over queries comes with a percentile bootstrap over queries (2,000
resamples, a fixed seed, so every configuration sees the same resamples): a two-sided 95%
interval and the one-sided 95% lower bound that calibration compares with the target.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from .._kernels.threads import limited_threads
from ..analysis.recall import recall_per_query

__all__ = ["BOOTSTRAP", "Measurement", "bootstrap_bounds", "timed_search"]

#: Bootstrap resamples.
BOOTSTRAP = 2000


def bootstrap_bounds(per_query, *, level: float = 0.95, seed: int = 0):
    """``(lower, (low, high))``: one-sided and two-sided ``level`` bounds of the mean."""
    r = np.asarray(per_query, dtype=np.float64)
    if r.size == 0:
        return float("nan"), (float("nan"), float("nan"))
    idx = np.random.default_rng(seed).integers(0, r.size, size=(BOOTSTRAP, r.size))
    means = r[idx].mean(axis=1)
    alpha = 1.0 - level
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(np.quantile(means, alpha)), (float(low), float(high))


@dataclass(frozen=True)
class Measurement:
    """One configuration measured on the held-out queries.

    ``latency_ms`` is the single-thread time per query of one batched search (the median
    when re-timed), ``qps = 1000 / latency_ms`` (queries per second on one core).
    """

    recall: float
    recall_low: float
    recall_ci: tuple[float, float]
    latency_ms: float
    per_query: np.ndarray

    @property
    def qps(self) -> float:
        return 1000.0 / self.latency_ms if self.latency_ms > 0 else float("inf")

    def retimed(self, latency_ms: float) -> Measurement:
        return Measurement(self.recall, self.recall_low, self.recall_ci, latency_ms, self.per_query)


def timed_search(index, queries, k: int, **search_kw) -> tuple[np.ndarray, float]:
    """``(ids, seconds)`` of one single-thread batched search."""
    with limited_threads(1):
        t0 = time.perf_counter()
        _, ids = index.search(queries, k, **search_kw)
        return ids, time.perf_counter() - t0


def measure(index, queries, gt_ids, gt_scores, k: int, **search_kw) -> Measurement:
    """Search ``queries`` once (single thread) and score the result against ground truth."""
    ids, seconds = timed_search(index, queries, k, **search_kw)
    per_query = recall_per_query(ids, gt_ids, k, gt_scores=gt_scores)
    low, ci = bootstrap_bounds(per_query)
    latency = 1000.0 * seconds / max(1, len(queries))
    return Measurement(float(per_query.mean()), low, ci, latency, per_query)
