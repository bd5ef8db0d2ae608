"""Custom ids on every index and adapter, the ``scores`` keyword, and the small defects of
issue 13 (an empty FlatIndex names itself empty; the IVF repr counts live vectors).

Ids are checked against the same index built with default ids: the custom ids of the results
must be the default ids (row numbers) mapped through the given id array, and scores must be
equal. Data are small (a few hundred rows) to keep CI time low.
"""

from __future__ import annotations

import numpy as np
import pytest

import bbqlib
from bbqlib import FlatIndex, IVFIndex, NotFittedError
from bbqlib.index.ids import MAX_ID, RowIds, check_ids, filter_rows
from bbqlib.similarity import Similarity, scores_from_raw

N, D = 300, 16


def _data(seed=0, n=N, d=D):
    g = np.random.default_rng(seed)
    X = (g.normal(size=(n, d)) + 0.3).astype(np.float32)
    Q = (g.normal(size=(7, d)) + 0.3).astype(np.float32)
    return X, Q


def _ids(n=N, seed=1):
    """Large, unordered, unique ids (up to int64's maximum)."""
    g = np.random.default_rng(seed)
    ids = g.choice(2**62, size=n, replace=False).astype(np.int64) * 2
    ids[0] = MAX_ID
    return ids


def _mapped(rows, ids):
    return np.where(rows >= 0, ids[np.maximum(rows, 0)], -1)


def _flat(**kw):
    return FlatIndex(bits=2, similarity="euclidean", **kw)


def _ivf(**kw):
    return IVFIndex(bits=1, similarity="euclidean", cluster_size=64, seed=3, **kw)


IVF_SEARCH = {"visit_percentage": 60.0}


# ----------------------------------------------------------------------------- RowIds


def test_check_ids_names_the_first_offenders():
    assert check_ids([5, 3, 9], 3).dtype == np.int64
    with pytest.raises(ValueError, match=r"unique; repeated in this call: \[3, 7\]"):
        check_ids([3, 7, 3, 1, 7], 5)
    with pytest.raises(ValueError, match=r"must be >= 0.*negative ids \[-1, -4\]"):
        check_ids([2, -1, 5, -4], 4)
    with pytest.raises(ValueError, match=r"\.\.\. \(6 in all\)"):
        check_ids(-np.arange(1, 7), 6)
    with pytest.raises(TypeError, match="ids must be integers"):
        check_ids([1.0, 2.0], 2)
    with pytest.raises(TypeError, match="ids must be integers"):
        check_ids([True, False], 2)
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        check_ids([1, 2], 3)
    with pytest.raises(ValueError, match="at most"):
        check_ids(np.array([2**63], dtype=np.uint64), 1)
    kept = np.array([4, 2], dtype=np.int32)
    out = check_ids(kept, 2)
    out[0] = 99
    assert kept[0] == 4  # the caller's array is never kept or written


def test_row_ids_lookup_matches_a_dictionary():
    g = np.random.default_rng(0)
    ids = g.choice(10**12, size=1000, replace=False).astype(np.int64)
    r = RowIds().appended(ids[:400], 400).appended(None, 100).appended(ids[500:], 500)
    assert r.next_id == max(ids[:400].max() + 1 + 99, ids[500:].max()) + 1
    full = r.array()
    table = {int(v): i for i, v in enumerate(full)}
    probe = np.concatenate([full[g.permutation(1000)[:50]], [-1, 7, MAX_ID]])
    expect = np.array([table.get(int(v), -1) for v in probe])
    np.testing.assert_array_equal(r._lookup(probe), expect)
    np.testing.assert_array_equal(r.of_rows(np.array([[3, -1]])), [[full[3], -1]])


def test_default_ids_stay_row_numbers_without_storage():
    r = RowIds().appended(None, 5).appended(np.arange(5, 9), 4).appended(None, 2)
    assert r.is_identity and r.n == 11 and r.next_id == 11
    r2 = r.appended(np.array([100, 50]), 2).appended(None, 2)
    assert not r2.is_identity
    np.testing.assert_array_equal(r2.array()[-4:], [100, 50, 101, 102])


