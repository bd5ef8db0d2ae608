"""Elasticsearch's block preconditioner: random orthogonal blocks on a random split of dims."""

from __future__ import annotations

import numpy as np

from .base import Transform, _check_int

__all__ = ["BlockPreconditioner", "block_sizes", "gram_schmidt_rows"]

MIN_BLOCK_DIM = 8
MAX_BLOCK_DIM = 384


def block_sizes(dim: int, block_dim: int) -> list[int]:
    """Sizes of the blocks for ``dim`` coordinates: ``dim // b`` full blocks of ``b =
    min(dim, block_dim)``, then one block of ``dim % b`` if that is non-zero."""
    b = min(dim, block_dim)
    sizes = [b] * (dim // b)
    if dim % b:
        sizes.append(dim % b)
    return sizes


def gram_schmidt_rows(M: np.ndarray) -> np.ndarray:
    """Orthonormalize the rows of a square matrix by modified Gram–Schmidt (float64 copy).

    Row ``i`` is divided by its norm (skipped when zero), then its projection is subtracted
    from every later row, as Elasticsearch's ``Preconditioner`` does.
    """
    Q = np.array(M, dtype=np.float64)
    for i in range(Q.shape[0]):
        norm = np.sqrt(Q[i] @ Q[i])
        if norm > 0:
            Q[i] /= norm
        Q[i + 1 :] -= np.outer(Q[i + 1 :] @ Q[i], Q[i])
    return Q


class BlockPreconditioner(Transform):
    """Block-diagonal random orthogonal transform on permuted coordinates (ES ``precondition``).

    Parameters
    ----------
    dim : int, optional
        Dimension (or give it to :meth:`fit`).
    block_dim : int, default 32
        Block size, 8 to 384 (Elasticsearch's default and bounds); ``min(dim, block_dim)`` is
        used.
    seed : int, default 42
        Seed of ``numpy.random.default_rng`` (Elasticsearch seeds ``java.util.Random(42)``;
        this class keeps the structure, not Java's random stream).

    Attributes
    ----------
    block_dim_ : int
        Effective block size ``min(dim, block_dim)``.
    block_sizes_ : list of int
        ``ceil(dim / block_dim_)`` sizes: full blocks, then ``dim % block_dim_`` if non-zero.
    blocks_ : ndarray ``(n_full, block_dim_, block_dim_)``, float32
        The full blocks, each with orthonormal rows.
    remainder_block_ : ndarray (rem, rem), float32
        The last, smaller block (shape (0, 0) when ``dim % block_dim_ == 0``).
    permutation_ : ndarray (dim,), int32
        Block ``j`` reads the coordinates ``permutation_[off_j : off_j + size_j]`` (ascending
        within each block) and writes outputs ``off_j : off_j + size_j``.

    Notes
    -----
    ``out[off_j + r] = Σ_k M_j[r, k] · x[P_j[k]]``, as Elasticsearch's diskbbq
    ``Preconditioner`` (``createPreconditioner(dim, blockDim)``). Draw order from one
    generator: each block's Gaussian matrix in order, then the permutation. Each block's rows are
    orthonormalized by modified Gram–Schmidt in float64, then stored as float32. Cost per
    vector: O(dim · block_dim).
    """

    name = "block"
    _param_names = ("block_dim",)

    def __init__(self, dim: int | None = None, *, block_dim: int = 32, seed: int = 42):
        super().__init__(dim, seed=seed)
        self.block_dim = block_dim

    def _validate_params(self) -> None:
        _check_int("block_dim", self.block_dim, MIN_BLOCK_DIM, MAX_BLOCK_DIM)

    def _fit(self, dim: int) -> None:
        self._set_sizes(dim)
        rng = np.random.default_rng(self.seed)
        mats = [gram_schmidt_rows(rng.standard_normal((s, s))) for s in self.block_sizes_]
        perm = rng.permutation(dim)
        offsets = np.cumsum([0, *self.block_sizes_])
        for lo, hi in zip(offsets[:-1], offsets[1:], strict=True):
            perm[lo:hi].sort()
        n_full = dim // self.block_dim_
        b = self.block_dim_
        self.blocks_ = np.asarray(mats[:n_full], dtype=np.float32).reshape(n_full, b, b)
        rem = mats[n_full] if len(mats) > n_full else np.zeros((0, 0))
        self.remainder_block_ = np.ascontiguousarray(rem, dtype=np.float32)
        self.permutation_ = perm.astype(np.int32)

    def _set_sizes(self, dim: int) -> None:
        self.block_dim_ = min(dim, int(self.block_dim))
        self.block_sizes_ = block_sizes(dim, self.block_dim_)

    def _blocks(self):
        """Yield ``(matrix, input index set, output slice)`` per block."""
        mats = [*self.blocks_, *([self.remainder_block_] if self.remainder_block_.size else [])]
        off = 0
        for M in mats:
            s = M.shape[0]
            yield M, self.permutation_[off : off + s], slice(off, off + s)
            off += s

    def _apply(self, X: np.ndarray) -> np.ndarray:
        out = np.empty_like(X)
        for M, idx, sl in self._blocks():
            out[:, sl] = X[:, idx] @ M.T
        return out

    def _apply_inverse(self, X: np.ndarray) -> np.ndarray:
        out = np.empty_like(X)
        for M, idx, sl in self._blocks():
            out[:, idx] = X[:, sl] @ M
        return out

    def _arrays(self) -> dict[str, np.ndarray]:
        return {
            "blocks": self.blocks_,
            "remainder_block": self.remainder_block_,
            "permutation": self.permutation_,
        }

    def _set_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        d = self.dim_
        self._set_sizes(d)
        b, rem = self.block_dim_, d % self.block_dim_
        self.blocks_ = self._stored_array(arrays, "blocks", (d // b, b, b), np.float32)
        self.remainder_block_ = self._stored_array(
            arrays, "remainder_block", (rem, rem), np.float32
        )
        perm = self._stored_array(arrays, "permutation", (d,), np.int32)
        if not np.array_equal(np.sort(perm), np.arange(d)):
            raise ValueError(
                f"transform state array 'permutation' is not a permutation of 0..{d - 1}"
            )
        self.permutation_ = perm
