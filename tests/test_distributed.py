"""bbqlib.distributed on a LocalCluster of worker processes (small data; issue 17).

One cluster (2 worker processes of one thread each) serves the module. Faults are injected by
a worker plugin that kills its own process (``os._exit``) while a build task runs, as a
machine failure would.
"""

from __future__ import annotations

import os
import shutil
import sys
import threading
import time

import numpy as np
import pytest

pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")

import bbqlib  # noqa: E402
from bbqlib.analysis.ground_truth import exact_knn  # noqa: E402
from bbqlib.distributed import BuildError, ShardedIndex, build_ivf, encode  # noqa: E402

N, D, NQ = 4000, 48, 100


def _data():
    g = np.random.default_rng(7)
    centres = g.normal(size=(30, D)).astype(np.float32) * 2
    X = centres[g.integers(0, 30, N + NQ)] + g.normal(size=(N + NQ, D)).astype(np.float32)
    return X[:N].copy(), X[N:].copy()


@pytest.fixture(scope="module")
def data():
    X, Q = _data()
    Xn = X / np.linalg.norm(X, axis=1, keepdims=True)
    _, gt = exact_knn(Xn, Q, 10, "cosine", scores_first=True)
    return X, Q, gt


@pytest.fixture(scope="module")
def client():
    import cloudpickle
    import dask

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    # When a worker process dies (the kill test), its nanny starts a new one; but if that
    # one has not registered within ``lost-worker-timeout`` (15 s; a loaded machine can take
    # longer to start an interpreter with Dask and numba), LocalCluster closes the nanny for
    # good, and the module's cluster keeps one worker (the kill test's wait for 2 workers
    # then fails: seen in 2 of 5 repeats at load 12).
    with dask.config.set({"distributed.deploy.lost-worker-timeout": "10 minutes"}):
        cluster = distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            env={"NUMBA_NUM_THREADS": "1"},
        )
        with distributed.Client(cluster) as c:
            yield c
        cluster.close()


def _recall(ids, gt) -> float:
    return float(np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids, gt, strict=True)]))


def _chunks(X, rows=700):
    import dask.array as da

    return da.from_array(X, chunks=(rows, X.shape[1]))


# ----------------------------------------------------------------------------- encode
@pytest.mark.parametrize(
    "quantizer",
    [
        bbqlib.BBQQuantizer(bits=1, similarity="cosine"),
        bbqlib.BBQQuantizer(bits=4, similarity="euclidean"),
        bbqlib.RaBitQQuantizer(bits=3, similarity="euclidean"),
    ],
    ids=["bbq1-cos", "bbq4-l2", "rabitq3-l2"],
)
def test_encode_is_bit_identical_to_local(client, data, quantizer):
    X = data[0]
    q = quantizer.fit(X)
    codes, corr = encode(q, _chunks(X))
    codes, corr = client.compute([codes, corr], sync=True)
    local = q.encode(X)
    assert np.array_equal(codes, local.codes)
    assert corr.tobytes() == local.corrections.tobytes()


def test_encode_to_directory(client, data, tmp_path):
    X = data[0]
    q = bbqlib.BBQQuantizer(bits=2, similarity="cosine").fit(X)
    assert encode(q, _chunks(X, 1500), path=tmp_path, client=client) == N
    codes = np.concatenate([np.load(p) for p in sorted(tmp_path.glob("*.codes.npy"))])
    assert np.array_equal(codes, q.encode(X).codes)


# ----------------------------------------------------------------------------- build
@pytest.fixture(scope="module")
def built(client, data, tmp_path_factory):
    """One distributed build of the test data (cluster, 700-row partitions)."""
    path = tmp_path_factory.mktemp("built") / "ivf"
    build_ivf(_chunks(data[0]), path, cluster_size=64, client=client)
    return path


