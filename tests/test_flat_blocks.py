"""Flat format 5: the memory-mapped vectors of a loaded file are checked per row on their first
read (a search reads only its rerank candidates' rows), not whole at load. Files written with
blocks of 256 rows (before per-row checksums) check per block, as before."""

from __future__ import annotations

import json
import pickle
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
from paths import FIXTURES

import bbqlib
from bbqlib import CorruptFileError, FlatIndex
from bbqlib.storage.blocks import BLOCK_ROWS

N, D = 3 * 256 + 17, 24
GROUP = 256  # rows 0-255 are their own cluster: their neighbours are among them
FORMATS = FIXTURES / "formats"


def _vectors_offset(path: Path) -> tuple[int, int]:
    raw = path.read_bytes()
    header_len = struct.unpack_from("<8sIIII", raw)[2]
    sections = json.loads(raw[24 : 24 + header_len])["sections"]
    sec = next(s for s in sections if s["name"] == "vectors")
    return sec["offset"], sec["nbytes"] // N  # bytes per row


def _flip_row(path: Path, row: int) -> None:
    offset, row_bytes = _vectors_offset(path)
    raw = bytearray(path.read_bytes())
    raw[offset + row * row_bytes + 3] ^= 0x10
    path.write_bytes(bytes(raw))


@pytest.fixture(params=["float32", "int8"])
def saved(request, tmp_path):
    rng = np.random.default_rng(5)
    X = rng.normal(size=(N, D)).astype(np.float32)
    X[:GROUP] += 20.0
    index = FlatIndex(bits=4, similarity="euclidean", store_vectors=request.param)
    index.add(X)
    path = index.save(tmp_path / "index.bbq")
    return index, path, X


def test_blocks_are_recorded_and_results_unchanged(saved):
    index, path, X = saved
    loaded = bbqlib.load(path)
    assert BLOCK_ROWS == 1
    assert loaded.verify() == {"vectors": N, "vector_blocks": N}
    for q in (X[:7], X[3]):  # the batch path and the single-query path
        for a, b in zip(index.search(q, k=5), loaded.search(q, k=5), strict=True):
            np.testing.assert_array_equal(a, b)


def test_damaged_row_is_caught_on_first_read_only(saved):
    _, path, X = saved
    damaged = 2 * GROUP + 5
    _flip_row(path, damaged)
    index = bbqlib.load(path)  # opening reads no vector row
    # a search that does not read the row serves; one that reads it raises, naming the row
    index.search(X[0], k=3)
    index.search(X[:4], k=3)
    with pytest.raises(CorruptFileError, match=f"row {damaged} fails its CRC32"):
        index.search(X[damaged], k=3)
    with pytest.raises(CorruptFileError, match="CRC32"):
        index.search(X[damaged : damaged + 2], k=3)
    with pytest.raises(CorruptFileError):
        bbqlib.load(path, mmap=False)  # read into RAM: checked whole at load
    with pytest.raises(CorruptFileError):
        bbqlib.load(path).verify()
    bbqlib.load(path, verify=False).search(X[damaged], k=3)  # the caller opted out


@pytest.mark.parametrize("action", ["save", "pickle", "add", "bound"])
def test_every_whole_read_checks_first(saved, action, tmp_path):
    _, path, X = saved
    _flip_row(path, N - 1)  # the short last block
    index = bbqlib.load(path)
    with pytest.raises(CorruptFileError):
        if action == "save":  # a damaged row is never re-blessed with a fresh checksum
            index.save(tmp_path / "copy.bbq")
        elif action == "pickle":
            pickle.dumps(index)
        elif action == "add":  # joining the loaded rows with new ones reads all of them
            index.add(X[:3])
            index.search(X[:2], k=3)
        else:
            q = bbqlib.RaBitQQuantizer(bits=1, similarity="euclidean")
            rb = FlatIndex(q)
            rb.add(X)
            rb.save(tmp_path / "rb.bbq")
            _flip_row(tmp_path / "rb.bbq", 0)
            bbqlib.load(tmp_path / "rb.bbq").search(X[:2], k=3, rerank="bound")
    assert not (tmp_path / "copy.bbq").exists()


def test_format_4_files_check_their_vectors_at_load(tmp_path):
    src = FORMATS / "flat_v4" / "bbq1_cosine.bbq"
    path = tmp_path / src.name
    shutil.copy(src, path)
    assert bbqlib.load(path).verify()["vector_blocks"] == 0
    raw = path.read_bytes()
    header_len = struct.unpack_from("<8sIIII", raw)[2]
    sections = json.loads(raw[24 : 24 + header_len])["sections"]
    sec = next(s for s in sections if s["name"] == "vectors")
    damaged = bytearray(raw)
    damaged[sec["offset"] + 1] ^= 1
    path.write_bytes(bytes(damaged))
    with pytest.raises(CorruptFileError, match="checksum"):
        bbqlib.load(path)


def test_concurrent_first_searches_on_a_damaged_file(saved):
    """Threads racing to check the same block all see the damage (none reads it unchecked)."""
    from concurrent.futures import ThreadPoolExecutor

    _, path, X = saved
    _flip_row(path, 5)
    index = bbqlib.load(path)

    def one(i):
        try:
            index.search(X[5], k=3)
        except CorruptFileError:
            return True
        return False

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(one, range(8)))
