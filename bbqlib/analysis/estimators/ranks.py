"""Row-wise rank correlations: Kendall's tau-b (exact or from sampled pairs) and Spearman's rho."""

from __future__ import annotations

import numpy as np

# Bands up to this many vectors per query get Kendall's tau from every pair of vectors;
# larger ones from _KENDALL_PAIRS random pairs per query. _KENDALL_CHUNK bounds temporaries.
_KENDALL_DENSE = 128
_KENDALL_PAIRS = 10_000
_KENDALL_CHUNK = 1 << 21


def _kendall(a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Kendall's tau-b of each row pair of two [nb, m] arrays.

    Exact (all pairs of columns) up to ``_KENDALL_DENSE`` columns; above, estimated from
    ``_KENDALL_PAIRS`` random pairs of distinct columns (drawn once per chunk of rows):
    ``Σ sa·sb / sqrt(Σ|sa| Σ|sb|)`` with ``sa = sign(a_i - a_j)``, the sample version of the
    same ratio (unbiased numerator and denominators; sd about ``1 / sqrt(pairs)`` per row).
    """
    nb, m = a.shape
    if m < 2:
        return np.full(nb, np.nan)
    out = np.empty(nb)
    if m <= _KENDALL_DENSE:
        i, j = np.triu_indices(m, 1)
    step = max(1, _KENDALL_CHUNK // (len(i) if m <= _KENDALL_DENSE else _KENDALL_PAIRS))
    for r0 in range(0, nb, step):
        ar, br = a[r0 : r0 + step], b[r0 : r0 + step]
        if m > _KENDALL_DENSE:
            # One draw of column pairs per chunk of rows: each row's estimate is unbiased.
            i = rng.integers(0, m, size=_KENDALL_PAIRS)
            j = rng.integers(0, m - 1, size=_KENDALL_PAIRS)
            j += j >= i  # distinct columns
        sa = np.sign(ar[:, i] - ar[:, j])
        sb = np.sign(br[:, i] - br[:, j])
        num = (sa * sb).sum(axis=1)
        den = np.sqrt(np.abs(sa).sum(axis=1) * np.abs(sb).sum(axis=1))
        with np.errstate(invalid="ignore", divide="ignore"):
            out[r0 : r0 + step] = num / den
    return out


def _average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks along rows, ties sharing their average rank (as ``scipy.stats.rankdata``)."""
    nb, m = x.shape
    order = np.argsort(x, axis=1, kind="stable")
    s = np.take_along_axis(x, order, axis=1)
    new = np.ones((nb, m), dtype=bool)
    new[:, 1:] = s[:, 1:] != s[:, :-1]
    flat = new.ravel()
    group = np.cumsum(flat) - 1  # every row starts a new group
    starts = np.flatnonzero(flat)
    sizes = np.diff(np.append(starts, flat.size))
    avg = (starts % m) + (sizes - 1) / 2.0
    ranks = np.empty((nb, m))
    np.put_along_axis(ranks, order, avg[group].reshape(nb, m), axis=1)
    return ranks


def _spearman(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Spearman's rho of each row pair (Pearson correlation of average ranks)."""
    nb, m = a.shape
    if m < 2:
        return np.full(nb, np.nan)
    ra = _average_ranks(a)
    rb = _average_ranks(b)
    ra -= ra.mean(axis=1, keepdims=True)
    rb -= rb.mean(axis=1, keepdims=True)
    den = np.sqrt((ra * ra).sum(axis=1) * (rb * rb).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return (ra * rb).sum(axis=1) / den
