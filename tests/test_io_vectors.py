"""Tests for bbqlib.formats.vectors and bbqlib.formats.ann_benchmarks."""

from __future__ import annotations

import os
import struct
import sys

import numpy as np
import pytest

from bbqlib.formats.ann_benchmarks import (
    read_ann_benchmarks,
    read_ann_benchmarks_metric,
    write_ann_benchmarks,
)
from bbqlib.formats.vectors import (
    SUPPORTED_SUFFIXES,
    iter_vector_batches,
    read_vectors,
    write_bvecs,
    write_fbin,
    write_fvecs,
    write_ibin,
    write_ivecs,
    write_u8bin,
    write_vectors,
)

WRITERS = {
    ".fvecs": (write_fvecs, np.float32),
    ".ivecs": (write_ivecs, np.int32),
    ".bvecs": (write_bvecs, np.uint8),
    ".fbin": (write_fbin, np.float32),
    ".ibin": (write_ibin, np.int32),
    ".u8bin": (write_u8bin, np.uint8),
}


def _random(n: int, d: int, dtype, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal((n, d)).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=(n, d), endpoint=True, dtype=dtype)


def _no_temp_files(directory) -> bool:
    return not [p for p in os.listdir(directory) if p.endswith(".tmp")]


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("suffix", list(WRITERS))
@pytest.mark.parametrize("n, d", [(1, 1), (5, 3), (17, 7), (9, 65), (4, 384)])
def test_round_trip(tmp_path, suffix, n, d):
    writer, dtype = WRITERS[suffix]
    X = _random(n, d, dtype, seed=n * 1000 + d)
    path = writer(tmp_path / f"x{suffix}", X)
    for mmap in (True, False):
        Y = read_vectors(path, mmap=mmap)
        assert Y.dtype == dtype and Y.shape == (n, d)
        np.testing.assert_array_equal(Y, X)
    assert write_vectors(tmp_path / f"y{suffix}", X).read_bytes() == path.read_bytes()
    assert _no_temp_files(tmp_path)


def test_npy_round_trip_keeps_dtype(tmp_path):
    X = _random(6, 5, np.float32).astype(np.float16)
    path = write_vectors(tmp_path / "x.npy", X)
    for mmap in (True, False):
        Y = read_vectors(path, mmap=mmap)
        assert Y.dtype == np.float16
        np.testing.assert_array_equal(Y, X)
    assert isinstance(read_vectors(path), np.memmap)


def test_writers_cast_within_kind(tmp_path):
    X = np.linspace(-2.0, 2.0, 12).reshape(4, 3)  # float64 -> float32
    Y = read_vectors(write_fvecs(tmp_path / "a.fvecs", X))
    np.testing.assert_array_equal(Y, X.astype(np.float32))
    ids = np.arange(12, dtype=np.int64).reshape(4, 3)  # int64 in range -> int32
    np.testing.assert_array_equal(read_vectors(write_ibin(tmp_path / "a.ibin", ids)), ids)


def test_empty_bin_round_trip(tmp_path):
    path = write_fbin(tmp_path / "e.fbin", np.empty((0, 7), np.float32))
    assert path.stat().st_size == 8
    assert read_vectors(path).shape == (0, 7)


# --------------------------------------------------------------------------- memory maps


@pytest.mark.parametrize("suffix", [".fvecs", ".ivecs", ".bvecs", ".fbin", ".ibin", ".u8bin"])
def test_mmap_is_a_view_and_copy_is_owned(tmp_path, suffix):
    writer, dtype = WRITERS[suffix]
    X = _random(11, 9, dtype)
    path = writer(tmp_path / f"x{suffix}", X)
    view = read_vectors(path, mmap=True)
    assert isinstance(view, np.memmap) and not view.flags.writeable
    if suffix.endswith("vecs"):  # strided: skips each row's 4-byte header, no copy
        assert view.strides == (4 + 9 * np.dtype(dtype).itemsize, np.dtype(dtype).itemsize)
    copy = read_vectors(path, mmap=False)
    assert not isinstance(copy, np.memmap)
    assert copy.flags.c_contiguous and copy.flags.writeable and copy.flags.owndata
    np.testing.assert_array_equal(view, copy)


