"""The driver of :func:`unbiasedness_test`: pooled and per-pair error over rotation seeds."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np

from ..._validation import check_vectors, prepare_for_similarity
from ...similarity import exact_raw
from ._inputs import _centre, _check_confidence, _similarity_of
from .reports import UnbiasednessResult


def unbiasedness_test(
    make_quantizer: Callable[[int], object],
    seeds: Iterable[int],
    queries,
    vectors,
    *,
    normalize: bool = False,
    alpha: float = 0.05,
    confidence: float = 0.95,
) -> UnbiasednessResult:
    """Is the estimator unbiased over its randomness (the rotation seed)?

    For each seed, ``make_quantizer(seed)`` is fitted on ``vectors`` (unless it comes back
    fitted), encodes them, and estimates every (query, vector) pair. The errors are pooled.

    Parameters
    ----------
    make_quantizer : callable seed -> quantizer
        E.g. ``lambda s: bbqlib.RaBitQQuantizer(bits=1, query_bits=None, seed=s)``.
    seeds : iterable of int
        At least 2 seeds (20 or more for a useful per-pair test).
    queries, vectors : float arrays [nq, d], [n, d]
        Memory: two float64 arrays of ``nq * n`` are kept.
    normalize : bool
        As in :func:`estimation_error` (the centre of each seed's fit).
    alpha : float
        Level of each pair's test.
    confidence : float
        Level of the pooled interval.

    Returns
    -------
    UnbiasednessResult

    Notes
    -----
    Two checks, as issue 3 asks. (1) The pooled mean error: each seed's mean over the fixed
    pairs is one independent draw, so the t interval over seeds is exact up to normality. (2)
    Per pair: an unbiased estimator has zero mean error for *every* pair over the rotation, so
    each pair's t test rejects with probability about ``alpha`` and the count of rejections is
    about ``Binomial(n_pairs, alpha)``. Pairs sharing a rotation are not independent, so the
    count varies more than a binomial; treat a p-value near the threshold with care. A
    deterministic quantizer (BBQ without preconditioning) has zero spread over seeds: its
    pooled interval collapses to its mean and every pair with a non-zero error counts.
    """
    from scipy import stats

    seeds = list(seeds)
    if len(seeds) < 2:
        raise ValueError(f"seeds must hold at least 2 seeds (20+ recommended), got {len(seeds)}")
    confidence = _check_confidence(confidence)
    alpha = float(alpha)
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1) (e.g. 0.05), got {alpha!r}")

    mean = m2 = None
    seed_means = []
    scale_name = None
    for i, seed in enumerate(seeds):
        q = make_quantizer(seed)
        if getattr(q, "is_fitted", True) is False:
            q.fit(vectors)
        rep_err, scale_name = _pair_errors(q, queries, vectors, normalize)
        seed_means.append(float(rep_err.mean()))
        if mean is None:
            mean = np.zeros_like(rep_err)
            m2 = np.zeros_like(rep_err)
        delta = rep_err - mean  # Welford: stable per-pair mean and variance over seeds
        mean += delta / (i + 1)
        m2 += delta * (rep_err - mean)
    s = len(seeds)
    seed_means = np.asarray(seed_means)
    pooled = float(seed_means.mean())
    se = float(seed_means.std(ddof=1) / math.sqrt(s))
    t_ci = stats.t.ppf(0.5 + confidence / 2, s - 1)
    pair_var = m2 / (s - 1)
    pair_se = np.sqrt(pair_var / s)
    t_pair = stats.t.ppf(1 - alpha / 2, s - 1)
    # An exactly repeatable error (zero spread) is a bias whenever it is not zero.
    tiny = 1e-12 * max(float(np.abs(mean).max(initial=0.0)), 1e-300)
    excl = np.where(pair_se > tiny, np.abs(mean) > t_pair * pair_se, np.abs(mean) > tiny)
    count = int(excl.sum())
    n_pairs = int(mean.size)
    p = float(stats.binomtest(count, n_pairs, alpha, alternative="greater").pvalue)
    return UnbiasednessResult(
        n_seeds=s,
        n_pairs=n_pairs,
        mean=pooled,
        ci=(pooled - t_ci * se, pooled + t_ci * se),
        se=se,
        mean_pair_sd=float(np.sqrt(pair_var.mean())),
        n_excluding_zero=count,
        expected_excluding_zero=alpha * n_pairs,
        binomial_p=p,
        alpha=alpha,
        confidence=confidence,
        scale=scale_name,
    )


def _pair_errors(quantizer, queries, vectors, normalize: bool) -> tuple[np.ndarray, str]:
    """Dense error matrix ``est - exact`` [nq, n] in float64 (normalized if asked)."""
    similarity = _similarity_of(quantizer)
    X = prepare_for_similarity(check_vectors(vectors, "vectors"), similarity, "vectors")
    Q = prepare_for_similarity(
        check_vectors(queries, "queries", dim=X.shape[1]), similarity, "queries"
    )
    enc = quantizer.encode(X)
    est = np.asarray(quantizer.estimate(Q, enc), dtype=np.float64)
    err = est - exact_raw(similarity, Q, X)
    if not normalize:
        return err, "squared L2" if similarity.is_distance else "inner product"
    c = _centre(quantizer, X)
    sx = np.linalg.norm(X.astype(np.float64) - c, axis=1)
    sq = np.linalg.norm(Q.astype(np.float64) - c, axis=1) * (2.0 if similarity.is_distance else 1.0)
    s = sq[:, None] * sx[None, :]
    return np.where(s > 0, err / np.where(s > 0, s, 1.0), 0.0), "normalized"