def test_build_opens_and_matches_the_single_process_recall(built, data, tmp_path):
    X, Q, gt = data
    index = bbqlib.IVFIndex.open(built)
    assert index.ntotal == N
    assert index.verify()["vector_segments"] == 1  # one .npy, filled in place by the workers
    local = bbqlib.IVFIndex(cluster_size=64)
    local.add(X)
    assert abs(index.n_lists - local.n_lists) <= 0.1 * local.n_lists
    for vp in (5, 20):
        r_dist = _recall(index.search(Q, 10, visit_percentage=vp)[1], gt)
        r_local = _recall(local.search(Q, 10, visit_percentage=vp)[1], gt)
        assert r_dist >= r_local - 0.005, (vp, r_dist, r_local)
    # every vector has its primary entry, at most one spill, none lost in the merge
    ids = np.asarray(index._postings.ids)
    assert np.array_equal(np.unique(ids), np.arange(N))
    assert np.bincount(ids, minlength=N).max() <= 2
    assert not list(built.glob(".bbqlib-build-*"))
    # the directory is an ordinary IVF index: later adds and saves work
    shutil.copytree(built, tmp_path / "copy")
    copy = bbqlib.IVFIndex.open(tmp_path / "copy")
    copy.add(X[:10])
    assert bbqlib.IVFIndex.open(tmp_path / "copy").ntotal == N + 10


def test_build_writes_what_the_local_writer_writes(built, data, tmp_path):
    """The workers' posting file, vector file and header are what ``IVFIndex.save`` writes for
    the same lists: the distributed index is re-encoded in this process from its own
    assignments (the single-process ``encode_postings``) and saved by the local writer; both
    directories then hold the same arrays and ``IVFIndex.open`` serves the same results. This
    pins the distributed writer to the current IVF format (a new section or header field on
    either side fails here)."""
    from bbqlib._validation import prepare_for_similarity
    from bbqlib.index.ivf import storage as ST
    from bbqlib.index.ivf.build import encode_postings

    X, Q, _ = data
    dist = bbqlib.IVFIndex.open(built)
    ref = bbqlib.IVFIndex.open(built)
    q = ref.quantizer
    W = q.transform_rows(prepare_for_similarity(X, q.similarity_, "X"))
    assign = np.array(ref._assign)
    ref._postings = encode_postings(W, np.arange(N), ref.centroids_, assign[:, 0],
                                    assign[:, 1], q, False)  # fmt: skip
    ref.save(tmp_path / "ref")  # in-memory postings: the local writer's own path
    meta_a, head_a, post_a, seg_a = ST.open_generation(tmp_path / "ref")
    meta_b, head_b, post_b, seg_b = ST.open_generation(built)
    # tokens: random per generation and per posting file
    names = ("postings_file", "postings_bytes", "vector_segments", "generation", "token",
             "postings_token")  # fmt: skip
    assert {k: v for k, v in meta_a.items() if k not in names} == {
        k: v for k, v in meta_b.items() if k not in names
    }
    assert meta_a["postings_bytes"] == meta_b["postings_bytes"]
    for want, got in ((head_a, head_b), (post_a, post_b)):
        assert sorted(want) == sorted(got)
        for name in want:
            if isinstance(want[name], dict):  # e.g. the posting file's section CRC32s
                assert want[name] == got[name], name
                continue
            assert want[name].dtype == got[name].dtype, name
            assert np.array_equal(want[name], got[name]), name
    assert [(len(s), s.crc32) for s in seg_a] == [(len(s), s.crc32) for s in seg_b]
    # block CRC32s joined from the partitions' pieces (700-row partitions, 4,096-row blocks)
    assert [s.blocks.crcs.tolist() for s in seg_a] == [s.blocks.crcs.tolist() for s in seg_b]
    assert np.array_equal(seg_a[0].array, seg_b[0].array)
    ST.verify_generation(built)
    ref = bbqlib.IVFIndex.open(tmp_path / "ref")
    for kw in ({}, {"visit_percentage": 10}, {"visit_percentage": 100, "rerank": False}):
        for got, want in zip(dist.search(Q, 10, **kw), ref.search(Q, 10, **kw), strict=True):
            assert np.array_equal(got, want), kw


