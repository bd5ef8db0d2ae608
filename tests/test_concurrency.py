"""The concurrency contract (docs/concurrency.md) and owned data (issue 12).

Stress tests run threads for a bounded time (``BBQLIB_STRESS_SECONDS``, default 2 s each)
and assert: no exception in any thread, no lost or duplicated row, every returned id valid
(issued, not deleted before the search began, at most once per result row). Longer runs
with rates: ``benchmarks/faults/faults.py``.
"""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pytest
from fault_harness import unit_rows

import bbqlib

SECONDS = float(os.environ.get("BBQLIB_STRESS_SECONDS", "2"))
SIMILARITIES = ["cosine", "dot_product", "euclidean", "max_inner_product"]


class Stress:
    """One writer and ``readers`` searching threads for ``seconds``; failures collected."""

    def __init__(self, seconds: float = SECONDS, readers: int = 3):
        self.seconds, self.readers = seconds, readers
        self.errors: list[BaseException] = []
        self.searches = 0
        self.stop = threading.Event()
        self._count = threading.Lock()

    def run(self, write_once, search_once) -> None:
        def writer():
            try:
                while not self.stop.is_set():
                    if write_once() is False:
                        break
            except BaseException as err:  # noqa: BLE001 - reported below
                self.errors.append(err)
            finally:
                self.stop.set()

        def reader(seed):
            rng = np.random.default_rng(seed)
            try:
                while not self.stop.is_set():
                    search_once(rng)
                    with self._count:
                        self.searches += 1
            except BaseException as err:  # noqa: BLE001
                self.errors.append(err)
                self.stop.set()

        threads = [threading.Thread(target=writer)]
        threads += [threading.Thread(target=reader, args=(s,)) for s in range(self.readers)]
        for t in threads:
            t.start()
        self.stop.wait(self.seconds)
        self.stop.set()
        for t in threads:
            t.join(60)
        assert not any(t.is_alive() for t in threads), "a thread hangs"
        if self.errors:
            raise self.errors[0]


def _check_result(ids: np.ndarray, ntotal_after: int, forbidden=()) -> None:
    for row in ids:
        valid = row[row >= 0]
        assert valid.size == np.unique(valid).size, f"duplicate ids in one result: {row}"
        assert (valid < ntotal_after).all(), f"ids beyond ntotal {ntotal_after}: {row}"
        assert not np.isin(valid, forbidden).any(), f"a deleted id was returned: {row}"


def test_flat_concurrent_adds_and_searches():
    d, batch = 32, 100
    pool = unit_rows(12_000, d, 1)
    index = bbqlib.FlatIndex(bits=4, similarity="cosine")
    index.add(pool[:500])
    added = [500]

    def write_once():
        n = added[0]
        if n + batch > pool.shape[0]:
            return False
        index.add(pool[n : n + batch])
        added[0] = n + batch

    def search_once(rng):
        known = added[0]
        r = rng.integers(0, known, 4)
        rerank = bool(rng.integers(0, 2))
        _, ids = index.search(pool[r], 10, rerank=rerank, oversample=3.0)
        _check_result(ids, index.ntotal)
        assert (ids >= 0).all()  # 10 <= ntotal: nothing to pad
        if rerank:  # rows added before the search began are in it: found first, exactly
            np.testing.assert_array_equal(ids[:, 0], r)

    stress = Stress()
    stress.run(write_once, search_once)
    assert stress.searches > 0 and added[0] > 500
    n = added[0]
    assert index.ntotal == n and len(index.codes) == n and index._parts()[1].shape == (n, d)
    _, ids = index.search(pool[:n], 1, oversample=5.0)  # no lost or duplicated row
    np.testing.assert_array_equal(ids[:, 0], np.arange(n))


