"""Exact candidate rescoring (bbqlib._kernels.rerank via bbqlib.search.rerank.exact_values).

The kernel's values are lane sums of float64 terms: bit for bit those of the NumPy twin
``reference.rerank`` (for any thread count, any group of candidates scored together, any
layout of the vectors), and within a float64 rounding bound of ``np.einsum``.
"""

from __future__ import annotations

import numpy as np
import pytest
from reference.rerank import exact_candidates as reference_candidates
from reference.rerank import exact_terms

from bbqlib._kernels.rerank import COSINE, exact_candidates
from bbqlib.search.rerank import exact_values


def rerank_exact(Q, V, cand, is_l2):
    return exact_values(Q, V, cand, int(is_l2))


DIMS = [1, 3, 7, 8, 9, 63, 64, 65, 127, 384, 1000, 1536]
U64 = float(np.finfo(np.float64).eps) / 2  # unit roundoff


def _gamma(n: int) -> float:
    """Higham's ``γ_n = n u / (1 - n u)``: relative error of ``n`` float64 roundings."""
    return n * U64 / (1.0 - n * U64)


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float64).view(np.uint64)


def _wide(n: int, d: int, seed: int) -> np.ndarray:
    """float32 values over 16 orders of magnitude: another summation order changes the sums."""
    g = np.random.default_rng(seed)
    return (g.normal(size=(n, d)) * 10.0 ** g.uniform(-8, 8, size=(n, d))).astype(np.float32)