@pytest.mark.parametrize("kind", ["float16", "int8"])
def test_float16_and_int8_vectors_are_the_local_builds_bytes(client, data, tmp_path, kind):
    """``store_vectors="float16" | "int8"`` (IVF format 6): each worker converts its rows
    with the local conversion and writes them in place; the vector file (header included),
    its CRC32 and block CRC32s are those of ``IVFIndex(path=..., store_vectors=kind).add``."""
    from bbqlib.index.ivf import storage as ST

    X, Q, gt = data
    got = build_ivf(_chunks(X), tmp_path / "d", cluster_size=64, store_vectors=kind,
                    client=client)  # fmt: skip
    local = bbqlib.IVFIndex(cluster_size=64, store_vectors=kind, path=tmp_path / "l")
    local.add(X)
    meta_d, _, _, seg_d = ST.open_generation(tmp_path / "d")
    meta_l, _, _, seg_l = ST.open_generation(tmp_path / "l")
    assert meta_d["vector_dtype"] == meta_l["vector_dtype"] == kind
    assert len(seg_d) == len(seg_l) == 1
    assert seg_d[0].file.read_bytes() == seg_l[0].file.read_bytes()
    assert seg_d[0].crc32 == seg_l[0].crc32
    assert seg_d[0].blocks.crcs.tolist() == seg_l[0].blocks.crcs.tolist()
    ST.verify_generation(tmp_path / "d")
    assert got.store_vectors == kind
    assert _recall(got.search(Q, 10, visit_percentage=20)[1], gt) >= 0.9


def test_oversized_lists_are_split_as_the_local_build_splits(client, data, tmp_path):
    """The re-split of lists above ``SPLIT_FACTOR · cluster_size`` (the local build's rule and
    code, :func:`~bbqlib.index.ivf.build.split_lists`) runs in the distributed build too:
    with the limit lowered to ``1 · cluster_size`` both builds make the same list profile,
    more lists than without the split."""
    from bbqlib.index.ivf import build as IB

    X = data[0]

    def profile(index):
        sizes = np.bincount(np.asarray(index._assign)[:, 0], minlength=index.n_lists)
        return index.n_lists, sizes

    unsplit, _ = profile(build_ivf(_chunks(X), tmp_path / "u", cluster_size=64, client=client))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(IB, "SPLIT_FACTOR", 1)
        dist = build_ivf(_chunks(X), tmp_path / "d", cluster_size=64, client=client)
        local = bbqlib.IVFIndex(cluster_size=64)
        local.add(X)
    k_d, sizes_d = profile(dist)
    k_l, sizes_l = profile(local)
    assert k_d > unsplit + 10 and k_l > unsplit + 10  # the split ran in both
    assert abs(k_d - k_l) <= 0.03 * k_l, (k_d, k_l)
    q = [10, 50, 90, 100]
    assert np.allclose(np.percentile(sizes_d, q), np.percentile(sizes_l, q), rtol=0.1, atol=3)


def test_build_from_files_without_client_equals_build_on_cluster(built, data, tmp_path):
    X, Q, _ = data
    shards = tmp_path / "shards"
    shards.mkdir()
    for i, s in enumerate(range(0, N, 700)):  # the fixture's partitions, as .npy files
        np.save(shards / f"part-{i:02d}.npy", X[s : s + 700])
    with pytest.MonkeyPatch.context() as mp:  # no current client: tasks run in-process
        mp.setattr("bbqlib.distributed.build.resolve_client", lambda c: None)
        b = build_ivf(shards, tmp_path / "b", cluster_size=64)
    a = bbqlib.IVFIndex.open(built)
    assert np.array_equal(a.centroids_, b.centroids_)
    for got, want in zip(a.search(Q, 10), b.search(Q, 10), strict=True):
        assert np.array_equal(got, want)


