"""HDF5 is parsed in a worker process that may hang or crash, never the caller (issue 12):
a damaged file that makes libhdf5 loop, a worker that dies and one that never answers all
give a ``CorruptFileError`` naming the file; healthy files read as h5py reads them."""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest
from fault_harness import unit_rows
from paths import FIXTURES

from bbqlib import CorruptFileError
from bbqlib.formats import hdf5_guard
from bbqlib.formats.ann_benchmarks import read_ann_benchmarks, read_ann_benchmarks_metric

h5py = pytest.importorskip("h5py", reason="h5py (bbqlib[hdf5]) is not installed")

HDF5 = FIXTURES / "hdf5"


@pytest.fixture
def fresh_worker():
    """Each test starts and leaves without a worker (some replace the worker's code)."""
    hdf5_guard._stop_worker()
    yield
    hdf5_guard._stop_worker()


def _write(path, train, test, neighbors, distances, distance="angular", **kwargs):
    with h5py.File(path, "w") as f:
        f.attrs["distance"] = distance
        for name, arr in zip(("train", "test", "neighbors", "distances"),
                             (train, test, neighbors, distances), strict=True):  # fmt: skip
            f.create_dataset(name, data=arr, **kwargs)
    return path


def test_a_file_that_makes_libhdf5_loop_is_a_clean_error(tmp_path, fresh_worker):
    path = tmp_path / "loop.hdf5"
    shutil.copy(HDF5 / "attribute_loop.hdf5", path)
    train, test, _, _ = read_ann_benchmarks(path)  # the datasets are intact; starts the worker
    assert train.shape == (64, 12) and test.shape == (4, 12)
    with pytest.raises(CorruptFileError, match="loop.hdf5"):
        read_ann_benchmarks_metric(path, timeout=5.0)  # the attributes make libhdf5 loop
    # the looping worker was killed; the next read starts another one
    assert np.array_equal(read_ann_benchmarks(path).train, train)


@pytest.mark.parametrize(
    ("worker", "match"),
    [
        ("import os, signal, sys; sys.stdin.readline(); os.kill(os.getpid(), signal.SIGSEGV)",
         "crashed"),
        ("import sys, time; sys.stdin.readline(); time.sleep(600)", "did not finish"),
        ("import sys; sys.stdin.readline(); print('garbage', flush=True)", "unreadable answer"),
    ],
)  # fmt: skip
def test_a_worker_that_dies_or_hangs_is_a_clean_error(
    tmp_path, fresh_worker, monkeypatch, worker, match
):
    if "SIGSEGV" in worker and os.name != "posix":
        pytest.skip("POSIX signals")
    X = unit_rows(10, 4, 0)
    path = _write(tmp_path / "ok.hdf5", X, X[:2], np.zeros((2, 1), int), np.zeros((2, 1)))
    monkeypatch.setattr(hdf5_guard, "_WORKER", worker)
    with pytest.raises(CorruptFileError, match=f"ok.hdf5.*{match}|{match}.*ok.hdf5"):
        read_ann_benchmarks(path, timeout=3.0)
    hdf5_guard._stop_worker()
    monkeypatch.undo()
    assert np.array_equal(read_ann_benchmarks(path).train, X)  # a healthy worker again


@pytest.mark.parametrize("layout", ["contiguous", "chunked", "gzip"])
@pytest.mark.parametrize("mmap", [False, True])
def test_every_layout_reads_as_h5py_reads_it(tmp_path, layout, mmap):
    rng = np.random.default_rng(1)
    train = rng.standard_normal((300, 7)).astype(np.float32)
    test = rng.standard_normal((5, 7)).astype(np.float32)
    nn = rng.integers(0, 300, (5, 4)).astype(np.int64)
    dist = rng.random((5, 4))
    kw = {"contiguous": {}, "chunked": {"chunks": True}, "gzip": {"compression": "gzip"}}
    path = _write(tmp_path / "x.hdf5", train, test, nn, dist, "euclidean", **kw[layout])
    got = read_ann_benchmarks(path, mmap=mmap)
    for a, b in zip(got, (train, test, nn, dist), strict=True):
        assert a.dtype == b.dtype and np.array_equal(a, b)
    assert isinstance(got.train, np.memmap) == (mmap and layout == "contiguous")
    assert read_ann_benchmarks_metric(path) == "euclidean"
    assert not any(p.name.startswith("bbqlib-h5-") for p in tmp_path.iterdir())


@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"distance": "angulas"}, "none of ann-benchmarks' metrics"),
        ({"train": np.zeros((10, 4), np.uint32)}, "same type of values"),
        ({"neighbors": np.full((2, 1), 10)}, r"in \[0, 10\)"),
        ({"neighbors": np.zeros((2, 1))}, "integer ids"),
        ({"test": np.zeros((2, 5), np.float32)}, "inconsistent shapes"),
    ],
)  # fmt: skip
def test_values_that_cannot_be_right_are_corrupt(tmp_path, change, match):
    X = unit_rows(10, 4, 0)
    parts = {"train": X, "test": X[:2], "neighbors": np.zeros((2, 1), int),
             "distances": np.zeros((2, 1)), "distance": "angular", **change}  # fmt: skip
    path = _write(tmp_path / "odd.hdf5", **parts)
    with pytest.raises(CorruptFileError, match=match):
        read_ann_benchmarks(path)
        read_ann_benchmarks_metric(path)


def test_bad_timeout_names_the_parameter(tmp_path):
    X = unit_rows(10, 4, 0)
    path = _write(tmp_path / "ok.hdf5", X, X[:2], np.zeros((2, 1), int), np.zeros((2, 1)))
    with pytest.raises(ValueError, match="timeout"):
        read_ann_benchmarks(path, timeout=0)
