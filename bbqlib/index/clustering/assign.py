"""Nearest-centroid assignment: every row to its nearest centroid, and centroid neighbourhoods.

The numba kernels (:mod:`bbqlib._kernels.kmeans`) run serially below
:data:`_PARALLEL_MIN_WORK` distance terms and in parallel above; the choice depends on the
size only, so results never depend on it.
"""

from __future__ import annotations

import numpy as np

from bbqlib._kernels.kmeans import (
    nearest_centroid_kernel,
    nearest_centroid_serial,
    nearest_in_neighbourhood_kernel,
    nearest_in_neighbourhood_serial,
)

from ._blocks import _groups, _row_blocks
from ._checks import _check_centroids, _check_int, _check_matrix

NEIGHBOURHOOD_SIZE = 128
#: Most steps of the greedy walk of :func:`walk_to_nearest`.
MAX_WALK_STEPS = 8

# Below this many distance terms (rows x candidates x d) a call runs single-threaded: too
# little work to outweigh a thread-pool wake-up, which on a busy machine can cost a
# scheduler time slice. The choice depends on the size only, so results never depend on it.
_PARALLEL_MIN_WORK = 1 << 23
# Elements of one float64 centroid-distance block in centroid_neighbourhoods (32 MiB).
_NEIGHBOUR_BLOCK_ELEMS = 1 << 22


def _assign(Xb: np.ndarray, C: np.ndarray, current: np.ndarray | None, neigh) -> np.ndarray:
    """Nearest centroid for every row of a float32 block (within neighbourhoods if given)."""
    out = np.empty(Xb.shape[0], dtype=np.int32)
    if neigh is None:
        _nearest(Xb, C, out)
    else:
        rows, starts, groups = _groups(current, C.shape[0])
        big = Xb.size * (neigh.shape[1] + 1) >= _PARALLEL_MIN_WORK
        run = nearest_in_neighbourhood_kernel if big else nearest_in_neighbourhood_serial
        run(Xb, C, rows, starts, groups, neigh, out)
    return out


def _nearest(Xb: np.ndarray, C: np.ndarray, out: np.ndarray) -> None:
    big = Xb.size * C.shape[0] >= _PARALLEL_MIN_WORK
    (nearest_centroid_kernel if big else nearest_centroid_serial)(Xb, C, out)


def walk_to_nearest(Xb, C, current, neigh, max_steps: int = MAX_WALK_STEPS) -> np.ndarray:
    """Greedy walk on the centroid graph from ``current`` (float32 block ``Xb`` in RAM).

    Each step moves every row to the nearest among its current centroid and that centroid's
    ``neigh`` neighbours; rows that did not move are done. Stops when none moves or after
    ``max_steps``. Returns a new int32 assignment. Used by the single-process build's last
    assignment (:func:`settle_assignment`) and by the distributed build's workers, so that
    both put a row in the same list.
    """
    current = np.array(current, dtype=np.int32)
    if neigh.shape[1] == 0:
        return current  # one centroid
    todo = np.arange(Xb.shape[0])
    for _ in range(max_steps):
        Xt = Xb if todo.size == Xb.shape[0] else np.ascontiguousarray(Xb[todo])
        cur = current[todo]
        new = _assign(Xt, C, cur, neigh)
        moved = new != cur
        current[todo] = new
        if not moved.any():
            break
        todo = todo[moved]
    return current


def settle_assignment(X, C, assign, neigh=None) -> np.ndarray:
    """Every row of ``X`` to its nearest centroid of ``C``, walking from ``assign``.

    k-means leaves a row in the list it was assigned to before its centroid's last move
    (the final pass assigns, then moves every centroid to its members' mean): a few percent
    of the rows then sit outside their nearest list. This pass (one step over all rows,
    more for the few that move) puts them in it, as the distributed build's workers do.
    ``neigh``: the centroid graph (:func:`centroid_neighbourhoods`), computed if not given.
    ``X`` is read in blocks (memmap fine).
    """
    C = np.ascontiguousarray(C, dtype=np.float32)
    if neigh is None:
        neigh = _neighbourhoods(C, NEIGHBOURHOOD_SIZE)
    out = np.empty(X.shape[0], dtype=np.int32)
    for start, stop, Xb in _row_blocks(X):
        out[start:stop] = walk_to_nearest(Xb, C, assign[start:stop], neigh)
    return out


def nearest_centroid(X, centroids) -> np.ndarray:
    """Index of the nearest centroid (squared L2) for every row of ``X``.

    Parameters
    ----------
    X : array_like of shape (n, d)
    centroids : array_like of shape (k, d)

    Returns
    -------
    ndarray of int32, shape (n,)
        ``argmin_j ||X[i] - centroids[j]||^2``; the lowest index among exact ties.
    """
    X = _check_matrix("X", X)
    C = _check_centroids(centroids, X.shape[1])
    out = np.empty(X.shape[0], dtype=np.int32)
    for start, stop, Xb in _row_blocks(X):
        _nearest(Xb, C, out[start:stop])
    return out


def centroid_neighbourhoods(centroids, neighbours: int = NEIGHBOURHOOD_SIZE) -> np.ndarray:
    """The ``neighbours`` nearest other centroids of each centroid (all others if fewer).

    Parameters
    ----------
    centroids : array_like of shape (k, d)
    neighbours : int, default 128
        Neighbourhood size, >= 1.

    Returns
    -------
    ndarray of int32, shape (k, min(neighbours, k - 1))
        Row ``j`` lists centroid ids ``!= j`` by increasing squared L2 distance to centroid
        ``j`` (float64 arithmetic; lower id first among equal distances).
    """
    C = _check_matrix("centroids", centroids)
    neighbours = _check_int("neighbours", neighbours, 1)
    return _neighbourhoods(np.asarray(C, dtype=np.float32), neighbours)


def _neighbourhoods(C: np.ndarray, neighbours: int) -> np.ndarray:
    k = C.shape[0]
    m = min(neighbours, k - 1)
    out = np.empty((k, m), dtype=np.int32)
    if m == 0:
        return out
    C64 = C.astype(np.float64)
    cc = np.einsum("ij,ij->i", C64, C64)
    block = max(1, _NEIGHBOUR_BLOCK_ELEMS // k)
    for s in range(0, k, block):
        e = min(k, s + block)
        D = C64[s:e] @ C64.T
        D *= -2.0
        D += cc[s:e, None]
        D += cc[None, :]
        D[np.arange(e - s), np.arange(s, e)] = np.inf  # never your own neighbour
        if m < k - 1:
            idx = np.argpartition(D, m - 1, axis=1)[:, :m]
        else:
            others = np.ones(D.shape, dtype=bool)
            others[np.arange(e - s), np.arange(s, e)] = False
            idx = np.broadcast_to(np.arange(k), D.shape)[others].reshape(e - s, k - 1)
        idx = np.sort(idx, axis=1)  # so that the stable sort below puts lower ids first
        order = np.argsort(np.take_along_axis(D, idx, axis=1), axis=1, kind="stable")
        out[s:e] = np.take_along_axis(idx, order, axis=1)
    return out
