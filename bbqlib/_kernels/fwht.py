"""Fast randomized Hadamard rotation ("FhtKac", RaBitQ-Library's default rotator), any dimension.

For ``d`` coordinates let ``m = 2**floor(log2(d))``. One round is

1. flip signs: ``x *= signs[r]`` (a fixed ±1 per coordinate and round);
2. a normalized fast Walsh–Hadamard transform (FWHT) on the leading ``m`` coordinates in even
   rounds and on the trailing ``m`` coordinates in odd rounds;
3. when ``m != d``, a Givens rotation by π/4 mixing the two halves:
   ``(x[i], x[i + h]) <- ((x[i] + x[i + h]) / √2, (x[i] - x[i + h]) / √2)`` for ``i < h = d // 2``
   (for odd ``d`` the last coordinate is left alone; the trailing FWHT always covers it).

Every step is orthogonal and its own inverse, so the inverse runs the steps of the rounds in
reverse order. Cost O(rounds · d log d) per vector.

Layout: rows are processed in tiles of ``TILE`` vectors copied transposed into a ``(d, TILE)``
scratch, so every butterfly acts on ``TILE`` contiguous floats and vectorizes (SIMD) even in
the first stages (pairs of neighbouring coordinates), where a per-row loop cannot; the
arithmetic is the same as one row at a time, so results are bit-identical
(``benchmarks/results/transforms.md`` times the transforms).

Kernels take preallocated outputs and validate nothing; ``bbqlib.transforms.hadamard`` is the
public wrapper. ``tests/reference/transforms.py`` holds the NumPy twin.
"""

from __future__ import annotations

import numpy as np

from .policy import kernel, parallel_kernel, prange

__all__ = ["TILE", "fwht_columns", "fht_kac_rows", "fht_kac_rows_parallel"]

#: Vectors per tile (32 float32 = 4 AVX registers; a 1536 x 32 scratch stays in L2).
TILE = 32

_INV_SQRT2 = np.float32(1.0 / np.sqrt(2.0))


@kernel
def fwht_columns(T, lo, m):
    """Normalized FWHT along axis 0 of ``T[lo:lo + m, :]`` in place (``m`` a power of two).

    The 1/√m normalization is applied as an exact factor 0.5 folded into every second stage
    (and one 1/√2 at the end when log2(m) is odd): no intermediate grows beyond 2·max|x|, so
    large inputs cannot overflow, and the power-of-two scalings add no rounding error.
    """
    B = T.shape[1]
    h = 1
    stage = 0
    while h < m:
        scale = np.float32(0.5) if stage % 2 == 1 else np.float32(1.0)
        for i in range(lo, lo + m, 2 * h):
            for j in range(i, i + h):
                for b in range(B):
                    x = T[j, b]
                    y = T[j + h, b]
                    T[j, b] = (x + y) * scale
                    T[j + h, b] = (x - y) * scale
        h *= 2
        stage += 1
    if stage % 2 == 1:
        for j in range(lo, lo + m):
            for b in range(B):
                T[j, b] *= _INV_SQRT2


@kernel
def _givens_columns(T):
    """Rotate row pairs ``(i, i + d // 2)`` of ``T`` by π/4 (symmetric: its own inverse)."""
    h = T.shape[0] // 2
    B = T.shape[1]
    for i in range(h):
        for b in range(B):
            x = T[i, b]
            y = T[i + h, b]
            T[i, b] = (x + y) * _INV_SQRT2
            T[i + h, b] = (x - y) * _INV_SQRT2


@kernel
def _flip_columns(T, signs, r):
    B = T.shape[1]
    for j in range(T.shape[0]):
        s = signs[r, j]
        for b in range(B):
            T[j, b] *= s


@kernel
def _fht_kac_tile(T, signs, m, inverse):
    """Apply the rotation (or its inverse) to every column of the ``(d, TILE)`` scratch."""
    d = T.shape[0]
    rounds = signs.shape[0]
    for step in range(rounds):
        r = rounds - 1 - step if inverse else step
        lo = 0 if r % 2 == 0 else d - m
        if inverse:
            if m != d:
                _givens_columns(T)
            fwht_columns(T, lo, m)
            _flip_columns(T, signs, r)
        else:
            _flip_columns(T, signs, r)
            fwht_columns(T, lo, m)
            if m != d:
                _givens_columns(T)


@kernel
def _rotate_tile(X, t0, signs, m, inverse, T, out):
    """Rotate rows ``t0 : t0 + TILE`` (or fewer at the end) of ``X`` into ``out`` via ``T``."""
    n, d = X.shape
    w = min(TILE, n - t0)
    for b in range(w):
        for j in range(d):
            T[j, b] = X[t0 + b, j]
    _fht_kac_tile(T, signs, m, inverse)
    for b in range(w):
        for j in range(d):
            out[t0 + b, j] = T[j, b]


@kernel
def fht_kac_rows(X, signs, m, inverse, out):
    """Rotate every row of ``X`` (n, d) float32 into ``out`` (n, d) float32, one thread.

    ``signs`` is (rounds, d) float32 of ±1, ``m = 2**floor(log2(d))``, ``inverse`` a bool.
    """
    n, d = X.shape
    T = np.zeros((d, TILE), dtype=np.float32)  # zeros: unused columns never hold denormals
    for t0 in range(0, n, TILE):
        _rotate_tile(X, t0, signs, m, inverse, T, out)


@parallel_kernel
def fht_kac_rows_parallel(X, signs, m, inverse, out):
    """Same as :func:`fht_kac_rows`, tiles spread over numba's threads."""
    n, d = X.shape
    for t in prange((n + TILE - 1) // TILE):
        T = np.zeros((d, TILE), dtype=np.float32)  # per tile: threads must not share it
        _rotate_tile(X, t * TILE, signs, m, inverse, T, out)
