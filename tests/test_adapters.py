"""Engine adapters (issue 6): usearch HNSW over BBQ codes, faiss / hnswlib routing.

The ann-benchmarks wrappers are tested in test_ann_benchmarks_plugin.py (and in the real
harness by test_ann_benchmarks_harness.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from toy_data import clustered as _clustered
from toy_data import recall as _recall
from toy_data import truth as _truth

from bbqlib import BBQQuantizer
from bbqlib.integrations.records import RecordLayout, make_records
from bbqlib.similarity import exact_raw


# ----------------------------------------------------------------------------- records
@pytest.mark.parametrize("bits", [1, 2, 4, 7, 8])
@pytest.mark.parametrize("d", [1, 7, 65])
def test_records_view_scores_like_the_codes(bits, d):
    from bbqlib.integrations import score_candidates

    X, Q = _clustered(60, d, seed=d, nq=3)
    q = BBQQuantizer(bits=bits, similarity="euclidean").fit(X)
    enc = q.encode(X)
    rec = make_records(q, enc)
    layout = RecordLayout.for_quantizer(q)
    assert rec.shape == (60, layout.record_bytes) and rec.shape[1] % 8 == 0
    ids = np.tile(np.arange(-1, 59), (3, 1))
    got = score_candidates(q.query_codes(Q), layout.docs(rec, q), ids)
    want = q.estimate(Q, enc)[:, np.maximum(ids[0], 0)]
    np.testing.assert_array_equal(got[:, 1:], want[:, 1:])
    assert np.isnan(got[:, 0]).all()


# ----------------------------------------------------------------------------- usearch
usearch = pytest.importorskip("usearch.index", reason="usearch not installed")


def test_usearch_pitfall_u8_rewrites_i8_keeps_records():
    """Why records go to usearch as int8 views: arbitrary bytes survive only in i8 (2.26)."""
    g = np.random.default_rng(0)
    rec = g.integers(0, 256, size=(50, 64), dtype=np.uint8)
    ix = usearch.Index(ndim=64, metric="l2sq", dtype="i8")
    ix.add(np.arange(50), rec.view(np.int8))
    assert np.array_equal(np.vstack(ix.get(np.arange(50))).view(np.uint8), rec)


@pytest.mark.parametrize("sim", ["cosine", "euclidean", "max_inner_product"])
@pytest.mark.parametrize("bits", [1, 4, 7])
def test_usearch_index_recall_and_rerank(sim, bits):
    from bbqlib.integrations.usearch import USearchIndex

    X, Q = _clustered(1500, 48, seed=bits)
    truth = _truth(X, Q, sim, 10)
    index = USearchIndex(bits=bits, similarity=sim, expansion_search=64)
    index.add(X)
    scores, ids = index.search(Q, k=10, oversample=4, scores="similarity")
    assert scores.shape == ids.shape == (20, 10) and scores.dtype == np.float32
    assert ids.dtype == np.int64 and (np.diff(scores, axis=1) <= 0).all()
    assert _recall(ids, truth) >= 0.9
    # every vector a candidate: exactly FlatIndex's proxy-then-rerank (same estimates, ties).
    # (Not for max_inner_product: an inner-product graph leaves some small-norm nodes
    # unreachable, about 4% here, which usearch then never returns.)
    from bbqlib import FlatIndex

    if sim == "max_inner_product":
        return
    flat = FlatIndex(BBQQuantizer(bits=bits, similarity=sim))
    flat.add(X)
    fs, fi = flat.search(Q, k=10, oversample=4)
    s_all, i_all = index.search(Q, k=10, oversample=4, candidates=len(X))
    np.testing.assert_array_equal(i_all, fi)
    np.testing.assert_array_equal(s_all, fs)
    # reranked scores are exact: equal to FlatIndex's exact mapping of the same ids
    q = index.quantizer
    Qp = Q / np.linalg.norm(Q, axis=1, keepdims=True) if sim == "cosine" else Q
    Xp = X / np.linalg.norm(X, axis=1, keepdims=True) if sim == "cosine" else X
    from bbqlib.similarity import scores_from_raw

    exact = np.take_along_axis(exact_raw(q.similarity_, Qp, Xp), ids, axis=1)
    np.testing.assert_allclose(scores, scores_from_raw(q.similarity_, exact), rtol=1e-5)
    # rerank=False: scores are the asymmetric estimates of the returned ids
    s2, i2 = index.search(Q, k=10, rerank=False, scores="similarity")
    est = np.take_along_axis(q.estimate(Q, q.encode(X)), i2, axis=1)
    np.testing.assert_allclose(s2, scores_from_raw(q.similarity_, est), rtol=1e-6)


def test_usearch_index_batches_attach_and_padding(tmp_path):
    from bbqlib.integrations.usearch import USearchIndex

    X, Q = _clustered(900, 33, seed=3)
    one = USearchIndex(bits=2, similarity="cosine")
    one.add(X)
    fitted = BBQQuantizer(bits=2, similarity="cosine").fit(X)  # the same centroid as `one`
    parts = USearchIndex(quantizer=fitted, store_vectors=False)
    for chunk in np.array_split(X, 3):
        parts.add(chunk)
    assert parts.ntotal == 900 and len(parts._blocks) == 3
    with pytest.raises(ValueError, match="attach_vectors"):
        parts.search(Q, k=5)
    np.save(tmp_path / "x.npy", X)  # raw, not normalized: cosine divides by the norms
    parts.attach_vectors(np.load(tmp_path / "x.npy", mmap_mode="r"))
    s1, i1 = one.search(Q, k=5, candidates=900)
    s2, i2 = parts.search(Q, k=5, candidates=900)  # every vector a candidate
    np.testing.assert_array_equal(i1, i2)
    np.testing.assert_allclose(s1, s2, rtol=1e-6)
    from bbqlib import FlatIndex

    flat = FlatIndex(BBQQuantizer(bits=2, similarity="cosine"))
    flat.add(X)
    np.testing.assert_array_equal(i1, flat.search(Q, k=5)[1])
    # estimates across blocks equal the quantizer's
    s3, i3 = parts.search(Q[:2], k=7, rerank=False, scores="similarity")
    q = parts.quantizer
    est = np.take_along_axis(q.estimate(Q[:2], q.encode(X)), i3, axis=1)
    from bbqlib.similarity import scores_from_raw

    np.testing.assert_allclose(s3, scores_from_raw(q.similarity_, est), rtol=1e-6)
    # k larger than the index: padded
    small = USearchIndex(bits=1, similarity="euclidean")
    small.add(X[:4])
    s, i = small.search(Q[0], k=6)
    assert i.shape == (1, 6) and sorted(i[0, :4].tolist()) == [0, 1, 2, 3]
    assert (i[0, 4:] == -1).all() and np.isposinf(s[0, 4:]).all()  # raw squared L2


def test_usearch_index_memory_and_parameters():
    from bbqlib.integrations.usearch import USearchIndex

    X, Q = _clustered(500, 64)
    index = USearchIndex(bits=1, similarity="euclidean", connectivity=8)
    with pytest.raises(ValueError, match="empty"):
        index.records  # noqa: B018
    from bbqlib import NotFittedError

    with pytest.raises(NotFittedError):
        USearchIndex().search(Q, k=3)
    index.add(X)
    assert index.records_bytes == 500 * (8 + 24)  # 64 dims -> 8 bytes of codes + 24 tail
    assert index.memory_usage == index.graph_bytes + index.records_bytes
    assert index.vectors_bytes == X.nbytes
    index.expansion_search = 200
    assert index.expansion_search == 200 and index._index.expansion_search == 200
    for bad in ({"connectivity": 1}, {"expansion_add": 0}, {"threads": -1}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            USearchIndex(**bad)
    with pytest.raises(ValueError, match="rerank"):
        index.search(Q, k=3, rerank="bound")
    with pytest.raises(ValueError, match="shape"):
        index.attach_vectors(X[:10])
    with pytest.raises(TypeError, match="Quantizer"):
        USearchIndex(quantizer="bbq")
    assert "USearchIndex(ntotal=500" in repr(index)


def test_usearch_index_unsupported_planes():
    rabitq = pytest.importorskip("bbqlib.quantizers.rabitq")
    from bbqlib.integrations.usearch import USearchIndex

    X, _ = _clustered(100, 16)
    with pytest.raises(ValueError, match="planes"):
        USearchIndex(quantizer=rabitq.RaBitQQuantizer(bits=3)).add(X)


# ----------------------------------------------------------------------------- faiss / hnswlib
def _flat(X, Q, bits, sim, k, **kw):
    from bbqlib import FlatIndex

    flat = FlatIndex(BBQQuantizer(bits=bits, similarity=sim))
    flat.add(X)
    return flat.search(Q, k=k, **kw)


@pytest.mark.parametrize("sim", ["cosine", "euclidean", "max_inner_product"])
def test_faiss_ivf_all_lists_equals_flat(sim):
    pytest.importorskip("faiss")
    from bbqlib.integrations.faiss import FaissIVFIndex

    X, Q = _clustered(1200, 40, seed=11)
    index = FaissIVFIndex(nlist=16, nprobe=4, bits=2, similarity=sim)
    index.add(X)
    assert index.nlist == 16 and index.list_sizes.sum() == 1200
    s, i = index.search(Q, k=10, nprobe=16)  # every list: the flat index's answer
    fs, fi = _flat(X, Q, 2, sim, 10)
    np.testing.assert_array_equal(i, fi)
    np.testing.assert_array_equal(s, fs)
    s, i = index.search(Q, k=10, nprobe=16, rerank=False, oversample=1)
    fs, fi = _flat(X, Q, 2, sim, 10, rerank=False)
    np.testing.assert_array_equal(i, fi)
    np.testing.assert_array_equal(s, fs)
    s4, i4 = index.search(Q, k=10)  # 4 of 16 lists: still good on clustered data
    assert _recall(i4, _truth(X, Q, sim, 10)) >= 0.8


def test_faiss_ivf_existing_coarse_and_batches():
    faiss = pytest.importorskip("faiss")
    from bbqlib.integrations.faiss import FaissIVFIndex

    X, Q = _clustered(1000, 24, seed=12)
    ivf = faiss.IndexIVFFlat(faiss.IndexFlatL2(24), 24, 10)  # a user's own faiss IVF
    ivf.train(X)
    q = BBQQuantizer(bits=1, similarity="euclidean").fit(X)
    one = FaissIVFIndex(coarse=ivf, quantizer=q, nprobe=3)
    one.add(X)
    parts = FaissIVFIndex(coarse=ivf, quantizer=q, nprobe=3)
    for chunk in np.array_split(X, 4):
        parts.add(chunk)
    assert one.nlist == parts.nlist == 10
    np.testing.assert_array_equal(one.search(Q, 5)[1], parts.search(Q, 5)[1])
    np.testing.assert_array_equal(one._rows, parts._rows)
    with pytest.raises(TypeError, match="faiss Index"):
        FaissIVFIndex(coarse=np.zeros((3, 24)))
    with pytest.raises(ValueError, match="centroids"):
        FaissIVFIndex(coarse=faiss.IndexFlatL2(24))
    wrong = faiss.IndexFlatL2(8)
    wrong.add(np.zeros((2, 8), np.float32))
    with pytest.raises(ValueError, match="dimension"):
        FaissIVFIndex(coarse=wrong, similarity="l2").add(X)
    with pytest.raises(ValueError, match="nprobe"):
        one.search(Q, 5, nprobe=0)
    no_vec = FaissIVFIndex(coarse=ivf, quantizer=q, store_vectors=False)
    no_vec.add(X)
    with pytest.raises(ValueError, match="store_vectors"):
        no_vec.search(Q, 5)
    assert no_vec.search(Q, 5, rerank=False)[1].shape == (20, 5)
    assert "FaissIVFIndex(ntotal=1000" in repr(one) and one.memory_usage > 0


@pytest.mark.parametrize("sim", ["cosine", "euclidean"])
def test_hnswlib_ivf_all_lists_equals_flat(sim):
    pytest.importorskip("hnswlib")
    from bbqlib.integrations.hnswlib import HnswlibIVFIndex

    X, Q = _clustered(1500, 36, seed=13)
    index = HnswlibIVFIndex(cluster_size=100, nprobe=3, bits=1, similarity=sim)
    index.add(X)
    assert index.nlist == len(index.centroids) > 3
    s, i = index.search(Q, k=10, nprobe=index.nlist)
    fs, fi = _flat(X, Q, 1, sim, 10)
    np.testing.assert_array_equal(i, fi)
    np.testing.assert_array_equal(s, fs)
    assert _recall(index.search(Q, k=10, nprobe=6)[1], _truth(X, Q, sim, 10)) >= 0.8


def test_hnswlib_ivf_given_centroids():
    pytest.importorskip("hnswlib")
    from bbqlib.integrations.hnswlib import HnswlibIVFIndex

    X, Q = _clustered(600, 20, seed=14)
    C = X[::60].copy()
    index = HnswlibIVFIndex(centroids=C, nprobe=2, similarity="max_inner_product")
    index.add(X)
    assert index.nlist == 10 and index.ntotal == 600
    assert index.search(Q[0], 4)[1].shape == (1, 4)
    with pytest.raises(ValueError, match="dimension"):
        HnswlibIVFIndex(centroids=C[:, :5]).add(X)
    with pytest.raises(ValueError, match="cluster_size"):
        HnswlibIVFIndex(cluster_size=0)
