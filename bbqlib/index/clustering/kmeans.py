"""Hierarchical k-means (ES ``HierarchicalKMeans`` / ``KMeansLocal``) and its Lloyd steps.

The algorithm (split, re-split of oversized clusters, neighbourhood-aware refinement) is
described in the package docstring, :mod:`bbqlib.index.clustering`.
"""

from __future__ import annotations

import math

import numpy as np

from bbqlib._kernels.kmeans import centroid_sums_kernel

from ._blocks import _gather, _groups, _is_f32_in_ram, _row_blocks
from ._checks import _check_int, _check_matrix
from .assign import NEIGHBOURHOOD_SIZE, _assign, centroid_neighbourhoods

MAX_K = 128
MAX_ITERATIONS = 6
SAMPLES_PER_CLUSTER = 64
SPLIT_FACTOR = 1.34
TARGET_SIZE_RANGE = (64, 65_536)


def _sums(Xb: np.ndarray, assign: np.ndarray, sums: np.ndarray) -> None:
    centroid_sums_kernel(Xb, assign, sums)


def _update(C: np.ndarray, sums: np.ndarray, counts: np.ndarray, which: np.ndarray) -> None:
    """Move centroids ``which`` (non-empty only) to the mean of their members."""
    which = which & (counts > 0)
    C[which] = (sums[which] / counts[which, None]).astype(np.float32)


def _lloyd(X, C, sample, max_iter, neigh=None, current=None):
    """ES ``KMeansLocal.cluster``: Lloyd on ``sample`` (or all rows), then a full pass if sampled.

    ``C`` (float32, updated in place) holds the initial centroids; ``current`` the prior
    assignment of all rows (needed with ``neigh``, optional otherwise). Returns the assignment
    of all rows. Empty clusters keep their position (the caller drops them).
    """
    n = X.shape[0]
    k = C.shape[0]
    sampled = sample is not None
    if sampled:
        Xs = _gather(X, sample)
        a_s = current[sample].copy() if current is not None else np.full(len(sample), -1, np.int32)
    else:
        Xs = X if _is_f32_in_ram(X) else np.array(X, dtype=np.float32, order="C", copy=True)
        a_s = current.copy() if current is not None else np.full(n, -1, np.int32)
    for _ in range(max_iter):
        new = _assign(Xs, C, a_s, neigh)
        moved = new != a_s
        if not moved.any():
            break
        # As ES: only clusters that gained or lost a member move (the others keep their mean
        # over the data they were built from, which for the refinement is all rows).
        changed = np.zeros(k, dtype=bool)
        old = a_s[moved]
        changed[old[old >= 0]] = True
        changed[new[moved]] = True
        a_s = new
        sums = np.zeros((k, C.shape[1]), dtype=np.float64)
        _sums(Xs, a_s, sums)
        _update(C, sums, np.bincount(a_s, minlength=k), changed)
    if not sampled and max_iter > 0:
        return a_s
    # Final pass over all rows; every non-empty centroid becomes the mean of its members.
    if current is not None:
        current = current.copy()
        if sampled:
            current[sample] = a_s
    assign = np.empty(n, dtype=np.int32)
    sums = np.zeros((k, C.shape[1]), dtype=np.float64)
    for start, stop, Xb in _row_blocks(X):
        cur = None if current is None else current[start:stop]
        assign[start:stop] = _assign(Xb, C, cur, neigh)
        _sums(Xb, assign[start:stop], sums)
    _update(C, sums, np.bincount(assign, minlength=k), np.ones(k, dtype=bool))
    return assign


def _drop_empty(C: np.ndarray, assign: np.ndarray):
    counts = np.bincount(assign, minlength=C.shape[0])
    keep = counts > 0
    if keep.all():
        return C, assign, counts
    remap = np.cumsum(keep, dtype=np.int32) - 1
    return C[keep], remap[assign], counts[keep]


