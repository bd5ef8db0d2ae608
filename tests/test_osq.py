"""OSQ (spec §1): the numba kernel against the NumPy reference, and the spec's §8 facts."""

from __future__ import annotations

import numpy as np
import pytest
from reference.osq import (
    dequantize,
    direct_pass_terms,
    initial_interval,
    java_round,
    lane_reduce,
    lane_sum,
    osq_loss,
    osq_reference,
    pass_sums,
    pass_terms,
)

from bbqlib import BBQQuantizer
from bbqlib._kernels.osq import _pass_sums, _row_stats
from bbqlib.packing import pack_planes
from bbqlib.quantizers.osq.math import quantize_pairs, quantize_rows

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


@pytest.mark.parametrize("iters", [0, 1, 2, 3, 4, 5, 9])
@pytest.mark.parametrize("lam", [0.0, 0.1, 0.5, 1.0])
@pytest.mark.parametrize("d", [7, 9, 65])
def test_kernel_matches_reference_iters_lambda(iters, lam, d):
    X = _data("normal", 40, d, seed=7)
    c = X.mean(axis=0)
    for bits in BITS:
        ref = osq_reference(X, c, bits, euclidean=False, iters=iters, lam=lam)
        assert_same(ref, quantize_rows(X, c, bits, euclidean=False, iters=iters, lam=lam))


