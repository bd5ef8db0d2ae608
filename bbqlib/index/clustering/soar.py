"""SOAR: a second (spill) list per vector by the orthogonality-amplified residual loss."""

from __future__ import annotations

import numpy as np

from bbqlib._kernels.kmeans import soar_kernel, soar_serial

from ._blocks import _groups, _row_blocks
from ._checks import _check_centroids, _check_int, _check_lambda, _check_matrix
from .assign import _PARALLEL_MIN_WORK, NEIGHBOURHOOD_SIZE, _neighbourhoods

SOAR_LAMBDA = 1.0


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
    return soar_with_graph(X, C, primary, lam, _neighbourhoods(C, neighbours))


def soar_with_graph(X, C, primary, lam: float, neigh: np.ndarray) -> np.ndarray:
    """:func:`soar_assign` with the centroid graph given (``neigh``, as
    :func:`~bbqlib.index.clustering.centroid_neighbourhoods` makes it) and no validation:
    for a build that computed the graph already (float32 ``C``, ``k > 1``)."""
    n, k = X.shape[0], C.shape[0]
    primary = primary.astype(np.int32, copy=False)
    out = np.empty(n, dtype=np.int32)
    for start, stop, Xb in _row_blocks(X):
        rows, starts, groups = _groups(primary[start:stop], k)
        big = Xb.size * neigh.shape[1] >= _PARALLEL_MIN_WORK
        (soar_kernel if big else soar_serial)(
            Xb, C, rows, starts, groups, neigh, lam, out[start:stop]
        )
    return out