# ----------------------------------------------------------------------------- shards
def test_sharded_search_is_identical_to_the_union(client, data, tmp_path):
    X, Q, gt = data
    half = N // 2
    s0 = build_ivf(_chunks(X[:half]), tmp_path / "s0", cluster_size=64, soar=False, client=client)
    build_ivf(_chunks(X[half:]), tmp_path / "s1", like=s0, soar=False, client=client)
    union = build_ivf(_chunks(X), tmp_path / "u", like=s0, soar=False, client=client)
    sharded = ShardedIndex.open([tmp_path / "s0", tmp_path / "s1"], client=client)
    assert sharded.ntotal == N and len(sharded) == N
    for kw in ({"visit_percentage": 100, "oversample": 1000},
               {"visit_percentage": 100, "rerank": False}):  # fmt: skip
        got = sharded.search(Q, 10, **kw)
        want = union.search(Q, 10, **kw)
        assert np.array_equal(got[1], want[1]), kw
        np.testing.assert_array_equal(got[0], want[0])
    # partial visits: each shard spends its own budget; recall no worse than the union's
    r_sharded = _recall(sharded.search(Q, 10, visit_percentage=10)[1], gt)
    r_union = _recall(union.search(Q, 10, visit_percentage=10)[1], gt)
    assert r_sharded >= r_union - 0.005
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("bbqlib.distributed.sharded.resolve_client", lambda c: None)
        local = ShardedIndex.open([tmp_path / "s0", tmp_path / "s1"])
    assert np.array_equal(local.search(Q, 10)[1], sharded.search(Q, 10)[1])
    sharded.close()


# ----------------------------------------------------------------------------- faults
class _KillDuringTask(distributed.WorkerPlugin):
    """Kill this worker process (os._exit) shortly after a task of ``prefix`` starts.

    ``once``: only the first time across the cluster (a marker file says it happened).
    """

    def __init__(self, prefix: str, marker: str, once: bool):
        self.prefix, self.marker, self.once = prefix, marker, once

    def transition(self, key, start, finish, **kwargs):
        name = key if isinstance(key, str) else str(key)
        if finish != "executing" or not name.startswith(self.prefix):
            return
        if self.once:
            try:
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL))
            except FileExistsError:
                return

        def die():
            time.sleep(0.05)
            os._exit(1)

        threading.Thread(target=die, daemon=True).start()


def _unregister(client, name):
    client.unregister_worker_plugin(name)
    client.wait_for_workers(2, timeout=180)


def test_worker_killed_mid_build_is_retried(client, built, data, tmp_path):
    X, Q, _ = data
    want = bbqlib.IVFIndex.open(built)
    plugin = _KillDuringTask("bbqlib-encode-", str(tmp_path / "killed"), once=True)
    client.register_plugin(plugin, name="kill-once")
    try:
        got = build_ivf(_chunks(X), tmp_path / "ivf", cluster_size=64, client=client)
    finally:
        _unregister(client, "kill-once")
    assert (tmp_path / "killed").exists()  # a worker did die mid-task
    for a, b in zip(got.search(Q, 10), want.search(Q, 10), strict=True):
        assert np.array_equal(a, b)


class _FailMerges(distributed.WorkerPlugin):
    """Every merge task raises (a full disk, say) on every worker, for as long as registered."""

    def setup(self, worker):
        from bbqlib.distributed import _tasks

        def broken(*args, **kwargs):
            raise OSError(28, "No space left on device (injected by the test)")

        self.real = _tasks.write_rows
        _tasks.write_rows = broken

    def teardown(self, worker):
        from bbqlib.distributed import _tasks

        _tasks.write_rows = self.real