def test_filter_rows_masks_and_ids():
    r = RowIds().appended(np.array([30, 10, 20]), 3)
    np.testing.assert_array_equal(filter_rows([20, 30], r), [True, False, True])
    np.testing.assert_array_equal(filter_rows(np.array([0, 1, 0], bool), r), [0, 1, 0])
    with pytest.raises(ValueError, match=r"not in the index: \[11\]"):
        filter_rows([10, 11], r)
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        filter_rows(np.ones(2, bool), r)
    with pytest.raises(TypeError, match="boolean mask or an array of integer ids"):
        filter_rows([1.5], r)
    # an empty list of ids (NumPy types [] as float64) allows nothing, as an empty id array
    np.testing.assert_array_equal(filter_rows([], r), [False, False, False])
    np.testing.assert_array_equal(filter_rows(np.array([], np.int64), r), [False] * 3)


# ----------------------------------------------------------------------------- FlatIndex


@pytest.mark.parametrize("rerank", [True, False])
def test_flat_returns_custom_ids(rerank):
    X, Q = _data()
    ids = _ids()
    plain, custom = _flat(), _flat()
    plain.add(X[:100])  # the same batches: the first add fits the quantizer
    plain.add(X[100:])
    custom.add(X[:100], ids=ids[:100])
    custom.add(X[100:], ids=ids[100:])
    s0, r0 = plain.search(Q, 8, rerank=rerank)
    s1, i1 = custom.search(Q, 8, rerank=rerank)
    np.testing.assert_array_equal(i1, _mapped(r0, ids))
    np.testing.assert_array_equal(s1, s0)
    np.testing.assert_array_equal(custom.ids, ids)


def test_flat_default_ids_continue_from_the_largest():
    X, _ = _data()
    index = _flat()
    index.add(X[:10])
    index.add(X[10:20], ids=np.arange(1000, 1010))
    index.add(X[20:25])
    np.testing.assert_array_equal(index.ids[20:], np.arange(1010, 1015))
    _, got = index.search(X[[3, 12, 22]], 1)
    np.testing.assert_array_equal(got[:, 0], [3, 1002, 1012])


def test_flat_rejects_duplicate_and_negative_ids_before_storing():
    X, _ = _data()
    index = _flat()
    with pytest.raises(ValueError, match=r"repeated in this call: \[4\]"):
        index.add(X[:3], ids=[4, 1, 4])
    assert not index.quantizer.is_fitted and index.ntotal == 0  # nothing was done
    index.add(X[:3], ids=[4, 1, 9])
    with pytest.raises(ValueError, match=r"negative ids \[-2\]"):
        index.add(X[3:5], ids=[-2, 5])
    with pytest.raises(ValueError, match=r"already there: \[9, 1\]"):
        index.add(X[3:6], ids=[9, 2, 1])
    assert index.ntotal == 3


def test_flat_delete_by_id_never_returns_it():
    X, Q = _data()
    ids = _ids()
    index = _flat()
    index.add(X, ids=ids)
    _, before = index.search(Q, 5)
    gone = np.unique(before[:, :2])
    index.delete(gone)
    assert len(index) == N - gone.size and index.ntotal == N and index.n_deleted == gone.size
    for rerank in (True, False):
        _, after = index.search(Q, 20, rerank=rerank)
        assert not np.isin(after, gone).any() and (after >= 0).all()
    _, exact = index.search(X[[int(np.flatnonzero(ids == gone[0])[0])]], 3)
    assert gone[0] not in exact
    with pytest.raises(ValueError, match="already deleted"):
        index.delete(gone[:1])
    with pytest.raises(ValueError, match=r"not in the index: \[3\]"):
        index.delete([3])


def test_flat_delete_then_add_the_same_id_again():
    X, _ = _data()
    index = _flat()
    index.add(X[:50], ids=np.arange(50) * 10)
    index.delete([70])
    index.add(X[100:101], ids=[70])  # the id is free again; its vector is new
    _, got = index.search(X[100], 1)
    assert got[0, 0] == 70
    _, old = index.search(X[7], 2)
    assert old[0, 0] != 70  # the deleted vector stays deleted
    index.delete([70])
    assert 70 not in index.search(X[100], 5)[1]


