"""The pair coders (``bbqlib._kernels.pairs``) against their NumPy references, on random and
adversarial inputs: zero residuals, values on and beyond the grid's ends and halfway between
its steps, dimensions that are not a multiple of the lane width, no pairs at all; the
parallel kernels against their serial bodies."""

from __future__ import annotations

import numpy as np
import pytest
from reference.pairs import (
    grid_pairs_reference,
    residual_pairs_reference,
    scaled_pairs_reference,
)

from bbqlib._kernels import pairs as KP


def _case(d, seed, n_pairs=40):
    g = np.random.default_rng(seed)
    Q = g.normal(size=(5, d)).astype(np.float32)
    C = g.normal(size=(7, d)).astype(np.float32)
    C[3] = Q[2]  # a zero residual
    Q[4, :] = 0.0
    pq = g.integers(0, 5, size=n_pairs).astype(np.int64)
    pl = g.integers(0, 7, size=n_pairs).astype(np.int64)
    pq[:2], pl[:2] = 2, 3
    return Q, C, pq, pl


def _close(got, ref, d):
    """Factor rows: the same sums in another order, float64 (|error| <= d·eps·Σ|terms|)."""
    scale = np.abs(ref).max() + 1.0
    np.testing.assert_allclose(got, ref, rtol=0, atol=4 * d * np.finfo(np.float64).eps * scale)


@pytest.mark.parametrize("d", [1, 7, 8, 9, 65, 384])
@pytest.mark.parametrize("is_l2", [True, False])
def test_residual_pairs_match_reference(d, is_l2):
    Q, C, pq, pl = _case(d, d)
    y = np.empty((len(pq), d), np.float32)
    f = np.empty((len(pq), 4))
    KP.residual_pairs(Q, C, pq, pl, is_l2, y, f)
    ry, rf = residual_pairs_reference(Q, C, pq, pl, is_l2)
    np.testing.assert_array_equal(y, ry)
    _close(f, rf, d)
    assert (f[:2, 2:] == 0.0).all() if is_l2 else (f[:2, 2] == 0.0).all()


@pytest.mark.parametrize("d", [1, 7, 8, 9, 65, 384])
@pytest.mark.parametrize("is_l2", [True, False])
def test_scaled_pairs_match_reference(d, is_l2):
    Q, C, pq, pl = _case(d, 100 + d)
    g = np.random.default_rng(d)
    scale = g.uniform(0.0, 2.0, size=d).astype(np.float32)
    scale[0] = 0.0  # a constant dimension
    offset = g.normal(size=d).astype(np.float32)
    y = np.empty((len(pq), d), np.float32)
    f = np.empty((len(pq), 4))
    KP.scaled_pairs(Q, C, pq, pl, scale, offset, is_l2, y, f)
    ry, rf = scaled_pairs_reference(Q, C, pq, pl, scale, offset, is_l2)
    np.testing.assert_array_equal(y, ry)
    _close(f, rf, d)


@pytest.mark.parametrize("d", [1, 9, 65, 384])
@pytest.mark.parametrize("is_l2", [True, False])
def test_grid_pairs_match_reference(d, is_l2):
    Q, C, pq, pl = _case(d, 200 + d)
    lower, upper, levels = -1.0, 1.5, 127
    alpha = float(np.float32(upper - lower) / np.float32(levels))
    inv_alpha = float(np.float32(levels) / np.float32(upper - lower))
    # residuals on the grid's ends, beyond them and halfway between two steps
    Q[0, :] = C[1, :] + np.float32(lower) - 1.0
    Q[1, :] = C[1, :] + np.float32(upper)
    Q[3, :] = C[1, :] + np.float32(lower + 2.5 * alpha)
    pq[2:6], pl[2:6] = [0, 1, 3, 3], 1
    codes = np.empty((len(pq), d), np.uint8)
    f = np.empty((len(pq), 4))
    KP.grid_pairs(Q, C, pq, pl, lower, upper, alpha, inv_alpha, levels, is_l2, codes, f)
    rc, rf = grid_pairs_reference(Q, C, pq, pl, lower, upper, alpha, inv_alpha, levels, is_l2)
    np.testing.assert_array_equal(codes, rc)
    assert codes[2].max() == 0 and codes[3].min() == levels
    _close(f, rf, d)


def test_no_pairs_and_serial_equals_parallel():
    Q, C, pq, pl = _case(33, 7, n_pairs=3000)
    outs = []
    for kern in (KP.residual_pairs, KP.residual_pairs.serial):
        y = np.empty((len(pq), 33), np.float32)
        f = np.empty((len(pq), 4))
        kern(Q, C, pq, pl, True, y, f)
        outs.append((y, f))
    np.testing.assert_array_equal(outs[0][0], outs[1][0])
    np.testing.assert_array_equal(outs[0][1], outs[1][1])
    empty = np.empty(0, np.int64)
    KP.residual_pairs(Q, C, empty, empty, True, np.empty((0, 33), np.float32), np.empty((0, 4)))