# --------------------------------------------------------------------------- standard layouts


def test_reads_hand_packed_vecs(tmp_path):
    """Bytes packed with struct as the TEXMEX spec says, not by our writer."""
    rows = [[1.5, -2.0, 3.25], [0.0, 1e-30, -7.0]]
    raw = b"".join(struct.pack("<i3f", 3, *r) for r in rows)
    (tmp_path / "h.fvecs").write_bytes(raw)
    np.testing.assert_array_equal(read_vectors(tmp_path / "h.fvecs"), np.array(rows, np.float32))
    assert write_fvecs(tmp_path / "w.fvecs", np.array(rows)).read_bytes() == raw

    raw = struct.pack("<i2i", 2, -1, 2**31 - 1) + struct.pack("<i2i", 2, 7, 0)
    (tmp_path / "h.ivecs").write_bytes(raw)
    np.testing.assert_array_equal(read_vectors(tmp_path / "h.ivecs"), [[-1, 2**31 - 1], [7, 0]])
    assert write_ivecs(tmp_path / "w.ivecs", [[-1, 2**31 - 1], [7, 0]]).read_bytes() == raw

    raw = struct.pack("<i4B", 4, 0, 1, 128, 255)
    (tmp_path / "h.bvecs").write_bytes(raw)
    np.testing.assert_array_equal(read_vectors(tmp_path / "h.bvecs"), [[0, 1, 128, 255]])
    assert write_bvecs(tmp_path / "w.bvecs", [[0, 1, 128, 255]]).read_bytes() == raw


def test_reads_hand_packed_bin(tmp_path):
    """big-ann-benchmarks layout: int32 n, int32 d, then n*d values row-major."""
    values = [1.0, 2.0, 3.0, 4.0, 5.0, -6.5]
    raw = struct.pack("<2i", 3, 2) + struct.pack("<6f", *values)
    (tmp_path / "h.fbin").write_bytes(raw)
    expected = np.array(values, np.float32).reshape(3, 2)
    np.testing.assert_array_equal(read_vectors(tmp_path / "h.fbin"), expected)
    assert write_fbin(tmp_path / "w.fbin", expected).read_bytes() == raw

    raw = struct.pack("<2i", 1, 3) + struct.pack("<3i", 5, -5, 2**31 - 1)
    (tmp_path / "h.ibin").write_bytes(raw)
    np.testing.assert_array_equal(read_vectors(tmp_path / "h.ibin"), [[5, -5, 2**31 - 1]])
    assert write_ibin(tmp_path / "w.ibin", [[5, -5, 2**31 - 1]]).read_bytes() == raw

    raw = struct.pack("<2i", 2, 2) + bytes([0, 9, 200, 255])
    (tmp_path / "h.u8bin").write_bytes(raw)
    np.testing.assert_array_equal(read_vectors(tmp_path / "h.u8bin"), [[0, 9], [200, 255]])
    assert write_u8bin(tmp_path / "w.u8bin", [[0, 9], [200, 255]]).read_bytes() == raw


def test_suffix_is_case_insensitive(tmp_path):
    (tmp_path / "UP.FVECS").write_bytes(struct.pack("<i1f", 1, 2.0))
    np.testing.assert_array_equal(read_vectors(tmp_path / "UP.FVECS"), [[2.0]])


# --------------------------------------------------------------------------- bad files


@pytest.mark.parametrize("suffix", [".fvecs", ".ivecs", ".bvecs"])
def test_truncated_vecs(tmp_path, suffix):
    writer, dtype = WRITERS[suffix]
    path = writer(tmp_path / f"t{suffix}", _random(4, 5, dtype))
    row = 4 + 5 * np.dtype(dtype).itemsize
    path.write_bytes(path.read_bytes()[:-1])
    with pytest.raises(ValueError, match=rf"t\{suffix}.*truncated.*{4 * row - 1} bytes") as info:
        read_vectors(path)
    assert f"{3 * row} or {4 * row}" in str(info.value)  # expected sizes around the actual one
    path.write_bytes(b"\x05\x00")
    with pytest.raises(ValueError, match="truncated: 2 bytes"):
        read_vectors(path)


