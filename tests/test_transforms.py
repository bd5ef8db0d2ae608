"""Tests of bbqlib.transforms and the FhtKac kernel (bbqlib._kernels.fwht)."""

from __future__ import annotations

import json
import math
from functools import cache

import numpy as np
import pytest
from reference.transforms import (
    block_matrix,
    block_preconditioner_reference,
    fht_kac_reference,
    fwht_recursive,
)
from threadpoolctl import threadpool_limits

from bbqlib._kernels.fwht import TILE, fht_kac_rows, fht_kac_rows_parallel, fwht_columns
from bbqlib.transforms import (
    TRANSFORMS,
    BlockPreconditioner,
    DenseRotation,
    HadamardRotation,
    Transform,
    make_transform,
    transform_from_state,
)
from bbqlib.transforms.block import gram_schmidt_rows

NAMES = sorted(TRANSFORMS)
DIMS = [1, 2, 3, 7, 8, 9, 63, 64, 65, 127, 384, 768, 1000, 1536]
KERNEL_DIMS = [1, 2, 3, 7, 8, 63, 64, 65, 127, 384, 768, 1000, 1536]
EPS32 = float(np.finfo(np.float32).eps)


def tol(d: int) -> float:
    """Relative tolerance for float32 rotations in dimension ``d``.

    Each output coordinate is a float32 sum along a path of ``k`` roundings, with error
    about ``λ·√k·u·‖x‖`` (probabilistic rounding-error bound, Higham & Mary, SISC 2019).
    ``k <= d`` for the dense matrix and the blocks; for FhtKac ``k ≈ rounds·(log2 d + 2)``,
    which exceeds ``d`` at tiny ``d``. λ = 8 covers a round trip (two transforms) with
    margin; storing the matrices in float32 adds O(u).
    """
    k = max(d, 4 * (math.log2(d) + 2))
    return 8.0 * math.sqrt(k) * EPS32


@pytest.fixture(autouse=True, scope="module")
def _single_blas_thread():
    """LAPACK's QR with several OpenBLAS threads on a busy 2-core machine runs 10-80x slower
    (threads spin-wait); the transforms' values do not depend on this setting's speed-up."""
    with threadpool_limits(limits=1, user_api="blas"):
        yield


def assert_within(err, bound) -> None:
    """``err <= bound`` elementwise (with broadcasting), reporting the worst ratio."""
    err, bound = np.broadcast_arrays(np.asarray(err, np.float64), np.asarray(bound, np.float64))
    bad = err > bound
    if bad.any():
        worst = np.max(err[bad] / np.maximum(bound[bad], 1e-300))
        raise AssertionError(
            f"{bad.sum()} of {err.size} errors exceed the bound (worst x{worst:.3g})"
        )


@cache
def fitted(name: str, d: int, seed: int | None = None) -> Transform:
    return make_transform(name, d, seed=seed)


def gaussian(n: int, d: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)


# -- isometry -----------------------------------------------------------------------------


@pytest.mark.parametrize("d", DIMS)
@pytest.mark.parametrize("name", NAMES)
def test_isometry(name, d):
    t = fitted(name, d)
    X = gaussian(48, d, seed=d)
    Y = t.transform(X)
    x64, y64 = X.astype(np.float64), Y.astype(np.float64)
    nx = np.linalg.norm(x64, axis=1)
    e = tol(d)
    assert_within(np.abs(np.linalg.norm(y64, axis=1) - nx), e * nx)
    # dot products and L2 distances of every pair, relative to the norms involved
    scale = np.outer(nx, nx)
    assert_within(np.abs(y64 @ y64.T - x64 @ x64.T), 2 * e * scale + 1e-30)
    dx = np.linalg.norm(x64[:, None] - x64[None], axis=2)
    dy = np.linalg.norm(y64[:, None] - y64[None], axis=2)
    assert_within(np.abs(dy - dx), e * (nx[:, None] + nx[None]) + 1e-30)
    back = t.inverse_transform(Y).astype(np.float64)
    assert_within(np.linalg.norm(back - x64, axis=1), 2 * e * nx)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("magnitude", [1e-30, 1e30])
