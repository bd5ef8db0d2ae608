"""RaBitQ in the IVF: the fused per-pair query kernel against its NumPy reference, and IVF
searches over RaBitQ codes against a brute-force reference of the same estimates."""

from __future__ import annotations

import numpy as np
import pytest
from reference import rabitq as ref
from reference.scoring import estimate_reference, int_dot

import bbqlib
from bbqlib._kernels.rabitq_query import rabitq_query_pairs
from bbqlib.encoding import padded_dim
from bbqlib.index.ivf.scan import uses_lut
from bbqlib.packing import pack_planes, unpack_planes
from bbqlib.quantizers.rabitq.codes import grid_codes


def _pairs_data(d: int, seed: int):
    """Queries and centres with adversarial rows: a query equal to a centre (zero residual),
    a constant residual, huge and tiny coordinates, exact half-step ties."""
    rng = np.random.default_rng(seed)
    Q = rng.normal(size=(30, d)).astype(np.float32)
    C = rng.normal(size=(7, d)).astype(np.float32)
    C[1] = Q[2]  # zero residual: step 0, codes 0
    C[2] = Q[3] - np.float32(0.25)  # constant residual
    Q[4] *= np.float32(1e30)
    Q[5] *= np.float32(1e-30)
    Q[6] = np.round(Q[6] * 15) / 15  # values on a grid: rounding ties
    C[3] = 0.0
    pq = np.concatenate([rng.integers(0, 30, 80), [2, 3, 4, 5, 6, 6]])
    pl = np.concatenate([rng.integers(0, 7, 80), [1, 2, 0, 5, 3, 0]])
    return Q, C, pq, pl


def _kernel(Q, C, pq, pl, qbits, is_l2, planes, width):
    codes = np.empty((len(pq), width), dtype=np.uint8)
    factors = np.empty((len(pq), 4))
    rabitq_query_pairs(Q, C, pq.astype(np.int64), pl.astype(np.int64), qbits, is_l2, planes,
                       codes, factors)  # fmt: skip
    return codes, factors