def _special_rows(d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Zero rows, rows equal to the centroid, constant rows, huge/tiny/mixed magnitudes."""
    g = np.random.default_rng(seed)
    c = g.normal(size=d).astype(np.float32)
    mixed = g.normal(size=d) * 10.0 ** g.uniform(-30, 18, size=d)
    signed_zeros = np.where(g.uniform(size=d) < 0.5, -0.0, 0.0)
    signed_zeros[0] = 1.0
    rows = [
        np.zeros(d),
        c,
        np.full(d, 2.5),
        c + 1e-6,
        g.normal(size=d) * 1e-30,
        g.normal(size=d) * 1e-20,
        g.normal(size=d) * 1e6,
        g.normal(size=d) * 1e18,
        mixed,
        np.r_[1.0, np.zeros(d - 1)],
        signed_zeros,  # ±0 against a zero centroid: the order of min/max shows in the sign
        g.integers(-2, 3, size=d) * 0.5,  # codes on rounding ties
    ]
    return np.array(rows, dtype=np.float32), c


@pytest.mark.parametrize("d", [1, 3, 7, 8, 9, 63, 64, 65, 127, 384, 1000])
@pytest.mark.parametrize("lam", [0.0, 0.1, 1.0])
def test_kernel_matches_reference_special_rows(d, lam):
    X, c = _special_rows(d, seed=d)
    for centroid in (c, np.zeros(d, np.float32)):
        for bits in BITS:
            for euclidean in (True, False):
                ref = osq_reference(X, centroid, bits, euclidean=euclidean, lam=lam)
                res = quantize_rows(X, centroid, bits, euclidean=euclidean, lam=lam)
                assert_same(ref, res)
                np.testing.assert_array_equal(np.signbit(res.lower), np.signbit(ref.lower))
                assert np.isfinite(res.lower).all() and np.isfinite(res.upper).all()
                # λ = 0 leaves rank-one normal equations (det = 0 up to rounding): the steps
                # are rounding noise and may cross, in Lucene's algorithm as in ours.
                assert lam == 0.0 or (res.lower <= res.upper).all()


# ----------------------------------------------------------------------------- lane arithmetic
def _wide_rows(n: int, d: int, seed: int) -> np.ndarray:
    """Terms over 16 orders of magnitude: any other summation order changes the sums."""
    g = np.random.default_rng(seed)
    return (g.normal(size=(n, d)) * 10.0 ** g.uniform(-8, 8, size=(n, d))).astype(np.float32)


@pytest.mark.parametrize("d", [1, 3, 7, 8, 9, 63, 64, 65, 127, 384, 1000])
def test_row_sums_are_the_reference_lane_sums(d):
    """The kernel's float64 row statistics equal the reference's lane sums bit for bit."""
    V = _wide_rows(20, d, seed=d)
    c = _wide_rows(1, d, seed=d + 1)[0]
    x = (V - c).astype(np.float64)
    total, norm2, cdot = lane_sum(x), lane_sum(x * x), lane_sum(V.astype(np.float64) * c)
    mean = total / d
    var = lane_sum((x - mean[:, None]) ** 2)
    xmin = lane_reduce(x, lambda p, q: np.where(p > q, q, p), np.inf)
    xmax = lane_reduce(x, lambda p, q: np.where(p < q, q, p), -np.inf)
    for r in range(V.shape[0]):
        got = _row_stats(V[r], c)
        assert got == (total[r], norm2[r], cdot[r], xmin[r], xmax[r], var[r]), r
    if d >= 16:  # the test can tell the lane order from a left-to-right sum
        assert (np.cumsum(x * x, axis=1)[:, -1] != norm2).any()


@pytest.mark.parametrize("d", [1, 7, 8, 9, 65, 384, 1000])
@pytest.mark.parametrize("bits", [1, 4, 8])
def test_pass_sums_are_the_reference_lane_sums(d, bits):
    """``(K1, K2, XK)`` of one optimizer pass, kernel vs reference, exactly (also b == a)."""
    V = _wide_rows(12, d, seed=d)
    c = np.zeros(d, np.float32)
    x = V.astype(np.float64)
    lv = 2**bits - 1
    spread = np.abs(x).max(axis=1)
    g = np.random.default_rng(bits)
    a = -spread * g.uniform(0.0, 1.0, size=12)
    b = spread * g.uniform(0.0, 1.0, size=12)
    b[0] = a[0]  # collapsed interval: every code 0
    k1, k2, xk = pass_sums(x, a, b, lv)
    for r in range(V.shape[0]):
        inv = lv / (b[r] - a[r]) if b[r] != a[r] else 0.0
        assert _pass_sums(V[r], c, a[r], b[r], inv) == (k1[r], k2[r], xk[r]), r
    assert k1[0] == k2[0] == 0 and xk[0] == 0.0


@pytest.mark.parametrize("bits", BITS)
@pytest.mark.parametrize("lam", [0.0, 0.1, 1.0])
def test_pass_terms_match_the_definitions(bits, lam):
    """The loss and normal-equation sums from (K1, K2, XK) are the spec §1.3-1.4 sums.

    Only the rounding differs: the closed form cancels ``‖x‖²`` against ``Σ x x̂``, so the
    loss agrees to a few ulps of ``‖x‖²``, the other sums to a few ulps of their terms.
    """
    g = np.random.default_rng(bits)
    n, d = 50, 97
    x = (g.normal(size=(n, d)) * g.uniform(0.01, 100.0, size=(n, 1))).astype(np.float32)
    x = x.astype(np.float64)
    lv = 2**bits - 1
    a32, b32 = initial_interval(x, bits)
    a = a32.astype(np.float64) * g.uniform(0.5, 1.5, size=n)
    b = b32.astype(np.float64) * g.uniform(0.5, 1.5, size=n)
    b[0] = a[0]
    norm2 = lane_sum(x * x)
    got = pass_terms(*pass_sums(x, a, b, lv), a, b, d, lv, lane_sum(x), norm2, lam)
    want = direct_pass_terms(x, a, b, lv, lam)
    scale = [norm2, d, d, d, np.abs(x).sum(axis=1), np.abs(x).sum(axis=1)]
    names = ("loss", "daa", "dab", "dbb", "dax", "dbx")
    for name, u, w, s_ in zip(names, got, want, scale, strict=True):
        assert (np.abs(u - w) <= 1e-13 * s_).all(), name


@pytest.mark.parametrize("d", [9, 65])
@pytest.mark.parametrize("bits", [1, 4, 7])
def test_ivf_pair_quantization_shares_the_row_body(d, bits):
    """``quantize_pairs`` (IVF) runs the same inline row function: same codes and factors,
    with lanes and a tail (``d mod 8 != 0``); the IVF tests cover d = 1 and 384."""
    X, c = _special_rows(d, seed=bits)
    X = np.concatenate([X, _data("heavy", 20, d, seed=d)])
    C = np.stack([c, np.zeros(d, np.float32), X[-1]])
    rows = np.repeat(np.arange(X.shape[0]), 3)
    lists = np.tile(np.arange(3), X.shape[0])
    planes = bits if bits <= 4 else 0
    codes, f = quantize_pairs(X, rows, C, lists, bits, False, 5, planes=planes)
    for i in range(rows.size):
        res = quantize_rows(X[rows[i]][None], C[lists[i]], bits, euclidean=False)
        expect = pack_planes(res.codes, bits) if planes else res.codes
        np.testing.assert_array_equal(codes[i], expect[0])
        assert f[i, 0] == res.lower[0] and f[i, 2] == res.component_sum[0]
        assert np.float32(f[i, 3]) == res.additional[0]


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
