"""``search`` returns exactly ``k`` columns, as faiss does (issue 27, deprecation of 0.2).

Every index and adapter takes ``pad_to_k``: ``True`` gives ``[nq, k]`` results padded with id
``-1`` and the worst score of the returned kind (``+inf`` for raw squared L2, ``-inf`` for raw
inner products and every ``scores="similarity"`` mapping); ``False`` gives the old
``min(k, ntotal)`` columns; ``None`` (the default until 0.4) the old shape with a
``FutureWarning`` when ``k > ntotal``. A ``k`` too large to allocate is a ``ValueError``
before anything is allocated. The one-query paths agree with the batch paths bit for bit.
"""

from __future__ import annotations

import importlib
import tracemalloc
import warnings

import numpy as np
import pytest

import bbqlib
from bbqlib.index.flat import one as single_flat
from bbqlib.index.ivf import one as single_ivf

finish_module = importlib.import_module("bbqlib.search.finish")  # the name `finish` is its function

N, D = 20, 16
SIMILARITIES = ["euclidean", "max_inner_product"]
# The kinds that returned min(k, ntotal) columns before 0.2 (default: old shape + warning)
# and those that always padded to k (default: k columns, no warning).
CAPPED = ["flat", "ivf"]
PADDED = ["usearch", "faiss", "hnswlib"]  # faiss, hnswlib: bbqlib.index.ListsIndex


def _data(seed=0):
    g = np.random.default_rng(seed)
    X = g.normal(0.3, 1.0, size=(N + 5, D)).astype(np.float32)
    return X[:N].copy(), X[N:].copy()


def _index(kind, similarity, X):
    if kind == "flat":
        index = bbqlib.FlatIndex(bits=1, similarity=similarity)
    elif kind == "ivf":
        index = bbqlib.IVFIndex(bits=1, similarity=similarity, cluster_size=64)
    elif kind == "usearch":
        pytest.importorskip("usearch")
        from bbqlib.integrations.usearch import USearchIndex

        index = USearchIndex(bits=1, similarity=similarity)
    elif kind == "faiss":
        faiss = pytest.importorskip("faiss")
        from bbqlib.integrations.faiss import FaissIVFIndex

        coarse = faiss.IndexFlatL2(D)  # two lists, no training
        coarse.add(X[:2])
        index = FaissIVFIndex(coarse=coarse, nprobe=2, bits=1, similarity=similarity)
    else:
        pytest.importorskip("hnswlib")
        from bbqlib.integrations.hnswlib import HnswlibIVFIndex

        index = HnswlibIVFIndex(centroids=X[:2].copy(), nprobe=2, similarity=similarity)
    index.add(X)
    return index


def _pad(similarity, scores):
    return np.inf if scores == "raw" and similarity == "euclidean" else -np.inf


@pytest.fixture(scope="module", params=[(k, s) for k in CAPPED + PADDED for s in SIMILARITIES],
                ids=lambda p: f"{p[0]}-{p[1]}")  # fmt: skip
def built(request):
    kind, similarity = request.param
    X, Q = _data()
    return kind, similarity, _index(kind, similarity, X), Q


# ----------------------------------------------------------------------------- the three modes
@pytest.mark.parametrize("scores", ["raw", "similarity"])
def test_pad_to_k_true_gives_k_columns_with_the_documented_pad(built, scores):
    kind, similarity, index, Q = built
    old = index.search(Q, N, scores=scores, pad_to_k=False)
    for queries in (Q, Q[0], Q[:1]):
        nq = 1 if queries.ndim == 1 else len(queries)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            s, i = index.search(queries, N + 7, scores=scores, pad_to_k=True)
        assert s.shape == i.shape == (nq, N + 7)
        assert s.dtype == np.float32 and i.dtype == np.int64
        assert (i[:, N:] == -1).all() and (s[:, N:] == _pad(similarity, scores)).all()
        # the first N columns: every vector, as pad_to_k=False returns them
        np.testing.assert_array_equal(i[:, :N], old[1][:nq])
        np.testing.assert_array_equal(s[:, :N], old[0][:nq])
        assert np.isfinite(s[:, :N]).all() and (np.sort(i[:, :N], axis=1) == np.arange(N)).all()


def test_pad_to_k_false_keeps_min_k_ntotal_columns_without_a_warning(built):
    _, _, index, Q = built
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for queries, nq in ((Q, len(Q)), (Q[0], 1)):
            for k in (5, N, N + 1, 10**12):  # k beyond the index: capped, never allocated
                s, i = index.search(queries, k, pad_to_k=False)
                assert s.shape == i.shape == (nq, min(k, N))


def test_pad_to_k_changes_nothing_up_to_ntotal(built):
    _, _, index, Q = built
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for k in (1, 7, N):
            want = index.search(Q, k, pad_to_k=False)
            for pad_to_k in (None, True):
                got = index.search(Q, k, pad_to_k=pad_to_k)
                np.testing.assert_array_equal(got[1], want[1])
                np.testing.assert_array_equal(got[0], want[0])