def _candidates(nq: int, m: int, n: int, seed: int) -> np.ndarray:
    """Ids with padding (-1) and duplicates; rows keep from 0 to ``m`` valid candidates."""
    g = np.random.default_rng(seed)
    cand = g.integers(0, n, size=(nq, m))
    for r in range(nq):
        cand[r, g.random(m) < (r % 4) / 4] = -1  # 0, 1/4, 1/2, 3/4 of the row padded
    cand[0, : m // 2] = cand[0, 0]  # duplicates
    if nq > 1:
        cand[1] = -1  # a row of padding only
    return cand


def _values(kind: str, n: int, d: int, seed: int) -> np.ndarray:
    g = np.random.default_rng(seed)
    if kind == "gaussian":
        return g.normal(size=(n, d)).astype(np.float32)
    if kind == "zeros":
        return np.zeros((n, d), np.float32)
    if kind == "signed_zeros":  # ±0.0 everywhere, a few ±1 among them
        X = np.where(g.random((n, d)) < 0.5, -0.0, 0.0).astype(np.float32)
        X[g.random((n, d)) < 0.05] = g.choice([-1.0, 1.0])
        return X
    if kind == "huge":
        return (g.normal(size=(n, d)) * 1e18).astype(np.float32)
    if kind == "tiny":
        return (g.normal(size=(n, d)) * 1e-30).astype(np.float32)
    if kind == "subnormal":  # float32 subnormals (exact in float64)
        return (g.normal(size=(n, d)) * 1e-40).astype(np.float32)
    if kind == "mixed":  # 1e-30 .. 1e18 in one row: cancellation and absorption
        return (g.normal(size=(n, d)) * 10.0 ** g.uniform(-30, 18, size=(n, d))).astype(np.float32)
    raise ValueError(kind)


# ----------------------------------------------------------------------------- lane order
@pytest.mark.parametrize("is_l2", [False, True])
@pytest.mark.parametrize("d", DIMS)
def test_values_are_the_reference_lane_sums(d, is_l2):
    """Kernel == ``reference.rerank`` bit for bit (padding nan, duplicates, 0..13 valid)."""
    V = _wide(50, d, seed=d)
    Q = _wide(8, d, seed=d + 1)
    cand = _candidates(8, 13, 50, seed=d)
    got = rerank_exact(Q, V, cand, is_l2)
    want = reference_candidates(Q, V, cand, is_l2)
    np.testing.assert_array_equal(_bits(got), _bits(want))
    assert np.isnan(got[cand < 0]).all() and not np.isnan(got[cand >= 0]).any()
    if d >= 16:  # the test can tell the lane order from a left-to-right sum
        terms = exact_terms(Q, V, cand, is_l2)
        sequential = np.cumsum(terms, axis=2)[:, :, -1]
        assert (sequential[cand >= 0] != got[cand >= 0]).any()


@pytest.mark.parametrize("is_l2", [False, True])
def test_value_does_not_depend_on_the_group(is_l2):
    """Scoring the first ``w`` candidates (groups of 8, 4, 2, 1) gives the same bits."""
    V = _wide(40, 65, seed=1)
    Q = _wide(3, 65, seed=2)
    cand = np.random.default_rng(3).integers(0, 40, size=(3, 17))
    full = rerank_exact(Q, V, cand, is_l2)
    for w in range(1, 18):
        np.testing.assert_array_equal(
            _bits(rerank_exact(Q, V, cand[:, :w], is_l2)), _bits(full[:, :w])
        )
    # one candidate in every column: one value, wherever it falls in a group
    same = rerank_exact(Q, V, np.full((3, 17), 5), is_l2)
    alone = rerank_exact(Q, V, np.full((3, 1), 5), is_l2)
    np.testing.assert_array_equal(_bits(same), _bits(np.repeat(alone, 17, axis=1)))


@pytest.mark.parametrize("is_l2", [False, True])
def test_same_bits_for_one_and_two_threads(is_l2, numba_threads):
    V = _wide(300, 384, seed=5)
    Q = _wide(64, 384, seed=6)
    cand = _candidates(64, 30, 300, seed=7)
    numba_threads(1)
    one = rerank_exact(Q, V, cand, is_l2)
    if numba_threads(2) < 2:
        pytest.skip("numba has one thread only")
    two = rerank_exact(Q, V, cand, is_l2)
    np.testing.assert_array_equal(_bits(one), _bits(two))


# ----------------------------------------------------------------------------- accuracy
@pytest.mark.parametrize(
    "kind", ["gaussian", "zeros", "signed_zeros", "huge", "tiny", "subnormal", "mixed"]
)
@pytest.mark.parametrize("is_l2", [False, True])
@pytest.mark.parametrize("d", DIMS)
def test_within_float64_rounding_of_einsum(d, is_l2, kind):
    """``|kernel - einsum| <= 2 γ_(d+1) Σ|t_i|``, ``t_i`` the float64 terms.

    Both sides sum the same ``d`` float64 terms: ``q_i v_i`` (exact for float32 inputs) or
    ``e_i²`` with the same ``e_i = float64(q_i) - float64(v_i)`` (one rounding each side); each
    is within ``γ_d Σ|t_i|`` of the exact sum (a product and ``d - 1`` additions, in any
    order), and ``γ_(d+1)`` also covers the rounding of ``Σ|t_i|`` itself.
    """
    V = _values(kind, 30, d, seed=d)
    Q = _values(kind, 4, d, seed=d + 7)
    if kind == "mixed":
        Q[0] = V[0]  # l2: an exact zero distance; ip: the squared norm
    cand = _candidates(4, 9, 30, seed=d)
    cand[0, -1] = 0
    got = rerank_exact(Q, V, cand, is_l2)
    Q64, V64 = Q.astype(np.float64), V.astype(np.float64)
    valid = cand >= 0
    rows = V64[np.where(valid, cand, 0)]
    if is_l2:
        diff = Q64[:, None, :] - rows
        want = np.einsum("qjd,qjd->qj", diff, diff)
        scale = np.einsum("qjd,qjd->qj", diff, diff)
    else:
        want = np.einsum("qd,qjd->qj", Q64, rows)
        scale = np.einsum("qd,qjd->qj", np.abs(Q64), np.abs(rows))
    bound = 2 * _gamma(d + 1) * scale
    assert np.isfinite(got[valid]).all()
    assert (np.abs(got - want)[valid] <= bound[valid]).all()
    assert np.isnan(got[~valid]).all()
    if kind in ("zeros", "signed_zeros") or (kind == "mixed" and is_l2):
        exact_zero = scale == 0.0
        assert (got[valid & exact_zero] == 0.0).all()


# ----------------------------------------------------------------------------- edge cases
@pytest.mark.parametrize("is_l2", [False, True])
def test_shapes_k1_nq1_and_empty(is_l2):
    V = _wide(10, 9, seed=1)
    Q = _wide(3, 9, seed=2)
    for cand in (np.array([[4]]), np.array([[4, -1, 4, 9]]), np.array([[-1]])):
        q = Q[:1]
        got = rerank_exact(q, V, cand, is_l2)
        assert got.shape == cand.shape
        np.testing.assert_array_equal(_bits(got), _bits(reference_candidates(q, V, cand, is_l2)))
    k1 = np.array([[0], [5], [-1]])
    np.testing.assert_array_equal(
        _bits(rerank_exact(Q, V, k1, is_l2)), _bits(reference_candidates(Q, V, k1, is_l2))
    )
    for shape in ((3, 0), (0, 4), (0, 0)):
        assert rerank_exact(Q[: shape[0]], V, np.empty(shape, np.int64), is_l2).shape == shape
    # the kernel itself, on empty outputs and on padding over an empty vector set
    out = np.empty((0, 4))
    exact_candidates(Q[:0], V, np.empty((0, 4), np.int64), int(is_l2), out)
    out = np.empty((3, 0))
    exact_candidates(Q, V, np.empty((3, 0), np.int64), int(is_l2), out)
    out = np.zeros((3, 2))
    exact_candidates(Q, V[:0], np.full((3, 2), -1), int(is_l2), out)
    assert np.isnan(out).all()


@pytest.mark.parametrize("is_l2", [False, True])
def test_vector_layouts_read_only_views_and_float64(is_l2, tmp_path):
    """Memory maps, row-contiguous views, strided views (rows copied) and float64 vectors
    give the reference's bits; the caller's arrays are not written."""
    d = 65
    W = _wide(80, 2 * d, seed=3)
    Q = _wide(5, d, seed=4)
    cand = _candidates(5, 11, 40, seed=5)
    np.save(tmp_path / "v.npy", np.ascontiguousarray(W[:40, :d]))
    layouts = {
        "memmap": np.load(tmp_path / "v.npy", mmap_mode="r"),
        "read-only": np.ascontiguousarray(W[:40, :d]),
        "row-contiguous view": W[:40, :d],  # unit stride inside rows, not C-contiguous
        "every other row": W[:80:2, :d],
        "strided rows": W[:40, : 2 * d : 2],
        "float64": W[:40, :d].astype(np.float64) * np.float64(1 + 2**-40),
    }
    layouts["read-only"].flags.writeable = False
    before = {name: np.array(v) for name, v in layouts.items()}
    for name, V in layouts.items():
        got = rerank_exact(Q, V, cand, is_l2)
        np.testing.assert_array_equal(
            _bits(got), _bits(reference_candidates(Q, V, cand, is_l2)), err_msg=name
        )
        np.testing.assert_array_equal(np.asarray(V), before[name], err_msg=name)


def test_non_float_vectors_are_a_typing_error():
    with pytest.raises(TypeError, match="float"):
        rerank_exact(
            np.ones((1, 8), np.float32), np.ones((2, 8), np.int32), np.zeros((1, 1)), False
        )


@pytest.mark.parametrize("mode", [0, 1, COSINE])
def test_serial_twin_and_cosine_mode(mode):
    """The serial twin gives the parallel kernel's bits; cosine divides by the doc's norm."""
    g = np.random.default_rng(11)
    Q = g.normal(size=(4, 37)).astype(np.float32)
    V = (g.normal(size=(50, 37)) * g.uniform(0.5, 3, (50, 1))).astype(np.float32)
    cand = _candidates(4, 9, 50, 3)
    par = np.empty(cand.shape)
    ser = np.empty(cand.shape)
    exact_candidates(Q, V, cand, mode, par)
    exact_candidates(Q, V, cand, mode, ser, parallel=False)
    np.testing.assert_array_equal(_bits(par), _bits(ser))
    if mode == COSINE:
        v = V.astype(np.float64)
        ref = np.where(cand >= 0, np.einsum("qd,qmd->qm", Q.astype(np.float64),
                       v[np.maximum(cand, 0)]) / np.linalg.norm(v[np.maximum(cand, 0)], axis=2),
                       np.nan)  # fmt: skip
        np.testing.assert_allclose(par, ref, rtol=1e-12, atol=1e-12)
