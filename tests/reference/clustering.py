"""Slow, readable float64 twins of bbqlib's clustering kernels (tests compare against these).

Every function works on whole distance tables (``n x k`` or ``n x m x d``), so keep inputs
small. Ties go to the first candidate in listed order (``np.argmin``).

* :func:`sqdist` — squared L2 table from differences, float64.
* :func:`nearest_centroid_ref` — argmin over all centroids.
* :func:`neighbourhoods_ref` — each centroid's nearest other centroids, by (distance, id).
* :func:`neighbourhood_assign_ref` — argmin over {current} + neighbours(current).
* :func:`soar_values_ref` / :func:`soar_ref` — the SOAR loss of Sun et al. (NeurIPS 2023) and
  Elasticsearch's ``KMeansLocal.assignSpilled``, written as in the paper:
  ``||x - c||^2 + lam * <x - c1, x - c>^2 / ||x - c1||^2``.
* :func:`centroid_means_ref` — per-cluster means with ``np.add.at``.
"""

from __future__ import annotations

import numpy as np

SOAR_MIN_RESIDUAL = 1e-16


def sqdist(X, C) -> np.ndarray:
    """``D[i, j] = sum_t (X[i, t] - C[j, t])**2`` in float64."""
    X = np.asarray(X, dtype=np.float64)
    C = np.asarray(C, dtype=np.float64)
    return ((X[:, None, :] - C[None, :, :]) ** 2).sum(axis=2)


def nearest_centroid_ref(X, C):
    """Return ``(argmin ids int32 [n], distance table float64 [n, k])``."""
    D = sqdist(X, C)
    return D.argmin(axis=1).astype(np.int32), D


def neighbourhoods_ref(C, neighbours: int) -> np.ndarray:
    """Row ``j``: the ``min(neighbours, k - 1)`` ids ``!= j`` by increasing (distance, id)."""
    k = len(C)
    m = min(neighbours, k - 1)
    D = sqdist(C, C)
    out = np.empty((k, m), dtype=np.int32)
    for j in range(k):
        others = [c for c in range(k) if c != j]
        ranked = sorted(others, key=lambda c: (D[j, c], c))
        out[j] = ranked[:m]
    return out


def neighbourhood_assign_ref(X, C, current, neigh):
    """Nearest among ``[current[i]] + list(neigh[current[i]])``; returns ids and the table."""
    D = sqdist(X, C)
    cand = np.concatenate([np.asarray(current)[:, None], neigh[current]], axis=1)
    vals = np.take_along_axis(D, cand, axis=1)
    pick = vals.argmin(axis=1)
    return cand[np.arange(len(cand)), pick].astype(np.int32), vals, cand


def soar_values_ref(X, C, primary, neigh, lam: float):
    """SOAR loss of every candidate ``neigh[primary[i]]`` for every row, float64 ``[n, m]``."""
    X = np.asarray(X, dtype=np.float64)
    C = np.asarray(C, dtype=np.float64)
    cand = neigh[primary]
    r = X - C[primary]  # residual to the primary centroid
    rr = (r * r).sum(axis=1)
    diff = X[:, None, :] - C[cand]  # x - c for each candidate
    dist = (diff * diff).sum(axis=2)
    proj = (r[:, None, :] * diff).sum(axis=2)  # <r, x - c>
    safe = np.where(rr > SOAR_MIN_RESIDUAL, rr, 1.0)
    loss = dist + lam * proj * proj / safe[:, None]
    return np.where((rr > SOAR_MIN_RESIDUAL)[:, None], loss, dist), cand


def soar_ref(X, C, primary, neigh, lam: float = 1.0) -> np.ndarray:
    """Secondary assignment: the candidate with the smallest SOAR loss (first on ties)."""
    if len(C) == 1:
        return np.full(len(X), -1, dtype=np.int32)
    vals, cand = soar_values_ref(X, C, primary, neigh, lam)
    return cand[np.arange(len(cand)), vals.argmin(axis=1)].astype(np.int32)


def centroid_means_ref(X, assign, k: int):
    """``(means float64 [k, d], counts int64 [k])``; empty clusters give NaN rows."""
    X = np.asarray(X, dtype=np.float64)
    sums = np.zeros((k, X.shape[1]))
    np.add.at(sums, assign, X)
    counts = np.bincount(assign, minlength=k)
    with np.errstate(invalid="ignore", divide="ignore"):
        return sums / counts[:, None], counts
