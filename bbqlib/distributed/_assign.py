"""List assignment of one partition against a fixed centroid table (runs on the workers).

A single-process build learns assignments while it clusters; a distributed one clusters a
sample, then assigns every partition on its own. Comparing a row with all ``K`` centroids
(13,000 at 5M rows) would cost more than the rest of the build, so :class:`Assigner` goes
down a two-level tree and then walks the centroid graph: the nearest parent (of
:func:`~bbqlib.index.clustering.parent_level`, about ``K / 32`` of them), the nearest child
of that parent and of its :data:`PROBE` - 1 nearest parents, then, until no row moves, the
nearest among the current centroid and its 128 nearest centroids (the neighbourhood the
single-process refinement searches, ``bbqlib.index.clustering``). SOAR and its spill costs
use the same precomputed neighbourhoods, so no worker recomputes the ``K x K`` distances.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._kernels import ivf as KI
from .._kernels.kmeans import soar_kernel
from ..index.clustering.assign import walk_to_nearest

__all__ = ["Assigner", "make_assigner"]

#: Centroid neighbourhood searched per step (as the single-process refinement and SOAR).
NEIGHBOURS = 128
#: Children per parent (about ``K / 32`` parents).
ENTRY_CHILDREN = 32
#: Parents whose children are searched for a row (its nearest parent's nearest parents).
PROBE = 4


def _groups(assign: np.ndarray, k: int):
    rows = np.argsort(assign, kind="stable").astype(np.int64, copy=False)
    counts = np.bincount(assign, minlength=k)
    groups = np.flatnonzero(counts).astype(np.int32)
    starts = np.zeros(groups.size + 1, dtype=np.int64)
    np.cumsum(counts[groups], out=starts[1:])
    return rows, starts, groups


@dataclass
class Assigner:
    """Centroids with their neighbourhood graph and entry points (picklable, shipped once)."""

    C: np.ndarray  # float32 [K, d]
    neigh: np.ndarray  # int32 [K, m]
    parents: np.ndarray | None  # float32 [P, d], None: every row is compared with all of C
    children: np.ndarray | None  # int32 [P, w]: children of each parent's PROBE nearest parents

    @property
    def n_lists(self) -> int:
        return self.C.shape[0]

    def nearest(self, W: np.ndarray, start: np.ndarray | None = None) -> np.ndarray:
        """Nearest centroid of each row of ``W`` (float32), by the greedy walk.

        ``start``: a first guess per row (e.g. the assignment against earlier centroids);
        otherwise the nearest entry centroid.
        """
        if start is None:
            if self.parents is None:
                return _nearest_dense(W, self.C)  # all K (K <= 1024)
            parent = _nearest_dense(W, self.parents)
            current = _nearest_children(W, self.C, parent, self.children)
        else:
            current = start
        return walk_to_nearest(W, self.C, current, self.neigh)

    def soar(self, W: np.ndarray, primary: np.ndarray, lam: float) -> np.ndarray:
        """SOAR spill list of each row (as :func:`~bbqlib.index.clustering.soar_assign`)."""
        if self.n_lists == 1:
            return np.full(W.shape[0], -1, dtype=np.int32)
        out = np.empty(W.shape[0], dtype=np.int32)
        primary = np.ascontiguousarray(primary, dtype=np.int32)
        soar_kernel(W, self.C, *_groups(primary, self.n_lists), self.neigh, float(lam), out)
        return out

    def spill_costs(self, W, primary, secondary, lam: float) -> np.ndarray:
        """SOAR loss of each row's spill (``inf`` without one), as the cap ranks them."""
        out = np.empty(W.shape[0], dtype=np.float64)
        KI.spill_costs(
            W,
            self.C,
            np.ascontiguousarray(primary, dtype=np.int64),
            np.ascontiguousarray(secondary, dtype=np.int64),
            float(lam),
            out,
        )
        return out


#: Rows per matrix product of :func:`_nearest_dense` (8,192 x 1,024 float32: 32 MiB).
_DENSE_ROWS = 8192


def _nearest_dense(W: np.ndarray, C: np.ndarray) -> np.ndarray:
    """Nearest row of ``C`` for each row of ``W``: ``argmin ||c||^2 - 2 w.c`` by BLAS
    (float32 matrix products, blocks of rows).

    The first two levels of the tree compare every row with hundreds of centroids: as
    matrix products they run faster than the numba loops of the walk (at the ~130
    centroids of a k-means the loops win: ``benchmarks/results/clustering.md``). A near
    tie may resolve differently than in those loops; the walk that follows settles it.
    """
    out = np.empty(W.shape[0], dtype=np.int32)
    sq = np.einsum("ij,ij->i", C, C)
    for r0 in range(0, W.shape[0], _DENSE_ROWS):
        D = W[r0 : r0 + _DENSE_ROWS] @ C.T
        D *= -2.0
        D += sq
        out[r0 : r0 + _DENSE_ROWS] = D.argmin(axis=1)
    return out


def _nearest_children(W, C, parent, children) -> np.ndarray:
    """Nearest of ``children[p]`` for each row whose nearest parent is ``p`` (BLAS per
    parent: its rows against its candidate centroids)."""
    out = np.empty(W.shape[0], dtype=np.int32)
    rows, starts, groups = _groups(parent, children.shape[0])
    sq = np.einsum("ij,ij->i", C, C)
    for g, p in enumerate(groups):
        idx = rows[starts[g] : starts[g + 1]]
        cand = children[p]
        for r0 in range(0, idx.size, _DENSE_ROWS):
            part = idx[r0 : r0 + _DENSE_ROWS]
            D = W[part] @ C[cand].T
            D *= -2.0
            D += sq[cand]
            out[part] = cand[D.argmin(axis=1)]
    return out


def make_assigner(C: np.ndarray, seed: int) -> Assigner:
    """The graph of ``C``: neighbourhoods and one entry centroid per parent (on the driver)."""
    from ..index.clustering import centroid_neighbourhoods, parent_level

    C = np.ascontiguousarray(C, dtype=np.float32)
    K = C.shape[0]
    neigh = centroid_neighbourhoods(C, NEIGHBOURS) if K > 1 else np.empty((K, 0), dtype=np.int32)
    level = parent_level(C, centroids_per_parent=ENTRY_CHILDREN, seed=seed) if K > 1 else None
    if level is None:
        return Assigner(C, np.ascontiguousarray(neigh, dtype=np.int32), None, None)
    P = level.centroids.shape[0]
    near = _nearest_parents(level.centroids, min(PROBE, P))
    kids = [level.child_order[level.offsets[p] : level.offsets[p + 1]] for p in range(P)]
    lists = [np.concatenate([kids[q] for q in near[p]]) for p in range(P)]
    width = max(len(x) for x in lists)
    children = np.empty((P, width), dtype=np.int32)
    for p, x in enumerate(lists):  # pad by repeating the first child (scanned twice: harmless)
        children[p, : len(x)] = x
        children[p, len(x) :] = x[0]
    return Assigner(C, np.ascontiguousarray(neigh, dtype=np.int32),
                    np.ascontiguousarray(level.centroids, dtype=np.float32), children)  # fmt: skip


def _nearest_parents(P: np.ndarray, m: int) -> np.ndarray:
    """Each parent and its ``m - 1`` nearest other parents (int [P, m])."""
    P64 = P.astype(np.float64)
    sq = np.einsum("ij,ij->i", P64, P64)
    D = sq[:, None] + sq[None, :] - 2.0 * (P64 @ P64.T)
    np.fill_diagonal(D, -np.inf)  # itself first
    return np.argsort(D, axis=1, kind="stable")[:, :m]
