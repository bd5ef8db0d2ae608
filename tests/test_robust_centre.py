"""Robust fitting (issue 30): one far row must not move the centre or the grids.

Statistical tests with fixed seeds: recall@10 with one row scaled by 10², 10⁴, 10⁶ and 10⁸
stays within 0.02 of recall without it (Flat and IVF, euclidean and max_inner_product, on
synthetic clustered data and on the bundled sample); the centre is exactly the plain mean on
ordinary data; the outlier itself is still encoded and found; Lucene's arithmetic keeps
Lucene's centroid (outliers included).
"""

from __future__ import annotations

import numpy as np
import pytest

import bbqlib
from bbqlib.analysis.ground_truth import exact_knn
from bbqlib.datasets import load_demo_sample
from bbqlib.quantizers.centre import ROBUST_Z, outlier_rows, robust_centre, without_outliers
from bbqlib.quantizers.osq.lucene import lucene_centroid

SCALES = [1e2, 1e4, 1e6, 1e8]
OUTLIER = 17


def clustered(n=3000, d=96, seed=0):
    """Clustered rows with a large common offset (the mean matters for 1-bit codes)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(40, d)) + 2.0
    X = centres[rng.integers(0, 40, n)] + 0.6 * rng.normal(size=(n, d))
    Q = centres[rng.integers(0, 40, 100)] + 0.6 * rng.normal(size=(100, d))
    return X.astype(np.float32), Q.astype(np.float32)


def recall(index, X, Q, similarity, k=10):
    _, gt = exact_knn(X, Q, k, metric=similarity, scores_first=True)
    _, ids = index.search(Q, k)
    return float(np.mean([len(set(a) & set(b)) / k for a, b in zip(ids, gt, strict=True)]))


def scaled(X, scale):
    Y = X.copy()
    Y[OUTLIER] *= np.float32(scale)
    return Y


def flat(similarity, family="bbq"):
    if family == "rabitq":
        return bbqlib.FlatIndex(quantizer=bbqlib.RaBitQQuantizer(bits=1, similarity=similarity))
    return bbqlib.FlatIndex(bits=1, similarity=similarity)


# ------------------------------------------------------------------------------ the centre
def test_centre_is_the_plain_mean_on_ordinary_data():
    base = load_demo_sample()["base"]
    X, _ = clustered()
    for data in (base, X, np.random.default_rng(1).normal(size=(2000, 8)).astype(np.float32)):
        assert not outlier_rows(data).any()
        assert np.array_equal(robust_centre(data), data.mean(axis=0, dtype=np.float64))
        assert without_outliers(data) is data


@pytest.mark.parametrize("scale", SCALES)
def test_one_far_row_does_not_move_the_centre(scale):
    X, _ = clustered()
    Y = scaled(X, scale)
    out = outlier_rows(Y)
    assert np.flatnonzero(out).tolist() == [OUTLIER]
    clean = np.delete(X, OUTLIER, axis=0).mean(axis=0, dtype=np.float64)
    np.testing.assert_allclose(robust_centre(Y), clean, rtol=1e-6, atol=1e-6)


def test_duplicates_are_not_trimmed_to_their_mode():
    # 60% of the rows at one point: the MAD is 0, the fallback scale keeps the others
    rng = np.random.default_rng(2)
    X = rng.normal(size=(1000, 16)).astype(np.float32)
    X[:600] = X[0]
    assert not outlier_rows(X).any()
    assert ROBUST_Z == 10.0


def test_tiny_inputs():
    X = np.array([[0.0, 1.0], [1e6, 1e6]], dtype=np.float32)
    np.testing.assert_array_equal(robust_centre(X), X.mean(axis=0, dtype=np.float64))


# ------------------------------------------------------------------------------ recall
@pytest.mark.parametrize("similarity", ["euclidean", "max_inner_product"])
@pytest.mark.parametrize("family", ["bbq", "rabitq"])
def test_flat_recall_with_one_outlier(similarity, family):
    X, Q = clustered()
    index = flat(similarity, family)
    index.add(X)
    clean = recall(index, X, Q, similarity)
    for scale in SCALES:
        Y = scaled(X, scale)
        index = flat(similarity, family)
        index.add(Y)
        assert abs(recall(index, Y, Q, similarity) - clean) <= 0.02, scale


@pytest.mark.parametrize("scale", SCALES)
def test_ivf_recall_with_one_outlier_euclidean(scale):
    X, Q = clustered(n=4000)
    clean_index = bbqlib.IVFIndex(bits=1, similarity="euclidean", cluster_size=128)
    clean_index.add(X)
    clean = recall(clean_index, X, Q, "euclidean")
    Y = scaled(X, scale)
    index = bbqlib.IVFIndex(bits=1, similarity="euclidean", cluster_size=128)
    index.add(Y)
    assert abs(recall(index, Y, Q, "euclidean") - clean) <= 0.02


@pytest.mark.parametrize("similarity", ["euclidean", "max_inner_product"])
def test_bundled_sample_with_one_outlier(similarity):
    sample = load_demo_sample()
    X, Q = sample["base"], sample["queries"]
    index = flat(similarity)
    index.add(X)
    clean = recall(index, X, Q, similarity)
    Y = scaled(X, 1e6)
    index = flat(similarity)
    index.add(Y)
    assert abs(recall(index, Y, Q, similarity) - clean) <= 0.02


def test_the_outlier_is_encoded_and_found():
    # under max_inner_product the far row is every aligned query's best match
    X, _ = clustered()
    Y = scaled(X, 1e6)
    index = flat("max_inner_product")
    index.add(Y)
    _, ids = index.search(X[OUTLIER : OUTLIER + 1], 1)
    assert ids[0, 0] == OUTLIER
    # its codes are not clipped: the estimate (no rerank) is within the 1-bit estimator's
    # relative error at d = 96 (about 1/sqrt(d)) of the truth
    q = index.quantizer
    est = q.estimate(X[OUTLIER : OUTLIER + 1], q.encode(Y[OUTLIER : OUTLIER + 1]))[0, 0]
    exact = float(np.dot(X[OUTLIER].astype(np.float64), Y[OUTLIER]))
    assert abs(est - exact) <= 0.15 * abs(exact)


@pytest.mark.parametrize("method", ["per_dim", "global"])
def test_int8_grids_ignore_one_far_row(method):
    X, Q = clustered()
    Y = scaled(X, 1e6)
    a = bbqlib.ScalarQuantizer(method=method, similarity="euclidean").fit(X)
    b = bbqlib.ScalarQuantizer(method=method, similarity="euclidean").fit(Y)
    found = []
    for data in (X, Y):
        quantizer = bbqlib.ScalarQuantizer(method=method, similarity="euclidean")
        index = bbqlib.FlatIndex(quantizer=quantizer)
        index.add(data)
        found.append(recall(index, data, Q, "euclidean"))
    assert abs(found[0] - found[1]) <= 0.02
    if method == "per_dim":
        np.testing.assert_allclose(b.vmax_, np.delete(X, OUTLIER, axis=0).max(axis=0))
        assert float(np.max(b.vmax_)) <= float(np.max(a.vmax_)) + 1e-6


def test_lucene_arithmetic_keeps_lucenes_centroid():
    X, _ = clustered()
    Y = scaled(X, 1e4)
    lucene = {"arithmetic": "lucene", "query_bits": 4}
    q = bbqlib.BBQQuantizer(bits=1, similarity="euclidean", **lucene).fit(Y)
    np.testing.assert_array_equal(q.centroid_, lucene_centroid(Y, False))
