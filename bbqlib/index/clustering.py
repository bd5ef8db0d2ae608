"""Clustering for the DiskBBQ-style IVF index: hierarchical k-means, SOAR, parent level.

Follows Elasticsearch's ``HierarchicalKMeans`` / ``KMeansLocal`` (spec
``bbq-osq-diskbbq.md`` §6.2-6.4):

1. ``n <= target``: one centroid, the mean.
2. Split: ``k = clamp(floor((n + target/2) / target), 2, 128)``; Lloyd (squared L2) on a
   random sample of ``min(64 k, n)`` vectors for at most 6 iterations, stopping when no
   assignment changes; if sampled, one assign-and-update pass over all ``n``. Clusters with
   more than ``round(1.34 target)`` members are split again the same way (the first
   sub-centroid takes the parent's slot, the others are appended); empty clusters are dropped.
3. Refinement: at most 6 Lloyd iterations on a sample of ``min(32 #c, n)`` vectors where,
   when there are more than 128 centroids, a vector only looks at its current centroid and
   that centroid's 128 nearest centroids; then one full pass if sampled.
4. SOAR: a second list per vector (:func:`soar_assign`).

The numeric work runs in numba kernels (:mod:`bbqlib._kernels.kmeans`); this module
validates, samples, groups and drives. Neither scikit-learn nor scipy is imported: the
kernels were measured faster than ``sklearn.metrics.pairwise_distances_argmin`` and a float32
BLAS matmul per block (``benchmarks/results/clustering.md``).

Determinism: for a given ``seed`` the results are identical run to run and for any numba
thread count (threads split whole clusters or whole dimensions, never a sum).
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from bbqlib._kernels.kmeans import (
    centroid_sums_kernel,
    nearest_centroid_kernel,
    nearest_centroid_serial,
    nearest_in_neighbourhood_kernel,
    nearest_in_neighbourhood_serial,
    soar_kernel,
    soar_serial,
)

__all__ = [
    "MAX_K",
    "MAX_ITERATIONS",
    "SAMPLES_PER_CLUSTER",
    "NEIGHBOURHOOD_SIZE",
    "SOAR_LAMBDA",
    "TARGET_SIZE_RANGE",
    "ParentLevel",
    "hierarchical_kmeans",
    "nearest_centroid",
    "centroid_neighbourhoods",
    "soar_assign",
    "parent_level",
]

MAX_K = 128
MAX_ITERATIONS = 6
SAMPLES_PER_CLUSTER = 64
NEIGHBOURHOOD_SIZE = 128
SOAR_LAMBDA = 1.0
SPLIT_FACTOR = 1.34
TARGET_SIZE_RANGE = (64, 65_536)
CENTROIDS_PER_PARENT_RANGE = (2, 256)

# Rows per block when the input must be converted or streamed (memmap, float64, strided):
# 65,536 x 384 float32 is 96 MiB.
_BLOCK_ROWS = 65_536
# Below this many distance terms (rows x candidates x d) a call runs single-threaded: about
# 1 ms of work, against a thread-pool wake-up that on a busy 2-core machine can cost a
# scheduler time slice. The choice depends on the size only, so results never depend on it.
_PARALLEL_MIN_WORK = 1 << 23
# Elements of one float64 centroid-distance block in centroid_neighbourhoods (32 MiB).
_NEIGHBOUR_BLOCK_ELEMS = 1 << 22


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


# --------------------------------------------------------------------------- validation


def _check_int(name: str, value, lo: int, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    value = int(value)
    if value < lo or (hi is not None and value > hi):
        bound = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ValueError(f"{name} must be {bound}, got {value}; pass a value {bound}")
    return value


def _check_matrix(name: str, X, *, check_finite: bool = True) -> np.ndarray:
    """A 2-D real array with at least one row and column; not copied when already an array."""
    if isinstance(X, np.memmap):
        X = X.view(np.ndarray)  # numba types memmap as a subclass; a plain view is free
    else:
        X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(
            f"{name} must be a 2-D array of shape (n, d), got {X.ndim} dimension(s) "
            f"with shape {X.shape}; reshape it, e.g. {name}.reshape(1, -1) for one vector"
        )
    if X.dtype.kind not in "fiub":
        raise TypeError(
            f"{name} must hold real numbers (float or integer), got dtype {X.dtype}; "
            f"convert it with np.asarray({name}, dtype=np.float32)"
        )
    if X.shape[0] < 1 or X.shape[1] < 1:
        raise ValueError(f"{name} must have at least one row and one column, got shape {X.shape}")
    if check_finite and X.dtype.kind == "f":
        for start in range(0, X.shape[0], _BLOCK_ROWS):
            block = X[start : start + _BLOCK_ROWS]
            if not np.isfinite(block).all():
                bad = start + int(np.flatnonzero(~np.isfinite(block).all(axis=1))[0])
                raise ValueError(
                    f"{name} must be finite, but row {bad} holds NaN or infinity; "
                    f"drop or repair that row before clustering"
                )
    return X


def _check_lambda(lam) -> float:
    if isinstance(lam, bool) or not isinstance(lam, (int, float, np.integer, np.floating)):
        raise TypeError(f"lam must be a real number, got {type(lam).__name__} {lam!r}")
    lam = float(lam)
    if not (math.isfinite(lam) and lam >= 0.0):
        raise ValueError(f"lam must be finite and >= 0, got {lam}; the SOAR default is 1.0")
    return lam


# --------------------------------------------------------------------------- data access


def _is_f32_in_ram(X: np.ndarray) -> bool:
    # Read-only arrays are copied block by block too: numba compiles a separate specialization
    # for read-only buffers, and a block copy costs far less than the kernel work on it.
    return (
        X.dtype == np.float32 and X.flags.c_contiguous and X.flags.writeable and not _is_mapped(X)
    )


def _is_mapped(X: np.ndarray) -> bool:
    base = X
    while base is not None:
        if isinstance(base, np.memmap) or type(base).__name__ == "mmap":
            return True
        base = getattr(base, "base", None)
    return False


def _row_blocks(X: np.ndarray):
    """Yield ``(start, stop, float32 C-contiguous block)``; in-RAM float32 comes in one piece."""
    n = X.shape[0]
    if _is_f32_in_ram(X):
        yield 0, n, X
        return
    for start in range(0, n, _BLOCK_ROWS):
        stop = min(n, start + _BLOCK_ROWS)
        yield start, stop, np.array(X[start:stop], dtype=np.float32, order="C", copy=True)


def _gather(X: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Rows of ``X`` (ascending ``rows``) as a new, writeable float32 C-contiguous array."""
    return np.ascontiguousarray(X[rows], dtype=np.float32)  # fancy indexing made a fresh copy


