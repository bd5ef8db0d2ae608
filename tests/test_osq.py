"""OSQ (spec §1): the numba kernel against the NumPy reference, and the spec's §8 facts."""

from __future__ import annotations

import numpy as np
import pytest
from reference.osq import dequantize, initial_interval, java_round, osq_loss, osq_reference

from bbqlib import BBQQuantizer
from bbqlib.quantizers.osq import quantize_rows

DIMS = [1, 2, 3, 7, 8, 9, 63, 64, 65, 127, 384, 1000]
BITS = list(range(1, 9))


def _data(kind: str, n: int, d: int, seed: int) -> np.ndarray:
    g = np.random.default_rng(seed)
    if kind == "normal":
        X = g.normal(0.2, 1.0, size=(n, d))
    elif kind == "uniform":
        X = g.uniform(size=(n, d))
    elif kind == "heavy":  # Student t, 2 dof: outliers stretch the range
        X = g.standard_t(2, size=(n, d))
    elif kind == "sparse":  # mostly zeros, a few spikes
        X = g.normal(size=(n, d)) * (g.uniform(size=(n, d)) < 0.05)
    elif kind == "ties":  # few distinct values: many codes sit exactly on rounding ties
        X = g.integers(-4, 5, size=(n, d)) / 4.0
    else:
        raise ValueError(kind)
    return X.astype(np.float32)


def assert_same(ref, res):
    """Kernel and reference agree bit for bit (same operations in the same order)."""
    np.testing.assert_array_equal(res.codes, ref.codes)
    np.testing.assert_array_equal(res.lower, ref.lower)
    np.testing.assert_array_equal(res.upper, ref.upper)
    np.testing.assert_array_equal(res.additional, ref.additional)
    np.testing.assert_array_equal(res.component_sum, ref.component_sum)


# ----------------------------------------------------------------------------- kernel == reference
@pytest.mark.parametrize("d", DIMS)
@pytest.mark.parametrize("kind", ["normal", "uniform", "heavy", "sparse", "ties"])
def test_kernel_matches_reference(d, kind):
    X = _data(kind, 32, d, seed=d)
    c = X.mean(axis=0)
    for bits in BITS:
        euclidean = bits % 2 == 0  # the flag only picks the additional correction
        ref = osq_reference(X, c, bits, euclidean=euclidean)
        res = quantize_rows(X, c, bits, euclidean=euclidean)
        assert_same(ref, res)
        assert res.codes.dtype == np.uint8 and res.component_sum.dtype == np.int64


@pytest.mark.parametrize("iters", [0, 1, 2, 5, 9])
@pytest.mark.parametrize("lam", [0.0, 0.1, 0.5, 1.0])
def test_kernel_matches_reference_iters_lambda(iters, lam):
    X = _data("normal", 40, 65, seed=7)
    c = X.mean(axis=0)
    for bits in (1, 2, 4, 7):
        ref = osq_reference(X, c, bits, euclidean=False, iters=iters, lam=lam)
        assert_same(ref, quantize_rows(X, c, bits, euclidean=False, iters=iters, lam=lam))


def test_kernel_matches_reference_special_rows():
    """Zero rows, rows equal to the centroid, constant rows and huge/tiny magnitudes."""
    g = np.random.default_rng(3)
    d = 65
    c = g.normal(size=d).astype(np.float32)
    rows = [
        np.zeros(d),
        c,
        np.full(d, 2.5),
        c + 1e-6,
        g.normal(size=d) * 1e-30,
        g.normal(size=d) * 1e-20,
        g.normal(size=d) * 1e6,
        g.normal(size=d) * 1e18,
        np.r_[1.0, np.zeros(d - 1)],
    ]
    X = np.array(rows, dtype=np.float32)
    for centroid in (c, np.zeros(d, np.float32)):
        for bits in BITS:
            ref = osq_reference(X, centroid, bits, euclidean=True)
            res = quantize_rows(X, centroid, bits, euclidean=True)
            assert_same(ref, res)
            assert np.isfinite(res.lower).all() and np.isfinite(res.upper).all()
            assert (res.lower <= res.upper).all()


def test_thread_count_does_not_change_results(numba_threads):
    X = _data("normal", 300, 127, seed=11)
    c = X.mean(axis=0)
    numba_threads(1)
    one = quantize_rows(X, c, 2, euclidean=False)
    numba_threads(2)
    assert_same(one, quantize_rows(X, c, 2, euclidean=False))


def test_empty_batch():
    res = quantize_rows(np.empty((0, 5), np.float32), np.zeros(5, np.float32), 1, euclidean=True)
    assert res.codes.shape == (0, 5) and res.lower.shape == (0,)


# ----------------------------------------------------------------------------- the math itself
def test_java_round_is_half_up():
    t = np.array([-1.5, -0.5, 0.5, 1.5, 2.5, 2.49999])
    np.testing.assert_array_equal(java_round(t), [-1, 0, 1, 2, 3, 2])
    assert not np.array_equal(java_round(t), np.round(t))  # NumPy rounds half to even


