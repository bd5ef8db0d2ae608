"""A search of a cold, memory-mapped index reads the rows it reranks, not blocks around them.

The float vectors are most of an index's bytes; a search reranks a few dozen rows of them.
Whatever a search checks (the rows' CRC32s) must not read more of the vector file than those
rows: checksums over blocks of 256 rows once made a cold query read ~20 MB where it needed
~75 KB. Here the vector file is evicted from the page cache (``posix_fadvise`` DONTNEED, the
file not mapped by anyone), one query is searched, and ``mincore`` counts the file's pages now
resident: at most a few per reranked row. Where the page cache cannot be emptied this way
(some file systems keep the pages), the tests skip and say so.
"""

from __future__ import annotations

import ctypes
import json
import mmap
import os
import struct
from pathlib import Path

import numpy as np
import pytest

import bbqlib

PAGE = mmap.PAGESIZE
N, D = 6000, 384  # a 9 MB vector file: 2,250 pages


def _libc():
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mincore  # noqa: B018 - presence check
    except (OSError, AttributeError):
        pytest.skip("mincore is not available on this platform")
    return libc


def _resident_pages(path: Path, offset: int = 0, length: int | None = None) -> int:
    """Pages of ``path[offset : offset + length]`` in the page cache (mincore on a fresh map;
    a private map reports the file's cached pages until written, and this one never is)."""
    libc = _libc()
    length = path.stat().st_size - offset if length is None else length
    start = offset // PAGE * PAGE
    span = offset + length - start
    with open(path, "rb") as f:
        m = mmap.mmap(f.fileno(), span, access=mmap.ACCESS_COPY, offset=start)
    view = ctypes.c_char.from_buffer(m)
    try:
        pages = -(-span // PAGE)
        vec = (ctypes.c_ubyte * pages)()
        libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
        if libc.mincore(ctypes.addressof(view), span, vec) != 0:
            pytest.skip(f"mincore failed (errno {ctypes.get_errno()})")
        return int(np.count_nonzero(np.frombuffer(vec, dtype=np.uint8) & 1))
    finally:
        del view
        m.close()


def _evict(path: Path) -> None:
    if not hasattr(os, "posix_fadvise"):
        pytest.skip("posix_fadvise is not available on this platform")
    with open(path, "rb") as f:
        os.fsync(f.fileno())
        os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    if _resident_pages(path) > 4:
        pytest.skip("this file system keeps the file's pages after POSIX_FADV_DONTNEED")


def _data(n: int = N):
    rng = np.random.default_rng(3)
    centres = rng.normal(size=(40, D)).astype(np.float32)
    X = centres[rng.integers(0, 40, n)] + 0.4 * rng.normal(size=(n, D)).astype(np.float32)
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X


def _bound(depth: int) -> int:
    # a row of 1,536 bytes spans at most two pages; a few more for the .npy header page
    return 2 * depth + 4


def _list_pages(index) -> int:
    """The most pages one posting list spans over the sections a scan reads."""
    post = index._postings
    blocks, starts = post.lut_layout()
    sizes = np.diff(post.start)
    lut = np.diff(starts) * blocks.shape[1]
    per_entry = post.factors.shape[1] * 4 + 4  # factors and ids
    return int(((lut + PAGE - 1) // PAGE + 2 + (sizes * per_entry + PAGE - 1) // PAGE).max())


@pytest.mark.parametrize("one", [True, False], ids=["one-query", "batch-of-one"])
def test_cold_ivf_search_reads_only_its_lists_and_rerank_rows(tmp_path, one):
    X = _data()
    where = tmp_path / "ivf"
    index = bbqlib.IVFIndex(bits=1, similarity="cosine", path=where)
    index.add(X)
    del index
    vec = next(where.glob("vectors.*.npy"))
    post = next(where.glob("postings.*.bbq"))
    _evict(vec)
    _evict(post)
    index = bbqlib.IVFIndex.open(where)
    opened = _resident_pages(post)  # the container's header and footer
    q = X[17] if one else X[17:18]
    index.search(q, 10, visit_percentage=20.0)
    stats = index.last_search_stats
    depth = int(stats["depth"])
    resident = _resident_pages(vec)
    assert resident <= _bound(depth), (resident, depth)
    # the visited lists' pages (their reads are announced ahead: no read-around beyond them)
    lists = int(stats["lists_visited"])
    assert _resident_pages(post) - opened <= lists * _list_pages(index) + 4, lists


def test_willneed_reads_a_mapped_range_ahead(tmp_path):
    """``willneed`` makes the kernel read a range of a map without anybody touching it, and
    is harmless on memory that is not a file map."""
    from bbqlib._kernels import prefetch

    if not prefetch.HAS_MADVISE:
        pytest.skip("no madvise on this platform")
    path = tmp_path / "data.bin"
    path.write_bytes(np.random.default_rng(0).integers(0, 256, 64 * PAGE, np.uint8).tobytes())
    _evict(path)
    arr = np.memmap(path, np.uint8, mode="r")
    prefetch.willneed(arr.ctypes.data + 10 * PAGE + 100, 3 * PAGE)
    import time

    deadline = time.monotonic() + 5.0
    while _resident_pages(path) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert 3 <= _resident_pages(path) <= 6
    anon = np.zeros(10 * PAGE, np.uint8)
    prefetch.willneed(anon.ctypes.data + 5, 2 * PAGE)  # not a file map: nothing happens
    assert anon.sum() == 0


def _section(path: Path, name: str) -> tuple[int, int]:
    raw = path.read_bytes()
    header_len = struct.unpack_from("<8sIIII", raw)[2]
    sections = json.loads(raw[24 : 24 + header_len])["sections"]
    sec = next(s for s in sections if s["name"] == name)
    return int(sec["offset"]), int(sec["nbytes"])


def test_cold_flat_search_reads_only_its_rerank_rows(tmp_path):
    # 30 MB of vectors: reading the codes at load reads ahead into the first few MB of them
    # (the device's read-ahead); the search's own reads are what is counted
    X = _data(20_000)
    index = bbqlib.FlatIndex(bits=1, similarity="cosine")
    index.add(X)
    path = index.save(tmp_path / "index.bbq")
    offset, nbytes = _section(path, "vectors")  # reads the file: before evicting it
    _evict(path)
    loaded = bbqlib.load(path)  # reads and checks the codes, not the vectors
    before = _resident_pages(path, offset, nbytes)
    loaded.search(X[-5], k=10)
    depth = 30  # 3x oversample of k = 10 (the 1-bit default)
    resident = _resident_pages(path, offset, nbytes) - before
    assert resident <= _bound(depth), (resident, before)


def test_cold_search_reads_a_page_of_custom_ids_per_result(tmp_path):
    """Custom ids are checked per block of 512 as results are mapped: a cold search reads a
    page of them per result, not the whole ``row_ids`` section (8 bytes per vector)."""
    X = _data(20_000)
    where = tmp_path / "ivf"
    index = bbqlib.IVFIndex(bits=1, similarity="cosine", path=where)
    index.add(X, ids=np.arange(X.shape[0], dtype=np.int64) * 3 + 11)
    del index
    post = next(where.glob("postings.*.bbq"))
    offset, nbytes = _section(post, "row_ids")  # reads the file: before evicting it
    _evict(post)
    index = bbqlib.IVFIndex.open(where)
    before = _resident_pages(post, offset, nbytes)
    _, ids = index.search(X[-5], 10, visit_percentage=20.0)
    assert ids[0, 0] == (X.shape[0] - 5) * 3 + 11
    resident = _resident_pages(post, offset, nbytes) - before
    assert resident <= 2 * 10 + 2, (resident, nbytes // PAGE)
