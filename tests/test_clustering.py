"""Clustering for the IVF index: kernels against float64 references, then cluster properties.

Tolerances come from floating-point error bounds (Higham, *Accuracy and Stability of Numerical
Algorithms*, 2nd ed., §3.1 and §4.2): a float32 sum of ``n`` non-negative terms, in any order,
has relative error at most ``gamma_n = n u / (1 - n u)`` with ``u = 2**-24``.
"""

from __future__ import annotations

import numba
import numpy as np
import pytest
from paths import SHARED
from reference.clustering import (
    centroid_means_ref,
    nearest_centroid_ref,
    neighbourhood_assign_ref,
    neighbourhoods_ref,
    soar_ref,
    soar_values_ref,
    sqdist,
)

from bbqlib._kernels.kmeans import (
    centroid_sums_kernel,
    nearest_centroid_kernel,
    nearest_centroid_serial,
    nearest_in_neighbourhood_kernel,
    nearest_in_neighbourhood_serial,
    soar_kernel,
    soar_serial,
)
from bbqlib.index.clustering import (
    ParentLevel,
    centroid_neighbourhoods,
    hierarchical_kmeans,
    nearest_centroid,
    parent_level,
    soar_assign,
)
from bbqlib.index.clustering._blocks import _groups
from bbqlib.index.clustering.assign import _assign, settle_assignment, walk_to_nearest
from bbqlib.index.clustering.kmeans import _split_k, _split_threshold

DIMS = [1, 3, 7, 8, 9, 63, 64, 65, 127, 384]
U32 = 2.0**-24
DATA = SHARED / "data"


def gamma(n: int) -> float:
    return n * U32 / (1 - n * U32)