@pytest.mark.parametrize("kind", CAPPED)
def test_default_of_capped_indexes_warns_and_keeps_the_old_shape(kind):
    X, Q = _data()
    index = _index(kind, "euclidean", X)
    for queries, nq in ((Q, len(Q)), (Q[0], 1), (Q[:1], 1)):
        with pytest.warns(FutureWarning, match=r"0\.4 it returns exactly k columns") as w:
            s, i = index.search(queries, N + 3)
        assert s.shape == i.shape == (nq, N)
        assert [r.filename for r in w] == [__file__]  # points at the caller of search
        text = str(w[0].message)
        assert "k=23" in text and "pad_to_k=True" in text and "pad_to_k=False" in text
    # a k too large to pad still returns the old shape; the warning says what comes
    with pytest.warns(FutureWarning, match="this k will then be a ValueError: 55,879.4 GiB"):
        assert index.search(Q, 10**12)[1].shape == (len(Q), N)


@pytest.mark.parametrize("similarity", SIMILARITIES)
@pytest.mark.parametrize("kind", PADDED)
def test_default_of_padded_adapters_is_k_columns_without_a_warning(kind, similarity):
    X, Q = _data()
    index = _index(kind, similarity, X)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for kw in ({}, {"pad_to_k": None}):
            s, i = index.search(Q, N + 3, **kw)
            assert s.shape == i.shape == (len(Q), N + 3) and (i[:, N:] == -1).all()
            assert (s[:, N:] == _pad(similarity, "raw")).all()


# ----------------------------------------------------------------------------- too large a k
def test_k_too_large_to_allocate_is_a_clear_error_before_allocating(built):
    kind, _, index, Q = built
    for queries in (Q, Q[0]):
        tracemalloc.start()
        try:
            with pytest.raises(ValueError) as err:
                index.search(queries, 10**12, pad_to_k=True)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 1 << 20  # nothing of the results' size was allocated
        text = str(err.value)
        assert "k=1000000000000" in text and "GiB" in text and "pad_to_k=False" in text
        assert f"k={N} returns every vector" in text


def test_the_bound_counts_every_query(monkeypatch):
    X, Q = _data()
    index = _index("flat", "euclidean", X)
    monkeypatch.setattr(
        finish_module, "_limit", (12 * 5 * 30, "a test's limit")
    )  # 5 x 30 results exactly
    assert index.search(Q, 30, pad_to_k=True)[1].shape == (5, 30)
    with pytest.raises(ValueError, match="5 x 31 results") as err:
        index.search(Q, 31, pad_to_k=True)
    assert "pad_to_k=False" in str(err.value)
    monkeypatch.setattr(
        finish_module, "_limit", (12 * 5 * 10 - 1, "a test's limit")
    )  # k <= ntotal: no cap helps
    with pytest.raises(ValueError, match="5 x 10 results") as err:
        index.search(Q, 10, pad_to_k=True)
    assert "pad_to_k=False" not in str(err.value) and "fewer queries" in str(err.value)


def test_result_bytes_limit_is_half_the_memory_or_documented():
    limit = finish_module.result_bytes_limit()
    assert limit > 0 and limit in (
        finish_module.RESULT_BYTES_FALLBACK,
        _physical_memory() // 2,
    )


def _physical_memory():
    import os

    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return -2


@pytest.mark.parametrize("bad", ["yes", 1, 0.0, [True]])
def test_pad_to_k_must_be_a_bool_or_none(built, bad):
    _, _, index, Q = built
    for queries in (Q, Q[0]):
        with pytest.raises(TypeError, match="pad_to_k must be True, False or None"):
            index.search(queries, 5, pad_to_k=bad)


# ----------------------------------------------------------------------------- one query, batch
@pytest.mark.parametrize("similarity", ["euclidean", "cosine", "max_inner_product"])
@pytest.mark.parametrize("kind", CAPPED)
def test_one_query_path_serves_padding_and_agrees_with_the_batch_path(kind, similarity):
    """The fused one-query paths answer k > ntotal themselves (pad_to_k True / False), with
    the batch path's results bit for bit; the default is left to the batch path (it warns)."""
    X, Q = _data(seed=3)
    index = _index(kind, similarity, X)
    if kind == "flat":

        def one(index, *a):
            return single_flat.flat_search_one(index, single_flat._flat_one_of(index), *a)
    else:

        def one(index, *a):
            return single_ivf.ivf_search_one(index, single_ivf._state(index), *a)

    extra = () if kind == "flat" else (None,)  # visit_percentage
    for rerank in (True, False):
        for scores in ("raw", "similarity"):
            for k, pad_to_k in ((N + 9, True), (N + 9, False), (N, True), (3, None)):
                args = (k, *extra, None, rerank, None, scores, pad_to_k)
                got = one(index, Q[1], *args)
                assert got is not None, (k, pad_to_k)
                batch = index._search(Q, *args) if kind == "ivf" else index._search_batch(Q, *args)
                np.testing.assert_array_equal(got[1][0], batch[1][1])
                np.testing.assert_array_equal(got[0][0], batch[0][1])
            assert one(index, Q[1], N + 1, *extra, None, rerank, None, "raw", None) is None


