"""The parent level: parent centroids grouping the list centroids when there are many."""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ._checks import _check_int, _check_matrix
from .kmeans import MAX_ITERATIONS, MAX_K, SAMPLES_PER_CLUSTER, _hierarchical

CENTROIDS_PER_PARENT_RANGE = (2, 256)


class ParentLevel(NamedTuple):
    """Parent centroids over the list centroids (spec §6.4).

    Attributes
    ----------
    centroids : ndarray of float32, shape (P, d)
        Parent centroids.
    child_order : ndarray of int32, shape (K,)
        List-centroid ids grouped by parent: parent ``p`` owns
        ``child_order[offsets[p]:offsets[p + 1]]`` (ascending ids within a parent).
    offsets : ndarray of int64, shape (P + 1,)
        Start of each parent's children in ``child_order``; ``offsets[-1] == K``.
    """

    centroids: np.ndarray
    child_order: np.ndarray
    offsets: np.ndarray


def parent_level(
    centroids, *, centroids_per_parent: int = 16, seed: int = 42
) -> ParentLevel | None:
    """Group list centroids under parent centroids when there are many (spec §6.4).

    Parameters
    ----------
    centroids : array_like of shape (k, d)
        The list centroids.
    centroids_per_parent : int, default 16
        Target children per parent, in [2, 256]; parents exist only when
        ``k > centroids_per_parent ** 2``.
    seed : int, default 42

    Returns
    -------
    ParentLevel or None
        ``(centroids, child_order, offsets)``; ``None`` when ``k <= centroids_per_parent**2``.

    Notes
    -----
    The parents are :func:`hierarchical_kmeans` over the centroids with target size
    ``centroids_per_parent`` (below the public minimum of 64, hence the private call) and no
    SOAR.
    """
    C = _check_matrix("centroids", centroids)
    cpp = _check_int("centroids_per_parent", centroids_per_parent, *CENTROIDS_PER_PARENT_RANGE)
    _check_int("seed", seed, 0)
    k = C.shape[0]
    if k <= cpp * cpp:
        return None
    C = np.array(C, dtype=np.float32, order="C", copy=True)
    parents, assign = _hierarchical(
        C,
        cpp,
        seed=seed,
        max_iter=MAX_ITERATIONS,
        samples_per_cluster=SAMPLES_PER_CLUSTER,
        max_k=MAX_K,
        refine=True,
        progress=False,
    )
    child_order = np.argsort(assign, kind="stable").astype(np.int32)
    offsets = np.zeros(parents.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.bincount(assign, minlength=parents.shape[0]), out=offsets[1:])
    return ParentLevel(parents, child_order, offsets)
