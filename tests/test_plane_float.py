"""Float query × bit-plane doc dots (bbqlib._kernels.plane_float) against the NumPy twin.

The kernel fixes its summation order, so it must equal ``reference.plane_float`` bit for bit,
whether it scores one query or several at once, and through every scorer that reads plane
docs with float queries (dense estimates, top-k scans, candidate ids, posting lists).
"""

from __future__ import annotations

import numpy as np
import pytest
from numba import njit
from reference.plane_float import plane_float_dot as ref_dot

from bbqlib._kernels import candidates as KC
from bbqlib._kernels import ivf as KI
from bbqlib._kernels import scoring as KS
from bbqlib._kernels.plane_float import pad_query, plane_float_dot, plane_float_dots
from bbqlib.packing import pack_planes


@njit(cache=True)
def _dots(y, packed, planes, out):
    qpad = np.empty(packed.shape[1] // planes * 8, dtype=np.float32)
    pad_query(y, qpad)
    for i in range(packed.shape[0]):
        out[i] = plane_float_dot(qpad, packed[i], planes, packed.shape[1] // planes)


@njit(cache=True)
def _dots3(ys, packed, planes, out):
    plane_bytes = packed.shape[1] // planes
    qa = np.empty(plane_bytes * 8, dtype=np.float32)
    qb = np.empty(plane_bytes * 8, dtype=np.float32)
    qc = np.empty(plane_bytes * 8, dtype=np.float32)
    pad_query(ys[0], qa)
    pad_query(ys[1], qb)
    pad_query(ys[2], qc)
    for i in range(packed.shape[0]):
        out[0, i], out[1, i], out[2, i] = plane_float_dots((qa, qb, qc), (packed[i],), planes,
                                                           plane_bytes)  # fmt: skip


@njit(cache=True)
def _dots_rows(y, packed, planes, out):
    plane_bytes = packed.shape[1] // planes
    qpad = np.empty(plane_bytes * 8, dtype=np.float32)
    pad_query(y, qpad)
    for i in range(0, packed.shape[0] - 2, 3):
        out[i], out[i + 1], out[i + 2] = plane_float_dots(
            (qpad,), (packed[i], packed[i + 1], packed[i + 2]), planes, plane_bytes
        )


def _bound(y, X, planes):
    """γ_h Σ |y_i| X_i with the height of the kernel's summation tree (module docstring)."""
    words = -(-X.shape[1] // 64)
    h = planes * words + 6
    u = 2.0**-24
    return h * u / (1 - h * u) * (np.abs(y.astype(np.float64)) @ X.astype(np.float64).T)


def _check(y, X, planes):
    packed = pack_planes(X, planes)
    got = np.empty(len(X))
    _dots(y, packed, planes, got)
    want = np.array([ref_dot(y, row, planes) for row in packed])
    np.testing.assert_array_equal(got, want)
    exact = X.astype(np.float64) @ y.astype(np.float64)
    assert (np.abs(got - exact) <= _bound(y[None], X, planes)[0]).all()
    return got


@pytest.mark.parametrize("d", [1, 3, 8, 63, 64, 65, 127, 128, 129, 200, 384, 1000])
@pytest.mark.parametrize("planes", [1, 2, 3, 4, 5, 8])
def test_random_matches_reference(d, planes):
    g = np.random.default_rng(d * 10 + planes)
    X = g.integers(0, 1 << planes, size=(25, d)).astype(np.uint8)
    X[0], X[1] = 0, (1 << planes) - 1
    y = g.normal(size=d).astype(np.float32)
    got = _check(y, X, planes)
    assert got[0] == 0.0 and not np.signbit(got[0])
    # several queries at once: each the value of its own call
    ys = g.normal(size=(3, d)).astype(np.float32)
    out = np.empty((3, len(X)))
    _dots3(ys, pack_planes(X, planes), planes, out)
    for r in range(3):
        one = np.empty(len(X))
        _dots(ys[r], pack_planes(X, planes), planes, one)
        np.testing.assert_array_equal(out[r], one)
    # several docs at once (24 of the 25)
    rows = np.empty(len(X))
    _dots_rows(ys[0], pack_planes(X, planes), planes, rows)
    _dots(ys[0], pack_planes(X, planes), planes, out[0])
    np.testing.assert_array_equal(rows[:24], out[0, :24])


@pytest.mark.parametrize("planes", [1, 2, 4, 7])
def test_adversarial_queries(planes):
    g = np.random.default_rng(planes)
    d = 200
    X = g.integers(0, 1 << planes, size=(30, d)).astype(np.uint8)
    X[0] = (1 << planes) - 1
    cases = [
        np.full(d, -0.0, np.float32),  # signed zeros: the sums stay +0.0
        np.where(np.arange(d) % 2 == 0, 1e8, -1e8).astype(np.float32),  # cancellation
        np.r_[np.float32(3e38) / (1 << planes), np.zeros(d - 1, np.float32)].astype(np.float32),
        (g.normal(size=d) * np.logspace(-30, 30, d)).astype(np.float32),  # wide exponents
        np.full(d, 1e-45, np.float32),  # subnormals
    ]
    for y in cases:
        got = _check(y, X, planes)
        if not y.any():
            assert (got == 0.0).all() and not np.signbit(got).any()


def _scan_args(g, n, d, planes, nq):
    X = g.integers(0, 1 << planes, size=(n, d)).astype(np.uint8)
    packed = pack_planes(X, planes)
    df = np.c_[g.uniform(-0.3, 0, n), g.uniform(0.01, 0.2, n), X.sum(1), g.uniform(0, 2, n)]
    qv = g.normal(size=(nq, d)).astype(np.float32)
    qf = np.c_[np.zeros(nq), np.ones(nq), qv.sum(1, dtype=np.float64), g.uniform(0, 1, nq)]
    return packed, df.astype(np.float32), qv, qf


@pytest.mark.parametrize("nq", [1, 2, 5])
@pytest.mark.parametrize("is_l2", [False, True])
def test_scorers_agree(nq, is_l2):
    """Dense estimates, scans (one query or pairs of queries), candidate ids and posting
    lists all give each (query, doc) the same value."""
    g = np.random.default_rng(nq + 10 * is_l2)
    n, d, planes, cc = 700, 130, 2, 0.3
    packed, df, qv, qf = _scan_args(g, n, d, planes, nq)
    pb = packed.shape[1] // planes
    est = np.empty((nq, n))
    KS.estimate_float_planes(qv, qf, packed, df, planes, pb, d, cc, is_l2, est)
    dots = np.array([[ref_dot(q, row, planes) for row in packed] for q in qv])
    s = df[None, :, 0].astype(np.float64) * qf[:, 2, None] + df[None, :, 1] * dots
    want = (
        qf[:, 3, None] + df[None, :, 3] - 2.0 * s
        if is_l2
        else s + qf[:, 3, None] + df[None, :, 3] - cc
    )
    np.testing.assert_allclose(est, want, rtol=1e-12, atol=1e-9)
    key = -est if is_l2 else est
    # the scan: every query's heap holds the best keys, equal to the estimates
    k = 9
    keys = np.full((1, nq, k), -np.inf)
    ids = np.full((1, nq, k), KS.EMPTY_ID, dtype=np.int64)
    KS.scan_float_planes(qv, qf, packed, df, planes, pb, d, cc, is_l2, np.empty(0, np.uint8), 0,
                         keys, ids)  # fmt: skip
    for q in range(nq):
        order = np.lexsort((np.arange(n), -key[q]))[:k]
        got = np.argsort(-keys[0, q], kind="stable")
        np.testing.assert_array_equal(ids[0, q][got], order)
        np.testing.assert_array_equal(keys[0, q][got], key[q][order])
    # candidate ids
    cand = g.integers(-1, n, size=(nq, 40))
    for kern in (KC.score_ids_float, KC.score_ids_float_parallel):
        out = np.empty((nq, 40))
        kern(qv, qf, packed, df, planes, pb, d, cc, is_l2, cand, out)
        ok = cand >= 0
        np.testing.assert_array_equal(out[ok], est[np.nonzero(ok)[0], cand[ok]])
        assert np.isnan(out[~ok]).all()
    # posting lists: one list of all docs per query
    keys = np.full((nq, k), -np.inf)
    hids = np.full((nq, k), KS.EMPTY_ID, dtype=np.int64)
    KI.ivf_scan_float(qv, qf, np.zeros(nq, np.int64), np.arange(nq + 1), np.array([0, n]),
                      packed, df, np.arange(n), np.full(1, cc), planes, pb, d, is_l2,
                      np.empty(0, np.uint8), keys, hids)  # fmt: skip
    for q in range(nq):
        order = np.lexsort((np.arange(n), -key[q]))[:k]
        got = np.argsort(-keys[q], kind="stable")
        np.testing.assert_array_equal(hids[q][got], order)
        np.testing.assert_array_equal(keys[q][got], key[q][order])
