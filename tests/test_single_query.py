"""The single-query path (issue 14): one query per call gives the batch path's results.

Kernels of ``bbqlib._kernels.single`` against the NumPy references of
``tests/reference/single.py`` on random and adversarial inputs; then ``FlatIndex`` and
``IVFIndex`` searches of one query (``[d]`` or ``[1, d]``) against the same queries in a
batch, bit for bit, over similarities, widths, rerank and score kinds, ties, ``k`` beyond the
index, and the cases the fast path leaves to the batch path.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from reference.single import (
    best_k_reference,
    flat_one_reference,
    ivf_one_reference,
    plan_one_reference,
    plan_two_reference,
    prepare_reference,
)

import bbqlib
from bbqlib._kernels import fused as KF
from bbqlib._kernels import single as KO
from bbqlib._validation import MAX_SQ_NORM, UNIT_NORM_TOLERANCE, row_sq_norms
from bbqlib.encoding import padded_dim
from bbqlib.index.clustering.parents import ParentLevel
from bbqlib.index.ivf import one as single_ivf
from bbqlib.index.ivf import plan as P
from bbqlib.index.ivf import storage as ST
from bbqlib.index.one import rerank_finish
from bbqlib.packing import unpack_planes
from bbqlib.similarity import Similarity
from bbqlib.storage.blocks import row_bytes, row_crcs

SIMILARITIES = ["euclidean", "cosine", "dot_product", "max_inner_product"]


def _data(similarity, make_vectors, n=600, d=40, seed=0):
    kind = {"dot_product": "unit", "max_inner_product": "wide", "euclidean": "wide"}
    X = make_vectors(n + 20, d, kind=kind.get(similarity, "gaussian"), seed=seed)
    return X[:n], X[n:]


# ----------------------------------------------------------------------------- kernels
@pytest.mark.parametrize("cosine", [False, True])
def test_prepare_one_matches_reference(cosine, rng):
    rows = [
        rng.normal(size=70).astype(np.float32),
        np.zeros(33, np.float32),
        np.full(16, 3e38, np.float32),  # squares beyond float32, not float64
        np.array([1e-42, -1e-42, 0.0], np.float32),  # subnormals
        np.array([1.0, np.nan, 2.0], np.float32),
        np.array([np.inf, 0.0], np.float32),
    ]
    for x in rows:
        out = np.zeros_like(x)
        sq = KO.prepare_one(x, cosine, out)
        ref_sq, ref_out = prepare_reference(x, cosine)
        if np.isfinite(ref_sq):
            np.testing.assert_allclose(sq, ref_sq, rtol=1e-13)
            assert sq == row_sq_norms(x[None, :])[0]  # the batch check's arithmetic
        else:
            assert not np.isfinite(sq)
        if cosine and np.isfinite(sq) and sq > 0:
            np.testing.assert_allclose(out, ref_out, rtol=2e-7)
            norm = np.sqrt(row_sq_norms(x[None, :]))
            np.testing.assert_array_equal(out, (x / norm).astype(np.float32))


@pytest.mark.parametrize("is_distance", [False, True])
def test_best_k_matches_reference(is_distance, rng):
    for m, k in [(30, 10), (5, 10), (12, 12), (1, 3), (0, 4)]:
        raw = rng.integers(0, 4, size=m).astype(np.float64)  # many ties
        cand = rng.permutation(1000)[:m].astype(np.int64)
        cand[rng.random(m) < 0.2] = -1
        for pad in (np.inf, -np.inf):
            got_raw, got_rows = KO.best_k(raw, cand, is_distance, k, pad)
            ref_raw, ref_rows = best_k_reference(raw, cand, is_distance, k, pad)
            np.testing.assert_array_equal(got_rows[0], ref_rows)
            np.testing.assert_array_equal(got_raw[0], ref_raw)


def _flat_inputs(index):
    q = index.quantizer
    d = q._cached_doc_codes(index.codes)
    blocks, cols = d.lut_layout()
    return q, d, blocks, cols


@pytest.mark.parametrize("bits", [1, 2, 4])
@pytest.mark.parametrize("similarity", ["euclidean", "max_inner_product"])
def test_flat_lut_one_matches_reference(bits, similarity, make_vectors, rng):
    X, Q = _data(similarity, make_vectors, n=150, d=70, seed=bits)
    X[10:20] = X[0]  # ties
    index = bbqlib.FlatIndex(bits=bits, similarity=similarity)
    index.add(X)
    q, d, blocks, cols = _flat_inputs(index)
    assert q.scanner().flat_one(index._parts()[0]).kernel is KO.flat_lut_one
    doc_codes = d.unpacked(0, len(d))
    is_l2 = similarity == "euclidean"
    for i, k in [(0, 10), (1, 150), (2, 200)]:
        allowed = None if i != 1 else (rng.random(len(d)) < 0.5)
        mask = np.empty(0, np.uint8) if allowed is None else allowed.astype(np.uint8)
        x = Q[i][None, :]
        keys, rows = KO.flat_lut_one(
            x, q.centroid_, q.encoding_.query_bits, q.iters, q.lam, is_l2, padded_dim(70),
            blocks, cols, d.planes, d.words * 8, len(d), d.dim, d.centroid_dot, d.is_l2, mask, k,
        )  # fmt: skip
        ref_k, ref_i = flat_one_reference(
            x[0], q.centroid_, q.encoding_.query_bits, q.iters, q.lam, is_l2, doc_codes,
            d.factors, d.dim, d.centroid_dot, d.is_l2, allowed, k,
        )  # fmt: skip
        np.testing.assert_array_equal(rows, ref_i)
        np.testing.assert_array_equal(keys, ref_k)


def _ivf(similarity, make_vectors, n=900, d=24, seed=0, **kw):
    X, Q = _data(similarity, make_vectors, n=n, d=d, seed=seed)
    index = bbqlib.IVFIndex(bits=kw.pop("bits", 1), similarity=similarity, cluster_size=64, **kw)
    index.add(X)
    return index, X, Q


@pytest.mark.parametrize("similarity", ["euclidean", "cosine", "max_inner_product"])
def test_ivf_kernels_match_reference(similarity, make_vectors):
    index, _, Q = _ivf(similarity, make_vectors, seed=3)
    q = index.quantizer
    table = index._table
    assert not table.has_parents
    assert single_ivf._state(index)["kernel"] is KF.ivf_lut_fused
    is_l2 = similarity == "euclidean"
    by_distance = similarity != "max_inner_product"
    sizes = index._postings.sizes
    post = index._postings
    blocks, block_starts = post.lut_layout()
    dim = q.dim_
    doc_codes = unpack_planes(np.asarray(post.codes), q.encoding_.doc_planes, dim)
    for i, need in [(0, 100.0), (1, 400.0), (2, 1e9)]:
        x = q.transform_rows(q._validated(Q[i], "q", allow_1d=True))
        lists = KO.ivf_plan_one(
            x, table.g, table.gg, table.codes, table.factors, table.cc, sizes, 7, 5, 0.1, is_l2,
            by_distance or is_l2, need,
        )  # fmt: skip
        ref = plan_one_reference(
            x[0], table.g, table.gg, table.codes, table.factors, table.cc, sizes, is_l2,
            by_distance, need,
        )  # fmt: skip
        assert lists.tolist() == ref
        depth = 15
        keys, rows, entries = KO.ivf_lut_one(
            x, index._C, lists, q.encoding_.query_bits, q.lam, is_l2, padded_dim(dim),
            post.start, block_starts, blocks, post.factors, post.ids, index._list_cc,
            q.encoding_.doc_planes, padded_dim(dim) // 8, dim, np.empty(0, np.uint8),
            2 * depth, depth,
        )  # fmt: skip
        assert entries == int(sizes[lists].sum())
        ref_k, ref_i = ivf_one_reference(
            x[0], index._C, lists, q.encoding_.query_bits, q.lam, is_l2, post.start,
            doc_codes, post.factors, post.ids, index._list_cc, dim, depth,
        )  # fmt: skip
        # the kernel keeps a heap of 2 * depth entries (SOAR copies) before de-duplicating
        valid = ref_i >= 0
        np.testing.assert_array_equal(rows[: valid.sum()], ref_i[valid])
        np.testing.assert_array_equal(keys[: valid.sum()], ref_k[valid])


# ----------------------------------------------------------------------------- indexes
def _same(one, batch_row):
    np.testing.assert_array_equal(one[1][0], batch_row[1])
    np.testing.assert_array_equal(one[0][0], batch_row[0])


@pytest.mark.parametrize("similarity", SIMILARITIES)
@pytest.mark.parametrize("bits", [1, 4])
def test_flat_single_query_equals_batch(similarity, bits, make_vectors):
    X, Q = _data(similarity, make_vectors, n=500, d=40, seed=bits)
    X[100:110] = X[5]  # exact ties
    Q[3] = X[5]
    index = bbqlib.FlatIndex(bits=bits, similarity=similarity)
    index.add(X, ids=np.arange(len(X)) * 3 + 7)
    for kwargs in [{}, {"rerank": False}, {"scores": "similarity"}, {"oversample": 5}]:
        for k in (1, 10):
            batch = index.search(Q, k, **kwargs)
            for i in range(len(Q)):
                one = index.search(Q[i], k, **kwargs)
                _same(one, (batch[0][i], batch[1][i]))
                _same(index.search(Q[i : i + 1], k, **kwargs), (batch[0][i], batch[1][i]))


@pytest.mark.parametrize("similarity", ["euclidean", "cosine"])
def test_read_only_queries_take_the_one_query_path(similarity, make_vectors, tmp_path):
    # queries read from a file map are read-only: answered as writable ones, same results
    X, Q = _data(similarity, make_vectors, n=700, d=24, seed=4)
    np.save(tmp_path / "q.npy", Q)
    Qr = np.load(tmp_path / "q.npy", mmap_mode="r")
    assert not Qr.flags.writeable
    for index in (bbqlib.FlatIndex(similarity=similarity), bbqlib.IVFIndex(similarity=similarity)):
        index.add(X)
        batch = index.search(Q, 5)
        for i in range(3):
            _same(index.search(np.asarray(Qr[i]), 5), (batch[0][i], batch[1][i]))


@pytest.mark.parametrize("similarity", SIMILARITIES)
def test_ivf_single_query_equals_batch(similarity, make_vectors):
    index, X, Q = _ivf(similarity, make_vectors, n=1200, d=32, seed=5)
    for kwargs in [{}, {"visit_percentage": 3}, {"visit_percentage": 100, "rerank": False},
                   {"scores": "similarity", "oversample": 2}]:  # fmt: skip
        batch = index.search(Q, 10, **kwargs)
        for i in range(len(Q)):
            one = index.search(Q[i], 10, **kwargs)
            stats = index.last_search_stats
            _same(one, (batch[0][i], batch[1][i]))
            index.search(Q[i : i + 1].astype(np.float64), 10, **kwargs)  # the batch path
            assert index.last_search_stats == stats


def test_ivf_single_query_from_files_and_after_changes(make_vectors, tmp_path):
    index, X, Q = _ivf("cosine", make_vectors, n=900, d=24, seed=8, bits=2)
    index.save(tmp_path / "ivf")
    opened = bbqlib.IVFIndex.open(tmp_path / "ivf")
    batch = opened.search(Q, 5)
    for i in range(len(Q)):
        _same(opened.search(Q[i], 5), (batch[0][i], batch[1][i]))
    opened.add(make_vectors(200, 24, seed=9))  # a second vector segment: the batch path
    opened.delete([3, 4])
    batch = opened.search(Q, 5)
    for i in range(len(Q)):
        _same(opened.search(Q[i], 5), (batch[0][i], batch[1][i]))


def test_single_query_fallbacks_and_errors(make_vectors):
    X, Q = _data("cosine", make_vectors, n=300, d=16)
    flat = bbqlib.FlatIndex(bits=1, similarity="cosine")
    flat.add(X)
    flat.delete([0, 1])
    batch = flat.search(Q, 5)
    for q in (Q[0], Q[0].astype(np.float64), Q[0].tolist(), Q[:, :][0:1], np.asfortranarray(Q[:1])):
        _same(flat.search(q, 5), (batch[0][0], batch[1][0]))
    allowed = np.arange(2, 50)
    got, want = flat.search(Q[0], 5, filter=allowed), flat.search(Q[:1], 5, filter=allowed)
    _same(got, (want[0][0], want[1][0]))
    with pytest.raises(ValueError, match="zero vector"):
        flat.search(np.zeros(16, np.float32), 5)
    with pytest.raises(ValueError, match="NaN"):
        flat.search(np.full(16, np.nan, np.float32), 5)
    with pytest.raises(ValueError, match="dimension"):
        flat.search(np.ones(15, np.float32), 5)
    with pytest.raises(ValueError):
        flat.search(Q[0], 0)
    unit = bbqlib.FlatIndex(bits=1, similarity="dot_product")
    unit.add(X / np.linalg.norm(X, axis=1, keepdims=True))
    with pytest.raises(ValueError, match="unit-length"):
        unit.search(Q[0] * 2, 5)
    q = Q[0].copy()
    flat.search(q, 5)
    np.testing.assert_array_equal(q, Q[0])  # the caller's array is not written


def test_single_queries_from_two_threads(make_vectors):
    index, X, Q = _ivf("euclidean", make_vectors, n=900, d=24, seed=11)
    Q = np.concatenate([Q] * 5)
    batch = index.search(Q, 10)
    got = [None] * len(Q)

    def run(part):
        for i in part:
            got[i] = index.search(Q[i], 10)

    threads = [threading.Thread(target=run, args=(range(t, len(Q), 2),)) for t in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(len(Q)):
        _same(got[i], (batch[0][i], batch[1][i]))


def _parent_table(rng, K, d, is_l2, *, ties=False, per_parent=12):
    """A centroid table with parents over random groups of the ``K`` lists (some parents of
    one child; with ``ties`` duplicated centroids and parents: exact key ties)."""
    C = rng.normal(size=(K, d)).astype(np.float32) * rng.uniform(0.5, 2.0, size=(K, 1))
    if ties:
        C[1::3] = C[0::3][: C[1::3].shape[0]]  # every list beside a twin
    cuts = np.sort(rng.choice(np.arange(1, K), size=K // per_parent, replace=False))
    cuts[:3] = [1, 2, 3]  # three parents of one child
    offsets = np.concatenate([[0], np.unique(cuts), [K]]).astype(np.int64)
    order = rng.permutation(K).astype(np.int32)
    for p in range(offsets.size - 1):  # ascending ids within a parent, as parent_level's
        order[offsets[p] : offsets[p + 1]].sort()
    owner = np.repeat(np.arange(offsets.size - 1), np.diff(offsets))
    parents = np.zeros((offsets.size - 1, d), np.float32)
    np.add.at(parents, owner, C[order])
    parents /= np.diff(offsets)[:, None]
    if ties:
        parents[1] = parents[2]
    return P.centroid_table(C, is_l2, parents=ParentLevel(parents, order, offsets))


@pytest.mark.parametrize("similarity", ["euclidean", "cosine", "max_inner_product"])
@pytest.mark.parametrize("ties, per_parent", [(False, 12), (True, 12), (False, 4)])
def test_ivf_plan_two_matches_reference_and_batch_plan(similarity, ties, per_parent, rng):
    """The compiled two-level plan against its NumPy reference and ``plan_batch`` (random
    and adversarial tables: twins, parents of one child, empty lists, queries on a centroid
    or far away, budgets below one list, beyond the ranked lists, beyond everything; with
    4 lists per parent every list is ranked, ``walks_parents``)."""
    is_l2 = similarity == "euclidean"
    by_distance = similarity != "max_inner_product"
    K, d = 300, 12
    table = _parent_table(rng, K, d, is_l2, ties=ties, per_parent=per_parent)
    assert P.walks_parents(table) == (per_parent >= P.WALK_MIN_CHILDREN)
    sizes = rng.integers(0, 40, size=K).astype(np.int64)
    sizes[::7] = 0  # empty lists
    C = table.codes.astype(np.float32)  # any rows; queries near / on / far from centroids
    Q = np.concatenate([
        rng.normal(size=(6, d)),
        (table.parent_codes[:2].astype(np.float32) - 64.0) / 20.0,
        np.full((1, d), 40.0),  # far from everything
        C[:1] * 0.0 + 1e-3,
    ]).astype(np.float32)  # fmt: skip
    if similarity == "cosine":
        Q /= np.linalg.norm(Q, axis=1, keepdims=True)
    plan = (table.g, table.gg, table.codes, table.factors, table.cc, sizes, 7, 5, 0.1, is_l2,
            by_distance or is_l2)  # fmt: skip
    parents = single_ivf._parents(table, d)
    for ratio in (0.0005, 0.01, 0.1, 0.9, 5.0):
        need = max(ratio * sizes.sum(), 1.0)
        n_par = table.parent_codes.shape[0] if P.walks_parents(table) else 0
        want = P.lists_wanted(need, float(sizes.mean()), ratio, K, n_par)
        batch = P.plan_batch(Q, table, sizes, is_l2, by_distance, ratio, need, 4)
        for i in range(Q.shape[0]):
            q2 = Q[i : i + 1]
            lists = KO.ivf_plan_two(q2, *plan, need, *parents, want)
            if n_par:
                ref = plan_two_reference(Q[i], table, sizes, is_l2, by_distance, need, want)
            else:
                ref = plan_one_reference(Q[i], *plan[:6], is_l2, by_distance, need)
            assert lists.tolist() == ref, (ratio, i)
            mine = batch[0][batch[2][i] : batch[2][i + 1]]
            np.testing.assert_array_equal(lists, mine)
            for few in (1, 5, 40):  # small heaps; the budget beyond them: every list ranked
                if not n_par:
                    break
                lists = KO.ivf_plan_two(q2, *plan, need, *parents, few)
                ref = plan_two_reference(Q[i], table, sizes, is_l2, by_distance, need, few)
                assert lists.tolist() == ref, (ratio, i, few)
        # without parents: the one-level plan
        flat = KO.ivf_plan_two(Q[:1], *plan, need, *single_ivf._parents(P.centroid_table(
            table.codes.astype(np.float32), is_l2), d), want)  # fmt: skip
        assert flat.size >= 1


@pytest.mark.parametrize("similarity", ["euclidean", "cosine", "max_inner_product"])
def test_ivf_with_parent_centroids(similarity, make_vectors, monkeypatch):
    """More than 256 lists: parent centroids, planned in the one compiled call, results
    equal to the batch path's (whose plan is ``plan_batch``)."""
    kind = {"max_inner_product": "wide", "cosine": "clustered"}.get(similarity, "clustered")
    X = make_vectors(17_000, 8, kind=kind, seed=13)
    index = bbqlib.IVFIndex(bits=1, similarity=similarity, cluster_size=64)
    index.add(X)
    assert index._table.has_parents
    Q = np.concatenate([X[:12] + 0.01, make_vectors(6, 8, seed=14)])
    calls = []
    fused = KF.ivf_lut_fused

    def spy(*args):
        out = fused(*args)
        calls.append(out[0])
        return out

    monkeypatch.setattr(KF, "ivf_lut_fused", spy)
    for kwargs in [{}, {"visit_percentage": 0.1}, {"visit_percentage": 2, "rerank": False}]:
        batch = index.search(Q, 10, **kwargs)
        for i in range(len(Q)):
            _same(index.search(Q[i], 10, **kwargs), (batch[0][i], batch[1][i]))
            stats = index.last_search_stats
            index.search(Q[i : i + 1].astype(np.float64), 10, **kwargs)  # the batch path
            assert index.last_search_stats == stats
    assert calls == [0] * (3 * len(Q))