@pytest.mark.parametrize("existing", [False, True], ids=["new-dir", "over-an-index"])
def test_build_that_keeps_failing_leaves_no_half_index(client, built, data, tmp_path, existing):
    X, Q, _ = data
    path = tmp_path / "ivf"
    if existing:
        shutil.copytree(built, path)
        before = bbqlib.IVFIndex.open(path)
        files_before = sorted(p.name for p in path.iterdir())
        want = before.search(Q, 10)
    client.register_plugin(_FailMerges(), name="fail-merges")
    try:  # the merge writes the posting file: the failure comes after files were written
        with pytest.raises(BuildError, match="stage 'merge'.*No space left.*holds"):
            build_ivf(_chunks(X[:2000]), path, cluster_size=64, client=client)
    finally:
        client.unregister_worker_plugin("fail-merges")
    if existing:
        assert sorted(p.name for p in path.iterdir()) == files_before
        index = bbqlib.IVFIndex.open(path)
        assert index.ntotal == N
        for a, b in zip(index.search(Q, 10), want, strict=True):
            assert np.array_equal(a, b)
    else:
        assert not path.exists()


# ----------------------------------------------------------------------------- inputs
def test_inputs_from_vector_files_and_parquet(data, tmp_path):
    from bbqlib.distributed import from_files, from_parquet
    from bbqlib.formats.vectors import write_fbin, write_fvecs

    X = data[0][:1000]
    write_fvecs(tmp_path / "a.fvecs", X[:300])
    write_fbin(tmp_path / "b.fbin", X[300:700])
    np.save(tmp_path / "c.npy", X[700:])
    arr = from_files(tmp_path, block_bytes=100 * 4 * D)
    assert max(arr.chunks[0]) == 100
    assert np.array_equal(arr.compute(), X)
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    frame = pd.DataFrame({"id": np.arange(1000), "emb": list(X.astype(np.float32))})
    (tmp_path / "pq").mkdir()
    frame.iloc[:600].to_parquet(tmp_path / "pq" / "0.parquet")
    frame.iloc[600:].to_parquet(tmp_path / "pq" / "1.parquet")
    arr = from_parquet(tmp_path / "pq", "emb")
    assert arr.shape == X.shape
    assert np.array_equal(arr.compute(), X)


def test_errors_name_the_parameter(data, tmp_path):
    X = data[0]
    with pytest.raises(ValueError, match="sample"):
        build_ivf(X, tmp_path / "x", sample=0)
    with pytest.raises(ValueError, match="unique"):
        build_ivf(X, tmp_path / "x", ids=np.zeros(N, np.int64))
    with pytest.raises(TypeError, match="dask.array"):
        build_ivf(object(), tmp_path / "x")
    with pytest.raises(ValueError, match="store_vectors"):
        build_ivf(X, tmp_path / "x", store_vectors="bfloat16")
    with pytest.raises(ValueError, match="fitted"):
        encode(bbqlib.BBQQuantizer(), X)
    assert not (tmp_path / "x").exists()


def test_missing_dask_names_the_extra(monkeypatch):
    from bbqlib.distributed import _dask

    monkeypatch.setitem(sys.modules, "distributed", None)
    with pytest.raises(ImportError, match=r"bbqlib\[dask\]"):
        _dask.require()


def test_custom_ids_are_stored_and_returned(client, built, data, tmp_path):
    import dask.array as da

    X, Q, _ = data
    ids = np.arange(N, dtype=np.int64) * 7 + 10**12  # increasing: ties keep their order
    build_ivf(_chunks(X), tmp_path / "ivf", ids=da.from_array(ids, chunks=1000),
                      cluster_size=64, client=client)  # fmt: skip
    want = bbqlib.IVFIndex.open(built).search(Q, 10)
    got = bbqlib.IVFIndex.open(tmp_path / "ivf").search(Q, 10)
    assert np.array_equal(got[1], ids[want[1]])
    assert np.array_equal(got[0], want[0])
    shards = ShardedIndex.open([tmp_path / "ivf"], client=None)
    assert np.array_equal(shards.search(Q, 10)[1], got[1])