@pytest.mark.parametrize("d", [1, 100, 384])
@pytest.mark.parametrize("qbits", [4, 7, 8])
@pytest.mark.parametrize("is_l2", [False, True])
def test_query_pairs_kernel_matches_reference(d, qbits, is_l2):
    Q, C, pq, pl = _pairs_data(d, d * 10 + qbits)
    codes_ref, f_ref = ref.query_pairs(Q, C, pq, pl, qbits, is_l2)
    width = padded_dim(d)
    codes, f = _kernel(Q, C, pq, pl, qbits, is_l2, 0, width + 8)
    np.testing.assert_array_equal(codes[:, :d], codes_ref)
    assert not codes[:, d:].any()
    np.testing.assert_array_equal(f, f_ref)  # the same sums in the same order: exact
    planes, _ = _kernel(Q, C, pq, pl, qbits, is_l2, qbits, qbits * width // 8)
    np.testing.assert_array_equal(planes, pack_planes(codes_ref.astype(np.uint8), qbits))
    assert not codes_ref[80].any() and f_ref[80, 1] == 0.0  # the zero residual


@pytest.mark.parametrize("is_l2", [False, True])
def test_query_pairs_kernel_keeps_grid_codes(is_l2):
    """Codes, ``a_y``, ``l_y`` and ``ΣY`` are bit for bit NumPy's ``grid_codes`` (the flat
    path's query quantization); ``add_y`` is within the float64 summation error."""
    d = 384
    Q, C, pq, pl = _pairs_data(d, 5)
    Q64, C64 = Q[pq].astype(np.float64), C[pl].astype(np.float64)
    y = (Q64 - C64).astype(np.float32)
    f_np = np.empty((len(y), 4))
    codes_np, _ = grid_codes(y.astype(np.float64), 4, f_np)
    codes, f = _kernel(Q, C, pq, pl, 4, is_l2, 0, d)
    np.testing.assert_array_equal(codes, codes_np)
    np.testing.assert_array_equal(f[:, :3], f_np[:, :3])
    terms = np.abs(y.astype(np.float64)) ** 2 if is_l2 else np.abs(Q64 * C64)
    add = np.einsum("ij,ij->i", y, y, dtype=np.float64) if is_l2 else (Q64 * C64).sum(1)
    bound = d * np.finfo(np.float64).eps * terms.sum(axis=1)
    assert (np.abs(f[:, 3] - add) <= bound).all()


def test_quantizer_query_pairs_layouts(monkeypatch):
    """``query_pairs`` serves both scans: padded bytes (lookup tables) and plane words."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(500, 72)).astype(np.float32)
    q = bbqlib.RaBitQQuantizer(bits=2, query_bits=4, similarity="euclidean", seed=0).fit(X)
    Qt = q.transform_rows(X[:9])
    C = q.transform_rows(X[100:104])
    pq, pl = np.repeat(np.arange(9), 4), np.tile(np.arange(4), 9)
    codes_ref, f_ref = ref.query_pairs(Qt, C, pq, pl, 4, True)
    data, f = q.query_pairs(Qt, C, pq, pl, lut=True)
    assert data.dtype == np.uint8 and data.shape == (36, padded_dim(72))
    np.testing.assert_array_equal(data[:, :72], codes_ref)
    np.testing.assert_array_equal(f, f_ref)
    words, f2 = q.query_pairs(Qt, C, pq, pl, lut=False)
    assert words.dtype == np.uint64
    got = unpack_planes(words.view(np.uint8), 4, 72)
    np.testing.assert_array_equal(got, codes_ref)
    np.testing.assert_array_equal(f2, f_ref)


def _brute_force(index, Q, k):
    """Top ``k`` ids and raw estimates over every posting entry, from the reference pieces:
    each entry scored with its own list's query codes (best SOAR copy per id)."""
    q = index.quantizer
    is_l2 = q.similarity_.is_distance
    post = index._postings
    d = q.dim_
    qbits = q.encoding_.query_bits
    Qt = q.transform_rows(q._validated(Q, "Q", allow_1d=True))
    entry_list = np.repeat(np.arange(post.n_lists), post.sizes)
    X = unpack_planes(np.asarray(post.codes), q.encoding_.doc_bits, d)
    df = np.asarray(post.factors, np.float64)
    keys = np.full((len(Q), index.ntotal), -np.inf)
    for j in range(post.n_lists):
        rows = slice(post.start[j], post.start[j + 1])
        pq = np.arange(len(Q))
        Y, qf = ref.query_pairs(Qt, index._C, pq, np.full(len(Q), j), qbits, is_l2)
        raw = estimate_reference(qf, df[rows], int_dot(Y, X[rows]), d, index._list_cc[j], is_l2)
        key = -raw if is_l2 else raw
        ids = np.asarray(post.ids[rows])
        for t, i in enumerate(ids):
            keys[:, i] = np.maximum(keys[:, i], key[:, t])
    assert entry_list.size == len(post)
    top = np.argsort(-keys, axis=1, kind="stable")[:, :k]
    vals = np.take_along_axis(keys, top, axis=1)
    return top, (-vals if is_l2 else vals)


@pytest.mark.parametrize(("similarity", "qbits"), [("euclidean", 4), ("cosine", 4), ("cosine", 8)])
def test_ivf_full_visit_equals_brute_force_estimates(similarity, qbits, monkeypatch):
    rng = np.random.default_rng(11)
    centres = rng.normal(size=(12, 48)) * 3
    X = (centres[rng.integers(0, 12, 1500)] + rng.normal(size=(1500, 48))).astype(np.float32)
    Q = (centres[rng.integers(0, 12, 12)] + rng.normal(size=(12, 48))).astype(np.float32)
    rq = bbqlib.RaBitQQuantizer(bits=2, query_bits=qbits, similarity=similarity, seed=0)
    index = bbqlib.IVFIndex(rq, cluster_size=64, seed=1)
    index.add(X)
    ids_ref, vals_ref = _brute_force(index, Q, 10)
    runs = {}
    for name in ("lut", "popcount"):
        if name == "popcount":
            monkeypatch.setenv("BBQLIB_NO_AVX2", "1")
        elif not uses_lut(index.encoding_):
            continue
        runs[name] = index.search(Q, 10, visit_percentage=100.0, rerank=False)
    for vals, ids in runs.values():
        np.testing.assert_array_equal(ids, ids_ref)
        np.testing.assert_allclose(vals, vals_ref, rtol=1e-5, atol=1e-5)
    if len(runs) == 2:
        np.testing.assert_array_equal(runs["lut"][0], runs["popcount"][0])
