"""The versioned, checksummed container file (bbqlib.storage.container)."""

from __future__ import annotations

import json
import zlib

import numpy as np
import pytest

from bbqlib.encoding import CORRECTIONS_I32, CORRECTIONS_U16
from bbqlib.storage import container
from bbqlib.storage.container import (
    FORMAT_VERSION,
    MAGIC,
    CorruptFileError,
    crc32_of,
    read_container,
    read_kind,
    write_container,
)


def sample_arrays():
    g = np.random.default_rng(0)
    corr = np.zeros(5, dtype=CORRECTIONS_U16)
    corr["lower"] = g.normal(size=5)
    corr["upper"] = g.normal(size=5)
    corr["additional"] = g.normal(size=5)
    corr["component_sum"] = [0, 1, 65535, 7, 300]
    corr32 = np.zeros(3, dtype=CORRECTIONS_I32)
    corr32["component_sum"] = [-1, 2**31 - 1, 5]
    nested = np.zeros(2, dtype=[("id", "<i8"), ("pair", "<f4", (2,)), ("flag", "?")])
    nested["id"] = [3, -4]
    nested["pair"] = [[1.5, 2.5], [3.5, 4.5]]
    nested["flag"] = [True, False]
    return {
        "codes": g.integers(0, 256, size=(5, 16), dtype=np.uint8),
        "corrections": corr,
        "corrections32": corr32,
        "nested": nested,
        "vectors": g.normal(size=(5, 7)).astype(np.float32),
        "half": g.normal(size=4).astype(np.float16),
        "big_endian": np.arange(6, dtype=">i4").reshape(2, 3),
        "transposed": np.arange(12.0).reshape(3, 4).T,  # not C-contiguous
        "scalar": np.array(2.5),
        "strings": np.array(["ab", "cde"]),
        "empty": np.empty((0, 16), np.uint8),
        "empty_struct": np.empty(0, dtype=CORRECTIONS_U16),
        "empty_1d": np.empty(0, np.float32),
    }


META = {"kind_version": 3, "name": "test", "nested": {"a": [1, 2.5, None, True]}, "uni": "é✓"}


@pytest.mark.parametrize("mmap", [True, False])
def test_round_trip(tmp_path, mmap):
    arrays = sample_arrays()
    path = write_container(tmp_path / "c.bbq", "test_kind", META, arrays)
    kind, meta, out = read_container(path, mmap=mmap)
    assert kind == "test_kind" and meta == META
    assert list(out) == list(arrays)
    for name, a in arrays.items():
        b = out[name]
        assert b.shape == a.shape, name
        assert b.dtype == a.dtype.newbyteorder("<") or b.dtype == a.dtype, name
        np.testing.assert_array_equal(b, a, err_msg=name)
    assert out["corrections"].dtype == CORRECTIONS_U16
    assert out["corrections"].dtype.names == ("lower", "upper", "additional", "component_sum")
    assert out["corrections"]["component_sum"].tolist() == [0, 1, 65535, 7, 300]
    assert out["corrections32"]["component_sum"][1] == 2**31 - 1
    assert out["big_endian"].dtype.str == "<i4"  # stored little-endian
    if mmap:  # memory maps are read-only: nobody writes into the file by accident
        assert not out["vectors"].flags.writeable


def test_write_read_write_is_byte_identical(tmp_path):
    first = write_container(tmp_path / "a.bbq", "test_kind", META, sample_arrays())
    for mmap in (True, False):
        kind, meta, arrays = read_container(first, mmap=mmap)
        second = write_container(tmp_path / f"b{mmap}.bbq", kind, meta, arrays)
        assert first.read_bytes() == second.read_bytes()


def test_layout(tmp_path):
    path = write_container(tmp_path / "c.bbq", "k", {}, sample_arrays())
    raw = path.read_bytes()
    assert raw[:8] == MAGIC
    assert int.from_bytes(raw[8:12], "little") == FORMAT_VERSION
    assert raw[-24:-16] == b"BBQEND\x00\x00"
    assert int.from_bytes(raw[-8:], "little") == len(raw)
    _, _, arrays = read_container(path)
    header = json.loads(raw[24 : 24 + int.from_bytes(raw[12:16], "little")])
    for sec in header["sections"]:
        assert sec["offset"] % 64 == 0
        assert sec["crc32"] == crc32_of(arrays[sec["name"]])


def test_only_empty_arrays_and_no_arrays(tmp_path):
    path = write_container(tmp_path / "e.bbq", "empty", {"n": 0}, {})
    assert read_container(path) == ("empty", {"n": 0}, {})
    assert read_kind(path) == "empty"
    path = write_container(
        tmp_path / "z.bbq", "zeros", {}, {"a": np.empty((0, 3)), "s": np.empty(0, CORRECTIONS_I32)}
    )
    _, _, out = read_container(path)
    assert out["a"].shape == (0, 3) and out["s"].dtype == CORRECTIONS_I32


def test_crc_streams_in_chunks(monkeypatch):
    a = np.random.default_rng(1).integers(0, 256, size=10_000, dtype=np.uint8)
    monkeypatch.setattr(container, "_CRC_CHUNK", 777)
    assert crc32_of(a) == zlib.crc32(a.tobytes())
    assert crc32_of(a.reshape(100, 100).T) == zlib.crc32(
        np.ascontiguousarray(a.reshape(100, 100).T)
    )


def test_large_header_grows_its_reservation(tmp_path):
    arrays = {"a": np.arange(7, dtype=np.int32)}
    path = write_container(tmp_path / "h.bbq", "k", {"blob": "x" * 100_000}, arrays)
    kind, meta, out = read_container(path)
    assert kind == "k" and len(meta["blob"]) == 100_000
    assert out["a"].tolist() == list(range(7))


def test_overwrite_replaces_atomically(tmp_path):
    path = write_container(tmp_path / "c.bbq", "one", {}, {"a": np.ones(3)})
    write_container(path, "two", {}, {"a": np.zeros(5)})
    kind, _, out = read_container(path)
    assert kind == "two" and out["a"].tolist() == [0.0] * 5
    assert [p.name for p in tmp_path.iterdir()] == ["c.bbq"]


def test_newer_version_is_refused(tmp_path):
    path = write_container(tmp_path / "c.bbq", "k", {}, {})
    raw = bytearray(path.read_bytes())
    raw[8:12] = (FORMAT_VERSION + 1).to_bytes(4, "little")
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptFileError, match="upgrade bbqlib"):
        read_container(path)


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_container(tmp_path / "nope.bbq")