def test_flat_filter_takes_ids_and_masks_in_insertion_order():
    X, Q = _data()
    ids = _ids()
    index = _flat()
    index.add(X, ids=ids)
    allowed = ids[::7]
    _, got = index.search(Q, 10, filter=allowed)
    assert np.isin(got[got >= 0], allowed).all() and (got >= 0).all()
    mask = np.zeros(N, bool)
    mask[::7] = True
    _, by_mask = index.search(Q, 10, filter=mask)
    np.testing.assert_array_equal(by_mask, got)
    index.delete(allowed[:3])
    _, filtered = index.search(Q, 10, filter=allowed)
    assert not np.isin(filtered, allowed[:3]).any()
    with pytest.raises(ValueError, match="filter ids not in the index"):
        index.search(Q, 3, filter=[12345])


def test_flat_bound_rerank_returns_custom_ids():
    X, Q = _data()
    ids = _ids()
    plain, custom = (
        FlatIndex(bbqlib.RaBitQQuantizer(bits=1, similarity="euclidean", seed=0)) for _ in "ab"
    )
    plain.add(X)
    custom.add(X, ids=ids)
    custom.delete(ids[:5])
    _, r0 = plain.search(Q, 5, rerank="bound", filter=np.arange(5, N))
    _, i1 = custom.search(Q, 5, rerank="bound")
    np.testing.assert_array_equal(i1, _mapped(r0, ids))


@pytest.mark.parametrize(
    "make",
    [
        lambda: _flat(),
        lambda: FlatIndex(bbqlib.RaBitQQuantizer(bits=2, similarity="cosine", seed=0)),
        lambda: FlatIndex(bbqlib.ScalarQuantizer(bits=8, method="per_dim")),
        lambda: _flat(store_vectors=False),
    ],
    ids=["bbq", "rabitq", "int8", "no_vectors"],
)
def test_flat_ids_and_tombstones_round_trip_through_files(make, tmp_path):
    X, Q = _data()
    ids = _ids() // 4  # room for default ids after the largest
    index = make()
    index.add(X[:200], ids=ids[:200])
    index.add(X[200:])  # defaults continue after the largest custom id
    index.delete(ids[[1, 2, 50]])
    rerank = bool(index.store_vectors)
    expected = index.search(Q, 6, rerank=rerank)
    index.save(tmp_path / "f.bbq")
    for mmap in (True, False):
        back = FlatIndex.load(tmp_path / "f.bbq", mmap=mmap)
        got = back.search(Q, 6, rerank=rerank)
        np.testing.assert_array_equal(got[1], expected[1])
        np.testing.assert_array_equal(got[0], expected[0])
        np.testing.assert_array_equal(back.ids, index.ids)
        np.testing.assert_array_equal(back.deleted, index.deleted)
        assert len(back) == N - 3
    back.add(X[:1])  # next_id survives the file
    assert back.ids[-1] == index.ids.max() + 1


def test_flat_default_ids_write_no_id_section(tmp_path):
    from bbqlib.storage.container import read_container

    X, _ = _data()
    index = _flat()
    index.add(X)
    index.save(tmp_path / "f.bbq")
    _, meta, arrays = read_container(tmp_path / "f.bbq")
    assert "ids" not in arrays and "deleted" not in arrays
    assert meta["format_version"] == bbqlib.index.flat.FORMAT_VERSION and meta["next_id"] == N


def test_empty_flat_index_says_it_is_empty():
    index = FlatIndex()
    with pytest.raises(NotFittedError, match="this FlatIndex is empty; call add"):
        index.search(np.ones(8, np.float32), 3)
    with pytest.raises(NotFittedError, match="empty"):
        index.save("never.bbq")
    with pytest.raises(ValueError, match="empty"):
        index.delete([0])
    assert "vectors=0" in repr(index)


# ----------------------------------------------------------------------------- IVFIndex


@pytest.fixture(scope="module")
def ivf_pair():
    """The same IVF built with default ids and with custom ids (two adds each)."""
    X, Q = _data(n=600)
    ids = _ids(600)
    plain, custom = _ivf(), _ivf()
    plain.add(X[:500])
    plain.add(X[500:])
    custom.add(X[:500], ids=ids[:500])
    custom.add(X[500:], ids=ids[500:])
    return X, Q, ids, plain, custom


