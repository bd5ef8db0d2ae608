"""Slow, readable float64 twins of bbqlib's transforms (tests compare the fast code to these).

* :func:`fht_kac_reference` — the FhtKac rotation with an explicit Sylvester Hadamard matrix
  (``scipy.linalg.hadamard``) instead of the numba butterflies.
* :func:`fwht_recursive` — the unnormalized Walsh–Hadamard transform by its recursive definition
  ``H_2m = [[H_m, H_m], [H_m, -H_m]]``.
* :func:`block_matrix` / :func:`block_preconditioner_reference` — the block preconditioner as
  one dense ``d × d`` matrix, the latter drawn independently of bbqlib's Gram–Schmidt (QR with
  a positive diagonal gives the same orthonormal rows).
"""

from __future__ import annotations

import numpy as np
import scipy.linalg


def fwht_recursive(x: np.ndarray) -> np.ndarray:
    """Unnormalized Walsh–Hadamard transform of the last axis (length a power of two)."""
    x = np.asarray(x, dtype=np.float64)
    m = x.shape[-1]
    if m == 1:
        return x.copy()
    a, b = fwht_recursive(x[..., : m // 2]), fwht_recursive(x[..., m // 2 :])
    return np.concatenate([a + b, a - b], axis=-1)


def _givens(Y: np.ndarray) -> None:
    h = Y.shape[1] // 2
    a, b = Y[:, :h].copy(), Y[:, h : 2 * h].copy()
    Y[:, :h] = (a + b) / np.sqrt(2.0)
    Y[:, h : 2 * h] = (a - b) / np.sqrt(2.0)


def fht_kac_reference(X: np.ndarray, signs: np.ndarray, inverse: bool = False) -> np.ndarray:
    """FhtKac rotation of the rows of ``X`` in float64.

    ``signs`` (rounds, d) of ±1. Round r: flip signs, ``x[lo:lo+m] = H_m x[lo:lo+m] / √m``
    with ``lo = 0`` (even r) or ``d - m`` (odd r), then the π/4 Givens mix of pairs
    ``(i, i + d//2)`` when ``m != d``. The inverse runs the rounds backwards (each step is
    symmetric and orthogonal, hence its own inverse).
    """
    Y = np.array(np.atleast_2d(X), dtype=np.float64)
    d = Y.shape[1]
    m = 1 << (d.bit_length() - 1)
    H = scipy.linalg.hadamard(m).astype(np.float64) / np.sqrt(m)
    rounds = range(signs.shape[0] - 1, -1, -1) if inverse else range(signs.shape[0])
    for r in rounds:
        lo = 0 if r % 2 == 0 else d - m
        if not inverse:
            Y *= signs[r]
        if inverse and m != d:
            _givens(Y)
        Y[:, lo : lo + m] = Y[:, lo : lo + m] @ H  # H symmetric: rows times H = H times x
        if not inverse and m != d:
            _givens(Y)
        if inverse:
            Y *= signs[r]
    return Y


def block_matrix(blocks: np.ndarray, remainder: np.ndarray, permutation: np.ndarray) -> np.ndarray:
    """The ``d × d`` matrix ``M`` of the block preconditioner: ``transform(x) = M x``.

    Row ``off_j + r`` of ``M`` holds ``M_j[r, k]`` in column ``P_j[k]`` (spec §5).
    """
    mats = [*blocks, *([remainder] if remainder.size else [])]
    d = len(permutation)
    M = np.zeros((d, d))
    off = 0
    for B in mats:
        s = B.shape[0]
        idx = permutation[off : off + s]
        M[off : off + s][:, idx] = B
        off += s
    return M


def block_preconditioner_reference(dim: int, block_dim: int, seed: int) -> np.ndarray:
    """Draw the block preconditioner as a dense matrix, with QR in place of Gram–Schmidt.

    Same draw order as bbqlib (each block's Gaussian, then the permutation). Gram–Schmidt of the
    rows of ``G`` gives ``G = L Q`` (``L`` lower triangular, positive diagonal), i.e. the QR
    factorization of ``G.T`` with a positive diagonal.
    """
    b = min(dim, block_dim)
    sizes = [b] * (dim // b) + ([dim % b] if dim % b else [])
    rng = np.random.default_rng(seed)
    mats = []
    for s in sizes:
        Q, R = np.linalg.qr(rng.standard_normal((s, s)).T)
        mats.append((Q * np.sign(np.diag(R))).T)
    perm = rng.permutation(dim)
    off = 0
    for s in sizes:
        perm[off : off + s].sort()
        off += s
    n_full = dim // b
    blocks = np.array(mats[:n_full]).reshape(n_full, b, b)
    remainder = mats[n_full] if len(mats) > n_full else np.zeros((0, 0))
    return block_matrix(blocks, remainder, perm)