def test_import_bbqlib_does_not_import_dask():
    import subprocess

    code = "import sys, bbqlib, bbqlib.distributed; print('dask' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)  # fmt: skip
    assert out.stdout.strip() == "False"


def test_assigner_walk_finds_the_nearest_centroid():
    """The greedy walk over the centroid graph against brute force (parents exist: K > 1024)."""
    from bbqlib.distributed._assign import make_assigner
    from bbqlib.index.clustering import nearest_centroid, soar_assign

    g = np.random.default_rng(3)
    C = g.normal(size=(1100, 24)).astype(np.float32)
    W = (C[g.integers(0, 1100, 6000)] + 0.3 * g.normal(size=(6000, 24))).astype(np.float32)
    a = make_assigner(C, seed=1)
    assert 16 < a.parents.shape[0] < 100
    exact = nearest_centroid(W, C)
    got = a.nearest(W)
    assert np.mean(got == exact) >= 0.99
    d = lambda i, j: ((W[i] - C[j]) ** 2).sum(axis=-1)  # noqa: E731
    worse = d(np.arange(6000), got) - d(np.arange(6000), exact)
    # the misses are near-ties: they cost little distance (random centroids: a hard case)
    assert worse.min() >= 0 and np.mean(worse) < 0.02 * np.mean(d(np.arange(6000), exact))
    assert np.array_equal(a.nearest(W, exact), exact)  # a right start stays put
    assert np.array_equal(a.soar(W, exact, 1.0), soar_assign(W, C, exact))


def test_block_checksums_joined_from_partition_pieces():
    """The vector file's block CRC32s, joined on the driver from each partition's pieces,
    equal those of the whole matrix (blocks spanning 1-3 partitions, uneven partitions)."""
    from bbqlib.distributed._tasks import block_crc_pieces, join_blocks
    from bbqlib.storage.blocks import BlockChecksums

    rows = np.random.default_rng(3).normal(size=(1000, 5)).astype("<f4")
    cuts = [0, 7, 64, 65, 300, 301, 1000]
    results = [{"blocks_crc": block_crc_pieces(rows[a:b], a, block_rows=64)}
               for a, b in zip(cuts[:-1], cuts[1:], strict=True)]  # fmt: skip
    want = BlockChecksums.of(rows, 64).crcs
    assert np.array_equal(join_blocks(results, 1000, block_rows=64), want)
    with pytest.raises(RuntimeError, match="do not cover"):
        join_blocks(results[:-1], 1000, block_rows=64)


def test_a_build_whose_lock_cannot_be_taken_writes_nothing(built, data, tmp_path, monkeypatch):
    """Locks fail closed (issue 27): the build raises LockError naming the cause and the
    index it would have replaced is untouched; a symlinked directory builds in its target."""
    X, _, _ = data
    path = tmp_path / "ivf"
    shutil.copytree(built, path)
    before = sorted((p.name, p.stat().st_mtime_ns) for p in path.iterdir())
    real_open = os.open

    def no_lock(name, flags, *args, **kwargs):
        if str(name).endswith(".bbqlib.lock"):
            raise PermissionError(13, "Permission denied", str(name))
        return real_open(name, flags, *args, **kwargs)

    monkeypatch.setattr("bbqlib.distributed.build.resolve_client", lambda c: None)
    with monkeypatch.context() as mp:
        mp.setattr(os, "open", no_lock)
        with pytest.raises(bbqlib.LockError, match="EACCES"):
            build_ivf(X[:700], path, cluster_size=64)
    assert sorted((p.name, p.stat().st_mtime_ns) for p in path.iterdir()) == before
    link = tmp_path / "current"
    link.symlink_to(path)
    build_ivf(X[:700], link, cluster_size=64)
    assert link.is_symlink() and bbqlib.IVFIndex.open(path).ntotal == 700