def test_huge_and_tiny_magnitudes(name, magnitude):
    d = 100
    X = gaussian(8, d) * np.float32(magnitude)
    Y = fitted(name, d).transform(X)
    assert np.all(np.isfinite(Y))
    nx = np.linalg.norm(X.astype(np.float64), axis=1)
    rel = np.abs(np.linalg.norm(Y.astype(np.float64), axis=1) - nx) / nx
    assert rel.max() < tol(d)


@pytest.mark.parametrize("name", NAMES)
def test_zero_and_constant_vectors(name):
    d = 65
    t = fitted(name, d)
    assert np.array_equal(t.transform(np.zeros(d)), np.zeros(d, np.float32))
    c = np.full(d, 3.0, np.float32)
    assert abs(np.linalg.norm(t.transform(c)) - np.linalg.norm(c)) < tol(d) * np.linalg.norm(c)


# -- FhtKac kernel vs the NumPy reference -------------------------------------------------


def test_fwht_recursive_matches_sylvester_matrix():
    import scipy.linalg

    x = np.random.default_rng(0).standard_normal((3, 64))
    np.testing.assert_allclose(fwht_recursive(x), x @ scipy.linalg.hadamard(64), atol=1e-12)


@pytest.mark.parametrize("m", [1, 2, 4, 8, 64, 512, 2048])
def test_fwht_kernel_matches_recursive(m):
    x = np.random.default_rng(m).standard_normal((m + 5, 3)).astype(np.float32)
    got = x.copy()
    fwht_columns(got, 3, m)  # only rows 3 : 3 + m change, each column on its own
    want = fwht_recursive(x[3 : 3 + m].T).T / math.sqrt(m)
    np.testing.assert_array_equal(got[:3], x[:3])
    np.testing.assert_array_equal(got[3 + m :], x[3 + m :])
    assert_within(np.abs(got[3 : 3 + m] - want), tol(m) * np.linalg.norm(x[3 : 3 + m], axis=0))


def _adversarial_rows(d: int) -> np.ndarray:
    rng = np.random.default_rng(d)
    rows = [
        rng.standard_normal(d),
        np.zeros(d),
        np.ones(d),
        np.eye(d)[0],
        np.eye(d)[-1],
        rng.uniform(0, 1, d),  # skewed: all positive
        np.where(rng.random(d) < 0.05, 100.0, 0.0),  # sparse spikes
        np.arange(d, dtype=np.float64) - d / 2,
    ]
    return np.array(rows, dtype=np.float32)


@pytest.mark.parametrize("d", KERNEL_DIMS)
def test_hadamard_kernel_matches_reference(d):
    t = fitted("hadamard", d)
    X = np.vstack([_adversarial_rows(d), gaussian(24, d, seed=d + 1)])
    scale = np.linalg.norm(X.astype(np.float64), axis=1, keepdims=True) + 1e-30
    Y = t.transform(X)
    assert_within(np.abs(Y - fht_kac_reference(X, t.signs_)), tol(d) * scale)
    Z = t.inverse_transform(X)
    want = fht_kac_reference(X, t.signs_, inverse=True)
    assert_within(np.abs(Z - want), tol(d) * scale)


@pytest.mark.parametrize("d", [7, 384, 1000])
@pytest.mark.parametrize("inverse", [False, True])
def test_parallel_kernel_equals_serial(d, inverse):
    t = fitted("hadamard", d)
    X = gaussian(10 * TILE + 7, d, seed=7)  # a partial last tile
    a, b = np.empty_like(X), np.empty_like(X)
    fht_kac_rows(X, t.signs_, t.hadamard_dim_, inverse, a)
    fht_kac_rows_parallel(X, t.signs_, t.hadamard_dim_, inverse, b)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(t._run(X, inverse), a)  # the wrapper's dispatch
    np.testing.assert_array_equal(t._run(X[5:6], inverse)[0], a[5])  # alone = in a batch


