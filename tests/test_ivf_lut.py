"""The IVF index's lookup-table scan: same heaps as the popcount scan, stored and checked.

``ivf_scan_lut`` must give exactly the reference's de-duplicated top k (it shares the integer
dots' exactness and the key arithmetic of ``ivf_scan_planes``); searches must not change when
the popcount scan serves instead (``BBQLIB_NO_AVX2=1``); format-2 files carry the blocks under
each list's CRC32, and format-1 files (no blocks) still open and serve.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from reference.ivf import scan_reference
from test_ivf import _flip_bits, _postings, _random_lists, _random_visits, _section, blobs

from bbqlib import CorruptFileError, IVFIndex
from bbqlib._kernels import lut as L
from bbqlib._kernels import scoring as KS
from bbqlib.encoding import get_encoding, padded_dim
from bbqlib.index.ivf import plan as S
from bbqlib.index.ivf.scan import uses_lut
from bbqlib.index.ivf.storage import FORMAT_VERSION
from bbqlib.packing import lut_blocks, lut_list_blocks, pack_planes
from bbqlib.search.topk import dedup_topk
from bbqlib.storage.blocks import file_map

needs_avx2 = pytest.mark.skipif(
    not L.avx2_available(), reason="the lookup-table kernel needs AVX2 (popcount scan serves)"
)


@pytest.fixture(scope="module")
def vectors():
    return blobs(5000, 72, seed=3), blobs(40, 72, seed=4)


@needs_avx2
@pytest.mark.parametrize("d", [1, 7, 65, 384])
@pytest.mark.parametrize("doc_bits", [1, 2, 4])
def test_lut_scan_kernel_matches_reference(d, doc_bits, numba_threads):
    rng = np.random.default_rng(d * 10 + doc_bits)
    enc = get_encoding(doc_bits)
    K, nq, n_ids, k = 9, 6, 1500, 7
    codes, df, ids, start = _random_lists(rng, K, d, enc, n_ids)
    cc = rng.uniform(0, 2, K)
    pair_list, pair_start, q_codes, qf = _random_visits(rng, K, nq, d, enc)
    q_padded = np.zeros((pair_list.size, padded_dim(d)), np.uint8)
    q_padded[:, :d] = q_codes
    blocks, block_starts = lut_list_blocks(pack_planes(codes, enc.doc_bits), start)
    allowed = (rng.random(n_ids) < 0.7).astype(np.uint8)
    for threads in (1, 2):
        numba_threads(threads)
        for is_l2 in (False, True):
            for mask in (None, allowed):
                keys = np.full((nq, 2 * k), -np.inf)
                hids = np.full((nq, 2 * k), KS.EMPTY_ID, np.int64)
                L.ivf_scan_lut(
                    q_padded, qf, pair_list, pair_start, start, block_starts, blocks, df, ids,
                    cc, enc.doc_planes, padded_dim(d) // 8, d, is_l2,
                    np.empty(0, np.uint8) if mask is None else mask, keys, hids,
                )  # fmt: skip
                got_k, got_i = dedup_topk(keys, hids, k)
                ref_k, ref_i = scan_reference(
                    q_codes, qf, pair_list, pair_start, start, codes, df, ids, cc, d, is_l2,
                    mask, k,
                )  # fmt: skip
                np.testing.assert_array_equal(got_i, ref_i)
                np.testing.assert_array_equal(got_k, ref_k)


def test_list_blocks_layout():
    g = np.random.default_rng(0)
    start = np.array([0, 0, 5, 37, 37, 101])  # empty lists, a list of exactly 32
    packed = g.integers(0, 256, (101, 12)).astype(np.uint8)
    blocks, block_starts = lut_list_blocks(packed, start)
    assert block_starts.tolist() == [0, 0, 1, 2, 2, 4]
    for j in range(5):
        rows = packed[start[j] : start[j + 1]]
        mine = blocks[block_starts[j] : block_starts[j + 1]]
        np.testing.assert_array_equal(mine, lut_blocks(rows) if len(rows) else mine)


@needs_avx2
@pytest.mark.parametrize(
    ("bits", "similarity"), [(1, "cosine"), (2, "euclidean"), (4, "max_inner_product")]
)
def test_search_same_with_popcount_scan(vectors, bits, similarity, monkeypatch):
    X, Q = vectors
    index = IVFIndex(bits=bits, similarity=similarity, cluster_size=64)
    index.add(X)
    index.delete(np.arange(0, 5000, 7))
    flt = np.arange(0, 5000, 3)
    runs = {}
    for name in ("lut", "popcount"):
        if name == "popcount":
            monkeypatch.setenv("BBQLIB_NO_AVX2", "1")
        assert uses_lut(index.encoding_) == (name == "lut")
        runs[name] = [
            index.search(Q, 10, visit_percentage=vp, rerank=rr, filter=f)
            for vp in (3.0, 30.0)
            for rr in (False, True)
            for f in (None, flt)
        ]
    for a, b in zip(runs["lut"], runs["popcount"], strict=True):
        np.testing.assert_array_equal(a[1], b[1])
        np.testing.assert_array_equal(a[0], b[0])


def test_format_2_files_carry_checked_blocks(vectors, tmp_path):
    X, Q = vectors
    index = IVFIndex(bits=1, similarity="cosine", cluster_size=64)
    index.add(X)
    expected = index.search(Q, 10, visit_percentage=20.0)
    index.save(tmp_path / "ix")
    manifest = json.loads((tmp_path / "ix" / "MANIFEST").read_text())
    assert manifest["format_version"] == FORMAT_VERSION
    opened = IVFIndex.open(tmp_path / "ix")
    assert opened._postings.lut is not None and file_map(opened._postings.lut[0]) is not None
    got = opened.search(Q, 10, visit_percentage=20.0)
    np.testing.assert_array_equal(got[1], expected[1])
    # Flip a byte of the blocks of the list the first query visits first.
    ranked = S.rank_lists(Q[:1] / np.linalg.norm(Q[:1]), opened._table, False, 0, dense=True)
    j = int(ranked[0, 0])
    block = int(opened._postings.lut[1][j])
    width = opened._postings.lut[0].shape[1]
    postings = _postings(tmp_path / "ix")
    offset = _section(postings, "lut_codes")["offset"] + block * width + 3
    del opened
    _flip_bits(postings, offset, 0x01)
    damaged = IVFIndex.open(tmp_path / "ix")
    if L.avx2_available():  # the blocks are what this search reads
        with pytest.raises(CorruptFileError, match=f"posting list {j}"):
            damaged.search(Q[:1], 10)
    with pytest.raises(CorruptFileError, match="CRC"):
        damaged.verify()


@needs_avx2
def test_lookup_table_search_reads_and_checks_no_row_codes(vectors, tmp_path):
    """Serving from the blocks: a damaged row code does not affect searches (they never read
    the row codes, so cold-cache serving pages in only blocks, factors and ids); verify
    still finds it."""
    X, Q = vectors
    index = IVFIndex(bits=1, similarity="cosine", cluster_size=64)
    index.add(X)
    expected = index.search(Q, 10, visit_percentage=100.0)
    index.save(tmp_path / "ix")
    postings = _postings(tmp_path / "ix")
    offset = _section(postings, "codes")["offset"] + 5
    _flip_bits(postings, offset, 0x04)
    opened = IVFIndex.open(tmp_path / "ix")
    got = opened.search(Q, 10, visit_percentage=100.0)
    np.testing.assert_array_equal(got[1], expected[1])
    post = opened._postings
    assert post._verified_blocks.all() and not post._verified.any()
    with pytest.raises(CorruptFileError, match="CRC"):
        opened.verify()


def test_format_1_files_open_and_serve(vectors, tmp_path, monkeypatch):
    """A posting file without blocks (format 1): the blocks are made in RAM on first search."""
    X, Q = vectors
    index = IVFIndex(bits=1, similarity="cosine", cluster_size=64)
    index.add(X)
    expected = index.search(Q, 10, visit_percentage=20.0)
    from bbqlib.index.ivf.postings import Postings

    plain = Postings.to_store

    def without_blocks(self, planes):
        out = plain(self, planes)
        out.pop("lut_codes")
        return out

    monkeypatch.setattr(Postings, "to_store", without_blocks)
    index.save(tmp_path / "ix")
    manifest = tmp_path / "ix" / "MANIFEST"
    manifest.write_text(manifest.read_text().replace('"format_version": 3', '"format_version": 1'))
    opened = IVFIndex.open(tmp_path / "ix")
    assert opened._postings.lut is None
    got = opened.search(Q, 10, visit_percentage=20.0)
    np.testing.assert_array_equal(got[1], expected[1])
    np.testing.assert_array_equal(got[0], expected[0])
    assert opened.verify()["lists"] == index.n_lists
