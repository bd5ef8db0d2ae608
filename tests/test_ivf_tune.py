"""IVFIndex.tune: search defaults measured on the index's own vectors."""

from __future__ import annotations

import numpy as np
import pytest

import bbqlib
from bbqlib.analysis.ground_truth import exact_knn
from bbqlib.analysis.recall import recall_at_k
from bbqlib.index.ivf import tune as tune_module


def _clustered(n, d, seed, centres_seed=0):
    centres = np.random.default_rng(centres_seed).normal(size=(40, d))
    rng = np.random.default_rng(seed)
    X = centres[rng.integers(0, 40, n)] + 0.6 * rng.normal(size=(n, d))
    return X.astype(np.float32)


@pytest.fixture(scope="module")
def built():
    X = _clustered(6000, 32, seed=0)
    Q = _clustered(200, 32, seed=1)
    index = bbqlib.IVFIndex(similarity="euclidean", cluster_size=64)
    index.add(X)
    return index, X, Q


def test_tune_sets_defaults_that_reach_the_target_on_new_queries(built, tmp_path):
    index, X, Q = built
    _, truth = exact_knn(X, Q, 10, metric="l2", scores_first=True)

    t = index.tune(target_recall=0.9)
    assert t.reached and t.recall >= 0.91
    assert (index.visit_percentage, index.oversample) == (t.visit_percentage, t.oversample)
    after = recall_at_k(index.search(Q, 10)[1], truth, 10)
    assert after >= 0.88  # new queries: a little below the sample's (may be cheaper than before)
    # the grid stops at the first budget that reaches the goal, per rerank depth
    goal = t.target_recall + t.margin
    for depth in {g[1] for g in t.grid}:
        rows = [g for g in t.grid if g[1] == depth]
        assert all(r < goal for _, _, r in rows[:-1])
    # queries unlike the indexed vectors (other clusters): tuned on some of them instead
    far = _clustered(400, 32, seed=3, centres_seed=9)
    _, far_truth = exact_knn(X, far[200:], 10, metric="l2", scores_first=True)
    t_far = index.tune(far[:200], target_recall=0.9)
    assert t_far.n_queries == 200
    assert recall_at_k(index.search(far[200:], 10)[1], far_truth, 10) >= 0.85
    t = index.tune(target_recall=0.9)
    opened = bbqlib.IVFIndex.open(index.save(tmp_path / "ivf"))
    assert (opened.visit_percentage, opened.oversample) == (t.visit_percentage, t.oversample)


def test_leave_one_out_truth_excludes_the_query_and_deleted_vectors(built):
    index, X, _ = built
    rows = np.array([3, 50, 700])
    truth = tune_module._exact_ids(index, rows, X[rows], 5)
    _, exact = exact_knn(X, X[rows], 6, metric="l2", scores_first=True)
    for r, got, want in zip(rows, truth, exact, strict=True):
        assert r not in got
        assert set(got) == set(want[want != r][:5])


def test_tune_needs_vectors_and_a_sane_target():
    X = _clustered(500, 8, seed=2)
    index = bbqlib.IVFIndex(similarity="euclidean", store_vectors=False)
    index.add(X)
    with pytest.raises(ValueError, match="keeps none"):
        index.tune()
    index = bbqlib.IVFIndex(similarity="euclidean")
    index.add(X)
    with pytest.raises(ValueError, match="target_recall"):
        index.tune(target_recall=1.5)


def test_target_recall_tunes_at_the_first_add_and_one_query_searches_follow():
    X = _clustered(3000, 16, seed=4)
    index = bbqlib.IVFIndex(similarity="euclidean", cluster_size=64, target_recall=0.9)
    assert index.visit_percentage is None
    index.add(X)
    tuned = (index.visit_percentage, index.oversample)
    assert tuned[0] is not None
    index.add(_clustered(100, 16, seed=5))  # later adds keep the defaults
    assert (index.visit_percentage, index.oversample) == tuned
    # a one-query search after a change of defaults uses the new ones, as a batch does
    q = X[7]
    index.search(q, 10)
    index.visit_percentage = 100.0
    one = index.search(q, 10)
    stats = dict(index.last_search_stats)
    batch = index.search(q[None, :].astype(np.float64), 10)
    assert index.last_search_stats == stats
    np.testing.assert_array_equal(one[1], batch[1])
    with pytest.raises(ValueError, match="target_recall"):
        bbqlib.IVFIndex(target_recall=0.0)
