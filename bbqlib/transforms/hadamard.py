"""Fast randomized Hadamard rotation (RaBitQ-Library's "FhtKac" scheme), O(d log d), any d."""

from __future__ import annotations

import numpy as np

from .._kernels.fwht import fht_kac_rows, fht_kac_rows_parallel
from .._kernels.policy import num_threads
from .base import Transform, _check_int

__all__ = ["HadamardRotation"]

# Below this many rows, thread start-up costs more than it saves.
_PARALLEL_MIN_ROWS = 256


class HadamardRotation(Transform):
    """Random sign flips + fast Walsh–Hadamard transforms + Givens mixes, over a few rounds.

    Parameters
    ----------
    dim : int, optional
        Dimension (or give it to :meth:`fit`). Any ``dim >= 1``; no padding.
    rounds : int, default 4
        Number of rounds (RaBitQ-Library uses 4).
    seed : int, default 0
        Seed of ``numpy.random.default_rng`` that draws the signs.

    Attributes
    ----------
    signs_ : ndarray (rounds, dim), float32
        The ±1 sign flips of each round (stored as ``rounds · dim`` bits by :meth:`get_state`).
    hadamard_dim_ : int
        ``m = 2**floor(log2(dim))``, the size of each Walsh–Hadamard block.

    Notes
    -----
    Round ``r``: ``x *= signs_[r]``; normalized FWHT on ``x[:m]`` (even ``r``) or ``x[-m:]``
    (odd ``r``); if ``m != dim``, ``(x[i], x[i+h]) <- ((x[i]+x[i+h])/√2, (x[i]-x[i+h])/√2)`` for
    ``i < h = dim // 2``. For a power-of-two ``dim`` this is ``rounds`` products ``H D_r``.
    The result is orthogonal but not Haar-distributed; a few rounds spread every input
    coordinate over all outputs, which is what quantization needs. See RaBitQ-Library
    (``rabitqlib/utils/rotator.hpp``, ``FhtKacRotator``) and Ailon & Chazelle's fast
    Johnson–Lindenstrauss transform. Kernel: ``bbqlib._kernels.fwht``.

    Examples
    --------
    >>> import numpy as np
    >>> from bbqlib.transforms import HadamardRotation
    >>> rot = HadamardRotation(seed=0).fit(100)
    >>> x = np.ones(100, dtype=np.float32)
    >>> bool(np.allclose(rot.inverse_transform(rot.transform(x)), x, atol=1e-5))
    True
    """

    name = "hadamard"
    _param_names = ("rounds",)

    def __init__(self, dim: int | None = None, *, rounds: int = 4, seed: int = 0):
        super().__init__(dim, seed=seed)
        self.rounds = rounds

    def _validate_params(self) -> None:
        _check_int("rounds", self.rounds, 1)

    def _fit(self, dim: int) -> None:
        rng = np.random.default_rng(self.seed)
        bits = rng.integers(0, 2, size=(int(self.rounds), dim), dtype=np.uint8)
        self._set_signs(bits)

    def _set_signs(self, bits: np.ndarray) -> None:
        self.signs_ = (1.0 - 2.0 * bits).astype(np.float32)  # bit 1 -> flip
        self.hadamard_dim_ = 1 << (self.dim_.bit_length() - 1)

    def _run(self, X: np.ndarray, inverse: bool) -> np.ndarray:
        out = np.empty_like(X)
        if X.shape[0] >= _PARALLEL_MIN_ROWS and num_threads() > 1:
            fht_kac_rows_parallel(X, self.signs_, self.hadamard_dim_, inverse, out)
        else:
            fht_kac_rows(X, self.signs_, self.hadamard_dim_, inverse, out)
        return out

    def _apply(self, X: np.ndarray) -> np.ndarray:
        return self._run(X, False)

    def _apply_inverse(self, X: np.ndarray) -> np.ndarray:
        return self._run(X, True)

    def _arrays(self) -> dict[str, np.ndarray]:
        flips = (self.signs_ < 0).astype(np.uint8)
        return {"sign_bits": np.packbits(flips, axis=1, bitorder="little")}

    def _set_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        d, rounds = self.dim_, int(self.rounds)
        packed = self._stored_array(arrays, "sign_bits", (rounds, (d + 7) // 8), np.uint8)
        self._set_signs(np.unpackbits(packed, axis=1, count=d, bitorder="little"))