def test_flat_padding_with_filters_deletions_and_the_bound_rerank():
    """One rule inside the columns and beyond them: id -1 and the pad of the score kind."""
    X, Q = _data(seed=4)
    index = bbqlib.FlatIndex(bbqlib.RaBitQQuantizer(bits=1, similarity="euclidean"))
    index.add(X)
    index.delete([0, 1])
    for rerank in (True, False, "bound"):
        s, i = index.search(Q, N + 4, rerank=rerank, filter=np.arange(10), pad_to_k=True)
        assert i.shape == (len(Q), N + 4) and (i[:, 8:] == -1).all()
        assert (np.sort(i[:, :8], axis=1) == np.arange(2, 10)).all()
        assert np.isposinf(s[:, 8:]).all() and np.isfinite(s[:, :8]).all()
        s, _ = index.search(Q, N + 4, rerank=rerank, scores="similarity", pad_to_k=True)
        assert np.isneginf(s[:, N - 2 :]).all() and np.isfinite(s[:, : N - 2]).all()


def test_ivf_padding_with_deletions_and_a_filter():
    X, Q = _data(seed=5)
    index = _index("ivf", "max_inner_product", X)
    index.delete([3])
    s, i = index.search(Q, N + 2, pad_to_k=True, visit_percentage=100)
    assert i.shape == (len(Q), N + 2) and (i[:, N - 1 :] == -1).all()
    assert np.isneginf(s[:, N - 1 :]).all() and not (i == 3).any()
    s, i = index.search(Q[0], N + 2, filter=np.array([4, 5]), pad_to_k=True)
    assert i.shape == (1, N + 2) and (i[0, 2:] == -1).all() and np.isneginf(s[0, 2:]).all()


def test_empty_flat_index():
    X, Q = _data()
    index = bbqlib.FlatIndex(bbqlib.BBQQuantizer(similarity="euclidean").fit(X))
    with pytest.warns(FutureWarning):
        assert index.search(Q, 3)[1].shape == (len(Q), 0)
    s, i = index.search(Q, 3, pad_to_k=True)
    assert i.shape == (len(Q), 3) and (i == -1).all() and np.isposinf(s).all()


# ----------------------------------------------------------------------------- sharded, plugin
def test_sharded_index_pads_against_all_shards(tmp_path, monkeypatch):
    pytest.importorskip("dask")
    from bbqlib.distributed import ShardedIndex

    X, Q = _data(seed=6)
    half = N // 2
    for s, part in enumerate((X[:half], X[half:])):
        shard = bbqlib.IVFIndex(bits=1, similarity="euclidean", cluster_size=64)
        shard.add(part)
        shard.save(tmp_path / f"s{s}")
    monkeypatch.setattr("bbqlib.distributed.sharded.resolve_client", lambda c: None)
    sharded = ShardedIndex.open([tmp_path / "s0", tmp_path / "s1"])
    with pytest.warns(FutureWarning, match="pad_to_k") as w:
        s, i = sharded.search(Q, N + 5)
    assert i.shape == (len(Q), N) and [r.filename for r in w] == [__file__]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        old = sharded.search(Q, N + 5, pad_to_k=False)
        s, i = sharded.search(Q, N + 5, pad_to_k=True)
        assert sharded.search(Q, 4, pad_to_k=None)[1].shape == (len(Q), 4)
    np.testing.assert_array_equal(old[1], i[:, :N])
    assert i.shape == (len(Q), N + 5) and (i[:, N:] == -1).all() and np.isposinf(s[:, N:]).all()
    assert (np.sort(i[:, :N], axis=1) == np.arange(N)).all()
    s, _ = sharded.search(Q, N + 5, pad_to_k=True, scores="similarity")
    assert np.isneginf(s[:, N:]).all() and np.isfinite(s[:, :N]).all()
    with pytest.raises(ValueError, match="k=1000000000000"):
        sharded.search(Q, 10**12, pad_to_k=True)
    sharded.close()


def test_ann_benchmarks_wrapper_asks_for_the_old_shape():
    from bbqlib.integrations.ann_benchmarks import BBQFlat

    X, Q = _data(seed=7)
    algo = BBQFlat("euclidean", 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.simplefilter("ignore", bbqlib.DataWarning)  # few dims: not this test's point
        algo.fit(X)
        assert algo.query(Q[0], N + 10).shape == (N,)
        algo.batch_query(Q, N + 10)
    assert all(r.shape == (N,) for r in algo.get_batch_results())


def test_ivf_one_query_settings_follow_adds():
    """The one-query path keeps a call's settings (its columns among them) until the index
    changes: after an add, k > the old ntotal finds the new vectors."""
    X, Q = _data(seed=8)
    index = _index("ivf", "euclidean", X)
    _, i = index.search(Q[0], N + 5, pad_to_k=True)
    assert (i[0, :N] >= 0).all() and (i[0, N:] == -1).all()
    index.add(_data(seed=9)[0][:5])
    _, i = index.search(Q[0], N + 5, pad_to_k=True, visit_percentage=100)
    assert (i[0] >= 0).all() and len(set(i[0].tolist())) == N + 5