def test_inconsistent_vecs_header(tmp_path):
    path = write_fvecs(tmp_path / "bad.fvecs", _random(5, 3, np.float32))
    raw = bytearray(path.read_bytes())
    raw[2 * 16 : 2 * 16 + 4] = struct.pack("<i", 4)  # row 2 claims d = 4, same total size
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match=r"bad\.fvecs.*row 2 has dimension header 4, expected 3"):
        read_vectors(path)
    path.write_bytes(struct.pack("<i", -3) + bytes(12))
    with pytest.raises(ValueError, match="dimension header is -3"):
        read_vectors(path)


@pytest.mark.parametrize("suffix", [".fbin", ".ibin", ".u8bin"])
def test_truncated_or_wrong_bin_header(tmp_path, suffix):
    writer, dtype = WRITERS[suffix]
    path = writer(tmp_path / f"t{suffix}", _random(4, 5, dtype))
    size = 8 + 20 * np.dtype(dtype).itemsize
    path.write_bytes(path.read_bytes()[:-1])
    with pytest.raises(ValueError, match=rf"n = 4, d = 5.*should be {size} bytes.*is {size - 1}"):
        read_vectors(path)
    path.write_bytes(struct.pack("<2i", 4, 6) + bytes(20 * np.dtype(dtype).itemsize))
    with pytest.raises(ValueError, match="n = 4, d = 6"):
        read_vectors(path)
    path.write_bytes(b"\x01\x00\x00")
    with pytest.raises(ValueError, match="8-byte header"):
        read_vectors(path)


def test_truncated_and_non_2d_npy(tmp_path):
    path = tmp_path / "t.npy"
    np.save(path, _random(8, 4, np.float32))
    path.write_bytes(path.read_bytes()[:-3])
    for mmap in (True, False):
        with pytest.raises(ValueError, match=r"t\.npy.*not a readable \.npy"):
            read_vectors(path, mmap=mmap)
    np.save(path, np.zeros(5, np.float32))
    with pytest.raises(ValueError, match=r"shape \(5,\).*2-D"):
        read_vectors(path)


@pytest.mark.parametrize("suffix", SUPPORTED_SUFFIXES)
def test_empty_and_missing_files(tmp_path, suffix):
    path = tmp_path / f"empty{suffix}"
    path.write_bytes(b"")
    with pytest.raises(ValueError, match=r"empty.*is empty \(0 bytes\)"):
        read_vectors(path)
    missing = tmp_path / f"missing{suffix}"
    with pytest.raises(FileNotFoundError, match=f"missing{suffix}"):
        read_vectors(missing)


def test_unknown_suffix(tmp_path):
    path = tmp_path / "x.hdf5"
    path.write_bytes(b"1234")
    with pytest.raises(ValueError, match=r"unsupported file suffix '\.hdf5'.*\.fvecs.*\.u8bin"):
        read_vectors(path)
    with pytest.raises(ValueError, match="unsupported file suffix"):
        write_vectors(tmp_path / "x.txt", np.zeros((1, 2)))


# --------------------------------------------------------------------------- bad writer input


def test_writer_input_errors(tmp_path):
    with pytest.raises(TypeError, match=r"X: \.ivecs stores int32.*float64"):
        write_ivecs(tmp_path / "a.ivecs", np.ones((2, 2)))
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        write_fvecs(tmp_path / "a.fvecs", np.ones(3))
    with pytest.raises(ValueError, match="d >= 1"):
        write_fbin(tmp_path / "a.fbin", np.ones((3, 0)))
    with pytest.raises(ValueError, match="cannot write 0 vectors"):
        write_fvecs(tmp_path / "a.fvecs", np.ones((0, 3)))
    with pytest.raises(ValueError, match=r"\[0, 255\].*\[-1, 300\]"):
        write_u8bin(tmp_path / "a.u8bin", np.array([[-1, 300]]))
    with pytest.raises(FileNotFoundError, match="nowhere"):
        write_fvecs(tmp_path / "nowhere" / "a.fvecs", np.ones((1, 2)))
    assert sorted(os.listdir(tmp_path)) == []


