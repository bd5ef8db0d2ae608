"""Bulk scoring kernels (bbqlib._kernels.scoring via bbqlib.search) against NumPy references.

Integer dot products must match exactly; float dots within a rounding bound that grows with
``d``; the top-k scan must return exactly the reference's full-sort top k (key desc, id asc),
for any thread count.
"""

from __future__ import annotations

import numpy as np
import pytest
from reference.scoring import (
    dequantized_dot,
    estimate_reference,
    int_dot,
    plane_popcount_dot,
    topk_reference,
)

from bbqlib._kernels import scoring as KS
from bbqlib.encoding import ENCODINGS
from bbqlib.layouts.codes import DocCodes, QueryCodes
from bbqlib.layouts.scan import QUERY_BATCH, estimate_raw
from bbqlib.layouts.scan import topk_keys as topk_raw
from bbqlib.packing import pack_planes, plane_words
from bbqlib.search.rerank import exact_values

EPS64 = float(np.finfo(np.float64).eps)
IDENTITY = np.array([0.0, 1.0, 0.0, 0.0])  # (a, l, Σ, add): raw = S = <X, Y> exactly


# ----------------------------------------------------------------------------- builders
def _readonly(a: np.ndarray) -> np.ndarray:
    # Encoded codes are read-only in bbqlib (EncodedVectors, memory maps); numba compiles a
    # separate specialization per writeability, so match it and share the compiled kernels.
    a.flags.writeable = False
    return a


def plane_row(planes: int):
    """A registry row whose docs are ``planes`` bit planes (OSQ up to 6, RaBitQ above)."""
    return ENCODINGS[("osq" if planes <= 6 else "rabitq", planes, 4)]


def plane_docs(X, planes, factors=None, *, dim=None, cc=0.0, is_l2=False) -> DocCodes:
    n = X.shape[0]
    f = np.tile(IDENTITY, (n, 1)) if factors is None else factors
    return DocCodes(
        plane_row(planes),
        _readonly(plane_words(pack_planes(X, planes))),
        np.ascontiguousarray(f, np.float32),
        X.shape[1] if dim is None else dim,
        cc,
        is_l2,
    )


def byte_docs(X, factors=None, *, cc=0.0, is_l2=False) -> DocCodes:
    f = np.tile(IDENTITY, (X.shape[0], 1)) if factors is None else factors
    return DocCodes(
        ENCODINGS[("osq", 8, 8)],
        _readonly(np.array(X, np.uint8)),
        np.ascontiguousarray(f, np.float32),
        X.shape[1],
        cc,
        is_l2,
    )


def plane_queries(Y, planes, factors=None) -> QueryCodes:
    f = np.tile(IDENTITY, (Y.shape[0], 1)) if factors is None else factors
    return QueryCodes(
        "planes", plane_words(pack_planes(Y, planes)), np.asarray(f, np.float64), planes
    )


def byte_queries(Y, factors=None) -> QueryCodes:
    f = np.tile(IDENTITY, (Y.shape[0], 1)) if factors is None else factors
    return QueryCodes("bytes", np.ascontiguousarray(Y, np.uint8), np.asarray(f, np.float64))


def float_queries(y, factors=None) -> QueryCodes:
    f = np.tile(IDENTITY, (y.shape[0], 1)) if factors is None else factors
    return QueryCodes("float", np.ascontiguousarray(y, np.float32), np.asarray(f, np.float64))


def random_factors(g, n, *, dtype):
    """Plausible OSQ factor rows (a, l, Σ, add)."""
    f = np.empty((n, 4))
    f[:, 0] = g.uniform(-0.3, -0.05, n)
    f[:, 1] = g.uniform(0.01, 0.2, n)
    f[:, 2] = g.integers(0, 500, n)
    f[:, 3] = g.uniform(0.0, 2.0, n)
    return f.astype(dtype)


def codes(g, n, d, bits):
    return g.integers(0, 1 << bits, size=(n, d)).astype(np.uint8)