@pytest.mark.parametrize("rounds", [1, 2, 3, 5])
def test_hadamard_rounds(rounds):
    t = HadamardRotation(rounds=rounds, seed=1).fit(100)
    X = gaussian(10, 100)
    assert t.signs_.shape == (rounds, 100)
    np.testing.assert_allclose(t.transform(X), fht_kac_reference(X, t.signs_), atol=1e-5)
    np.testing.assert_allclose(t.inverse_transform(t.transform(X)), X, atol=1e-5)


# -- determinism and seeds ----------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_deterministic_per_seed(name):
    d = 65
    X = gaussian(5, d)
    a = make_transform(name, d, seed=3).transform(X)
    b = make_transform(name, d, seed=3).transform(X)
    c = make_transform(name, d, seed=4).transform(X)
    np.testing.assert_array_equal(a, b)
    assert np.abs(a - c).max() > 0.1


def test_default_seeds():
    assert make_transform("block", 64).seed == 42
    assert make_transform(True, 64).seed == 42
    assert make_transform("dense", 64).seed == 0
    assert make_transform("hadamard", 64).seed == 0
    assert BlockPreconditioner().seed == 42


def test_fit_from_data_equals_fit_from_dim():
    X = gaussian(4, 30)
    for cls in TRANSFORMS.values():
        assert cls(seed=5).fit(X).fingerprint() == cls(seed=5).fit(30).fingerprint()
        assert cls(30, seed=5).fit().fingerprint() == cls(seed=5).fit(30).fingerprint()


# -- dense rotation: orthogonality and Haar distribution ----------------------------------


def test_dense_matrix_orthogonal():
    Q = fitted("dense", 384).matrix_.astype(np.float64)
    assert np.abs(Q @ Q.T - np.eye(384)).max() < tol(384)


def test_dense_rotation_is_haar():
    """Over S seeds, with Q Haar on O(d): y = Q e_0 is uniform on the sphere, so y_0 has mean 0
    and E[y_0²] = 1/d with Var(y_0²) = 2(d-1)/(d²(d+2)); and tr Q has mean 0, E[(tr Q)²] = 1
    (Diaconis & Shahshahani 1994), Var((tr Q)²) -> 2. Each sample mean must be within 4 standard
    errors (about 6e-5 two-sided per check if the claim holds). Without the sign fix numpy's QR
    gives y_0 = Q[0, 0] < 0 always, which the first check catches."""
    d, S = 16, 2000
    mats = np.array([DenseRotation(seed=s).fit(d).matrix_ for s in range(S)], dtype=np.float64)
    y0 = mats[:, 0, 0]
    tr = np.trace(mats, axis1=1, axis2=2)
    assert abs(y0.mean()) < 4 * math.sqrt(1 / d / S)
    assert abs((y0**2).mean() - 1 / d) < 4 * math.sqrt(2 * (d - 1) / (d**2 * (d + 2)) / S)
    assert abs(tr.mean()) < 4 * math.sqrt(1 / S)
    assert abs((tr**2).mean() - 1) < 4 * math.sqrt(2 / S)


# -- block preconditioner facts (spec §5, §8) ---------------------------------------------


