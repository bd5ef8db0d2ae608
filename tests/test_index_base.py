"""The index base class (:mod:`bbqlib.index.base`): the one copy of the search-option checks
(:class:`SearchOptions`), the registry ``bbqlib.load`` / ``repair`` / ``warmup`` dispatch
through, and the state every index shares."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

import bbqlib
from bbqlib.index import base as index_base
from bbqlib.index.base import INDEX_KINDS, Index, SearchOptions
from bbqlib.search.rerank import candidate_count
from bbqlib.storage.container import read_container, write_container


@pytest.fixture(scope="module")
def X():
    return np.random.default_rng(3).normal(size=(400, 16)).astype(np.float32)


@pytest.fixture(scope="module")
def flat(X):
    index = bbqlib.FlatIndex(bits=1, similarity="euclidean")
    index.add(X)
    return index


@pytest.fixture(scope="module")
def ivf(X):
    index = bbqlib.IVFIndex(bits=1, similarity="euclidean", cluster_size=64)
    index.add(X)
    return index


# -- SearchOptions --------------------------------------------------------------------------
def test_search_options_columns_and_depth():
    opts = SearchOptions(k=10, rerank=True, oversample=3.0, scores="raw", pad_to_k=True)
    assert opts.columns(100, 2) == 10
    assert opts.columns(4, 2) == 10  # pad_to_k: k columns even past the index's size
    assert opts.depth(100) == candidate_count(10, 3.0, 100) == 30
    assert opts.depth(4) == 4
    assert opts.depth(100, live=20) == 20  # deleted vectors are never candidates
    raw = SearchOptions(k=10, rerank=False, oversample=3.0, scores="raw", pad_to_k=False)
    assert raw.depth(100) == 10 and raw.depth(100, live=7) == 7
    assert raw.columns(4, 1) == 4
    with pytest.raises(AttributeError):
        opts.k = 3  # frozen: a checked set of options is not changed afterwards


def test_search_options_resolve_the_index_defaults(X):
    index = bbqlib.FlatIndex(bits=1, oversample=5.0)
    index.add(X[:50])
    opts = index._search_options(3, None, None, "raw", None)
    assert opts == SearchOptions(3, True, 5.0, "raw", None)
    assert index._search_options(3, 2, 0, "similarity", False) == SearchOptions(
        3, False, 2.0, "similarity", False
    )
    assert index._search_options(3, None, 1, "raw", None).rerank is True  # 1 == True
    assert index._search_options(3, None, "bound", "raw", None).rerank == "bound"
    plain = bbqlib.FlatIndex(bits=2, store_vectors=False)
    plain.add(X[:50])
    opts = plain._search_options(3, None, None, "raw", None)
    assert opts.rerank is False and opts.oversample == plain.quantizer.encoding_.default_oversample


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"k": 0}, ValueError, "k"),
        ({"k": 2.5}, (TypeError, ValueError), "k"),
        ({"scores": "cosine"}, ValueError, r"scores must be one of \['raw', 'similarity'\]"),
        ({"oversample": 0.5}, ValueError, "oversample must be a finite number >= 1"),
        ({"pad_to_k": "yes"}, TypeError, "pad_to_k must be True, False or None"),
    ],
)
def test_search_options_errors_are_every_index_s(flat, ivf, kwargs, error, match):
    args = {"k": 3, "oversample": None, "rerank": None, "scores": "raw", "pad_to_k": None}
    args.update(kwargs)
    for index in (flat, ivf):
        with pytest.raises(error, match=match):
            index._search_options(**args)
        with pytest.raises(error, match=match):
            index.search(np.zeros((2, 16), np.float32) + 1, **args)


def test_rerank_errors_name_each_index_s_modes(flat, ivf, X):
    with pytest.raises(ValueError, match=r"rerank must be True, False or 'bound', got 'x'"):
        flat.search(X[:2], k=3, rerank="x")
    with pytest.raises(ValueError, match=r"rerank must be True or False, got 'bound'"):
        ivf.search(X[:2], k=3, rerank="bound")
    plain = bbqlib.IVFIndex(bits=1, cluster_size=64, store_vectors=False)
    plain.add(X)
    with pytest.raises(ValueError, match=r"keeps no float vectors \(store_vectors=False\)"):
        plain.search(X[:2], k=3, rerank=True)


def test_fast_options_are_kept_per_call_and_none_where_the_batch_path_serves(flat):
    first = flat._fast_options(5, None, None, "raw", None)
    assert first is flat._fast_options(5, None, None, "raw", None)
    assert first.rerank is True and first.k == 5
    assert flat._fast_options(0, None, None, "raw", None) is None  # the batch path raises
    assert flat._fast_options(5, None, "bound", "raw", None) is None  # not a one-query mode
    assert flat._fast_options(5, [2.0], None, "raw", None) is None  # unhashable
    assert flat._fast_options(5, None, None, "nope", None) is None
    # the same values of other types are other calls (1 == True == 1.0)
    assert flat._fast_options(5, None, 1, "raw", None) is not flat._fast_options(
        5, None, True, "raw", None
    )


@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_one_query_path_honours_the_index_s_oversample(X, kind):
    if kind == "flat":
        index = bbqlib.FlatIndex(bits=1, similarity="euclidean", oversample=8.0)
    else:
        index = bbqlib.IVFIndex(bits=1, similarity="euclidean", cluster_size=64, oversample=8.0)
    index.add(X)
    q = X[7] + 0.05
    one = index.search(q, k=5)
    batch = index.search(np.stack([q, q]), k=5)
    np.testing.assert_array_equal(one[1][0], batch[1][0])
    np.testing.assert_array_equal(one[0][0], batch[0][0])
    if kind == "ivf":
        assert index.last_search_stats["depth"] == candidate_count(5, 8.0, len(index))


@pytest.mark.parametrize("make", ["lists", "usearch"])
def test_adapters_check_oversample_at_construction(make):
    if make == "lists":
        pytest.importorskip("faiss")
        from bbqlib.integrations.faiss import FaissIVFIndex as cls
    else:
        pytest.importorskip("usearch")
        from bbqlib.integrations.usearch import USearchIndex as cls
    with pytest.raises(ValueError, match="oversample must be a finite number >= 1"):
        cls(oversample=0.5)


# -- state every index shares ----------------------------------------------------------------
def test_every_index_derives_from_index_and_shares_ids_and_tombstones(flat, ivf, X):
    assert isinstance(flat, Index) and isinstance(ivf, Index)
    for index in (flat, ivf):
        assert index.deleted.shape == (len(X),) and not index.deleted.any()
        assert index.n_deleted == 0 and len(index) == len(X)
        np.testing.assert_array_equal(index.ids, np.arange(len(X)))
    index = bbqlib.IVFIndex(bits=1, cluster_size=64)
    index.add(X)
    index.delete([3, 5])
    assert index.deleted.sum() == 2 and index.deleted[[3, 5]].all() and len(index) == len(X) - 2
    empty = bbqlib.IVFIndex(bits=1)
    assert empty.deleted.shape == (0,) and len(empty) == 0


def test_pickles_drop_the_guard_and_derived_state(flat, ivf, X):
    for index in (flat, ivf):
        index.search(X[0], k=3)  # makes the one-query path's derived state
        state = index.__getstate__()
        assert "_guard" not in state
        assert not set(type(index)._DERIVED) & set(state)
        again = pickle.loads(pickle.dumps(index))
        np.testing.assert_array_equal(again.search(X[:3], k=3)[1], index.search(X[:3], k=3)[1])


# -- the registry and what dispatches through it ---------------------------------------------
class _Probe(Index):
    """A saved index of a kind of its own: one container file holding its ids."""

    kind = "test_probe"
    file_kind = "test_probe_index"
    opened: list = []

    def __init__(self, ids=()):
        self._ids_list = np.asarray(ids, dtype=np.int64)

    @property
    def ntotal(self) -> int:
        return len(self._ids_list)

    @classmethod
    def open(cls, path, **kwargs):
        cls.opened.append(kwargs)
        return cls(read_container(path)[2]["ids"])

    def verify(self) -> dict:
        return {"vectors": self.ntotal}


INDEX_KINDS.pop("test_probe")  # registered when defined; the fixture registers it per test


@pytest.fixture
def probe_kind():
    INDEX_KINDS["test_probe"] = _Probe  # registered at class creation; kept for this test
    _Probe.opened.clear()
    yield _Probe
    INDEX_KINDS.pop("test_probe", None)


def test_a_subclass_with_a_kind_registers_and_kinds_are_unique(probe_kind):
    assert INDEX_KINDS["flat"] is bbqlib.FlatIndex and INDEX_KINDS["ivf"] is bbqlib.IVFIndex
    assert INDEX_KINDS["test_probe"] is _Probe

    class _Unnamed(_Probe):  # no kind of its own: its parent's entry serves
        pass

    assert INDEX_KINDS["test_probe"] is _Probe
    with pytest.raises(TypeError, match="index kind 'flat' is taken by FlatIndex"):

        class _Clash(Index):
            kind = "flat"


def test_load_and_repair_dispatch_through_the_registry(tmp_path, probe_kind):
    path = tmp_path / "probe.bin"
    write_container(path, "test_probe_index", {}, {"ids": np.arange(4, dtype=np.int64)})
    index = bbqlib.load(path, mmap=False)
    assert type(index) is _Probe and index.ntotal == 4
    assert _Probe.opened == [{"mmap": False}]  # the caller's options reach its open
    report = bbqlib.repair(path)
    assert report.kind == "test_probe" and report.status == "ok"
    INDEX_KINDS.pop("test_probe")
    with pytest.raises(ValueError, match="'test_probe_index', which bbqlib.load cannot open"):
        bbqlib.load(path)
    assert bbqlib.repair(path).kind == "container"


def test_load_and_repair_find_the_built_in_kinds(tmp_path, flat, ivf):
    flat.save(tmp_path / "f.bbq")
    ivf.save(tmp_path / "ivf")
    assert type(bbqlib.load(tmp_path / "f.bbq")) is bbqlib.FlatIndex
    assert type(bbqlib.load(tmp_path / "ivf")) is bbqlib.IVFIndex
    assert bbqlib.repair(tmp_path / "f.bbq").kind == "flat"
    assert bbqlib.repair(tmp_path / "ivf").kind == "ivf"
    assert bbqlib.IVFIndex.coerce(tmp_path / "ivf").ntotal == ivf.ntotal
    assert bbqlib.IVFIndex.coerce(ivf) is ivf


def test_warmup_dispatches_through_the_index_hooks(monkeypatch, probe_kind, flat):
    folders = []
    monkeypatch.setattr(_Probe, "warm_saved_kernels", classmethod(lambda cls, f: folders.append(f)))
    bbqlib.warmup()
    assert len(folders) == 1  # every registered kind, in one temporary folder
    opened = []
    monkeypatch.setattr(type(flat), "warmup_tiers", lambda self: opened.append(self) or ())
    bbqlib.warmup(flat, batch=False)
    assert opened == [flat]


def test_the_fast_options_cache_stays_bounded(flat):
    index_base._FAST.clear()
    for k in range(1, index_base._FAST_SIZE + 10):
        assert flat._fast_options(k, None, None, "raw", True) is not None
    assert len(index_base._FAST) <= index_base._FAST_SIZE


@pytest.mark.parametrize("engine", ["faiss", "usearch"])
def test_adapter_searches_wait_for_an_add(monkeypatch, X, engine):
    """The adapters take the index guard: a search during an add sees it before or after."""
    import threading

    pytest.importorskip(engine)
    if engine == "faiss":
        from bbqlib.integrations.faiss import FaissIVFIndex as cls

        index = cls(nlist=4, nprobe=4, bits=1, similarity="euclidean")
        slow = "_store"
    else:
        from bbqlib.integrations.usearch import USearchIndex as cls

        index = cls(bits=1, similarity="euclidean")
        slow = "_add"
    index.add(X[:200])
    entered, release = threading.Event(), threading.Event()
    original = getattr(cls, slow)

    def held(self, *args):
        entered.set()
        release.wait(10)
        return original(self, *args)

    monkeypatch.setattr(cls, slow, held)
    writer = threading.Thread(target=index.add, args=(X[200:],))
    writer.start()
    assert entered.wait(10)
    found = []
    reader = threading.Thread(target=lambda: found.append(index.search(X[:1], k=3)))
    reader.start()
    reader.join(0.3)
    assert not found  # waits for the add
    release.set()
    writer.join(10)
    reader.join(10)
    assert len(found) == 1 and index.ntotal == len(X)


def test_the_last_call_s_options_serve_the_next_identical_call(X):
    index = bbqlib.FlatIndex(bits=1)
    index.add(X[:50])
    first = index._fast_options(4, None, None, "raw", None)
    assert index._fast_last[-1] is first
    assert index._fast_options(4, None, None, "raw", None) is first
    index.oversample = 6.0  # the index's defaults are part of the call
    assert index._fast_options(4, None, None, "raw", None).oversample == 6.0
    index.store_vectors = False
    assert index._fast_options(4, None, None, "raw", None).rerank is False
    assert index._fast_options(4, None, True, "raw", None) is None  # no vectors: batch raises
    assert "_fast_last" not in index.__getstate__()


def test_usearch_rerank_none_follows_attached_vectors(X):
    pytest.importorskip("usearch")
    from bbqlib.integrations.usearch import USearchIndex

    index = USearchIndex(bits=1, similarity="euclidean", store_vectors=False)
    index.add(X)
    assert index._search_options(3, None, None, "raw", None).rerank is False
    index.attach_vectors(X)
    assert index._search_options(3, None, None, "raw", None).rerank is True
    np.testing.assert_array_equal(index.search(X[:2], k=3, rerank=None)[1][:, 0], [0, 1])