def clustered(n: int, d: int, n_clusters: int, seed: int, spread: float = 0.35) -> np.ndarray:
    """Gaussian blobs around unit-norm centres (noise norm about ``spread``)."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((n_clusters, d))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    labels = rng.integers(0, n_clusters, n)
    noise = rng.standard_normal((n, d)) * (spread / np.sqrt(d))
    return (centres[labels] + noise).astype(np.float32)


def assert_argmin(chosen_pos, vals, tol, *, min_exact_fraction=0.9):
    """``vals[i, chosen]`` is within ``tol[i]`` of the row minimum, and equals the reference
    argmin on every row whose runner-up is more than ``tol[i]`` behind (most rows)."""
    rows = np.arange(len(vals))
    got = vals[rows, chosen_pos]
    best = vals.min(axis=1)
    assert np.all(got - best <= tol), np.max(got - best - tol)
    if vals.shape[1] == 1:
        return
    two = np.partition(vals, 1, axis=1)[:, :2]
    separated = two[:, 1] - two[:, 0] > tol
    assert separated.mean() >= min_exact_fraction
    np.testing.assert_array_equal(chosen_pos[separated], vals.argmin(axis=1)[separated])


# --------------------------------------------------------------------------- kernels


@pytest.mark.parametrize("d", DIMS)
@pytest.mark.parametrize("k", [1, 4, 37])
def test_nearest_centroid_matches_reference(d, k):
    rng = np.random.default_rng(1000 * d + k)
    X = rng.standard_normal((300, d)).astype(np.float32)
    C = rng.standard_normal((k, d)).astype(np.float32)
    got = nearest_centroid(X, C)
    _, D = nearest_centroid_ref(X, C)
    assert got.dtype == np.int32
    # Each float32 distance is within gamma_{d+2} (relative) of the exact one, so the pick
    # can only lose against a rival when the two differ by less than gamma * (both).
    chosen = D[np.arange(len(X)), got]
    tol = gamma(d + 2) * (chosen + D.min(axis=1)) * 1.001
    assert_argmin(got, D, tol)


def test_nearest_centroid_far_from_origin_keeps_precision():
    # Differences, not ||x||^2 - 2x.c + ||c||^2: an offset of 1e4 must not blur the choice.
    rng = np.random.default_rng(7)
    X = rng.standard_normal((500, 65)).astype(np.float32) + np.float32(1e4)
    C = X[rng.choice(500, 40, replace=False)] + np.float32(0.25)
    got = nearest_centroid(X, C)
    _, D = nearest_centroid_ref(X, C)
    chosen = D[np.arange(len(X)), got]
    tol = gamma(67) * (chosen + D.min(axis=1)) * 1.001
    assert_argmin(got, D, tol)


def test_nearest_centroid_adversarial():
    rng = np.random.default_rng(3)
    C = rng.standard_normal((9, 7)).astype(np.float32)
    C = np.concatenate([C, C[:4]])  # duplicated centroids: ties
    X = np.concatenate([C[[0, 5, 11]], rng.standard_normal((50, 7)).astype(np.float32)])
    got = nearest_centroid(X, C)
    # A vector equal to a centroid is at distance exactly 0 from it (and from its duplicate).
    np.testing.assert_array_equal(C[got[:3]], X[:3])
    _, D = nearest_centroid_ref(X, C)
    chosen = D[np.arange(len(X)), got]
    assert np.all(chosen - D.min(axis=1) <= gamma(9) * (chosen + D.min(axis=1)) * 1.001)
    # Identical vectors get identical answers.
    Xd = np.repeat(X[3:4], 20, axis=0)
    assert len(set(nearest_centroid(Xd, C).tolist())) == 1
    # One centroid, d = 1.
    np.testing.assert_array_equal(nearest_centroid(X, C[:1]), 0)
    x1 = np.array([[0.0], [1.0], [2.4], [2.6], [10.0]], np.float32)
    c1 = np.array([[0.0], [2.0], [3.0]], np.float32)
    np.testing.assert_array_equal(nearest_centroid(x1, c1), [0, 0, 1, 2, 2])


@pytest.mark.parametrize("d", [1, 3, 64, 127])
@pytest.mark.parametrize("k", [2, 5, 40])
def test_neighbourhoods_match_reference(d, k):
    rng = np.random.default_rng(d * 100 + k)
    C = rng.standard_normal((k, d)).astype(np.float32)
    for m in (1, 3, 200):
        got = centroid_neighbourhoods(C, m)
        ref = neighbourhoods_ref(C, m)
        assert got.shape == (k, min(m, k - 1))
        np.testing.assert_array_equal(got, ref)


def test_neighbourhoods_with_duplicates_and_single():
    C = np.array([[0.0, 0], [1, 0], [1, 0], [3, 0]], np.float32)
    np.testing.assert_array_equal(centroid_neighbourhoods(C, 2), [[1, 2], [2, 0], [1, 0], [1, 2]])
    assert centroid_neighbourhoods(C[:1], 5).shape == (1, 0)


@pytest.mark.parametrize("d", DIMS)
def test_neighbourhood_assign_matches_reference(d):
    rng = np.random.default_rng(d)
    k, n = 45, 400
    C = rng.standard_normal((k, d)).astype(np.float32)
    X = rng.standard_normal((n, d)).astype(np.float32)
    current = rng.integers(0, k, n).astype(np.int32)
    neigh = neighbourhoods_ref(C, 6)
    got = _assign(X, C, current, neigh)
    _, vals, cand = neighbourhood_assign_ref(X, C, current, neigh)
    pos = (cand == got[:, None]).argmax(axis=1)
    assert np.all(cand[np.arange(n), pos] == got)  # the winner is a listed candidate
    chosen = vals[np.arange(n), pos]
    tol = gamma(d + 2) * (chosen + vals.min(axis=1)) * 1.001
    assert_argmin(pos, vals, tol)


def soar_tolerance(X, C, primary, neigh, lam, d):
    """Bound on the kernel's SOAR error per row (see soar_kernel: it works with r = x - c1 and
    D = c - c1). With a = ||r||, b = ||D||, g = gamma_{d+2}: |rr| err <= g a^2, |<r,D>| err <=
    g a b, |dd| err <= g b^2, so ||x-c||^2 = rr - 2<r,D> + dd is off by <= g (a+b)^2 and
    <r,x-c>^2 / rr by <= (3g + g^2)/(1-g) (a+b)^2. Two losses compared: twice that."""
    X = X.astype(np.float64)
    C = C.astype(np.float64)
    a = np.linalg.norm(X - C[primary], axis=1)
    b = np.linalg.norm(C[neigh[primary]] - C[primary][:, None, :], axis=2).max(axis=1)
    g = gamma(d + 2)
    return 2 * (g + lam * (3 * g + g * g) / (1 - g)) * (a + b) ** 2 * 1.001


@pytest.mark.parametrize("d", DIMS)
@pytest.mark.parametrize("k, neighbours", [(2, 128), (7, 128), (61, 128), (61, 9)])
@pytest.mark.parametrize("lam", [1.0, 0.0, 4.0])
def test_soar_matches_reference(d, k, neighbours, lam):
    rng = np.random.default_rng(d * 1000 + k + int(lam * 7))
    n = 300
    C = rng.standard_normal((k, d)).astype(np.float32)
    X = rng.standard_normal((n, d)).astype(np.float32)
    primary = nearest_centroid(X, C)
    got = soar_assign(X, C, primary, lam=lam, neighbours=neighbours)
    neigh = neighbourhoods_ref(C, neighbours)
    vals, cand = soar_values_ref(X, C, primary, neigh, lam)
    assert got.dtype == np.int32
    assert np.all(got != primary)
    pos = (cand == got[:, None]).argmax(axis=1)
    assert np.all(cand[np.arange(n), pos] == got)
    tol = soar_tolerance(X, C, primary, neigh, lam, d)
    assert_argmin(pos, vals, tol, min_exact_fraction=0.85)


def test_soar_adversarial():
    rng = np.random.default_rng(11)
    C = rng.standard_normal((10, 5)).astype(np.float32)
    # Zero residual: vectors sitting on their primary fall back to the plain distance, i.e.
    # the centroid nearest to the primary (released Elasticsearch behaviour).
    primary = np.arange(10, dtype=np.int32)
    got = soar_assign(C.copy(), C, primary)
    neigh = neighbourhoods_ref(C, 128)
    np.testing.assert_array_equal(got, neigh[:, 0])
    np.testing.assert_array_equal(got, soar_ref(C, C, primary, neigh))
    # One centroid: no secondary.
    X = rng.standard_normal((20, 5)).astype(np.float32)
    np.testing.assert_array_equal(soar_assign(X, C[:1], np.zeros(20, np.int64)), -1)
    # Two centroids: the other one.
    p2 = nearest_centroid(X, C[:2])
    np.testing.assert_array_equal(soar_assign(X, C[:2], p2), 1 - p2)
    # lam = 0 is the second-nearest centroid.
    p = nearest_centroid(X, C)
    D = sqdist(X, C)
    D[np.arange(20), p] = np.inf
    np.testing.assert_array_equal(soar_assign(X, C, p, lam=0.0), D.argmin(axis=1))
    # d = 1: a vector right of its centroid spills to the left one only if nothing is right.
    x = np.array([[1.2], [2.9]], np.float32)
    c = np.array([[0.0], [1.0], [3.0]], np.float32)
    np.testing.assert_array_equal(soar_assign(x, c, nearest_centroid(x, c)), [0, 1])
    # Duplicate vectors: identical answers; inputs untouched.
    Xd = np.repeat(X[:1], 9, axis=0)
    before = Xd.copy()
    assert len(set(soar_assign(Xd, C, nearest_centroid(Xd, C)).tolist())) == 1
    np.testing.assert_array_equal(Xd, before)


@pytest.mark.parametrize("d", [1, 7, 65])
def test_parallel_kernels_equal_serial_twins(d):
    # The public functions pick the serial twin for small calls; both must agree exactly.
    rng = np.random.default_rng(d)
    n, k = 3001, 150
    X = rng.standard_normal((n, d)).astype(np.float32)
    C = rng.standard_normal((k, d)).astype(np.float32)
    a, b = np.empty(n, np.int32), np.empty(n, np.int32)
    nearest_centroid_kernel(X, C, a)
    nearest_centroid_serial(X, C, b)
    np.testing.assert_array_equal(a, b)
    neigh = centroid_neighbourhoods(C, 128)
    rows, starts, groups = _groups(a, k)
    nearest_in_neighbourhood_kernel(X, C, rows, starts, groups, neigh, a)
    nearest_in_neighbourhood_serial(X, C, rows, starts, groups, neigh, b)
    np.testing.assert_array_equal(a, b)
    rows, starts, groups = _groups(a, k)
    soar_kernel(X, C, rows, starts, groups, neigh, 1.0, b)
    s2 = np.empty(n, np.int32)
    soar_serial(X, C, rows, starts, groups, neigh, 1.0, s2)
    np.testing.assert_array_equal(b, s2)


def test_centroid_sums_kernel_is_exact_float64_row_order():
    rng = np.random.default_rng(5)
    for d in (1, 7, 65, 384):
        X = rng.standard_normal((333, d)).astype(np.float32)
        a = rng.integers(0, 11, 333).astype(np.int32)
        sums = np.zeros((11, d))
        centroid_sums_kernel(X, a, sums)
        ref = np.zeros((11, d))
        np.add.at(ref, a, X.astype(np.float64))  # same additions, same order
        np.testing.assert_array_equal(sums, ref)


# --------------------------------------------------------------------------- spec rules


def test_split_rules_follow_spec():
    # k = clamp(floor((n + target/2) / target), 2, 128)
    assert _split_k(385, 384) == 2
    assert _split_k(575, 384) == 2
    assert _split_k(576, 384) == 2  # floor(768 / 384) = 2
    assert _split_k(960, 384) == 3  # floor(1152 / 384) = 3
    assert _split_k(10**6, 384) == 128
    assert _split_k(10**6, 384, max_k=64) == 64
    # split again when count > round(1.34 * target)
    assert _split_threshold(384) == 515  # 514.56
    assert _split_threshold(64) == 86  # 85.76
    assert _split_threshold(100) == 134


# --------------------------------------------------------------------------- clustering


def check_partition(X, C, a, *, target=None):
    n = len(X)
    assert C.dtype == np.float32 and a.dtype == np.int32
    assert a.shape == (n,) and C.shape[1] == X.shape[1]
    assert a.min() == 0 and a.max() == len(C) - 1
    counts = np.bincount(a, minlength=len(C))
    assert counts.sum() == n and counts.min() >= 1  # every vector once, no empty list
    # Every centroid is the mean of its members (the last pass sets it so), up to the float32
    # rounding of the float64 mean.
    means, _ = centroid_means_ref(X, a, len(C))
    scale = np.abs(X).max()
    np.testing.assert_allclose(C, means, rtol=0, atol=2 * U32 * scale)
    return counts


def test_small_input_is_one_centroid_the_mean():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((64, 9)).astype(np.float32)
    C, a = hierarchical_kmeans(X, 64)
    assert C.shape == (1, 9)
    np.testing.assert_array_equal(a, 0)
    np.testing.assert_allclose(C[0], X.astype(np.float64).mean(axis=0), atol=2 * U32 * 4)


@pytest.fixture(scope="module")
def blobs():
    return clustered(20_000, 32, 50, seed=0)


@pytest.fixture(scope="module")
def blobs_clustered(blobs):
    return hierarchical_kmeans(blobs, 64)


def test_clustered_sizes(blobs, blobs_clustered):
    C, a = blobs_clustered
    counts = check_partition(blobs, C, a)
    assert len(C) > 128  # exercises the neighbourhood-restricted refinement
    assert counts.max() <= 2 * 64
    assert 0.5 * 64 <= np.median(counts) <= 1.34 * 64


def test_without_refinement_no_list_exceeds_split_threshold(blobs):
    C, a = hierarchical_kmeans(blobs, 64, refine=False)
    counts = check_partition(blobs, C, a)
    assert counts.max() <= _split_threshold(64)


def test_refinement_lowers_quantization_error(blobs, blobs_clustered):
    C0, a0 = hierarchical_kmeans(blobs, 64, refine=False)
    C1, a1 = blobs_clustered
    sse = [((blobs - C[a]) ** 2).sum(dtype=np.float64) for C, a in ((C0, a0), (C1, a1))]
    assert sse[1] < sse[0]


def test_deterministic_per_seed_and_thread_count(blobs, blobs_clustered):
    C, a = blobs_clustered
    C2, a2 = hierarchical_kmeans(blobs, 64)
    np.testing.assert_array_equal(C, C2)
    np.testing.assert_array_equal(a, a2)
    C3, a3 = hierarchical_kmeans(blobs, 64, seed=7)
    assert len(C3) != len(C) or not np.array_equal(a3, a)
    if numba.config.NUMBA_NUM_THREADS >= 2:
        before = numba.get_num_threads()
        try:
            numba.set_num_threads(1)
            C1, a1 = hierarchical_kmeans(blobs, 64)
            s1 = soar_assign(blobs, C1, a1)
            numba.set_num_threads(2)
            s2 = soar_assign(blobs, C1, a1)
        finally:
            numba.set_num_threads(before)
        np.testing.assert_array_equal(C1, C)
        np.testing.assert_array_equal(a1, a)
        np.testing.assert_array_equal(s1, s2)


def test_memmap_and_float64_inputs_give_the_same_clusters(tmp_path):
    X = clustered(6000, 24, 20, seed=1)
    path = tmp_path / "x.npy"
    np.save(path, X)
    Xm = np.load(path, mmap_mode="r")
    C, a = hierarchical_kmeans(X, 64)
    for other in (Xm, X.astype(np.float64), np.asfortranarray(X)):
        C2, a2 = hierarchical_kmeans(other, 64)
        np.testing.assert_array_equal(C, C2)
        np.testing.assert_array_equal(a, a2)
    np.testing.assert_array_equal(soar_assign(Xm, C, a), soar_assign(X, C, a))
    np.testing.assert_array_equal(nearest_centroid(Xm, C), nearest_centroid(X, C))


def test_progress_bar_does_not_change_the_result(blobs, capsys):
    X = blobs[:5000]
    C, a = hierarchical_kmeans(X, 64)
    C2, a2 = hierarchical_kmeans(X, 64, progress=True)
    np.testing.assert_array_equal(a, a2)
    assert "k-means" in capsys.readouterr().err


def test_inputs_not_modified(blobs):
    X = blobs[:3000].copy()
    before = X.copy()
    C, a = hierarchical_kmeans(X, 64)
    a_before = a.copy()
    soar_assign(X, C, a)
    parent_level(C)
    np.testing.assert_array_equal(X, before)
    np.testing.assert_array_equal(a, a_before)


def test_degenerate_data():
    rng = np.random.default_rng(2)
    # All identical: k-means finds one non-empty cluster, which is kept as it is (spec).
    X = np.ones((1000, 3), np.float32)
    C, a = hierarchical_kmeans(X, 64)
    assert C.shape == (1, 3) and np.all(a == 0)
    # Two distinct points, many copies: two lists.
    X = np.repeat(rng.standard_normal((2, 5)).astype(np.float32), 500, axis=0)
    C, a = hierarchical_kmeans(X, 64)
    check_partition(X, C, a)
    assert len(C) == 2
    # d = 1 and zero vectors among the data.
    X = np.concatenate([np.zeros((100, 1)), rng.standard_normal((900, 1))]).astype(np.float32)
    C, a = hierarchical_kmeans(X, 64)
    check_partition(X, C, a)
    assert np.bincount(a).max() <= 2 * 64 or len(set(X[a == np.bincount(a).argmax(), 0])) == 1


def test_soar_on_clusters(blobs, blobs_clustered):
    C, a = blobs_clustered
    s = soar_assign(blobs, C, a)
    assert s.shape == a.shape and s.dtype == np.int32
    assert np.all((s >= 0) & (s < len(C)) & (s != a))
    # SOAR picks among the primary's 128 nearest centroids.
    neigh = centroid_neighbourhoods(C, 128)
    assert np.all((neigh[a] == s[:, None]).any(axis=1))


def test_settle_assignment_moves_rows_to_their_nearest_centroid(blobs, blobs_clustered, tmp_path):
    """k-means' final pass assigns, then moves the centroids: some rows end outside their
    nearest list. The settling walk puts them in it (brute force decides), moves no row to a
    farther centroid, is a fixed point, and reads a memmap block by block the same way."""
    C, a = blobs_clustered
    got = settle_assignment(blobs, C, a)
    exact = nearest_centroid(blobs, C)
    d = lambda lab: ((blobs.astype(np.float64) - C[lab]) ** 2).sum(axis=1)  # noqa: E731
    assert np.mean(a != exact) > 0.001  # the case exists on these blobs
    assert np.mean(got == exact) >= 0.999
    assert np.all(d(got) <= d(a) * (1 + 1e-5) + 1e-7)
    assert np.array_equal(settle_assignment(blobs, C, got), got)
    path = tmp_path / "x.f32"
    blobs.tofile(path)
    mapped = np.memmap(path, dtype=np.float32, mode="r", shape=blobs.shape)
    assert np.array_equal(settle_assignment(mapped, C, a), got)
    # one centroid: nothing to walk to
    one = walk_to_nearest(blobs[:5], C[:1], np.zeros(5, np.int32), np.empty((1, 0), np.int32))
    assert np.array_equal(one, np.zeros(5))


def test_parent_level(blobs, blobs_clustered):
    C, _ = blobs_clustered
    assert parent_level(C[:256]) is None
    pl = parent_level(C)
    assert isinstance(pl, ParentLevel)
    parents, order, offsets = pl
    P = len(parents)
    assert parents.dtype == np.float32 and order.dtype == np.int32 and offsets.dtype == np.int64
    assert offsets.shape == (P + 1,) and offsets[0] == 0 and offsets[-1] == len(C)
    sizes = np.diff(offsets)
    assert sizes.min() >= 1 and sizes.max() <= 2 * 16
    np.testing.assert_array_equal(np.sort(order), np.arange(len(C)))
    parent_of = np.repeat(np.arange(P), sizes)
    child_parent = np.empty(len(C), np.int64)
    child_parent[order] = parent_of
    check_partition(C, parents, child_parent.astype(np.int32))
    pl2 = parent_level(C)
    np.testing.assert_array_equal(pl2.child_order, order)
    # A smaller fan-out gives more parents.
    assert len(parent_level(C, centroids_per_parent=4).centroids) > P


# --------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    "kwargs, exc, match",
    [
        ({"target_size": 63}, ValueError, r"target_size must be in \[64, 65536\], got 63"),
        ({"target_size": 65_537}, ValueError, "target_size"),
        ({"target_size": 100.0}, TypeError, "target_size must be an integer"),
        ({"target_size": True}, TypeError, "target_size"),
        ({"max_iter": -1}, ValueError, "max_iter must be >= 0"),
        ({"max_k": 1}, ValueError, "max_k"),
        ({"samples_per_cluster": 0}, ValueError, "samples_per_cluster"),
        ({"seed": -3}, ValueError, "seed"),
    ],
)
def test_hierarchical_kmeans_rejects_bad_parameters(kwargs, exc, match):
    X = np.zeros((10, 3), np.float32)
    with pytest.raises(exc, match=match):
        hierarchical_kmeans(X, **kwargs)


def test_bad_vectors():
    with pytest.raises(ValueError, match="X must be a 2-D array"):
        hierarchical_kmeans(np.zeros(10, np.float32))
    with pytest.raises(ValueError, match="at least one row"):
        hierarchical_kmeans(np.zeros((0, 4), np.float32))
    X = np.zeros((10, 3), np.float32)
    X[4, 1] = np.nan
    with pytest.raises(ValueError, match="row 4 holds NaN"):
        hierarchical_kmeans(X)
    with pytest.raises(TypeError, match="real numbers"):
        hierarchical_kmeans(np.zeros((4, 2), complex))
    C = np.zeros((3, 4), np.float32)
    with pytest.raises(ValueError, match="centroids must have the vectors' dimension 3"):
        nearest_centroid(np.zeros((5, 3), np.float32), C)


def test_bad_soar_and_parent_arguments():
    X = np.zeros((5, 2), np.float32)
    C = np.eye(2, dtype=np.float32)
    with pytest.raises(ValueError, match="primary must hold centroid ids in"):
        soar_assign(X, C, np.array([0, 1, 2, 0, 0]))
    with pytest.raises(ValueError, match="length 5"):
        soar_assign(X, C, np.array([0, 1]))
    with pytest.raises(ValueError, match="integer array"):
        soar_assign(X, C, np.zeros(5))
    with pytest.raises(ValueError, match="lam must be finite and >= 0"):
        soar_assign(X, C, np.zeros(5, int), lam=-1.0)
    with pytest.raises(ValueError, match="neighbours must be >= 1"):
        soar_assign(X, C, np.zeros(5, int), neighbours=0)
    with pytest.raises(ValueError, match=r"centroids_per_parent must be in \[2, 256\]"):
        parent_level(C, centroids_per_parent=1)


# --------------------------------------------------------------------------- real data


@pytest.mark.slow
@pytest.mark.shared_data
def test_debian_minilm_lists():
    path = DATA / "debian-minilm-384" / "base.npy"
    if not path.exists():
        pytest.skip(f"shared data set not found at {path}")
    X = np.load(path, mmap_mode="r")
    C, a = hierarchical_kmeans(X, 384)
    counts = check_partition(np.asarray(X), C, a)
    assert 100 <= len(C) <= 400  # 60,710 / 384 = 158 at exactly the target
    assert counts.max() <= 2 * 384
    s = soar_assign(X, C, a)
    assert np.all(s != a)