@pytest.mark.parametrize(
    ("d", "block_dim"), [(1, 32), (7, 8), (8, 8), (100, 32), (384, 32), (768, 64), (1000, 384)]
)
def test_block_counts_and_sizes(d, block_dim):
    t = BlockPreconditioner(block_dim=block_dim).fit(d)
    b = min(d, block_dim)
    assert t.block_dim_ == b
    assert len(t.block_sizes_) == math.ceil(d / b)
    assert sum(t.block_sizes_) == d
    if d % b:
        assert t.block_sizes_[-1] == d % b
        assert t.remainder_block_.shape == (d % b, d % b)
    else:
        assert t.remainder_block_.shape == (0, 0)
    assert t.blocks_.shape == (d // b, b, b)
    assert np.array_equal(np.sort(t.permutation_), np.arange(d))
    off = 0
    for s, B in zip(t.block_sizes_, [*t.blocks_, t.remainder_block_], strict=False):
        assert np.all(np.diff(t.permutation_[off : off + s]) > 0)  # ascending within a block
        B64 = B.astype(np.float64)
        assert np.abs(B64 @ B64.T - np.eye(s)).max() < tol(s)  # orthonormal rows
        off += s


@pytest.mark.parametrize(("d", "block_dim"), [(3, 8), (100, 32), (768, 32), (1000, 384)])
def test_block_matches_reference(d, block_dim):
    t = BlockPreconditioner(block_dim=block_dim, seed=9).fit(d)
    M = block_preconditioner_reference(d, block_dim, seed=9)
    assert np.abs(block_matrix(t.blocks_, t.remainder_block_, t.permutation_) - M).max() < tol(d)
    X = gaussian(16, d)
    scale = np.linalg.norm(X.astype(np.float64), axis=1, keepdims=True)
    assert_within(np.abs(t.transform(X) - X @ M.T), tol(d) * scale)
    assert_within(np.abs(t.inverse_transform(X) - X @ M), tol(d) * scale)


def test_gram_schmidt_rows_orthonormal_and_keeps_zero_rows():
    G = np.random.default_rng(0).standard_normal((6, 6))
    Q = gram_schmidt_rows(G)
    np.testing.assert_allclose(Q @ Q.T, np.eye(6), atol=1e-12)
    Q0 = gram_schmidt_rows(np.zeros((3, 3)))
    assert np.array_equal(Q0, np.zeros((3, 3)))


@pytest.mark.parametrize("block_dim", [7, 385, 0, -1])
def test_block_dim_bounds(block_dim):
    with pytest.raises(ValueError, match="block_dim"):
        BlockPreconditioner(block_dim=block_dim).fit(64)


# -- state round trip ---------------------------------------------------------------------


@pytest.mark.parametrize("d", [1, 7, 65, 384])
@pytest.mark.parametrize("name", NAMES)
def test_state_round_trip(name, d):
    t = fitted(name, d)
    params, arrays = t.get_state()
    params = json.loads(json.dumps(params))  # JSON-able and survives a trip through JSON
    assert params["name"] == name and params["dim"] == d
    arrays = {k: np.array(v) for k, v in arrays.items()}
    t2 = transform_from_state(params, arrays)
    assert type(t2) is type(t)
    X = gaussian(20, d)
    np.testing.assert_array_equal(t2.transform(X), t.transform(X))
    np.testing.assert_array_equal(t2.inverse_transform(X), t.inverse_transform(X))
    assert t2.fingerprint() == t.fingerprint()
    assert len(t.fingerprint()) == 16


def test_fingerprint_depends_on_state():
    prints = {make_transform(n, 64, seed=s).fingerprint() for n in NAMES for s in (1, 2)}
    assert len(prints) == 2 * len(NAMES)


def test_hadamard_state_is_bits():
    _, arrays = HadamardRotation(seed=0).fit(100).get_state()
    assert arrays["sign_bits"].dtype == np.uint8 and arrays["sign_bits"].shape == (4, 13)


def test_from_state_rejects_bad_input():
    params, arrays = fitted("block", 100).get_state()
    bad = dict(arrays, permutation=np.zeros(100, np.int32))
    with pytest.raises(ValueError, match="permutation"):
        transform_from_state(params, bad)
    with pytest.raises(ValueError, match="shape"):
        transform_from_state(params, dict(arrays, blocks=arrays["blocks"][:1]))
    with pytest.raises(ValueError, match="missing"):
        transform_from_state(params, {})
    with pytest.raises(ValueError, match="name"):
        transform_from_state(dict(params, name="nope"), arrays)
    with pytest.raises(ValueError, match="unknown parameters"):
        transform_from_state(dict(params, rounds=4), arrays)
    with pytest.raises(ValueError, match="expected 'dense'"):
        DenseRotation.from_state(params, arrays)


# -- inputs, outputs and errors -----------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_input_not_modified_and_output_is_new(name):
    d = 65
    t = fitted(name, d)
    X = gaussian(6, d)
    X_copy = X.copy()
    for f in (t.transform, t.inverse_transform):
        Y = f(X)
        np.testing.assert_array_equal(X, X_copy)
        assert Y.dtype == np.float32 and Y.flags.c_contiguous and Y.shape == X.shape
        assert not np.shares_memory(X, Y)


@pytest.mark.parametrize("name", NAMES)
def test_accepts_1d_float64_fortran_and_empty(name):
    d = 9
    t = fitted(name, d)
    X = gaussian(5, d)
    want = t.transform(X)
    np.testing.assert_array_equal(t.transform(np.asfortranarray(X)), want)
    np.testing.assert_allclose(t.transform(X.astype(np.float64)), want, atol=tol(d) * 10)
    one = t.transform(X[2])
    assert one.shape == (d,)
    # BLAS may round a single row (gemv) differently from a batch (gemm)
    assert_within(np.abs(one - want[2]), tol(d) * np.linalg.norm(X[2]))
    assert t.transform(np.empty((0, d))).shape == (0, d)


@pytest.mark.parametrize("name", NAMES)
def test_errors(name):
    cls = TRANSFORMS[name]
    with pytest.raises(ValueError, match="not fitted"):
        cls().transform(np.zeros(4))
    with pytest.raises(ValueError, match="not fitted"):
        cls().get_state()
    with pytest.raises(ValueError, match="dimension"):
        cls().fit()
    t = fitted(name, 8)
    for bad in (np.zeros(7), np.zeros((2, 9)), np.zeros((2, 2, 8)), np.float32(1.0)):
        with pytest.raises(ValueError, match=r"\(n, 8\)"):
            t.transform(bad)
        with pytest.raises(ValueError, match=r"\(n, 8\)"):
            t.inverse_transform(bad)
    with pytest.raises(TypeError, match="dtype"):
        t.transform(np.zeros(8, dtype=complex))
    with pytest.raises(ValueError, match="dim=8"):
        cls(8).fit(9)
    with pytest.raises(ValueError, match="dim"):
        cls().fit(0)
    with pytest.raises(TypeError, match="dim"):
        cls().fit(8.0)
    with pytest.raises(ValueError, match="seed"):
        cls(seed=-1).fit(8)


def test_make_transform():
    assert make_transform(None, 10) is None
    assert make_transform(False, 10) is None
    assert isinstance(make_transform(True, 10), BlockPreconditioner)
    for name, cls in TRANSFORMS.items():
        t = make_transform(name.upper(), 10, seed=1)
        assert isinstance(t, cls) and t.is_fitted and t.dim_ == 10 and t.seed == 1
    unfitted = HadamardRotation(seed=2)
    assert make_transform(unfitted, 12) is unfitted and unfitted.dim_ == 12
    assert make_transform(unfitted, 12) is unfitted
    with pytest.raises(ValueError, match="fitted for dim=12"):
        make_transform(unfitted, 13)
    with pytest.raises(ValueError, match="unknown transform"):
        make_transform("qr", 10)
    with pytest.raises(TypeError, match="transform spec"):
        make_transform(3, 10)


def test_repr_lists_params():
    assert (
        repr(BlockPreconditioner(block_dim=16))
        == "BlockPreconditioner(dim=None, seed=42, block_dim=16)"
    )
