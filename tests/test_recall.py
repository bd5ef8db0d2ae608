"""Tests of the evaluation tools: recall@k (with ties) and exact ground truth."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from paths import SHARED

from bbqlib.analysis.ground_truth import exact_knn
from bbqlib.analysis.recall import recall_at_k, recall_per_query

DATA_DIR = SHARED / "data"


# ----------------------------------------------------------------------------- references
def naive_recall(found, gt, k):
    """Set intersection per query, the textbook definition."""
    out = []
    for f, g in zip(found, gt, strict=True):
        hits = {int(i) for i in f[:k] if i >= 0} & {int(i) for i in g[:k]}
        out.append(len(hits) / k)
    return np.array(out)


def naive_knn(base, queries, k, metric):
    """Full float64 score matrix, every row sorted by (better score, lower id)."""
    b = base.astype(np.float64)
    q = queries.astype(np.float64)
    if metric == "cosine":
        b = b / np.linalg.norm(b, axis=1, keepdims=True)
        q = q / np.linalg.norm(q, axis=1, keepdims=True)
    if metric == "l2":
        s = ((q[:, None, :] - b[None, :, :]) ** 2).sum(-1)
        key = s
    else:
        s = q @ b.T
        key = -s
    ids = np.array([np.lexsort((np.arange(len(b)), row))[:k] for row in key])
    return ids, np.take_along_axis(s, ids, axis=1)


# ----------------------------------------------------------------------------- recall
@pytest.mark.parametrize("k", [1, 3, 10])
def test_recall_matches_set_intersection(k):
    rng = np.random.default_rng(0)
    nq, n = 40, 30
    gt = np.array([rng.permutation(n)[:15] for _ in range(nq)])
    found = rng.integers(-1, n, size=(nq, 12))  # -1 padding and repeated ids included
    expected = naive_recall(found, gt, k)
    np.testing.assert_allclose(recall_per_query(found, gt, k), expected)
    assert recall_at_k(found, gt, k) == pytest.approx(expected.mean())


def test_padding_and_duplicates_never_count():
    gt = np.array([[5, 6, 7, 8]])
    assert recall_at_k(np.array([[-1, -1, -1, -1]]), gt, k=4) == 0.0
    assert recall_at_k(np.array([[5, 5, 5, 5]]), gt, k=4) == 0.25
    assert recall_at_k(np.array([[8, 7, 6, 5]]), gt, k=4) == 1.0


def test_only_first_k_found_and_gt_count():
    gt = np.array([[0, 1, 2, 3]])
    # id 3 is the 4th true neighbour: outside gt[:2]; id 1 is found at place 3: outside found[:2].
    assert recall_at_k(np.array([[0, 3, 1]]), gt, k=2) == 0.5


def test_fewer_found_columns_than_k_caps_recall():
    gt = np.array([[0, 1, 2, 3]])
    assert recall_at_k(np.array([[0, 1]]), gt, k=4) == 0.5


def test_integer_dtypes_and_one_query_vector():
    gt = np.array([0, 1, 2], dtype=np.int32)
    found = np.array([2, 1, 9], dtype=np.uint32)  # rabitqlib returns uint32
    assert recall_at_k(found, gt, k=3) == pytest.approx(2 / 3)


def test_ties_looked_up_in_longer_ground_truth():
    gt = np.array([[0, 1, 2, 3, 4]])
    scores = np.array([[0.9, 0.8, 0.7, 0.7, 0.6]])  # ids 2 and 3 tie for 3rd place
    found = np.array([[0, 1, 3]])
    assert recall_at_k(found, gt, k=3) == pytest.approx(2 / 3)
    assert recall_at_k(found, gt, k=3, gt_scores=scores) == 1.0
    # id 4 is worse than the 3rd score: a tie only within a tolerance of 0.1.
    worse = np.array([[0, 1, 4]])
    assert recall_at_k(worse, gt, k=3, gt_scores=scores) == pytest.approx(2 / 3)
    assert recall_at_k(worse, gt, k=3, gt_scores=scores, tie_tol=0.1) == 1.0
    # An id beyond the ground-truth row has no known score: a miss.
    assert recall_at_k(np.array([[0, 1, 9]]), gt, k=3, gt_scores=scores, tie_tol=1.0) == (
        pytest.approx(2 / 3)
    )


def test_ties_on_distances_ascending():
    gt = np.array([[0, 1, 2, 3]])
    found = np.array([[0, 1, 3]])
    tied = np.array([[0.1, 0.2, 0.3, 0.3]])
    assert recall_at_k(found, gt, k=3, gt_scores=tied) == 1.0
    farther = np.array([[0.1, 0.2, 0.3, 0.35]])
    assert recall_at_k(found, gt, k=3, gt_scores=farther) == pytest.approx(2 / 3)
    assert recall_at_k(found, gt, k=3, gt_scores=farther, tie_tol=0.05) == 1.0


def test_ties_from_found_scores():
    gt = np.array([[0, 1, 2]])
    scores = np.array([[0.9, 0.8, 0.7]])
    found = np.array([[0, 1, 42]])
    exact = np.array([[0.9, 0.8, 0.7]])  # id 42 has the 3rd score exactly: a tie
    assert recall_at_k(found, gt, k=3, gt_scores=scores, found_scores=exact) == 1.0
    lower = np.array([[0.9, 0.8, 0.69]])
    assert recall_at_k(found, gt, k=3, gt_scores=scores, found_scores=lower) == (
        pytest.approx(2 / 3)
    )
    # A tie never pushes a query above k hits.
    many = np.array([[0, 1, 2, 42]])
    per = recall_per_query(many, gt, k=3, gt_scores=scores, found_scores=np.full((1, 4), 0.9))
    assert per.tolist() == [1.0]


def test_ties_agree_with_ann_benchmarks_rule():
    """ann-benchmarks: count found[:k] whose true distance <= gt_dist[k-1] + eps."""
    rng = np.random.default_rng(3)
    base = rng.integers(0, 4, size=(200, 3)).astype(np.float32)  # many exact ties
    queries = rng.integers(0, 4, size=(20, 3)).astype(np.float32)
    k = 10
    gt_d, gt_ids = exact_knn(base, queries, 100, "l2", scores_first=True)
    # Five true neighbours, then five other distinct ids (ann-benchmarks would count repeats).
    found = np.array(
        [np.r_[g[3:8], rng.permutation(np.setdiff1d(np.arange(200), g[3:8]))[:5]] for g in gt_ids]
    )
    found_d = ((queries[:, None, :] - base[found]) ** 2).sum(-1).astype(np.float64)
    eps = 1e-3
    expected = np.array(
        [(fd <= gd[k - 1] + eps).sum() / k for fd, gd in zip(found_d, gt_d, strict=True)]
    )
    got = recall_per_query(found, gt_ids, k, gt_scores=gt_d, found_scores=found_d, tie_tol=eps)
    np.testing.assert_allclose(got, expected)


def test_recall_does_not_modify_inputs():
    found = np.array([[3, -1, 3]])
    gt = np.array([[3, 4, 5]])
    scores = np.array([[3.0, 2.0, 1.0]])
    copies = [a.copy() for a in (found, gt, scores)]
    recall_at_k(found, gt, 3, gt_scores=scores, tie_tol=0.5)
    for a, c in zip((found, gt, scores), copies, strict=True):
        np.testing.assert_array_equal(a, c)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(found_ids=np.zeros((2, 3)), gt_ids=np.zeros((2, 3), int)), TypeError, "found_ids"),
        (
            dict(found_ids=np.zeros((2, 3), int), gt_ids=np.zeros((3, 3), int)),
            ValueError,
            "queries",
        ),
        (
            dict(found_ids=np.zeros((2, 3), int), gt_ids=np.zeros((2, 2), int)),
            ValueError,
            "columns",
        ),
        (
            dict(found_ids=np.zeros((2, 3), int), gt_ids=np.zeros((2, 3), int), k=0),
            ValueError,
            "k must",
        ),
        (
            dict(
                found_ids=np.zeros((2, 3), int),
                gt_ids=np.zeros((2, 3), int),
                found_scores=np.zeros((2, 3)),
            ),
            ValueError,
            "gt_scores",
        ),
        (
            dict(
                found_ids=np.zeros((1, 3), int),
                gt_ids=np.zeros((1, 3), int),
                gt_scores=np.array([[1.0, 3.0, 2.0]]),
            ),
            ValueError,
            "sorted",
        ),
        (
            dict(
                found_ids=np.zeros((1, 3), int),
                gt_ids=np.zeros((1, 3), int),
                gt_scores=np.zeros((1, 2)),
            ),
            ValueError,
            "shape",
        ),
        (
            dict(found_ids=np.zeros((1, 3), int), gt_ids=np.zeros((1, 3), int), tie_tol=-1),
            ValueError,
            "tie_tol",
        ),
    ],
)
def test_recall_errors(kwargs, error, match):
    kwargs.setdefault("k", 3)
    with pytest.raises(error, match=match):
        recall_at_k(**kwargs)


# ----------------------------------------------------------------------------- ground truth
@pytest.mark.parametrize("metric", ["ip", "l2", "cosine"])
@pytest.mark.parametrize("d", [1, 3, 7, 65])
def test_exact_knn_matches_naive(metric, d):
    rng = np.random.default_rng(d)
    base = rng.standard_normal((150, d)).astype(np.float32)
    queries = rng.standard_normal((13, d)).astype(np.float32)
    ref_ids, ref_scores = naive_knn(base, queries, 12, metric)
    scores, ids = exact_knn(base, queries, 12, metric, block=40, query_block=5, scores_first=True)
    assert ids.dtype == np.int64 and scores.dtype == np.float64
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_allclose(scores, ref_scores, rtol=1e-12, atol=1e-12 * d)


@pytest.mark.parametrize("metric", ["ip", "l2"])
def test_exact_knn_breaks_ties_by_lower_id_across_blocks(metric):
    rng = np.random.default_rng(7)
    # Ten distinct rows, each repeated 12 times: every score is a 12-way tie, spread over blocks.
    base = np.tile(rng.integers(-3, 4, size=(10, 4)).astype(np.float32), (12, 1))
    queries = rng.integers(-3, 4, size=(6, 4)).astype(np.float32)
    ref_ids, _ = naive_knn(base, queries, 25, metric)
    for block in (7, 16, 1000):
        _, ids = exact_knn(base, queries, 25, metric, block=block, query_block=4, scores_first=True)
        np.testing.assert_array_equal(ids, ref_ids)


def test_exact_knn_k_equals_n_and_float16_input():
    rng = np.random.default_rng(1)
    base = rng.standard_normal((9, 5)).astype(np.float16)
    _, ids = exact_knn(base, base[:2], 9, "l2", block=4, scores_first=True)
    assert sorted(ids[0].tolist()) == list(range(9))
    assert ids[0, 0] == 0 and ids[1, 0] == 1


def test_exact_knn_does_not_modify_inputs():
    rng = np.random.default_rng(2)
    base = rng.standard_normal((20, 3)).astype(np.float32)
    queries = rng.standard_normal((4, 3)).astype(np.float32)
    b, q = base.copy(), queries.copy()
    exact_knn(base, queries, 5, "cosine", scores_first=True)
    np.testing.assert_array_equal(base, b)
    np.testing.assert_array_equal(queries, q)


@pytest.mark.parametrize(
    "args, kwargs, error, match",
    [
        ((np.ones((5, 3)), np.ones((2, 3)), 2), dict(metric="hamming"), ValueError, "metric"),
        ((np.ones((5, 3)), np.ones((2, 4)), 2), {}, ValueError, "dimension"),
        ((np.ones((5, 3)), np.ones((2, 3)), 6), {}, ValueError, "k must"),
        ((np.ones((5, 3), int), np.ones((2, 3)), 2), {}, TypeError, "base"),
        ((np.zeros((5, 3)), np.ones((2, 3)), 2), dict(metric="cosine"), ValueError, "zero"),
        ((np.ones((5, 3)), np.ones((2, 3)), 2), dict(block=0), ValueError, "block"),
    ],
)
def test_exact_knn_errors(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        exact_knn(*args, **kwargs, scores_first=True)


@pytest.mark.shared_data
@pytest.mark.parametrize("name", ["debian-minilm-384", "spacy-wordvec-300"])
@pytest.mark.parametrize(
    "metric, ids_file, scores_file",
    [("ip", "gt_ip", "gt_ip_scores"), ("l2", "gt_l2", "gt_l2_dists")],
)
def test_exact_knn_reproduces_shared_ground_truth(name, metric, ids_file, scores_file):
    folder = DATA_DIR / name
    if not (folder / "base.npy").exists():
        pytest.skip(f"shared data set {name} not found at {folder}")
    base = np.load(folder / "base.npy", mmap_mode="r")
    queries = np.load(folder / "queries.npy")[:50]
    gt = np.load(folder / f"{ids_file}.npy")[:50]
    gt_scores = np.load(folder / f"{scores_file}.npy")[:50]
    scores, ids = exact_knn(base, queries, gt.shape[1], metric, scores_first=True)
    np.testing.assert_array_equal(ids, gt)
    # The files store float32: rounding our float64 scores must give the same numbers.
    np.testing.assert_array_equal(scores.astype(np.float32), gt_scores)
    assert recall_at_k(ids, gt, 10) == 1.0


def test_exact_knn_order_deprecation():
    """(ids, scores) is deprecated: the default warns, scores_first picks the order silently."""
    rng = np.random.default_rng(4)
    base = rng.standard_normal((30, 5)).astype(np.float32)
    queries = rng.standard_normal((3, 5)).astype(np.float32)
    with pytest.warns(FutureWarning, match="scores_first=True"):
        old_ids, old_scores = exact_knn(base, queries, 4, "ip")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scores, ids = exact_knn(base, queries, 4, "ip", scores_first=True)
        kept_ids, kept_scores = exact_knn(base, queries, 4, "ip", scores_first=False)
    assert ids.dtype == np.int64 and scores.dtype == np.float64
    for a, b in ((old_ids, ids), (kept_ids, ids), (old_scores, scores), (kept_scores, scores)):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(TypeError, match="scores_first"):
        exact_knn(base, queries, 4, "ip", scores_first="yes")