def _fused_args(
    index,
    x,
    need,
    depth,
    lists_ok=None,
    rows_ok=None,
    block_rows=2**62,
    row_crcs=None,
    list_crcs=None,
    rerank=True,
):
    """``(qp, args)`` of one call of the index's fused kernel, ``args`` ending with the
    outputs ``(raw, rows, out_lists, out_cands)``."""
    q = index.quantizer
    sim = q.similarity_
    state = single_ivf._state(index)
    cosine = sim is Similarity.COSINE
    qp = np.empty_like(x) if cosine else x.copy()
    checks = list(state["checks"])
    if lists_ok is not None:
        checks[0] = lists_ok
    if list_crcs is not None:
        checks[1] = list_crcs
    rows_ok = np.ones(1, dtype=bool) if rows_ok is None else rows_ok
    row_crcs = np.zeros(1, np.uint32) if row_crcs is None else row_crcs
    front = (cosine, sim is Similarity.DOT_PRODUCT, MAX_SQ_NORM, UNIT_NORM_TOLERANCE,
             *state["plan"], float(need), *state["parents"], 2**62, *checks)  # fmt: skip
    middle = (*state["middle"], np.empty(0, np.uint8), 2 * depth, depth)
    back = (state["vectors"], rerank, 10, -np.inf, state["is_l2"], rows_ok, np.int64(block_rows),
            row_bytes(state["vectors"]), row_crcs, np.ones(1, np.bool_))  # fmt: skip
    outs = (np.full((1, 10), np.nan), np.full((1, 10), -7, np.int64),
            np.full(index.n_lists, -5, np.int32), np.full(depth, -5, np.int64))  # fmt: skip
    return qp, (x, qp, np.empty(0, np.float32), front, middle, back, outs)


