"""The IVF list shape at another ``n``: SOAR spills measured at the target's list density.

An IVF of ``n`` vectors has ``K(n) ≈ n / cluster_size`` lists. Its posting entries per
vector (1 + the share of vectors whose SOAR copy survives the per-list cap) depend on how
finely the lists cut the data, not on ``n`` alone: on 1M x 384 synthetic clustered vectors
(1,000 true clusters, ``cluster_size=384``) a build on a 100,000-vector subsample had 1.28
entries per vector, the whole 1.59 (``benchmarks/results/calibrate.md``). A sample of ``m``
vectors clustered into ``K(n)`` lists, i.e. at ``cluster_size · m / n`` vectors per list,
cuts the data as finely as the target does; its spill rate is what :func:`entries_at`
measures (1.65 from 100,000 vectors, 1.63 from 200,000, against 1.59 at 1M).

Only the clustering, SOAR assignment and cap run (no encode): about the cost of the
sample's own list build.
"""

from __future__ import annotations

import numpy as np

__all__ = ["MIN_LIST", "entries_at"]

#: Smallest per-list target the rule clusters at; a target ``n`` further away is measured
#: at this density (the equivalent ``n`` returned is then below the target).
MIN_LIST = 16
#: Re-cluster a list above this multiple of its target (as the IVF build does).
_SPLIT_FACTOR = 2


def _kmeans(X, target: int, seed: int):
    from ..index.clustering import kmeans as KM

    # The public hierarchical_kmeans refuses targets below 64 (too small for an index's
    # lists); here small lists only stand for the target's density.
    return KM._hierarchical(
        X, int(target), seed=seed, max_iter=KM.MAX_ITERATIONS, samples_per_cluster=64,
        max_k=128, refine=True, progress=False,
    )  # fmt: skip


def _split_oversized(W, C, primary, target: int, seed: int):
    """Re-cluster lists of more than twice ``target`` primaries (``build.split_oversized``)."""
    primary = np.array(primary, dtype=np.int32)
    big = np.flatnonzero(np.bincount(primary, minlength=C.shape[0]) > _SPLIT_FACTOR * target)
    for j in big:
        members = np.flatnonzero(primary == j)
        Cs, sub = _kmeans(np.asarray(W[members], dtype=np.float32), target, seed)
        if Cs.shape[0] == 1:
            continue
        slots = np.concatenate([[j], np.arange(C.shape[0], C.shape[0] + Cs.shape[0] - 1)])
        C = np.concatenate([C, Cs[1:]])
        C[j] = Cs[0]
        primary[members] = slots[sub]
    return C, primary


def entries_at(W, n: int, cluster_size: int, *, seed: int = 0, soar: bool = True):
    """``(n_equivalent, entries_per_vector)`` of ``W`` clustered as an IVF of ``n`` would be.

    Parameters
    ----------
    W : float32 array [m, d]
        The vectors as the IVF clusters them (prepared: normalized for cosine). Not modified.
    n : int
        The vector count to size for (``n > m``).
    cluster_size : int
        The IVF's target list size.
    seed : int
    soar : bool
        Whether the IVF spills (without SOAR every vector has one entry).

    Returns
    -------
    tuple of (int, float)
        The ``n`` whose list density was measured (``n`` itself unless the per-list target
        ``cluster_size · m / n`` fell below :data:`MIN_LIST`) and the posting entries per
        vector measured there.
    """
    from ..index.clustering import soar_assign
    from ..index.ivf.build import cap_spills

    m = W.shape[0]
    if n <= m:
        raise ValueError(f"n must exceed the {m} vectors measured, got {n}")
    if not soar:
        return int(n), 1.0
    size = max(MIN_LIST, int(round(cluster_size * m / n)))
    n_eq = int(round(m * cluster_size / size))
    X = np.ascontiguousarray(W, dtype=np.float32)
    C, primary = _kmeans(X, size, seed)
    C, primary = _split_oversized(X, C, primary, size, seed)
    if C.shape[0] < 2:
        return n_eq, 1.0
    secondary = soar_assign(X, C, primary)
    room = np.bincount(primary, minlength=C.shape[0])
    secondary = cap_spills(X, C, primary, secondary, room)
    return n_eq, 1.0 + float(np.mean(secondary >= 0))
