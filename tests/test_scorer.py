"""Candidate scorers (issue 6): q.scorer equals q.estimate at the ids, exact_scorer, kernels.

The candidate kernels reuse the bulk kernels' arithmetic, so estimates must agree bit for bit
with ``q.estimate``; the kernels are also checked against the NumPy references
(``reference.scoring``, ``reference.packing``) on odd dimensions.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest
from reference.scoring import estimate_reference, int_dot, topk_reference

from bbqlib import BBQQuantizer
from bbqlib._kernels import candidates as candidates_kernels
from bbqlib._kernels.scoring import EMPTY_ID
from bbqlib.integrations import CandidateScorer, check_ids, exact_scorer
from bbqlib.layouts.kernels import KERNELS
from bbqlib.packing import pack_planes
from bbqlib.search.topk import merge_topk
from bbqlib.similarity import Similarity, exact_raw

DIMS = [1, 3, 7, 63, 65, 127, 384]
SIMS = ["cosine", "euclidean", "max_inner_product"]


def _data(n, d, seed=0):
    g = np.random.default_rng(seed)
    X = g.normal(0.3, 1.0, size=(n, d)) * np.exp(g.uniform(-1, 1, size=(n, 1)))
    return X.astype(np.float32)


def _ids(n, m, seed=1):
    g = np.random.default_rng(seed)
    ids = g.integers(0, n, size=m)
    ids[:3] = [0, n - 1, 0]  # both ends and a repeat
    return ids


# ----------------------------------------------------------------------------- scorer == estimate
@pytest.mark.parametrize("d", DIMS)
@pytest.mark.parametrize("bits", [1, 2, 4, 7])
def test_scorer_equals_estimate(d, bits):
    X = _data(150, d, seed=d)
    Q = _data(3, d, seed=d + 100)
    ids = _ids(150, 90)
    for sim in SIMS:
        for query_bits in ("auto", None):
            q = BBQQuantizer(bits=bits, query_bits=query_bits, similarity=sim).fit(X)
            enc = q.encode(X)
            full = q.estimate(Q, enc)
            for r in range(len(Q)):
                got = q.scorer(Q[r], enc)(ids)
                assert got.dtype == np.float32 and got.shape == ids.shape
                np.testing.assert_array_equal(got, full[r, ids])


def test_scorer_bits8_and_query_bits():
    X = _data(120, 65, seed=3)
    ids = _ids(120, 50)
    for bits, query_bits in [(8, "auto"), (8, None), (1, 7), (2, 8), (4, 8), (7, 8)]:
        q = BBQQuantizer(bits=bits, query_bits=query_bits, similarity="euclidean").fit(X)
        enc = q.encode(X)
        np.testing.assert_array_equal(q.scorer(X[5], enc)(ids), q.estimate(X[5], enc)[0, ids])


def test_scorer_rabitq():
    rabitq = pytest.importorskip("bbqlib.quantizers.rabitq")
    X = _data(130, 63, seed=4)
    ids = _ids(130, 70)
    for bits, query_bits in [(1, "auto"), (3, None), (5, None), (2, 4)]:
        q = rabitq.RaBitQQuantizer(bits=bits, query_bits=query_bits, similarity="l2").fit(X)
        enc = q.encode(X)
        np.testing.assert_array_equal(q.scorer(X[9], enc)(ids), q.estimate(X[9], enc)[0, ids])


def test_scorer_id_dtypes_and_shapes():
    X = _data(64, 7)
    q = BBQQuantizer(bits=1, similarity="euclidean").fit(X)
    enc = q.encode(X)
    score = q.scorer(X[0], enc)
    ref = q.estimate(X[0], enc)[0]
    for ids in ([3, 1, 3], np.array([3, 1, 3], np.int32), np.array([3, 1, 3], np.uint64)):
        np.testing.assert_array_equal(score(ids), ref[[3, 1, 3]])
    assert score([]).shape == (0,)
    assert score(np.arange(64)[::2]).tolist() == ref[::2].tolist()  # strided input
    assert isinstance(score, CandidateScorer) and "n=64" in repr(score)


def test_scorer_bad_ids():
    X = _data(40, 9)
    q = BBQQuantizer(bits=2).fit(X)
    enc = q.encode(X)
    score = q.scorer(X[0], enc)
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 40\).*-1"):
        score([0, -1])
    with pytest.raises(ValueError, match=r"\[0, 40\).*40"):
        score([40])
    with pytest.raises(ValueError, match=r"\[0, 40\)"):
        score(np.array([2**64 - 1], np.uint64))  # wraps negative as int64
    with pytest.raises(TypeError, match="integer ids"):
        score([0.0, 1.0])
    with pytest.raises(ValueError, match="1-D"):
        score([[0, 1]])


def test_scorer_bad_query_and_codes():
    X = _data(40, 9)
    q = BBQQuantizer(bits=1).fit(X)
    enc = q.encode(X)
    with pytest.raises(ValueError, match="one vector"):
        q.scorer(X[:2], enc)
    with pytest.raises(ValueError, match="dimension"):
        q.scorer(X[0, :5], enc)
    other = BBQQuantizer(bits=1).fit(X + 1.0)
    with pytest.raises(ValueError, match="different fit"):
        other.scorer(X[0], enc)
    with pytest.raises(TypeError, match="EncodedVectors"):
        q.scorer(X[0], enc.codes)


def test_check_ids_contract():
    ids = np.array([4, 0, 2], np.int16)
    out = check_ids(ids, 5)
    assert out.dtype == np.int64 and out.tolist() == [4, 0, 2]
    assert ids.dtype == np.int16  # the caller's array is untouched


# ----------------------------------------------------------------------------- kernels vs reference
@pytest.mark.parametrize("d", DIMS)
def test_score_ids_kernels_match_reference(d):
    """Kernels against the textbook algebra on unpacked codes (float64, order-free tolerance)."""
    g = np.random.default_rng(d)
    n, nq, m = 50, 3, 40
    for planes, qp in [(1, 4), (2, 4), (4, 4), (1, 8)]:
        X = g.integers(0, 2**planes, size=(n, d)).astype(np.uint8)
        Y = g.integers(0, 2**qp, size=(nq, d)).astype(np.uint8)
        df = g.normal(size=(n, 4)).astype(np.float32)
        df[:, 2] = X.sum(axis=1)
        qf = g.normal(size=(nq, 4))
        qf[:, 2] = Y.sum(axis=1)
        ids = g.integers(-1, n, size=(nq, m))
        for is_l2 in (True, False):
            ref = estimate_reference(qf, df, int_dot(Y, X), d, 0.7, is_l2)
            want = np.take_along_axis(ref, np.maximum(ids, 0), axis=1)
            want[ids < 0] = np.nan
            dw = pack_planes(X, planes).view(np.uint64)
            qw = pack_planes(Y, qp).view(np.uint64)
            words = dw.shape[1] // planes
            for kern in (
                candidates_kernels.score_ids_planes,
                candidates_kernels.score_ids_planes_parallel,
            ):
                out = np.empty((nq, m), np.float32)
                kern(qw, qf, dw, df, qp, planes, words, d, 0.7, is_l2, ids, out)
                np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4 * d)
            for kern in (
                candidates_kernels.score_ids_bytes,
                candidates_kernels.score_ids_bytes_parallel,
            ):
                out = np.empty((nq, m), np.float32)
                kern(Y, qf, X, df, d, 0.7, is_l2, ids, out)
                np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4 * d)
            # float query: Y as floats, docs packed (planes) or as bytes
            qv = Y.astype(np.float32)
            packed = pack_planes(X, planes)
            for kern in (
                candidates_kernels.score_ids_float,
                candidates_kernels.score_ids_float_parallel,
            ):
                for codes, p in ((packed, planes), (X, 0)):
                    out = np.empty((nq, m), np.float32)
                    kern(qv, qf, codes, df, p, dw.shape[1] * 8 // planes, d, 0.7, is_l2, ids, out)
                    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-4 * d)


def test_id_range():
    g = np.random.default_rng(0)
    for n in (1, 2, 7, 1000):
        ids = g.integers(-5, 10**12, size=n)
        assert candidates_kernels.id_range(ids) == (ids.min(), ids.max())


@pytest.mark.parametrize("layout", ["planes", "bytes", "float-planes"])
def test_list_kernels_match_reference(layout):
    g = np.random.default_rng(5)
    n, d, nq, k, nlist = 300, 65, 4, 7, 9
    planes = 7 if layout == "bytes" else 2
    X = g.integers(0, 2**planes, size=(n, d)).astype(np.uint8)
    df = g.normal(size=(n, 4)).astype(np.float32)
    df[:, 2] = X.sum(axis=1)
    qf = g.normal(size=(nq, 4))
    row_ids = g.permutation(n).astype(np.int64) + 1000  # caller ids, unrelated to rows
    sizes = np.bincount(g.integers(0, nlist, size=n), minlength=nlist)
    sizes[3] = 0  # an empty list
    ptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    ptr[-1] = n
    probes = np.stack([g.permutation(nlist)[:4] for _ in range(nq)]).astype(np.int64)
    probes[0, 1] = -1  # skipped probe
    for is_l2 in (True, False):
        if layout == "float-planes":
            Y = g.normal(size=(nq, d)).astype(np.float32)
            qf[:, 2] = Y.sum(axis=1, dtype=np.float64)
            dot = Y.astype(np.float64) @ X.astype(np.float64).T
        else:
            qbits = 7 if layout == "bytes" else 4
            Y = g.integers(0, 2**qbits, size=(nq, d)).astype(np.uint8)
            qf[:, 2] = Y.sum(axis=1)
            dot = int_dot(Y, X)
        raw = estimate_reference(qf, df, dot, d, 0.3, is_l2)
        keys = -raw if is_l2 else raw
        tol = np.zeros(nq)
        if layout == "float-planes":  # float32 dots: their rounding bound, through the algebra
            u = 2.0**-24
            slope = estimate_reference(qf, df, dot + 1.0, d, 0.3, is_l2) - raw
            bound = d * u / (1 - d * u) * (np.abs(Y.astype(np.float64)) @ X.T.astype(np.float64))
            tol = (np.abs(slope) * bound).max(axis=1)
        out_k = np.full((nq, k), -np.inf)
        out_i = np.full((nq, k), EMPTY_ID, np.int64)
        # The IVF list kernels, one query per (query, list) pair, one centre for all lists.
        valid = probes >= 0
        pl = np.ascontiguousarray(probes[valid], dtype=np.int32)
        pq = np.repeat(np.arange(nq), valid.sum(axis=1))
        ps = np.concatenate([[0], np.cumsum(valid.sum(axis=1))]).astype(np.int64)
        cc = np.full(nlist, 0.3)
        tail = (np.empty(0, np.uint8), out_k, out_i)
        if layout == "planes":
            dw = pack_planes(X, planes).view(np.uint64)
            qw = pack_planes(Y, 4).view(np.uint64)
            words = dw.shape[1] // planes
            KERNELS["planes"].lists(
                qw[pq], qf[pq], pl, ps, ptr, dw, df, row_ids, cc, 4, planes, words, d, is_l2,
                *tail,
            )  # fmt: skip
        elif layout == "bytes":
            KERNELS["bytes"].lists(Y[pq], qf[pq], pl, ps, ptr, X, df, row_ids, cc, d, is_l2,
                                   *tail)  # fmt: skip
        else:
            packed = pack_planes(X, planes)
            pb = packed.shape[1] // planes
            KERNELS["float"].lists(
                Y[pq], qf[pq], pl, ps, ptr, packed, df, row_ids, cc, planes, pb, d, is_l2,
                *tail,
            )  # fmt: skip
        out_k, out_i = merge_topk(out_k, out_i, k)  # the kernel leaves heaps
        out_i[out_i == EMPTY_ID] = -1
        for q in range(nq):
            rows = np.concatenate([np.arange(ptr[p], ptr[p + 1]) for p in probes[q] if p >= 0])
            full = np.full((1, n + 1000), -np.inf)
            full[0, row_ids[rows]] = keys[q, rows]
            allowed = np.zeros(n + 1000, bool)
            allowed[row_ids[rows]] = True
            rk, ri = topk_reference(full, k, allowed=allowed)
            np.testing.assert_array_equal(out_i[q], ri[0])
            np.testing.assert_allclose(out_k[q], rk[0], rtol=1e-9, atol=1e-9 * d + tol[q])


# ----------------------------------------------------------------------------- usearch metric
def _records(codes_packed, factors, dim):
    n, cb = codes_packed.shape
    pad = -(-cb // 8) * 8
    rec = np.zeros((n, pad + candidates_kernels.RECORD_TAIL), np.uint8)
    rec[:, :cb] = codes_packed
    tail = np.zeros((n, candidates_kernels.RECORD_TAIL // 4), np.float32)
    tail[:, :4] = factors
    tail[:, 4] = np.sqrt(dim) * factors[:, 0].astype(np.float64)
    rec[:, pad:] = tail.view(np.uint8)
    return rec


@pytest.mark.parametrize("d", [1, 7, 65, 384])
@pytest.mark.parametrize("planes", [1, 2, 4, 7])
def test_doc_doc_metric_matches_reference(d, planes):
    g = np.random.default_rng(d * 10 + planes)
    n = 12
    X = g.integers(0, 2**planes, size=(n, d)).astype(np.uint8)
    df = g.normal(size=(n, 4)).astype(np.float32)
    df[:, 2] = X.sum(axis=1)
    kind = planes if planes <= 4 else 0
    rec = _records(pack_planes(X, planes) if kind else X, df, d)
    call = ctypes.CFUNCTYPE(
        ctypes.c_float, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64
    )
    for is_l2 in (True, False):
        f = call(candidates_kernels.doc_doc_metric(kind, is_l2).address)
        raw = estimate_reference(df.astype(np.float64), df, int_dot(X, X), d, 0.0, is_l2)
        want = raw if is_l2 else 1.0 - raw
        got = np.empty((n, n), np.float32)
        size = rec.shape[1]
        for i in range(n):
            for j in range(n):
                got[i, j] = f(rec[i].ctypes.data, rec[j].ctypes.data, size, size)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-4 * d)
        np.testing.assert_array_equal(got, got.T)  # bit-exact symmetry


def test_doc_doc_metric_rejects_layout():
    with pytest.raises(ValueError, match="planes"):
        candidates_kernels.doc_doc_metric(3, True)


# ----------------------------------------------------------------------------- exact scorer
@pytest.mark.parametrize("d", [1, 7, 65])
def test_exact_scorer(d, tmp_path):
    X = _data(80, d, seed=d)
    ids = _ids(80, 30)
    for sim in ["euclidean", "dot_product", "max_inner_product", "cosine"]:
        s = Similarity(sim)
        q = X[1] / np.linalg.norm(X[1]) if sim == "dot_product" else X[1]
        got = exact_scorer(q, X, sim)(ids)
        qq = q[None] / np.linalg.norm(q) if sim == "cosine" else q[None]
        xx = X / np.linalg.norm(X, axis=1, keepdims=True) if sim == "cosine" else X
        want = exact_raw(s, qq, xx)[0, ids]
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    # memory-mapped float16 vectors, read at the candidate rows only
    path = tmp_path / "v.npy"
    np.save(path, X.astype(np.float16))
    mm = np.load(path, mmap_mode="r")
    got = exact_scorer(X[2], mm, "l2")(ids)
    want = exact_raw(Similarity.EUCLIDEAN, X[2:3], mm.astype(np.float32))[0, ids]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_exact_scorer_does_not_modify_inputs():
    X = _data(10, 5)
    q = X[0] * 3
    before = q.copy()
    exact_scorer(q, X, "cosine")([0, 1])
    np.testing.assert_array_equal(q, before)


def test_exact_scorer_errors():
    X = _data(10, 5)
    with pytest.raises(ValueError, match="dimension"):
        exact_scorer(X[0, :4], X, "l2")
    with pytest.raises(ValueError, match="one vector"):
        exact_scorer(X[:2], X, "l2")
    with pytest.raises(TypeError, match="2-D float"):
        exact_scorer(X[0], X.astype(np.int32), "l2")
    with pytest.raises(ValueError, match="similarity"):
        exact_scorer(X[0], X, "hamming")
    with pytest.raises(ValueError, match=r"\[0, 10\)"):
        exact_scorer(X[0], X, "l2")([10])