def test_flat_adds_and_deletes_by_id_during_searches():
    """``add(X, ids=)`` and ``delete`` take the writer lock: a search sees the ids, codes,
    vectors and tombstones of one moment (never a deleted id, never an id not issued)."""
    d = 16
    pool = unit_rows(8_000, d, 4)
    index = bbqlib.FlatIndex(bits=2, similarity="euclidean")

    def ident(rows):
        return np.asarray(rows, dtype=np.int64) * 5 + 3

    index.add(pool[:400], ids=ident(np.arange(400)))
    added, deleted = [400], []
    rng_w = np.random.default_rng(12)

    def write_once():
        n = added[0]
        if n + 80 > pool.shape[0]:
            return False
        if rng_w.integers(0, 2):
            index.add(pool[n : n + 80], ids=ident(np.arange(n, n + 80)))
            added[0] = n + 80
        else:
            live = np.setdiff1d(np.arange(n), deleted)
            gone = rng_w.choice(live, 10, replace=False)
            index.delete(ident(gone))
            deleted.extend(gone.tolist())

    def search_once(rng):
        forbidden = ident(np.array(deleted, dtype=np.int64))
        r = rng.integers(0, added[0], 4)
        _, ids = index.search(pool[r], 8, rerank=bool(rng.integers(0, 2)))
        assert ((ids == -1) | (ids % 5 == 3)).all(), f"an id never issued: {ids}"
        assert not np.isin(ids, forbidden).any(), f"a deleted id was returned: {ids}"
        _check_result(np.where(ids >= 0, ids // 5, -1), index.ntotal)

    stress = Stress()
    stress.run(write_once, search_once)
    assert stress.searches > 0
    n, gone = added[0], np.array(deleted, dtype=np.int64)
    assert index.ntotal == n and len(index) == n - gone.size
    live = np.setdiff1d(np.arange(n), gone)
    _, ids = index.search(pool[live], 1, oversample=5.0)
    np.testing.assert_array_equal(ids[:, 0], ident(live))  # nothing lost or duplicated


def test_flat_readding_rows_loses_none():
    X = unit_rows(300, 16, 2)
    index = bbqlib.FlatIndex(bits=2, similarity="euclidean")
    index.add(X)
    rounds = [1]

    def write_once():
        index.add(X)
        rounds[0] += 1
        return rounds[0] < 40

    def search_once(rng):
        _, ids = index.search(X[rng.integers(0, 300, 3)], 5)
        _check_result(ids, index.ntotal)

    Stress().run(write_once, search_once)
    n = 300 * rounds[0]
    assert index.ntotal == n and len(index.codes) == n and index._parts()[1].shape == (n, 16)


def _ivf_id(rows):
    return np.asarray(rows, dtype=np.int64) * 3 + 1


@pytest.mark.parametrize("on_disk", [False, True], ids=["ram", "directory"])
def test_ivf_concurrent_adds_deletes_and_searches(tmp_path, on_disk):
    d = 24
    pool = unit_rows(20_000, d, 3)
    index = bbqlib.IVFIndex(bits=1, similarity="cosine", cluster_size=64, seed=7,
                            path=tmp_path / "ivf" if on_disk else None)  # fmt: skip
    index.add(pool[:1500], ids=_ivf_id(np.arange(1500)))  # custom ids: mapped under the lock
    added, deleted = [1500], []
    rng_w = np.random.default_rng(11)

    def write_once():
        n = added[0]
        if n + 50 > pool.shape[0]:
            return False
        if rng_w.integers(0, 3):
            index.add(pool[n : n + 50], ids=_ivf_id(np.arange(n, n + 50)))
            added[0] = n + 50
        else:
            live = np.setdiff1d(np.arange(n), deleted)
            gone = rng_w.choice(live, 5, replace=False)
            index.delete(_ivf_id(gone))
            deleted.extend(gone.tolist())

    def search_once(rng):
        forbidden = np.array(deleted)  # deleted before this search began: never returned
        q = pool[rng.integers(0, added[0], 3)]
        _, ids = index.search(q, 10, visit_percentage=float(rng.choice([5.0, 30.0])))
        assert ((ids == -1) | (ids % 3 == 1)).all(), f"an id never issued: {ids}"
        _check_result(np.where(ids >= 0, ids // 3, -1), index.ntotal, forbidden)

    stress = Stress()
    stress.run(write_once, search_once)
    assert stress.searches > 0
    n, gone = added[0], np.array(deleted, dtype=np.int64)
    for ix in [index] + ([bbqlib.IVFIndex.open(tmp_path / "ivf")] if on_disk else []):
        assert ix.ntotal == n and len(ix) == n - gone.size
        live = np.setdiff1d(np.arange(n), gone)
        _, ids = ix.search(pool[live], 1, visit_percentage=100.0, oversample=20.0)
        np.testing.assert_array_equal(ids[:, 0], _ivf_id(live))  # nothing lost or duplicated
        ix.verify()
    if on_disk:  # a single generation's files remain
        names = sorted(p.name for p in (tmp_path / "ivf").iterdir())
        assert len([n for n in names if n.startswith("header.")]) == 1
        assert not [n for n in names if n.startswith(".")]


def test_writes_are_serialized():
    X = unit_rows(4000, 16, 4)
    index = bbqlib.FlatIndex(bits=4, similarity="cosine")
    threads = [
        threading.Thread(target=lambda i=i: index.add(X[i * 500 : (i + 1) * 500])) for i in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert index.ntotal == 4000 and index._parts()[1].shape == (4000, 16)
    _, ids = index.search(X, 1, oversample=5.0)
    assert sorted(ids[:, 0].tolist()) == list(range(4000))  # each batch once, rows intact


def test_indexes_pickle_without_their_locks():
    import pickle

    X = unit_rows(300, 8, 5)
    for index in (bbqlib.FlatIndex(bits=1), bbqlib.IVFIndex(bits=1, cluster_size=64)):
        index.add(X)
        again = pickle.loads(pickle.dumps(index))
        np.testing.assert_array_equal(again.search(X[:5], 3)[1], index.search(X[:5], 3)[1])
        again.add(X[:10])  # a fresh guard works


# ------------------------------------------------------------------ own your data


def _batches_through_one_buffer(X, batch):
    buf = np.empty((batch, X.shape[1]), dtype=np.float32)
    for start in range(0, X.shape[0], batch):
        buf[:] = X[start : start + batch]
        yield buf


@pytest.mark.parametrize("similarity", SIMILARITIES)
@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_reusing_one_buffer_for_every_batch(kind, similarity):
    X = unit_rows(1200, 20, 6) * (1.0 if similarity == "dot_product" else 3.0)
    Q = unit_rows(20, 20, 7)

    def make():
        if kind == "flat":
            return bbqlib.FlatIndex(bits=1, similarity=similarity)
        return bbqlib.IVFIndex(bits=1, similarity=similarity, cluster_size=64, seed=3)

    reused, fresh = make(), make()
    fresh.add(X[:400].copy(), ids=np.arange(400) * 2 + 9)
    ids = np.empty(400, dtype=np.int64)  # the ids go through one buffer too
    for i, b in enumerate(_batches_through_one_buffer(X, 400)):
        ids[:] = np.arange(i * 400, (i + 1) * 400) * 2 + 9
        reused.add(b, ids=ids)
        if fresh.ntotal < reused.ntotal:
            fresh.add(b.copy(), ids=ids.copy())
    b[:] = 0.0  # the caller keeps scribbling on its buffers
    ids[:] = 0
    kwargs = {"visit_percentage": 50.0} if kind == "ivf" else {}
    for rerank in (True, False):
        got = reused.search(Q, 10, rerank=rerank, **kwargs)
        want = fresh.search(Q, 10, rerank=rerank, **kwargs)
        np.testing.assert_array_equal(got[1], want[1])
        np.testing.assert_array_equal(got[0], want[0])


def test_search_never_writes_into_the_queries():
    X = unit_rows(200, 8, 8) * 2
    Q = X[:5].copy()
    keep = Q.copy()
    for index in (bbqlib.FlatIndex(bits=1, similarity="cosine"),
                  bbqlib.IVFIndex(bits=1, similarity="cosine", cluster_size=64)):  # fmt: skip
        index.add(X)
        index.search(Q, 3)
        np.testing.assert_array_equal(Q, keep)


def test_stress_seconds_are_bounded():
    t0 = time.perf_counter()
    Stress(seconds=0.2).run(lambda: time.sleep(0.01), lambda rng: time.sleep(0.01))
    assert time.perf_counter() - t0 < 30


@pytest.mark.parametrize("engine", ["faiss", "hnswlib", "usearch"])
def test_adapters_keep_their_own_copy(engine):
    pytest.importorskip(engine)
    X = unit_rows(900, 16, 9) * 2.0
    if engine == "usearch":
        from bbqlib.integrations.usearch import USearchIndex

        index = USearchIndex(bits=1, similarity="euclidean")
    elif engine == "faiss":
        from bbqlib.integrations.faiss import FaissIVFIndex

        index = FaissIVFIndex(nlist=8, nprobe=8, bits=1, similarity="euclidean")
    else:
        from bbqlib.integrations.hnswlib import HnswlibIVFIndex

        index = HnswlibIVFIndex(cluster_size=64, nprobe=8, bits=1, similarity="euclidean")
    for b in _batches_through_one_buffer(X, 300):
        index.add(b)
    b[:] = 0.0
    kept = index._vectors if engine != "usearch" else np.concatenate(index._vectors)
    np.testing.assert_array_equal(kept, X)


def test_ivf_save_to_another_directory_writes_a_snapshot_while_adds_go_on(tmp_path, monkeypatch):
    """A save of an in-memory IVF writes the index as of its start without holding the write
    guard: an add in another thread completes while the save's files are being written, and
    the saved directory holds the state the save started from."""
    from bbqlib.index.ivf import files as F

    index = bbqlib.IVFIndex(bits=1, similarity="euclidean", cluster_size=64)
    index.add(unit_rows(600, 24, 0))
    writing, release = threading.Event(), threading.Event()
    save = F.save

    def slow_save(work, path):
        writing.set()
        assert release.wait(30)
        save(work, path)

    monkeypatch.setattr(F, "save", slow_save)
    saver = threading.Thread(target=index.save, args=(tmp_path / "copy",))
    saver.start()
    assert writing.wait(30)
    index.add(unit_rows(10, 24, 1))  # would wait for the save if it held the guard
    assert index.ntotal == 610
    release.set()
    saver.join(30)
    assert bbqlib.IVFIndex.open(tmp_path / "copy").ntotal == 600
    index.save(tmp_path / "copy")
    assert bbqlib.IVFIndex.open(tmp_path / "copy").ntotal == 610
