"""SAQ in an IVFIndex: the list-scan and centre-term kernels against the NumPy reference
(random and adversarial inputs), and IVF searches against a brute-force NumPy evaluation of
the same estimator (each entry's residual code against its list's centre)."""

from __future__ import annotations

import numpy as np
import pytest
from reference import saq as ref
from test_saq_kernels import _encode, _plan

import bbqlib
from bbqlib._kernels import saq as saq_kernels
from bbqlib._kernels import saq_ivf as saq_ivf_kernels
from bbqlib.index.ivf import storage as ST

DIMS, BITS = [32, 48, 16], [4, 2, 1]


def _rows(rng, n, scale):
    """Random rows with adversarial ones mixed in: zeros, constants, a one-hot, huge/tiny."""
    Y = rng.standard_normal((n, sum(DIMS))) * scale
    Y[0] = 0.0
    Y[1] = scale
    Y[2] = 0.0
    Y[2, 5] = 7.0 * scale
    Y[3] *= 1e4
    Y[4] *= 1e-4
    return Y.astype(np.float32)


def _tables(Qr):
    T = np.empty((len(Qr), sum(DIMS) // 8, 256), dtype=np.float32)
    saq_kernels.build_tables(np.ascontiguousarray(Qr, np.float32), T)
    starts = np.cumsum([0, *DIMS[:-1]])
    qconst = np.stack(
        [
            (2**b - 1) / 2 * Qr[:, p : p + d].sum(1, dtype=np.float64)
            for p, d, b in zip(starts, DIMS, BITS, strict=True)
        ],
        1,
    )
    return T, qconst


@pytest.mark.parametrize("scale", [1.0, 1e-3, 1e3])
def test_entry_totals_match_reference(scale):
    rng = np.random.default_rng(11)
    plan = _plan(DIMS, BITS)
    a = plan.arrays()
    codes, fac = _encode(_rows(rng, 30, scale), plan)
    centres = (rng.standard_normal((4, sum(DIMS))) * scale).astype(np.float32)
    centres[3] = 0.0
    lists = rng.integers(0, 4, 30)
    T, cconst = _tables(centres)
    out = np.empty(30)
    saq_ivf_kernels.entry_totals(T, cconst, lists, codes, fac, a["start"], a["dims"], a["bits"],
                    a["msb_off"], a["low_off"], out)  # fmt: skip
    want = ref.entry_totals(centres, lists, codes, fac[:, 1:4].astype(np.float64), DIMS, BITS)
    tol = 1e-5 * (np.abs(want).max() + 1e-30) + 1e-6 * scale * scale
    np.testing.assert_allclose(out, want, atol=tol)


@pytest.mark.parametrize("is_l2", [True, False])
@pytest.mark.parametrize("scale", [1.0, 1e-3, 1e3])
@pytest.mark.parametrize("masked", [False, True])
def test_ivf_scan_matches_reference(is_l2, scale, masked):
    rng = np.random.default_rng(int(is_l2) + 3 * int(masked) + 5)
    plan = _plan(DIMS, BITS)
    a = plan.arrays()
    sizes = np.array([0, 9, 14, 1, 21, 0, 6])  # empty lists included
    list_start = np.r_[0, np.cumsum(sizes)].astype(np.int64)
    E = int(list_start[-1])
    codes, fac = _encode(_rows(rng, E, scale), plan)
    fac[:, 0] = rng.standard_normal(E) * scale * scale
    # SOAR: ids 0..34, the first 16 entries' ids appear again in other lists
    ids = np.r_[np.arange(35), rng.choice(35, E - 35, replace=False)].astype(np.int32)
    rng.shuffle(ids)
    allowed = (rng.random(35) < 0.6).astype(np.uint8) if masked else np.empty(0, np.uint8)
    nq = 6
    Qr = (rng.standard_normal((nq, sum(DIMS))) * scale).astype(np.float32)
    Qr[1] = 0.0
    pairs = [rng.permutation(len(sizes))[: rng.integers(1, len(sizes) + 1)] for _ in range(nq)]
    pairs[4] = np.array([], dtype=np.int64)  # a query without pairs
    pair_list = np.concatenate(pairs).astype(np.int32)
    pair_start = np.r_[0, np.cumsum([len(p) for p in pairs])].astype(np.int64)
    pair_add = rng.standard_normal(len(pair_list)) * scale * scale
    T, qconst = _tables(Qr)
    heap = 8
    keys = np.full((nq, heap), -np.inf)
    hid = np.full((nq, heap), np.iinfo(np.int64).max, dtype=np.int64)
    saq_ivf_kernels.ivf_scan_saq(T, qconst, pair_add, pair_list, pair_start, list_start, codes,
                                 fac, ids, a["start"], a["dims"], a["bits"], a["msb_off"],
                                 a["low_off"], is_l2, allowed, keys, hid)  # fmt: skip
    want_k, want_i = ref.ivf_scan(Qr, pair_add, pair_list, pair_start, list_start, codes, fac,
                                  ids, DIMS, BITS, is_l2, allowed, heap)  # fmt: skip
    order = np.lexsort((hid, -keys), axis=1)
    got_k = np.take_along_axis(keys, order, 1)
    got_i = np.take_along_axis(hid, order, 1)
    got_i[~np.isfinite(got_k)] = -1
    np.testing.assert_array_equal(got_i, want_i)
    fin = np.isfinite(want_k)
    np.testing.assert_array_equal(np.isfinite(got_k), fin)
    tol = 1e-5 * (np.abs(want_k[fin]).max() if fin.any() else 1.0) + 1e-6 * scale * scale
    np.testing.assert_allclose(got_k[fin], want_k[fin], atol=tol)


# ------------------------------------------------------------------------ the IVF index
def _clustered(n=1200, d=40, nq=12, seed=0):
    rng = np.random.default_rng(seed)
    C = rng.standard_normal((12, d)) * 2.0
    X = (C[rng.integers(0, 12, n)] + rng.standard_normal((n, d))).astype(np.float32)
    Q = (C[rng.integers(0, 12, nq)] + rng.standard_normal((nq, d))).astype(np.float32)
    return X, Q


def _prepared(A, sim):
    return A / np.linalg.norm(A, axis=1, keepdims=True) if sim == "cosine" else A


def _brute_force(ix, X, Q, k):
    """Top ``k`` raw estimates per query over every posting entry: each entry's residual code
    scored against the residual query ``q - c`` of its own list (reference ``estimate``, with
    the centre terms from the float vectors), the best entry per id (SOAR)."""
    q = ix.quantizer
    sim = q.similarity_.value
    is_l2 = q.similarity_.is_distance
    plan = q.plan_
    dims = [s.dims for s in plan.segments]
    bits = [s.bits for s in plan.segments]
    S, Dc = len(dims), plan.coded_dims
    P = ix._postings
    codes, fac, ids = np.asarray(P.codes), np.asarray(P.factors), np.asarray(P.ids)
    Xr = q.rotate(_prepared(X, sim)).astype(np.float64)
    Qp = _prepared(Q, sim).astype(np.float64)
    Qr = q.rotate(Qp).astype(np.float64)
    C = np.asarray(ix._C, dtype=np.float64)
    Cr = q.rotate(ix._C).astype(np.float64)
    best = np.full((len(Q), len(X)), -np.inf)
    for j in range(P.n_lists):
        e = np.arange(P.start[j], P.start[j + 1])
        if e.size == 0:
            continue
        o = Xr[ids[e]] - Cr[j]
        add = (o * o).sum(1) if is_l2 else o @ Cr[j]
        y = (Qr - Cr[j])[:, :Dc]
        q_add = ((Qp - C[j]) ** 2).sum(1) if is_l2 else Qp @ C[j]
        raw = ref.estimate(y, codes[e], fac[e, 1 : 1 + S].astype(np.float64), add, q_add,
                           dims, bits, is_l2)  # fmt: skip
        key = -raw if is_l2 else raw
        best[:, ids[e]] = np.maximum(best[:, ids[e]], key)
    top = np.argsort(-best, axis=1, kind="stable")[:, :k]
    keys = np.take_along_axis(best, top, 1)
    return top, (-keys if is_l2 else keys)


@pytest.mark.parametrize(
    "sim,bits", [("euclidean", 2.0), ("cosine", 1.5), ("max_inner_product", 3.0)]
)
def test_ivf_search_equals_brute_force_estimator(sim, bits, tmp_path):
    X, Q = _clustered()
    ix = bbqlib.IVFIndex(bbqlib.SAQQuantizer(bits=bits, similarity=sim), cluster_size=100)
    ix.add(X)
    k = 10
    raw, got = ix.search(Q, k, visit_percentage=100, rerank=False)
    want, want_raw = _brute_force(ix, X, Q, k)
    overlap = np.mean([len(set(a) & set(b)) / k for a, b in zip(got, want, strict=True)])
    assert overlap >= 0.98, overlap
    same = got == want
    scale = np.abs(want_raw).max()
    np.testing.assert_allclose(raw[same], want_raw[same], atol=1e-4 * scale)
    # the 4 bytes of each factor column and the plan's code bytes per entry
    assert (
        ix.bytes_per_entry
        == ix.quantizer.plan_.code_bytes + 4 * (1 + 2 * len(ix.quantizer.plan_.segments)) + 4
    )
    # save / open: the same results, the plan in the header
    ix.save(tmp_path / "ix")
    back = bbqlib.IVFIndex.open(tmp_path / "ix")
    assert back.quantizer.plan_ == ix.quantizer.plan_
    raw2, got2 = back.search(Q, k, visit_percentage=100, rerank=False)
    np.testing.assert_array_equal(got2, got)
    np.testing.assert_array_equal(raw2, raw)
    manifest = ST._read_manifest(tmp_path / "ix")
    assert manifest["format_version"] == ST.FORMAT_VERSION


def test_ivf_add_delete_filter_and_rerank():
    X, Q = _clustered(seed=1)
    ix = bbqlib.IVFIndex(bbqlib.SAQQuantizer(bits=2.0, similarity="euclidean"), cluster_size=100)
    ix.add(X[:900])
    ix.add(X[900:])  # coded against the existing lists
    want, _ = _brute_force(ix, X, Q, 10)
    _, got = ix.search(Q, 10, visit_percentage=100, rerank=False)
    overlap = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, want, strict=True)])
    assert overlap >= 0.98
    # exact rerank over the float vectors finds the true neighbours
    true = np.argsort(((Q[:, None] - X[None]) ** 2).sum(-1), axis=1)[:, :10]
    _, rr = ix.search(Q, 10, visit_percentage=100, oversample=5)
    assert np.mean([len(set(a) & set(b)) / 10 for a, b in zip(rr, true, strict=True)]) >= 0.95
    ix.delete(np.arange(0, 1200, 2))
    allowed = np.arange(1, 1200, 4)
    _, f = ix.search(Q, 10, visit_percentage=100, filter=allowed)
    assert np.isin(f[f >= 0], allowed).all()
    _, d = ix.search(Q, 10, visit_percentage=100)
    assert (d[d >= 0] % 2 == 1).all()


def test_ivf_with_quantized_queries():
    X, Q = _clustered(seed=2)
    sim = "cosine"
    ix = bbqlib.IVFIndex(bbqlib.SAQQuantizer(bits=4.0, query_bits=8, similarity=sim),
                         cluster_size=100)  # fmt: skip
    ix.add(X)
    _, got = ix.search(Q, 10, visit_percentage=100, rerank=False)
    want, _ = _brute_force(ix, X, Q, 10)  # float queries
    overlap = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got, want, strict=True)])
    assert overlap >= 0.9