@pytest.mark.parametrize("rerank", [True, False])
def test_ivf_returns_custom_ids(ivf_pair, rerank):
    X, Q, ids, plain, custom = ivf_pair
    s0, r0 = plain.search(Q, 8, rerank=rerank, **IVF_SEARCH)
    s1, i1 = custom.search(Q, 8, rerank=rerank, **IVF_SEARCH)
    np.testing.assert_array_equal(i1, _mapped(r0, ids))
    np.testing.assert_array_equal(s1, s0)
    np.testing.assert_array_equal(custom.ids, ids)


def test_ivf_filter_by_ids_and_by_mask(ivf_pair):
    X, Q, ids, plain, custom = ivf_pair
    rows = np.arange(0, 600, 5)
    _, r0 = plain.search(Q, 8, filter=rows, **IVF_SEARCH)
    _, i1 = custom.search(Q, 8, filter=ids[rows], **IVF_SEARCH)
    np.testing.assert_array_equal(i1, _mapped(r0, ids))
    mask = np.zeros(600, bool)
    mask[rows] = True
    _, i2 = custom.search(Q, 8, filter=mask, **IVF_SEARCH)
    np.testing.assert_array_equal(i2, i1)
    with pytest.raises(ValueError, match="filter ids not in the index"):
        custom.search(Q, 3, filter=[1, 2, 3])


def test_ivf_rejects_bad_ids_before_building():
    X, _ = _data()
    index = _ivf()
    with pytest.raises(ValueError, match=r"repeated in this call: \[8\]"):
        index.add(X[:3], ids=[8, 8, 1])
    with pytest.raises(ValueError, match=r"negative ids \[-5\]"):
        index.add(X[:3], ids=[1, -5, 2])
    assert not index.is_fitted
    index.add(X[:100], ids=np.arange(100) + 7)
    with pytest.raises(ValueError, match=r"already there: \[7\]"):
        index.add(X[:2], ids=[7, 1000])
    assert index.ntotal == 100


def test_ivf_delete_by_id_round_trips_and_repr_counts_live(tmp_path):
    X, Q = _data(n=600)
    ids = _ids(600)
    index = _ivf()
    index.add(X, ids=ids)
    _, before = index.search(Q, 5, **IVF_SEARCH)
    gone = np.unique(before[:, 0])
    index.delete(gone)
    assert f"vectors={600 - gone.size}, deleted={gone.size}" in repr(index)
    for rerank in (True, False):
        _, after = index.search(Q, 20, rerank=rerank, **IVF_SEARCH)
        assert not np.isin(after, gone).any()
    with pytest.raises(ValueError, match="already deleted"):
        index.delete(gone[:1])
    with pytest.raises(ValueError, match=r"not in the index: \[5\]"):
        index.delete([5])
    expected = index.search(Q, 6, **IVF_SEARCH)
    index.save(tmp_path / "ivf")
    back = bbqlib.load(tmp_path / "ivf")
    got = back.search(Q, 6, **IVF_SEARCH)
    np.testing.assert_array_equal(got[1], expected[1])
    np.testing.assert_array_equal(got[0], expected[0])
    np.testing.assert_array_equal(back.ids, ids)
    assert repr(back) == repr(index).replace("'auto'", "4")
    back.delete(ids[[10, 11]])  # a delete on disk keeps the ids (postings file reused)
    again = IVFIndex.open(tmp_path / "ivf")
    assert len(again) == 600 - gone.size - 2
    np.testing.assert_array_equal(again.ids, ids)
    again.add(X[:1], ids=gone[:1])  # a deleted id may come back
    assert again.search(X[0], 1, **IVF_SEARCH)[1][0, 0] == gone[0]


def test_ivf_on_disk_with_custom_ids(tmp_path):
    X, Q = _data(n=400)
    ids = _ids(400) // 4  # MAX_ID // 4 leaves room for default ids
    disk, ram = _ivf(path=tmp_path / "live"), _ivf()
    for index in (disk, ram):
        index.add(X[:300], ids=ids[:300])
        index.add(X[300:])  # defaults continue after the largest id
    assert disk.ids[300] == ids[:300].max() + 1
    back = IVFIndex.open(tmp_path / "live")
    np.testing.assert_array_equal(back.ids, ram.ids)
    np.testing.assert_array_equal(
        back.search(Q, 5, **IVF_SEARCH)[1], ram.search(Q, 5, **IVF_SEARCH)[1]
    )


