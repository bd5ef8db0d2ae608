"""Row checks and normalization (bbqlib._kernels.validation) against NumPy.

``row_sq_norms`` is a lane sum of float64 squares: bit for bit the reference's lane order,
within ``d · eps`` of NumPy's float64 sum, and non-finite exactly for rows holding a NaN or an
inf. ``normalize_rows`` is ``float32(float64(x) / norm)``, bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest
from reference.osq import lane_sum

from bbqlib._validation import check_vectors, normalize_rows, prepare_for_similarity, row_sq_norms
from bbqlib.similarity import Similarity

EPS64 = float(np.finfo(np.float64).eps)


@pytest.mark.parametrize("d", [1, 3, 7, 8, 9, 63, 64, 65, 127, 384, 1000, 1536])
def test_sq_norms_follow_the_lane_order(d):
    g = np.random.default_rng(d)
    X = (g.standard_normal((50, d)) * np.exp(g.uniform(-30, 30, (50, 1)))).astype(np.float32)
    X[0] = 0.0
    X[1, 0] = -0.0
    X[2] = np.float32(3e38)  # float32 max-ish: the squares stay finite in float64
    got = row_sq_norms(X)
    x64 = X.astype(np.float64)
    np.testing.assert_array_equal(got, lane_sum(x64 * x64))
    exact = np.einsum("ij,ij->i", x64, x64)
    assert np.all(np.abs(got - exact) <= d * EPS64 * exact)


def test_non_finite_rows_are_flagged():
    X = np.ones((6, 9), np.float32)
    X[1, 8] = np.nan
    X[3, 0] = np.inf
    X[4, 4] = -np.inf
    finite = np.isfinite(row_sq_norms(X))
    assert finite.tolist() == [True, False, True, False, False, True]
    with pytest.raises(ValueError, match="3 row\\(s\\), first at row 1"):
        check_vectors(X)


def test_empty_batches():
    assert row_sq_norms(np.empty((0, 5), np.float32)).shape == (0,)
    out = prepare_for_similarity(np.empty((0, 5), np.float32), Similarity.COSINE)
    assert out.shape == (0, 5)


@pytest.mark.parametrize("d", [1, 7, 384])
def test_normalize_rows_equals_numpy(d):
    g = np.random.default_rng(d)
    X = (g.standard_normal((40, d)) * 10.0 ** g.uniform(-20, 20, (40, 1))).astype(np.float32)
    keep = X.copy()
    norms = np.sqrt(row_sq_norms(X))
    out = np.empty_like(X)
    normalize_rows(X, norms, out)
    np.testing.assert_array_equal(out, (X / norms[:, None]).astype(np.float32))
    np.testing.assert_array_equal(prepare_for_similarity(X, Similarity.COSINE), out)
    np.testing.assert_array_equal(X, keep)  # the caller's array is untouched
    np.testing.assert_allclose(np.linalg.norm(out.astype(np.float64), axis=1), 1.0, rtol=1e-6)