def test_kernel_rounds_ties_up():
    """With iters=0 the interval is [xmin, xmax] = [0, 3] at 2 bits, step 1: 0.5 -> 1, 2.5 -> 3.

    mean 1.5, std 1.275, ±1.493·std exceeds the range, so both ends clamp to the data.
    """
    X = np.array([[0.0, 0.5, 2.5, 3.0]], dtype=np.float32)
    c = np.zeros(4, np.float32)
    res = quantize_rows(X, c, 2, euclidean=True, iters=0)
    assert (res.lower[0], res.upper[0]) == (0.0, 3.0)
    assert res.codes[0].tolist() == [0, 1, 3, 3]  # half-to-even would give [0, 0, 2, 3]
    assert_same(osq_reference(X, c, 2, euclidean=True, iters=0), res)


def test_initial_interval_is_grid_times_std():
    g = np.random.default_rng(5)
    x = g.normal(size=(50, 1000))
    for bits, grid in [(1, 0.798), (2, 1.493), (4, 2.514), (7, 3.611), (8, 3.922)]:
        a, b = initial_interval(x, bits)
        mean, std = x.mean(axis=1), x.std(axis=1)
        lo, hi = x.min(axis=1), x.max(axis=1)
        np.testing.assert_allclose(a, np.clip(mean - grid * std, lo, hi), rtol=1e-6)
        np.testing.assert_allclose(b, np.clip(mean + grid * std, lo, hi), rtol=1e-6)
        if bits <= 4:  # the range of 1000 normals is wider than ±2.514 std: no clamping
            np.testing.assert_allclose(a, mean - grid * std, rtol=1e-6)


@pytest.mark.parametrize("bits", [1, 2, 4, 7])
def test_optimization_never_increases_the_loss(bits):
    """The stopping rule keeps the last accepted interval: loss(final) <= loss(initial)."""
    X = _data("heavy", 200, 96, seed=bits)
    c = X.mean(axis=0)
    res = quantize_rows(X, c, bits, euclidean=True)
    x = (X - c).astype(np.float64)
    norm2 = (x * x).sum(axis=1)
    a0, b0 = initial_interval(x, bits)
    levels = 2.0**bits - 1
    before = osq_loss(x, a0, b0, levels, norm2, 0.1)
    after = osq_loss(x, res.lower, res.upper, levels, norm2, 0.1)
    assert (after <= before * (1 + 1e-12)).all()
    assert (after < before).mean() > 0.5  # and usually improves it
    ref = osq_reference(X, c, bits, euclidean=True)
    assert (ref.iterations <= 5).all() and (ref.iterations >= 1).mean() > 0.5


def test_final_codes_are_the_rounded_clamped_positions():
    X = _data("normal", 30, 63, seed=2)
    c = X.mean(axis=0)
    for bits in BITS:
        res = quantize_rows(X, c, bits, euclidean=False)
        x = (X - c).astype(np.float64)
        a, b = res.lower.astype(np.float64)[:, None], res.upper.astype(np.float64)[:, None]
        t = (np.clip(x, a, b) - a) / ((b - a) / (2**bits - 1))
        np.testing.assert_array_equal(res.codes, java_round(t).astype(np.uint8))
        assert res.codes.max() <= 2**bits - 1
        np.testing.assert_array_equal(res.component_sum, res.codes.sum(axis=1))


def test_corrections_per_similarity():
    X = _data("normal", 20, 33, seed=4)
    c = X.mean(axis=0)
    X64, c64 = X.astype(np.float64), c.astype(np.float64)
    l2 = quantize_rows(X, c, 1, euclidean=True).additional
    ip = quantize_rows(X, c, 1, euclidean=False).additional
    np.testing.assert_allclose(l2, ((X64 - c64) ** 2).sum(axis=1), rtol=1e-6)
    np.testing.assert_allclose(ip, X64 @ c64, rtol=1e-6, atol=1e-6)


# ----------------------------------------------------------------------------- spec §8
@pytest.mark.parametrize("bits", BITS)
def test_quantization_quality(bits):
    """Lucene/ES testQuantizationQuality: D = 16, 32 uniform vectors, centroid = their mean;
    mean |dequantized - v| <= 2^-B for every B."""
    g = np.random.default_rng(42)
    X = g.uniform(size=(32, 16)).astype(np.float32)
    c = X.mean(axis=0)
    for euclidean in (True, False):
        res = quantize_rows(X, c, bits, euclidean=euclidean)
        recon = dequantize(res.codes, res.lower, res.upper, bits) + c
        err = np.abs(recon - X).mean(axis=1)
        assert (err <= 2.0**-bits).all(), (bits, err.max())