def test_ivf_default_ids_after_int64_max_fail_clearly(tmp_path):
    X, _ = _data(n=200)
    index = _ivf(path=tmp_path / "live")
    index.add(X[:150], ids=np.concatenate([[MAX_ID], np.arange(149)]))
    with pytest.raises(ValueError, match="default ids would exceed"):
        index.add(X[150:])
    index.add(X[150:], ids=np.arange(1000, 1050))
    back = IVFIndex.open(tmp_path / "live")
    assert back.search(X[0], 1, **IVF_SEARCH)[1][0, 0] == MAX_ID
    assert back.search(X[160], 1, **IVF_SEARCH)[1][0, 0] == 1010


# ----------------------------------------------------------------------------- scores


def _indexes():
    X, Q = _data()
    flat = FlatIndex(bits=4, similarity="cosine")
    flat.add(X)
    ivf = IVFIndex(bits=4, similarity="euclidean", cluster_size=64, seed=1)
    ivf.add(X)
    return Q, [(flat, {}), (ivf, IVF_SEARCH)]


def test_raw_scores_are_the_default_and_similarity_maps_them():
    Q, cases = _indexes()
    for index, kw in cases:
        raw, ids = index.search(Q, 5, **kw)
        same, ids2 = index.search(Q, 5, scores="raw", **kw)
        mapped, ids3 = index.search(Q, 5, scores="similarity", **kw)
        np.testing.assert_array_equal(raw, same)
        np.testing.assert_array_equal(ids, ids3)
        sim = index.quantizer.similarity_
        np.testing.assert_allclose(mapped, scores_from_raw(sim, raw), rtol=1e-6)
        if sim is Similarity.EUCLIDEAN:
            assert (np.diff(raw, axis=1) >= 0).all() and (raw >= 0).all()
        else:
            assert (np.diff(raw, axis=1) <= 0).all() and (np.abs(raw) <= 1 + 1e-5).all()
        with pytest.raises(ValueError, match="scores must be one of"):
            index.search(Q, 5, scores="lucene", **kw)


# ----------------------------------------------------------------------------- adapters


def _check_adapter(make, search_kw=None):
    X, Q = _data(n=400)
    ids = _ids(400)
    plain, custom = make(), make()
    plain.add(X[:250])  # the same batches: the first add trains the router
    plain.add(X[250:])
    custom.add(X[:250], ids=ids[:250])
    custom.add(X[250:], ids=ids[250:])
    for rerank in (True, False):
        s0, r0 = plain.search(Q, 6, rerank=rerank, **(search_kw or {}))
        s1, i1 = custom.search(Q, 6, rerank=rerank, **(search_kw or {}))
        np.testing.assert_array_equal(i1, _mapped(r0, ids))
        np.testing.assert_array_equal(s1, s0)
    np.testing.assert_array_equal(custom.ids, ids)
    raw, _ = custom.search(Q, 3)
    mapped, _ = custom.search(Q, 3, scores="similarity")
    np.testing.assert_allclose(mapped, scores_from_raw(Similarity.EUCLIDEAN, raw), rtol=1e-6)
    with pytest.raises(ValueError, match=r"repeated in this call"):
        make().add(X[:3], ids=[1, 1, 2])
    with pytest.raises(ValueError, match=r"already there"):
        custom.add(X[:2], ids=ids[:2])
    assert custom.ntotal == 400


def test_faiss_adapter_carries_ids():
    pytest.importorskip("faiss")
    from bbqlib.integrations.faiss import FaissIVFIndex

    _check_adapter(lambda: FaissIVFIndex(nlist=8, nprobe=4, similarity="euclidean", seed=1))


def test_hnswlib_adapter_carries_ids():
    pytest.importorskip("hnswlib")
    from bbqlib.integrations.hnswlib import HnswlibIVFIndex

    _check_adapter(lambda: HnswlibIVFIndex(cluster_size=64, nprobe=4, similarity="euclidean"))


def test_usearch_adapter_carries_ids():
    pytest.importorskip("usearch")
    from bbqlib.integrations.usearch import USearchIndex

    _check_adapter(lambda: USearchIndex(bits=1, similarity="euclidean", seed=0))