def _mean(X: np.ndarray) -> np.ndarray:
    total = np.zeros(X.shape[1], dtype=np.float64)
    for _, _, Xb in _row_blocks(X):
        total += Xb.sum(axis=0, dtype=np.float64)
    return (total / X.shape[0]).astype(np.float32)[None, :]


def _split_k(n: int, target: int, max_k: int = MAX_K) -> int:
    """Centroids of one split: ``clamp(floor((n + target/2) / target), 2, max_k)`` (and <= n)."""
    return min(max((2 * n + target) // (2 * target), 2), max_k, n)


def _split_threshold(target: int) -> int:
    """Clusters with more members than this are split again: Java ``Math.round(1.34 target)``."""
    return math.floor(SPLIT_FACTOR * target + 0.5)


def _split_once(X, target, rng, max_iter, samples_per_cluster, max_k):
    """One ``clusterAndSplit`` k-means (no recursion); empty clusters dropped."""
    n = X.shape[0]
    k = _split_k(n, target, max_k)
    m = min(k * samples_per_cluster, n)
    init = np.sort(rng.choice(n, size=k, replace=False))
    C = _gather(X, init)
    sample = np.sort(rng.choice(n, size=m, replace=False)) if m < n else None
    assign = _lloyd(X, C, sample, max_iter)
    return _drop_empty(C, assign)


class _Progress:
    """tqdm bar when asked for (imported lazily), otherwise a no-op."""

    def __init__(self, enabled: bool, total: int, desc: str):
        self.bar = None
        if enabled:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=desc, unit="vec")

    def update(self, n: int) -> None:
        if self.bar is not None:
            self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _hierarchical(X, target, *, seed, max_iter, samples_per_cluster, max_k, refine, progress):
    """The algorithm behind :func:`hierarchical_kmeans`, with validated arguments."""
    n = X.shape[0]
    if n <= target:
        return _mean(X), np.zeros(n, dtype=np.int32)
    rng = np.random.default_rng(seed)
    threshold = _split_threshold(target)
    bar = _Progress(progress, n, "k-means split")

    C, assign, counts = _split_once(X, target, rng, max_iter, samples_per_cluster, max_k)
    if C.shape[0] == 1:
        bar.update(n)
        bar.close()
        return C, assign
    # Growing centroid table: slot j of `table` is centroid j; the first `size` are in use.
    table = np.empty((max(2 * C.shape[0], 16), X.shape[1]), dtype=np.float32)
    table[: C.shape[0]] = C
    size = C.shape[0]

    rows_all, starts, groups = _groups(assign, size)
    stack = []
    for g in range(groups.size - 1, -1, -1):
        members = rows_all[starts[g] : starts[g + 1]]
        if members.size > threshold:
            stack.append((members, int(groups[g])))
        else:
            bar.update(members.size)
    while stack:
        rows, slot = stack.pop()
        Xsub = _gather(X, rows)
        Cs, sub_assign, sub_counts = _split_once(
            Xsub, target, rng, max_iter, samples_per_cluster, max_k
        )
        ks = Cs.shape[0]
        table[slot] = Cs[0]
        if ks == 1:  # could not split (e.g. identical vectors): keep as one list
            bar.update(rows.size)
            continue
        if size + ks - 1 > table.shape[0]:
            grown = np.empty((2 * (size + ks), table.shape[1]), dtype=np.float32)
            grown[:size] = table[:size]
            table = grown
        table[size : size + ks - 1] = Cs[1:]
        slots = np.empty(ks, dtype=np.int32)
        slots[0] = slot
        slots[1:] = np.arange(size, size + ks - 1, dtype=np.int32)
        size += ks - 1
        assign[rows] = slots[sub_assign]
        sub_rows, sub_starts, sub_groups = _groups(sub_assign, ks)
        for g in range(sub_groups.size - 1, -1, -1):
            part = rows[sub_rows[sub_starts[g] : sub_starts[g + 1]]]
            if part.size > threshold:
                stack.append((part, int(slots[sub_groups[g]])))  # ascending already
            else:
                bar.update(part.size)
    C = table[:size].copy()
    bar.close()

    if refine and 1 < C.shape[0] < n:
        m = min(C.shape[0] * samples_per_cluster // 2, n)
        sample = np.sort(rng.choice(n, size=m, replace=False)) if m < n else None
        neigh = None
        if C.shape[0] > NEIGHBOURHOOD_SIZE:
            neigh = centroid_neighbourhoods(C, NEIGHBOURHOOD_SIZE)
        if progress:
            bar = _Progress(True, 1, "k-means refine")
        assign = _lloyd(X, C, sample, max_iter, neigh=neigh, current=assign)
        C, assign, _ = _drop_empty(C, assign)
        if progress:
            bar.update(1)
            bar.close()
    return C, assign


def hierarchical_kmeans(
    X,
    target_size: int = 384,
    *,
    seed: int = 42,
    max_iter: int = MAX_ITERATIONS,
    samples_per_cluster: int = SAMPLES_PER_CLUSTER,
    max_k: int = MAX_K,
    refine: bool = True,
    progress: bool = False,
) -> tuple[np.ndarray, np.ndarray]:
    """Partition vectors into lists of about ``target_size`` (Elasticsearch DiskBBQ clustering).

    Parameters
    ----------
    X : array_like of shape (n, d)
        Vectors to cluster, float32 preferred. A ``np.memmap`` (or any float array) is read in
        blocks of 65,536 rows for the full passes; only samples and one cluster's members are
        gathered into RAM at a time. Not modified.
    target_size : int, default 384
        Desired vectors per list, in [64, 65536].
    seed : int, default 42
        Seed for the initial centroids and the Lloyd samples; same seed, same result.
    max_iter : int, default 6
        Lloyd iterations per k-means (on the sample), >= 0.
    samples_per_cluster : int, default 64
        Lloyd sample size per centroid (the refinement uses half of it), >= 1.
    max_k : int, default 128
        Most centroids one split k-means may create, >= 2.
    refine : bool, default True
        Run the neighbourhood-aware refinement (``KMeansLocal``) after splitting.
    progress : bool, default False
        Show a tqdm progress bar.

    Returns
    -------
    centroids : ndarray of float32, shape (c, d)
        List centroids; every centroid has at least one member.
    assignments : ndarray of int32, shape (n,)
        List of each vector, in ``[0, c)``.

    Notes
    -----
    Spec ``bbq-osq-diskbbq.md`` §6.2 (docstring of :mod:`bbqlib.index.clustering`). Distances
    are squared L2. Where ES leaves a detail unstated, bbqlib draws the initial centroids as
    ``k`` distinct random rows and the Lloyd sample uniformly without replacement (NumPy
    ``default_rng(seed)``), and a final full pass sets every centroid to the mean of its
    members. ES's early exit in the refinement (skip a vector whose distance is below its
    neighbourhood's largest centroid-centroid distance) is not applied: every candidate is
    scored.

    Examples
    --------
    >>> import numpy as np
    >>> from bbqlib.index.clustering import hierarchical_kmeans
    >>> X = np.random.default_rng(0).standard_normal((5000, 16), dtype=np.float32)
    >>> C, a = hierarchical_kmeans(X, target_size=128)
    >>> C.shape[0] == a.max() + 1
    True
    """
    X = _check_matrix("X", X)
    target_size = _check_int("target_size", target_size, *TARGET_SIZE_RANGE)
    _check_int("seed", seed, 0)
    max_iter = _check_int("max_iter", max_iter, 0)
    samples_per_cluster = _check_int("samples_per_cluster", samples_per_cluster, 1)
    max_k = _check_int("max_k", max_k, 2)
    return _hierarchical(
        X,
        target_size,
        seed=seed,
        max_iter=max_iter,
        samples_per_cluster=samples_per_cluster,
        max_k=max_k,
        refine=bool(refine),
        progress=bool(progress),
    )