def _groups(assign: np.ndarray, k: int):
    """Rows ordered by cluster: ``(rows int64, starts int64 [G+1], groups int32 [G])``."""
    rows = np.argsort(assign, kind="stable").astype(np.int64, copy=False)
    counts = np.bincount(assign, minlength=k)
    groups = np.flatnonzero(counts).astype(np.int32)
    starts = np.zeros(groups.size + 1, dtype=np.int64)
    np.cumsum(counts[groups], out=starts[1:])
    return rows, starts, groups


# --------------------------------------------------------------------------- kernels, wrapped


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


# --------------------------------------------------------------------------- public API


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
    Spec ``bbq-osq-diskbbq.md`` §6.2 (module docstring). Distances are squared L2. Where ES
    leaves a detail unstated, bbqlib draws the initial centroids as ``k`` distinct random rows
    and the Lloyd sample uniformly without replacement (NumPy ``default_rng(seed)``), and a
    final full pass sets every centroid to the mean of its members. ES's early exit in the
    refinement (skip a vector whose distance is below its neighbourhood's largest
    centroid-centroid distance) is not applied: every candidate is scored.

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


def _check_centroids(centroids, d: int | None) -> np.ndarray:
    C = _check_matrix("centroids", centroids)
    if d is not None and C.shape[1] != d:
        raise ValueError(
            f"centroids must have the vectors' dimension {d}, got {C.shape[1]}; "
            f"pass the centroids built from these vectors"
        )
    return np.array(C, dtype=np.float32, order="C", copy=True)  # small; always writeable


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


def soar_assign(
    X, centroids, primary, *, lam: float = SOAR_LAMBDA, neighbours: int = NEIGHBOURHOOD_SIZE
) -> np.ndarray:
    """Secondary (spill) list of every vector by SOAR's orthogonality-amplified residual loss.

    Parameters
    ----------
    X : array_like of shape (n, d)
        The clustered vectors (memmap fine; read in blocks). Not modified.
    centroids : array_like of shape (k, d)
    primary : array_like of int, shape (n,)
        Primary list of each vector, in ``[0, k)``.
    lam : float, default 1.0
        SOAR weight lambda >= 0 (0 gives the second-nearest centroid).
    neighbours : int, default 128
        Candidates are the ``neighbours`` nearest centroids of the primary centroid (all other
        centroids when there are fewer).

    Returns
    -------
    ndarray of int32, shape (n,)
        Secondary list of each vector, never equal to its primary; all ``-1`` when ``k == 1``.

    Notes
    -----
    Spec §6.3 and Sun et al., "SOAR: Improved Indexing for Approximate Nearest Neighbor
    Search" (NeurIPS 2023). With ``r = x - c1`` (``c1`` the primary centroid) the secondary is

    .. math::

        \\arg\\min_{c \\ne c_1} \\|x - c\\|^2
        + \\lambda \\langle r, x - c\\rangle^2 / \\|r\\|^2,

    penalising candidates whose residual ``x - c`` is parallel to ``r``. When
    ``||r||^2 <= 1e-16`` the plain ``||x - c||^2`` decides (released Elasticsearch
    behaviour). The kernel works with
    ``r`` and ``c - c1`` (``||x - c||^2 = ||r||^2 - 2<r, c - c1> + ||c - c1||^2``), so the
    precision follows the size of the residuals, not of the vectors.
    """
    X = _check_matrix("X", X)
    C = _check_centroids(centroids, X.shape[1])
    lam = _check_lambda(lam)
    neighbours = _check_int("neighbours", neighbours, 1)
    n, k = X.shape[0], C.shape[0]
    primary = np.asarray(primary)
    if primary.shape != (n,) or primary.dtype.kind not in "iu":
        raise ValueError(
            f"primary must be a 1-D integer array of length {n} (one list per vector), got "
            f"shape {primary.shape} and dtype {primary.dtype}"
        )
    if n and (primary.min() < 0 or primary.max() >= k):
        raise ValueError(
            f"primary must hold centroid ids in [0, {k - 1}], got values in "
            f"[{primary.min()}, {primary.max()}]; pass the assignments of these centroids"
        )
    if k == 1:
        return np.full(n, -1, dtype=np.int32)
    primary = primary.astype(np.int32, copy=False)
    neigh = _neighbourhoods(C, neighbours)
    out = np.empty(n, dtype=np.int32)
    for start, stop, Xb in _row_blocks(X):
        rows, starts, groups = _groups(primary[start:stop], k)
        big = Xb.size * neigh.shape[1] >= _PARALLEL_MIN_WORK
        (soar_kernel if big else soar_serial)(
            Xb, C, rows, starts, groups, neigh, lam, out[start:stop]
        )
    return out


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