# ----------------------------------------------------------------------------- integer dots
@pytest.mark.parametrize("d", [1, 3, 63, 64, 65, 127, 384])
@pytest.mark.parametrize("dp", [1, 2, 3, 4, 5, 6])
@pytest.mark.parametrize("qp", [4, 7, 8])
def test_plane_dots_exact(d, dp, qp):
    g = np.random.default_rng(d * 100 + dp * 10 + qp)
    X, Y = codes(g, 40, d, dp), codes(g, 5, d, qp)
    X[0], Y[0] = 0, (1 << qp) - 1  # all-zero doc, all-ones query
    X[1] = (1 << dp) - 1
    expected = int_dot(Y, X)
    got = estimate_raw(plane_queries(Y, qp), plane_docs(X, dp))
    np.testing.assert_array_equal(got, expected)  # float64 holds these integers exactly
    # the spec's popcount formula on the same packed bytes, a second route
    np.testing.assert_array_equal(
        plane_popcount_dot(pack_planes(Y, qp), pack_planes(X, dp), qp, dp), expected
    )
    # the single-pair kernel
    qw, dw = plane_words(pack_planes(Y, qp)), plane_words(pack_planes(X, dp))
    words = dw.shape[1] // dp
    for i, j in [(0, 0), (0, 1), (4, 39), (2, 7)]:
        assert KS.plane_dot(qw[i], dw[j], qp, dp, words) == expected[i, j]


@pytest.mark.parametrize("d", [1, 3, 65, 384, 1000])
@pytest.mark.parametrize("bits", [7, 8])
def test_byte_dots_exact(d, bits):
    g = np.random.default_rng(d + bits)
    X, Y = codes(g, 30, d, bits), codes(g, 4, d, bits)
    X[0], Y[0] = 0, (1 << bits) - 1
    X[1] = (1 << bits) - 1
    got = estimate_raw(byte_queries(Y), byte_docs(X))
    np.testing.assert_array_equal(got, int_dot(Y, X))


