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

Kernels take preallocated outputs and validate nothing; ``bbqlib.transforms.hadamard`` is the
public wrapper. ``tests/reference/transforms.py`` holds the NumPy twin.
"""

from __future__ import annotations

import numpy as np

from .policy import kernel, parallel_kernel, prange

__all__ = ["fwht_inplace", "fht_kac_rows", "fht_kac_rows_parallel"]

_INV_SQRT2 = np.float32(1.0 / np.sqrt(2.0))


@kernel
def fwht_inplace(x, lo, m):
    """Normalized FWHT of ``x[lo:lo + m]`` in place (``m`` a power of two, ``x`` float32 1-D).

    The 1/√m normalization is applied as an exact factor 0.5 folded into every second stage
    (and one 1/√2 at the end when log2(m) is odd): no intermediate grows beyond 2·max|x|, so
    large inputs cannot overflow, and the power-of-two scalings add no rounding error.
    """
    h = 1
    stage = 0
    while h < m:
        scale = np.float32(0.5) if stage % 2 == 1 else np.float32(1.0)
        for i in range(lo, lo + m, 2 * h):
            for j in range(i, i + h):
                a = x[j]
                b = x[j + h]
                x[j] = (a + b) * scale
                x[j + h] = (a - b) * scale
        h *= 2
        stage += 1
    if stage % 2 == 1:
        for j in range(lo, lo + m):
            x[j] *= _INV_SQRT2


@kernel
def _givens_halves(x):
    """Rotate pairs ``(i, i + d // 2)`` by π/4 in place (symmetric, so its own inverse)."""
    h = x.shape[0] // 2
    for i in range(h):
        a = x[i]
        b = x[i + h]
        x[i] = (a + b) * _INV_SQRT2
        x[i + h] = (a - b) * _INV_SQRT2


@kernel
def _fht_kac_row(x, signs, m, inverse):
    """Apply the rotation (or its inverse) to one float32 row ``x`` in place."""
    d = x.shape[0]
    rounds = signs.shape[0]
    for step in range(rounds):
        r = rounds - 1 - step if inverse else step
        lo = 0 if r % 2 == 0 else d - m
        if inverse:
            if m != d:
                _givens_halves(x)
            fwht_inplace(x, lo, m)
            for j in range(d):
                x[j] *= signs[r, j]
        else:
            for j in range(d):
                x[j] *= signs[r, j]
            fwht_inplace(x, lo, m)
            if m != d:
                _givens_halves(x)


@kernel
def fht_kac_rows(X, signs, m, inverse, out):
    """Rotate every row of ``X`` (n, d) float32 into ``out`` (n, d) float32, one thread.

    ``signs`` is (rounds, d) float32 of ±1, ``m = 2**floor(log2(d))``, ``inverse`` a bool.
    """
    n, d = X.shape
    for i in range(n):
        row = out[i]
        for j in range(d):
            row[j] = X[i, j]
        _fht_kac_row(row, signs, m, inverse)


@parallel_kernel
def fht_kac_rows_parallel(X, signs, m, inverse, out):
    """Same as :func:`fht_kac_rows`, rows spread over numba's threads."""
    n, d = X.shape
    for i in prange(n):
        row = out[i]
        for j in range(d):
            row[j] = X[i, j]
        _fht_kac_row(row, signs, m, inverse)