@pytest.mark.parametrize("similarity", ["euclidean", "cosine", "max_inner_product"])
def test_ivf_fused_equals_its_steps(similarity, make_vectors):
    """The one-call kernel returns what its steps return one call at a time, and stops
    at the step whose input has an unchecked CRC32 (status 2: lists, 3: rows)."""
    index, _, Q = _ivf(similarity, make_vectors, seed=4)
    state = single_ivf._state(index)
    fused = state["kernel"]
    assert fused is KF.ivf_lut_fused
    is_l2 = similarity == "euclidean"
    q = index.quantizer
    post = index._postings
    blocks, block_starts = post.lut_layout()
    dim = q.dim_
    docs = (post.start, block_starts, blocks, post.factors, post.ids, index._list_cc,
            q.encoding_.doc_planes, padded_dim(dim) // 8, dim, np.empty(0, np.uint8))  # fmt: skip
    for i, need in [(0, 100.0), (1, 400.0), (2, 1e9)]:
        x = np.ascontiguousarray(Q[i], dtype=np.float32)
        qp, args = _fused_args(index, x, need, 15)
        raw, out_rows = args[-1][:2]
        status, n_lists, entries = fused(*args)
        assert status == 0
        Qp = qp.reshape(1, -1)
        ref_lists = KO.ivf_plan_one(Qp, *state["plan"], need)
        assert n_lists == ref_lists.size
        ref_keys, ref_rows, ref_entries = KO.ivf_lut_one(
            Qp, state["C"], ref_lists, q.encoding_.query_bits, q.lam, is_l2, padded_dim(dim),
            *docs, 30, 15,
        )  # fmt: skip
        assert entries == ref_entries
        rerank = KO.rerank_sqdists if is_l2 else KO.rerank_dots
        ref_raw, ref_out = rerank(Qp, state["vectors"], ref_rows, 10, -np.inf)
        np.testing.assert_array_equal(raw, ref_raw)
        np.testing.assert_array_equal(out_rows, ref_out)
        # without rerank: the estimates as ``rerank_finish`` makes them
        _, args = _fused_args(index, x, need, 15, rerank=False)
        assert fused(*args)[0] == 0
        sim = q.similarity_
        ref = rerank_finish(Qp, None, ref_keys, ref_rows, 10, sim, False, "raw")
        outs = args[-1]
        np.testing.assert_array_equal(outs[0].astype(np.float32), ref[0])
        np.testing.assert_array_equal(outs[1], ref[1])
        assert (outs[2] == -5).all() and (outs[3] == -5).all()  # nothing to check: untouched
        # an unchecked list among the planned ones, checked in the call (its CRC32 holds:
        # marked, scanned); one whose CRC32 fails, or with no CRC32s to check in the call:
        # nothing scanned, the lists handed back
        postings = index._postings
        crcs = ST.list_crcs(postings.to_store(True), postings.start, blocks=True)
        unchecked = np.ones(index.n_lists, dtype=bool)
        unchecked[ref_lists[-1]] = False
        _, args = _fused_args(index, x, need, 15, lists_ok=unchecked, list_crcs=crcs)
        assert fused(*args) == (0, ref_lists.size, ref_entries)
        assert unchecked.all()
        unchecked[ref_lists[-1]] = False
        crcs[ref_lists[-1]] ^= 1
        _, args = _fused_args(index, x, need, 15, lists_ok=unchecked, list_crcs=crcs)
        assert fused(*args) == (2, ref_lists.size, 0)
        assert not unchecked[ref_lists[-1]]
        _, args = _fused_args(index, x, need, 15, lists_ok=unchecked)
        assert fused(*args) == (2, ref_lists.size, 0)
        outs = args[-1]
        assert np.isnan(outs[0]).all() and (outs[1] == -7).all()
        np.testing.assert_array_equal(outs[2][: ref_lists.size], ref_lists)
        no_room = (*args[:-1], (*outs[:2], np.empty(0, np.int32), np.empty(0, np.int64)))
        assert fused(*no_room) == (2, ref_lists.size, 0)
        # an unchecked row among the candidates: checked in the call (its CRC32 holds: marked,
        # reranked); one whose CRC32 fails: not reranked, the rows handed back
        crcs = row_crcs(state["vectors"])
        last = ref_rows[ref_rows >= 0][-1]
        blocks_ok = np.ones(index.ntotal, dtype=bool)
        blocks_ok[last] = False
        _, args = _fused_args(index, x, need, 15, rows_ok=blocks_ok, block_rows=1, row_crcs=crcs)
        assert fused(*args) == (0, ref_lists.size, ref_entries)
        assert blocks_ok.all()
        np.testing.assert_array_equal(args[-1][0], ref_raw)
        blocks_ok[last] = False
        crcs[last] ^= 1
        _, args = _fused_args(index, x, need, 15, rows_ok=blocks_ok, block_rows=1, row_crcs=crcs)
        assert fused(*args) == (3, ref_lists.size, ref_entries)
        outs = args[-1]
        assert np.isnan(outs[0]).all() and (outs[1] == -7).all()
        np.testing.assert_array_equal(outs[3], ref_rows)
        assert not blocks_ok[last]
    # a query the general path rejects: status 1, nothing else done
    bad = [np.full(24, np.nan, np.float32), np.full(24, 1e30, np.float32)]
    if similarity == "cosine":
        bad.append(np.zeros(24, np.float32))
    for x in bad:
        _, args = _fused_args(index, x, 100.0, 15)
        assert fused(*args)[0] == 1


def test_ivf_single_query_takes_one_call(make_vectors, monkeypatch, tmp_path):
    """In memory and opened from files every query is one fused call (the lists' and rows'
    CRC32s are checked inside the call at their first read); same results throughout."""
    index, _, Q = _ivf("cosine", make_vectors, n=900, d=24, seed=6)
    calls = []
    fused = KF.ivf_lut_fused

    def spy(*args):
        out = fused(*args)
        calls.append(out[0])
        return out

    monkeypatch.setattr(KF, "ivf_lut_fused", spy)
    batch = index.search(Q, 10)
    for i in range(len(Q)):
        _same(index.search(Q[i], 10), (batch[0][i], batch[1][i]))
    assert calls == [0] * len(Q)
    index.save(tmp_path / "ivf")
    opened = bbqlib.IVFIndex.open(tmp_path / "ivf")
    calls.clear()
    for _ in range(2):
        for i in range(len(Q)):
            _same(opened.search(Q[i], 10), (batch[0][i], batch[1][i]))
    assert calls == [0] * (2 * len(Q))
    opened.verify()  # everything checked: one call per query from now on
    calls.clear()
    for i in range(len(Q)):
        _same(opened.search(Q[i], 10), (batch[0][i], batch[1][i]))
    assert calls == [0] * len(Q)


class _Kernel:
    """A stand-in dispatcher: nothing compiled in this process, no disk cache."""

    signatures: list = []


def test_tier_waits_for_compile_single_after_seconds_of_one_query_searches(monkeypatch):
    """On an empty kernel cache one-query searches take the batch path (charged to the
    tier; batches are not) until COMPILE_SINGLE_AFTER seconds, then the path opens."""
    from bbqlib.index import tiers as single

    monkeypatch.setattr(single, "COMPILE_SINGLE_AFTER", 0.05)
    tier = single.SingleQueryTier(_Kernel())
    assert not tier.ready()

    def slow(queries, *args):
        import time

        time.sleep(0.03)
        return queries.shape, args

    batch = np.zeros((2, 8), np.float32)
    assert tier.on_batch_path(slow, batch, 8, "k") == ((2, 8), ("k",))
    assert tier.batch_seconds == 0.0 and not tier.ready()
    tier.on_batch_path(slow, batch[0], 8)
    assert 0.03 <= tier.batch_seconds < 0.05 and not tier.ready()
    tier.on_batch_path(slow, batch[:1], 8)  # [1, d] is one query too
    assert tier.ready()


def test_tier_opens_when_the_kernel_is_compiled_or_cached():
    from bbqlib.index import tiers as single

    assert single.SingleQueryTier(KO.flat_lut_one).ready() is bool(
        KO.flat_lut_one.signatures or single.has_entries(KO.flat_lut_one)
    )
    compiled = _Kernel()
    compiled.signatures = [("float32",)]
    assert single.SingleQueryTier(compiled).ready()
    tier = single.SingleQueryTier(_Kernel())
    tier.open()  # what warmup(index) does
    assert tier.ready()


@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_a_closed_tier_answers_by_the_batch_path(kind, make_vectors, monkeypatch):
    """Same results either way; the single path runs once the tier opens (warmup(index))."""
    from bbqlib.index import tiers as single
    from bbqlib.index.flat import one as flat_one

    X = make_vectors(600, 24, kind="clustered", seed=3)
    if kind == "flat":
        index = bbqlib.FlatIndex(bits=1, similarity="cosine")
        tier, module, name = single.FLAT_TIER, flat_one, "flat_search_one"
    else:
        index = bbqlib.IVFIndex(bits=1, similarity="cosine", cluster_size=64)
        tier, module, name = single_ivf.IVF_TIER, single_ivf, "ivf_search_one"
    index.add(X)
    expected = index.search(X[5], k=10)
    monkeypatch.setattr(single, "COMPILE_SINGLE_AFTER", 1e9)
    monkeypatch.setattr(tier, "_kernel", _Kernel())
    monkeypatch.setattr(tier, "_ready", False)
    monkeypatch.setattr(tier, "batch_seconds", 0.0)
    monkeypatch.setattr(tier, "_child", None)  # the global tier's: none after this test
    calls = []
    real = getattr(module, name)
    monkeypatch.setattr(module, name, lambda *a: calls.append(1) or real(*a))
    got = index.search(X[5], k=10)
    assert calls == [] and tier.batch_seconds > 0.0
    np.testing.assert_array_equal(got[1], expected[1])
    np.testing.assert_allclose(got[0], expected[0], rtol=1e-6)
    bbqlib.warmup(index, batch=False)
    assert tier.ready() and calls