def test_failed_write_keeps_the_old_file(tmp_path):
    path = write_ivecs(tmp_path / "keep.ivecs", [[1, 2, 3]])
    before = path.read_bytes()
    with pytest.raises(ValueError, match="wrap around"):
        write_ivecs(path, np.array([[1, 2, 2**40]]))
    assert path.read_bytes() == before
    assert _no_temp_files(tmp_path)


# --------------------------------------------------------------------------- batches


@pytest.mark.parametrize("source_kind", ["array", "fvecs", "npy", "u8bin"])
def test_batches_cover_all_rows_in_order(tmp_path, source_kind):
    X = _random(23, 7, np.uint8 if source_kind == "u8bin" else np.float32, seed=3)
    source = {
        "array": X.astype(np.float64),
        "fvecs": tmp_path / "b.fvecs",
        "npy": tmp_path / "b.npy",
        "u8bin": tmp_path / "b.u8bin",
    }[source_kind]
    if source_kind != "array":
        write_vectors(source, X)
    batches = list(iter_vector_batches(source, batch_size=10))
    assert [len(b) for b in batches] == [10, 10, 3]
    for b in batches:
        assert b.dtype == np.float32 and b.flags.c_contiguous and b.flags.owndata
    np.testing.assert_array_equal(np.concatenate(batches), X.astype(np.float32))


def test_batches_are_copies_and_validate_eagerly():
    X = np.arange(12, dtype=np.float32).reshape(4, 3)
    first = next(iter_vector_batches(X, batch_size=4))
    first[0, 0] = 99.0
    assert X[0, 0] == 0.0
    assert list(iter_vector_batches(np.empty((0, 3), np.float32))) == []
    with pytest.raises(ValueError, match="batch_size: must be >= 1, got 0"):
        iter_vector_batches(X, batch_size=0)
    with pytest.raises(TypeError, match="batch_size"):
        iter_vector_batches(X, batch_size=2.5)
    with pytest.raises(ValueError, match=r"source: expected 2-D.*\(12,\)"):
        iter_vector_batches(X.ravel())


# --------------------------------------------------------------------------- ann-benchmarks


def _ann_arrays(seed: int = 0):
    rng = np.random.default_rng(seed)
    train = rng.standard_normal((50, 9)).astype(np.float32)
    test = rng.standard_normal((6, 9)).astype(np.float32)
    dist = ((test[:, None, :] - train[None, :, :]) ** 2).sum(-1) ** 0.5
    neighbors = np.argsort(dist, axis=1, kind="stable")[:, :10].astype(np.int32)
    distances = np.take_along_axis(dist, neighbors, axis=1).astype(np.float32)
    return train, test, neighbors, distances


def test_ann_benchmarks_round_trip(tmp_path):
    h5py = pytest.importorskip("h5py", reason="h5py (bbqlib[hdf5]) is not installed")
    arrays = _ann_arrays()
    path = write_ann_benchmarks(tmp_path / "toy-9-euclidean.hdf5", *arrays, distance="euclidean")
    assert _no_temp_files(tmp_path)
    for mmap in (False, True):
        train, test, neighbors, distances = read_ann_benchmarks(path, mmap=mmap)
        for got, want in zip((train, test, neighbors, distances), arrays, strict=True):
            np.testing.assert_array_equal(got, want)
    assert isinstance(read_ann_benchmarks(path, mmap=True).train, np.memmap)
    assert read_ann_benchmarks_metric(path) == "euclidean"
    # Exactly ann-benchmarks' layout, checked with h5py directly.
    with h5py.File(path, "r") as f:
        assert sorted(f.keys()) == ["distances", "neighbors", "test", "train"]
        assert f.attrs["distance"] == "euclidean" and f.attrs["point_type"] == "float"
        assert f.attrs["dimension"] == 9 and f.attrs["type"] == "dense"
        assert f["train"].dtype == np.float32 and f["neighbors"].dtype == np.int32
        assert f["distances"].dtype == np.float32 and f["train"].chunks is None


