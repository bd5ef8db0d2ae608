"""Dense Haar-random orthogonal rotation (QR of a Gaussian matrix with the sign fix)."""

from __future__ import annotations

import numpy as np

from .base import Transform

__all__ = ["DenseRotation", "haar_orthogonal"]


def haar_orthogonal(dim: int, rng: np.random.Generator) -> np.ndarray:
    """Draw a Haar-distributed orthogonal ``dim × dim`` matrix (float64).

    Notes
    -----
    ``Q, R = qr(G)`` with ``G`` i.i.d. standard normal gives an orthogonal ``Q`` whose
    distribution depends on the sign convention of the QR routine; multiplying column ``j`` of
    ``Q`` by ``sign(R[j, j])`` makes the factorization unique (positive diagonal of ``R``) and
    ``Q`` exactly Haar (Mezzadri, "How to generate random matrices from the classical compact
    groups", Notices AMS 54, 2007, eq. 5.3).
    """
    G = rng.standard_normal((dim, dim))
    Q, R = np.linalg.qr(G)
    signs = np.sign(np.diag(R))
    signs[signs == 0] = 1.0  # probability zero for a Gaussian, but keep Q orthogonal
    return Q * signs


class DenseRotation(Transform):
    """Haar-random orthogonal matrix ``Q``: ``transform(x) = Q x`` (``X @ Q.T`` on rows).

    Parameters
    ----------
    dim : int, optional
        Dimension (or give it to :meth:`fit`).
    seed : int, default 0
        Seed of ``numpy.random.default_rng``.

    Attributes
    ----------
    matrix_ : ndarray of shape (dim, dim), float32
        The rotation ``Q``. Stores ``4·dim²`` bytes; costs O(dim²) per vector.

    Notes
    -----
    The draw is reproducible from ``(dim, seed)`` for a given NumPy/LAPACK build; other
    builds may differ in the last bits, so an index stores ``matrix_`` itself
    (:meth:`get_state`).

    Examples
    --------
    >>> import numpy as np
    >>> from bbqlib.transforms import DenseRotation
    >>> rot = DenseRotation(seed=0).fit(8)
    >>> x = np.arange(8, dtype=np.float32)
    >>> bool(np.isclose(np.linalg.norm(rot.transform(x)), np.linalg.norm(x)))
    True
    """

    name = "dense"

    def __init__(self, dim: int | None = None, *, seed: int = 0):
        super().__init__(dim, seed=seed)

    def _fit(self, dim: int) -> None:
        Q = haar_orthogonal(dim, np.random.default_rng(self.seed))
        self.matrix_ = np.ascontiguousarray(Q, dtype=np.float32)

    def _apply(self, X: np.ndarray) -> np.ndarray:
        return X @ self.matrix_.T

    def _apply_inverse(self, X: np.ndarray) -> np.ndarray:
        return X @ self.matrix_

    def _arrays(self) -> dict[str, np.ndarray]:
        return {"matrix": self.matrix_}

    def _set_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        d = self.dim_
        self.matrix_ = self._stored_array(arrays, "matrix", (d, d), np.float32)