def float_dot_bound(y, X, planes=0):
    """Rounding bound of a float32 dot product of length d, in any summation order:
    γ_d Σ|y_i x_i| with u = 2⁻²⁴ (Higham, Thm 3.1); the codes are exact in float32. Against
    ``planes`` bit planes the sum is a tree of height ``planes · words + 6``
    (:mod:`bbqlib._kernels.plane_float`), which can exceed a tiny d."""
    d = y.shape[1]
    if planes:
        words = -(-d // 64)
        d = max(d, planes * words + 6)
    u = 2.0**-24
    gamma = d * u / (1 - d * u)
    return gamma * (np.abs(y.astype(np.float64)) @ X.astype(np.float64).T)


@pytest.mark.parametrize("d", [1, 3, 65, 384, 1000])
def test_float_query_dots(d):
    g = np.random.default_rng(d)
    y = g.normal(size=(4, d)).astype(np.float32)
    # against byte docs
    X = codes(g, 30, d, 7)
    got = estimate_raw(float_queries(y), byte_docs(X))
    exact = y.astype(np.float64) @ X.astype(np.float64).T
    assert (np.abs(got - exact) <= float_dot_bound(y, X)).all()
    # against plane docs (dots straight from the planes)
    X4 = codes(g, 30, d, 4)
    got = estimate_raw(float_queries(y), plane_docs(X4, 4))
    exact = y.astype(np.float64) @ X4.astype(np.float64).T
    assert (np.abs(got - exact) <= float_dot_bound(y, X4, 4)).all()


# ----------------------------------------------------------------------------- estimates
LAYOUTS = [
    ("planes", 1, 4),
    ("planes", 2, 8),
    ("planes", 4, 7),
    ("planes", 3, 4),
    ("planes", 5, 7),
    ("planes", 6, 4),
    ("bytes", 7, 7),
    ("float", 1, None),
    ("float", 7, None),
]


@pytest.mark.parametrize("is_l2", [False, True])
@pytest.mark.parametrize(("layout", "dp", "qp"), LAYOUTS)
def test_estimates_follow_the_correction_algebra(layout, dp, qp, is_l2):
    g = np.random.default_rng(dp * 10 + (qp or 0) + is_l2)
    d, cc = 65, 0.37
    X = codes(g, 50, d, dp)
    df = random_factors(g, 50, dtype=np.float32)
    df[:, 2] = X.sum(axis=1)
    qf = random_factors(g, 6, dtype=np.float64)
    if dp >= 7:
        docs = byte_docs(X, df, cc=cc, is_l2=is_l2)
    else:
        docs = plane_docs(X, dp, df, cc=cc, is_l2=is_l2)
    if layout == "float":
        Yq = g.normal(size=(6, d)).astype(np.float32)
        qf[:, :3] = np.c_[np.zeros(6), np.ones(6), Yq.sum(axis=1, dtype=np.float64)]
        q = float_queries(Yq, qf)
        dot = Yq.astype(np.float64) @ X.T.astype(np.float64)
    else:
        Yq = codes(g, 6, d, qp)
        qf[:, 2] = Yq.sum(axis=1)
        q = byte_queries(Yq, qf) if layout == "bytes" else plane_queries(Yq, qp, qf)
        dot = int_dot(Yq, X)
    got = estimate_raw(q, docs)
    ref = estimate_reference(qf, df, dot, d, cc, is_l2)
    scale = np.abs(ref).max() + 1.0
    atol = 1e-12 * d * scale
    if layout == "float":  # float32 dots: their rounding bound, through the (linear) algebra
        slope = estimate_reference(qf, df, dot + 1.0, d, cc, is_l2) - ref
        atol = atol + np.abs(slope) * float_dot_bound(Yq, X)
    assert (np.abs(got - ref) <= atol).all()
    # the algebra reproduces the dot product of the dequantized vectors
    df64 = df.astype(np.float64)
    S = dequantized_dot(
        Yq.astype(np.float64), qf[:, 0], qf[:, 1], X.astype(np.float64), df64[:, 0], df64[:, 1]
    )
    add = qf[:, 3, None] + df64[None, :, 3]
    direct = add - 2 * S if is_l2 else S + add - cc
    assert (np.abs(got - direct) <= atol + 1e-12 * d * scale).all()


def test_true_dimension_not_padded_dimension():
    """Padding dims must not enter D·a_x·a_y: d = 65 is padded to 128 in the planes."""
    g = np.random.default_rng(0)
    X, Y = codes(g, 3, 65, 1), codes(g, 2, 65, 4)
    df = np.tile([0.5, 0.0, 0.0, 0.0], (3, 1))
    qf = np.tile([2.0, 0.0, 0.0, 0.0], (2, 1))
    got = estimate_raw(plane_queries(Y, 4, qf), plane_docs(X, 1, df))
    np.testing.assert_array_equal(got, np.full((2, 3), 65 * 0.5 * 2.0))


def test_float_plane_scan_offsets():
    """Float queries against plane docs: ids and masks follow the offsets."""
    g = np.random.default_rng(1)
    X = codes(g, 50, 33, 2)
    y = g.normal(size=(3, 33)).astype(np.float32)
    docs = plane_docs(X, 2)
    est = estimate_raw(float_queries(y), docs)
    exact = y.astype(np.float64) @ X.T.astype(np.float64)
    assert (np.abs(est - exact) <= float_dot_bound(y, X)).all()
    mask = g.uniform(size=50) < 0.6
    keys, ids = topk_raw(float_queries(y), docs, 9, allowed=mask, id_base=100)
    rk, ri = topk_reference(est, 9, allowed=mask, id_base=100)
    np.testing.assert_array_equal(ids, ri)
    np.testing.assert_array_equal(keys, rk)


# ----------------------------------------------------------------------------- top-k scans
def scan_case(kind, g, n, d, *, is_l2, duplicates):
    """Queries and docs of one layout, with quantized-looking factors; optional duplicate docs."""
    base = n // 4 if duplicates else n
    bits = {"planes": 1, "bytes": 7, "float": 4}[kind]
    X = codes(g, base, d, bits)
    df = random_factors(g, base, dtype=np.float32)
    df[:, 2] = X.sum(axis=1)
    if duplicates:  # every doc 4 times, shuffled: equal keys at different ids
        perm = g.permutation(n)
        X, df = np.tile(X, (4, 1))[perm], np.tile(df, (4, 1))[perm]
    qf = random_factors(g, 5, dtype=np.float64)
    if kind == "planes":
        Y = codes(g, 5, d, 4)
        qf[:, 2] = Y.sum(axis=1)
        return plane_queries(Y, 4, qf), plane_docs(X, 1, df, cc=0.2, is_l2=is_l2)
    if kind == "bytes":
        Y = codes(g, 5, d, 7)
        qf[:, 2] = Y.sum(axis=1)
        return byte_queries(Y, qf), byte_docs(X, df, cc=0.2, is_l2=is_l2)
    y = g.normal(size=(5, d)).astype(np.float32)
    qf[:, :3] = np.c_[np.zeros(5), np.ones(5), y.sum(axis=1)]
    return float_queries(y, qf), plane_docs(X, 4, df, cc=0.2, is_l2=is_l2)


def check_scan(q, docs, k, *, allowed=None, id_base=0):
    raw = estimate_raw(q, docs)
    keys_ref = -raw if docs.is_l2 else raw
    rk, ri = topk_reference(keys_ref, k, allowed=allowed, id_base=id_base)
    keys, ids = topk_raw(q, docs, k, allowed=allowed, id_base=id_base)
    assert keys.dtype == np.float64 and ids.dtype == np.int64 and ids.shape == (len(q), k)
    np.testing.assert_array_equal(ids, ri)
    np.testing.assert_array_equal(keys, rk)
    return keys, ids


@pytest.mark.parametrize("kind", ["planes", "bytes", "float"])
@pytest.mark.parametrize("is_l2", [False, True])
def test_scan_topk_with_ties_masks_and_threads(kind, is_l2, numba_threads):
    g = np.random.default_rng(["planes", "bytes", "float"].index(kind) * 2 + is_l2)
    n, d = 1200, 65  # > 2 blocks of 256, so two threads get a chunk each
    q, docs = scan_case(kind, g, n, d, is_l2=is_l2, duplicates=True)
    mask = g.uniform(size=n) < 0.7
    results = {}
    for threads in (1, 2):
        numba_threads(threads)
        for k in (1, 10, 37):
            keys, ids = check_scan(q, docs, k)
            # duplicates guarantee ties; the lower id must come first
            dup = (np.diff(keys, axis=1) == 0) & (ids[:, 1:] >= 0)
            assert (ids[:, 1:][dup] > ids[:, :-1][dup]).all()
            results[threads, k] = (keys, ids)
            results[threads, k, "mask"] = check_scan(q, docs, k, allowed=mask, id_base=5000)
    assert (np.diff(results[1, 37][0], axis=1) == 0).any(), "duplicate docs should tie"
    for key, (keys, ids) in results.items():
        if key[0] == 2:
            one = results[(1,) + key[1:]]
            np.testing.assert_array_equal(ids, one[1])
            np.testing.assert_array_equal(keys, one[0])


@pytest.mark.parametrize("kind", ["planes", "bytes", "float"])
def test_scan_pads_when_k_exceeds_n(kind):
    g = np.random.default_rng(2)
    q, docs = scan_case(kind, g, 5, 9, is_l2=False, duplicates=False)
    keys, ids = check_scan(q, docs, 8)
    assert (ids[:, 5:] == -1).all() and np.isneginf(keys[:, 5:]).all()
    assert sorted(ids[0, :5]) == list(range(5))
    # a mask leaving fewer than k, and one leaving none
    mask = np.array([False, True, False, False, True])
    keys, ids = check_scan(q, docs, 3, allowed=mask)
    assert (ids[:, 2] == -1).all()
    keys, ids = check_scan(q, docs, 3, allowed=np.zeros(5, bool))
    assert (ids == -1).all() and np.isneginf(keys).all()


def test_many_query_batches():
    """More queries than one kernel batch (QUERY_BATCH): results are stitched per batch."""
    g = np.random.default_rng(3)
    nq = QUERY_BATCH + 17
    X, Y = codes(g, 300, 40, 2), codes(g, nq, 40, 4)
    check_scan(plane_queries(Y, 4), plane_docs(X, 2), 6)


@pytest.mark.parametrize("d", [1, 65])
@pytest.mark.parametrize(("dp", "qp"), [(1, 4), (2, 4), (4, 4), (4, 8), (7, 7), (8, 8)])
def test_adversarial_codes(d, dp, qp):
    """All-zero docs, all-ones docs, a single doc; d = 1 and d = 65."""
    g = np.random.default_rng(d + dp)
    levels = (1 << dp) - 1
    X = np.vstack([np.zeros((3, d)), np.full((3, d), levels), codes(g, 4, d, dp)]).astype(np.uint8)
    Y = np.vstack([np.zeros((1, d)), np.full((1, d), (1 << qp) - 1), codes(g, 2, d, qp)])
    Y = Y.astype(np.uint8)
    if dp >= 7:
        q, docs = byte_queries(Y), byte_docs(X)
    else:
        q, docs = plane_queries(Y, qp), plane_docs(X, dp)
    np.testing.assert_array_equal(estimate_raw(q, docs), int_dot(Y, X))
    keys, ids = check_scan(q, docs, 4)
    # identical all-ones docs tie for the best place against a positive query: ids 3, 4, 5
    assert ids[1, :3].tolist() == [3, 4, 5]
    # a single doc
    one = DocCodes(docs.encoding, docs.data[3:4], docs.factors[3:4], d, 0.0, False)
    keys, ids = check_scan(q, one, 3)
    assert (ids[:, 0] == 0).all() and (ids[:, 1:] == -1).all()


def test_empty_docs():
    q = plane_queries(np.ones((2, 8), np.uint8), 4)
    docs = plane_docs(np.zeros((0, 8), np.uint8), 1)
    assert estimate_raw(q, docs).shape == (2, 0)
    keys, ids = topk_raw(q, docs, 3)
    assert (ids == -1).all() and np.isneginf(keys).all()


def test_layout_mismatch_is_an_error():
    q = byte_queries(np.ones((1, 8), np.uint8))
    docs = plane_docs(np.zeros((2, 8), np.uint8), 1)
    with pytest.raises(ValueError, match="layout"):
        estimate_raw(q, docs)


# ----------------------------------------------------------------------------- rerank kernel
@pytest.mark.parametrize("is_l2", [False, True])
def test_rerank_exact_matches_float64(is_l2):
    g = np.random.default_rng(4)
    V = g.normal(size=(40, 65)).astype(np.float32)
    Q = g.normal(size=(3, 65)).astype(np.float32)
    cand = g.integers(0, 40, size=(3, 6))
    cand[1, 4:] = -1
    out = exact_values(Q, V, cand, int(is_l2))
    Q64, V64 = Q.astype(np.float64), V.astype(np.float64)
    for r in range(3):
        for j, c in enumerate(cand[r]):
            if c < 0:
                assert np.isnan(out[r, j])
                continue
            terms = (Q64[r] - V64[c]) ** 2 if is_l2 else Q64[r] * V64[c]
            gamma = 65 * EPS64 / (1 - 65 * EPS64)  # float64 products and sums of 65 terms
            assert abs(out[r, j] - terms.sum()) <= gamma * np.abs(terms).sum()