@pytest.mark.parametrize("bits", BITS)
def test_abusive_all_zero_vector(bits):
    """All-zero 4096-d vector, zero centroid: every code 0, finite results, a <= b, Σk >= 0."""
    X = np.zeros((1, 4096), np.float32)
    c = np.zeros(4096, np.float32)
    for euclidean in (True, False):
        res = quantize_rows(X, c, bits, euclidean=euclidean)
        assert not res.codes.any()
        for v in (res.lower, res.upper, res.additional):
            assert np.isfinite(v).all()
        assert res.lower[0] <= res.upper[0] and res.component_sum[0] == 0


@pytest.mark.parametrize("bits", BITS)
def test_abusive_one_dimension(bits):
    g = np.random.default_rng(bits)
    X = g.normal(size=(50, 1)).astype(np.float32)
    for c in (np.zeros(1, np.float32), X.mean(axis=0)):
        res = quantize_rows(X, c, bits, euclidean=True)
        assert np.isfinite(res.lower).all() and (res.lower <= res.upper).all()
        assert res.codes.max() < 2**bits and (res.component_sum >= 0).all()
        assert_same(osq_reference(X, c, bits, euclidean=True), res)


@pytest.mark.parametrize("bits", BITS)
def test_constant_vectors(bits):
    """A constant centred row has std 0: a = b = the constant, codes all 0 (Java NaN -> 0)."""
    X = np.full((3, 40), 1.75, np.float32)
    X[1] = -3.0
    X[2] = 0.0
    res = quantize_rows(X, np.zeros(40, np.float32), bits, euclidean=True)
    assert not res.codes.any()
    np.testing.assert_array_equal(res.lower, [1.75, -3.0, 0.0])
    np.testing.assert_array_equal(res.upper, res.lower)
    # and it dequantizes to itself exactly
    np.testing.assert_array_equal(dequantize(res.codes, res.lower, res.upper, bits), X)


def test_mathematical_consistency_random_dims():
    """Random D in [1, 4096]: codes in [0, 2^B), finite a <= b, Σk >= 0, every similarity."""
    g = np.random.default_rng(9)
    for trial in range(4):
        d = int(g.integers(1, 4097))
        X = g.normal(size=(6, d)).astype(np.float32) * g.uniform(0.1, 10)
        for bits in BITS:
            for euclidean in (True, False):
                res = quantize_rows(X, X.mean(axis=0), bits, euclidean=euclidean)
                assert res.codes.max() < 2**bits
                assert np.isfinite(res.lower).all() and np.isfinite(res.upper).all()
                assert (res.lower <= res.upper).all() and (res.component_sum >= 0).all()
        for sim in ("euclidean", "cosine", "max_inner_product", "dot_product"):
            Y = X / np.linalg.norm(X, axis=1, keepdims=True) if sim == "dot_product" else X
            for bits in (1, 2, 4, 7):
                q = BBQQuantizer(bits=bits, similarity=sim).fit(Y)
                est = q.estimate(Y[:2], q.encode(Y))
                assert np.isfinite(est).all(), (trial, d, sim, bits)


# Spec §8 illustrative example (float64 NumPy; our float32 interval ends agree to ~1e-6).
EXAMPLE_V = [0.5, -1.0, 2.0, 0.25, -0.75, 1.5, 0.0, -2.0]
EXAMPLE = {
    1: ([1, 0, 1, 1, 0, 1, 0, 0], -1.346723, 1.526287, 4),
    2: ([2, 1, 3, 2, 1, 3, 2, 0], -2.185843, 1.671527, 14),
    4: ([9, 4, 15, 8, 5, 13, 8, 0], -2.048517, 2.037773, 62),
    7: ([79, 32, 127, 71, 40, 111, 64, 0], -2.005737, 2.004439, 524),
}


@pytest.mark.parametrize("bits", sorted(EXAMPLE))
def test_illustrative_example(bits):
    codes, a, b, ksum = EXAMPLE[bits]
    X = np.array([EXAMPLE_V], np.float32)
    res = quantize_rows(X, np.zeros(8, np.float32), bits, euclidean=True)
    assert res.codes[0].tolist() == codes
    np.testing.assert_allclose([res.lower[0], res.upper[0]], [a, b], rtol=1e-5)
    assert res.additional[0] == 12.125 and res.component_sum[0] == ksum


def test_illustrative_example_query():
    u = np.array([[0.4, -0.8, 1.7, 0.5, -0.5, 1.0, 0.2, -1.5]], np.float32)
    res = quantize_rows(u, np.zeros(8, np.float32), 4, euclidean=True)
    assert res.codes[0].tolist() == [9, 3, 15, 9, 5, 12, 8, 0]
    np.testing.assert_allclose([res.lower[0], res.upper[0]], [-1.491631, 1.689160], rtol=1e-5)
    np.testing.assert_allclose(res.additional[0], 7.48, rtol=1e-6)
    assert res.component_sum[0] == 61