def test_reads_file_written_like_ann_benchmarks(tmp_path):
    """A file made the way ann_benchmarks/datasets.py writes it: int64 neighbours and float64
    distances (``dtype=int`` / ``float`` in write_output), here a float64 train, bytes attrs."""
    h5py = pytest.importorskip("h5py", reason="h5py (bbqlib[hdf5]) is not installed")
    train, test, neighbors, distances = _ann_arrays(seed=1)
    path = tmp_path / "toy-9-angular.hdf5"
    with h5py.File(path, "w") as f:
        f.attrs["distance"] = np.bytes_(b"angular")
        f.attrs["point_type"] = "float"
        f.create_dataset("train", (len(train), 9), dtype=np.float64)[:] = train
        f.create_dataset("test", (len(test), 9), dtype=np.float64)[:] = test
        f.create_dataset("neighbors", (len(test), 10), dtype=int)[:] = neighbors
        f.create_dataset("distances", (len(test), 10), dtype=float)[:] = distances
    ds = read_ann_benchmarks(path)
    assert ds.train.dtype == np.float64
    assert ds.neighbors.dtype == np.int64 and ds.distances.dtype == np.float64
    np.testing.assert_array_equal(ds.train, train)
    np.testing.assert_array_equal(ds.neighbors, neighbors)
    assert read_ann_benchmarks_metric(path) == "angular"


def test_ann_benchmarks_errors(tmp_path):
    h5py = pytest.importorskip("h5py", reason="h5py (bbqlib[hdf5]) is not installed")
    train, test, neighbors, distances = _ann_arrays()
    with pytest.raises(ValueError, match="distance: must be one of"):
        write_ann_benchmarks(tmp_path / "a.hdf5", train, test, neighbors, distances, "cosine")
    with pytest.raises(ValueError, match="inconsistent shapes.*neighbors"):
        write_ann_benchmarks(tmp_path / "a.hdf5", train, test, neighbors[:3], distances, "dot")
    with pytest.raises(ValueError, match=r"ids must lie in \[0, 50\)"):
        write_ann_benchmarks(tmp_path / "a.hdf5", train, test, neighbors + 45, distances, "dot")
    with pytest.raises(TypeError, match="neighbors: expected integer"):
        write_ann_benchmarks(tmp_path / "a.hdf5", train, test, distances, distances, "dot")
    assert sorted(os.listdir(tmp_path)) == []
    with pytest.raises(FileNotFoundError, match="nope.hdf5"):
        read_ann_benchmarks(tmp_path / "nope.hdf5")
    (tmp_path / "junk.hdf5").write_bytes(b"not hdf5 at all")
    with pytest.raises(ValueError, match="not a readable HDF5 file"):
        read_ann_benchmarks(tmp_path / "junk.hdf5")
    with h5py.File(tmp_path / "partial.hdf5", "w") as f:
        f.create_dataset("train", data=train)
    with pytest.raises(ValueError, match=r"\['test', 'neighbors', 'distances'\] are missing"):
        read_ann_benchmarks(tmp_path / "partial.hdf5")


def test_missing_h5py_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "h5py", None)  # makes `import h5py` raise ImportError
    with pytest.raises(ImportError, match=r"pip install bbqlib\[hdf5\]"):
        read_ann_benchmarks(tmp_path / "x.hdf5")
    with pytest.raises(ImportError, match=r"pip install bbqlib\[hdf5\]"):
        write_ann_benchmarks(tmp_path / "x.hdf5", *_ann_arrays(), distance="euclidean")
