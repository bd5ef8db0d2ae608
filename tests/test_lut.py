"""The lookup-table scan (bbqlib._kernels.lut) against its NumPy reference and the popcount scan.

Its integer dots must equal ``<X, Y>`` exactly (tables summed in bytes, widened to 16 bits and
flushed every ``MAX_STEPS`` steps: the worst cases sit at those bounds), and its top-k must be
bit for bit the popcount scan's, for every plane encoding it serves, with masks and threads.
"""

from __future__ import annotations

import numpy as np
import pytest
from reference.lut import block_dots_reference, blocks_reference, tables_reference
from test_scoring_kernels import codes, plane_docs, plane_queries, random_factors

from bbqlib._kernels import lut as L
from bbqlib._kernels import scoring as KS
from bbqlib.encoding import padded_dim
from bbqlib.layouts import scan as scan_module
from bbqlib.layouts.kernels import use_lut
from bbqlib.packing import lut_blocks, pack_planes
from bbqlib.search.topk import merge_topk

needs_avx2 = pytest.mark.skipif(
    not L.avx2_available(), reason="the lookup-table kernel needs AVX2 (popcount scan serves)"
)


def kernel_dots(blocks, tables, planes, pairs):
    """int64 [nq, n_blocks · 32] through ``lut_block_dot`` (the scan's inner call)."""
    out = np.empty((tables.shape[0], blocks.shape[0] * L.LANES), dtype=np.int64)
    buf = np.empty(L.LANES, dtype=np.int32)
    for q in range(tables.shape[0]):
        for b in range(blocks.shape[0]):
            L.lut_block_dot(blocks[b], tables[q], planes, pairs, buf)
            out[q, b * L.LANES : (b + 1) * L.LANES] = buf
    return out


def padded_queries(Y):
    out = np.zeros((Y.shape[0], padded_dim(Y.shape[1])), dtype=np.uint8)
    out[:, : Y.shape[1]] = Y
    return out


@pytest.mark.parametrize("n", [0, 1, 31, 32, 33, 100])
def test_blocks_layout(n):
    g = np.random.default_rng(n)
    packed = pack_planes(codes(g, n, 130, 2), 2)
    np.testing.assert_array_equal(lut_blocks(packed), blocks_reference(packed))


@pytest.mark.parametrize("d", [1, 7, 64, 65, 384])
def test_tables_match_reference(d):
    g = np.random.default_rng(d)
    Y = padded_queries(codes(g, 4, d, 4))
    pairs = Y.shape[1] // 8
    got = np.empty((4, 2 * pairs * L.LANES), dtype=np.uint8)
    L.build_tables(Y, pairs, got)
    np.testing.assert_array_equal(got, tables_reference(Y))


@needs_avx2
@pytest.mark.parametrize(
    ("n", "d", "dp", "qp"),
    [
        (5, 1, 1, 4),
        (33, 7, 2, 4),
        (70, 65, 4, 4),
        (64, 384, 1, 4),
        (40, 1000, 1, 1),
        (40, 1000, 2, 3),
        (40, 1000, 4, 2),
        (33, 130, 3, 4),
        (40, 200, 5, 4),
        (40, 200, 6, 4),
        (36, 100, 8, 4),
    ],
)
def test_block_dots_exact(n, d, dp, qp):
    g = np.random.default_rng(n * d + dp)
    X, Y = codes(g, n, d, dp), codes(g, 3, d, qp)
    packed = pack_planes(X, dp)
    pairs = padded_dim(d) // 8
    tables = tables_reference(padded_queries(Y))
    got = kernel_dots(lut_blocks(packed), tables, dp, pairs)
    ref = block_dots_reference(blocks_reference(packed), tables, dp, pairs)
    np.testing.assert_array_equal(got, ref)
    np.testing.assert_array_equal(got[:, :n], Y.astype(np.int64) @ X.T.astype(np.int64))
    assert (got[:, n:] == 0).all()  # padding docs are zero codes


@needs_avx2
@pytest.mark.parametrize("d", [4096, 4097, 8192])
@pytest.mark.parametrize("dp", [1, 4, 6])
def test_block_dots_at_the_accumulator_bounds(d, dp):
    """All-ones docs against all-15 queries: every byte sum is 240, 16-bit lanes fill to
    MAX_STEPS · 240 (d = 4096 is exactly one flush; beyond it, two)."""
    X = np.full((40, d), (1 << dp) - 1, dtype=np.uint8)
    X[1::2, ::3] = 0  # odd docs differ from even ones (the lanes are split even / odd)
    Y = np.full((2, d), 15, dtype=np.uint8)
    pairs = padded_dim(d) // 8
    tables = tables_reference(padded_queries(Y))
    got = kernel_dots(lut_blocks(pack_planes(X, dp)), tables, dp, pairs)
    np.testing.assert_array_equal(got[:, :40], Y.astype(np.int64) @ X.T.astype(np.int64))


@needs_avx2
@pytest.mark.parametrize("dp", [1, 2, 3, 4, 6])
@pytest.mark.parametrize("is_l2", [False, True])
def test_scan_equals_popcount_scan(dp, is_l2, numba_threads):
    """Same keys to the last bit and same ids as ``scan_planes``, with ties, masks, threads."""
    g = np.random.default_rng(dp * 2 + is_l2)
    n, d = 1500, 200
    X = codes(g, n, d, dp)
    X[700:720] = X[10]  # duplicates tie
    q = plane_queries(codes(g, 7, d, 4), 4, random_factors(g, 7, dtype=np.float64))
    docs = plane_docs(X, dp, random_factors(g, n, dtype=np.float32), cc=0.3, is_l2=is_l2)
    mask = (g.uniform(size=n) < 0.6).astype(np.uint8)
    for threads in (1, 2):
        numba_threads(threads)
        for k in (1, 10, 64):
            for allowed in (np.empty(0, np.uint8), mask):
                chunks = max(1, min(threads, -(-n // KS.BLOCK)))
                lut = scan_module._scan(q, docs, k, allowed, 3, chunks)
                assert use_lut(q.planes, docs.kind)
                ref_keys = np.full((chunks, len(q), k), -np.inf)
                ref_ids = np.full((chunks, len(q), k), KS.EMPTY_ID, dtype=np.int64)
                KS.scan_planes(
                    q.data, q.factors, docs.data, docs.factors, q.planes, docs.planes,
                    docs.words, docs.dim, docs.centroid_dot, docs.is_l2, allowed, 3,
                    ref_keys, ref_ids,
                )  # fmt: skip
                merged = [
                    merge_topk(
                        a.transpose(1, 0, 2).reshape(len(q), -1),
                        b.transpose(1, 0, 2).reshape(len(q), -1),
                        k,
                    )
                    for a, b in (lut, (ref_keys, ref_ids))
                ]
                np.testing.assert_array_equal(merged[0][1], merged[1][1])
                np.testing.assert_array_equal(merged[0][0], merged[1][0])


@needs_avx2
def test_search_same_with_and_without_the_lut_kernel(monkeypatch, make_vectors):
    import bbqlib

    X = make_vectors(3000, 96, "unit")
    for bits in (1, 2, 4):
        q = bbqlib.BBQQuantizer(bits=bits, similarity="cosine").fit(X)
        enc = q.encode(X)
        fast = q.search(X[:9], enc, 12)
        monkeypatch.setenv("BBQLIB_NO_AVX2", "1")
        assert not L.avx2_available()
        slow = q.search(X[:9], enc, 12)
        monkeypatch.delenv("BBQLIB_NO_AVX2")
        np.testing.assert_array_equal(fast[1], slow[1])
        np.testing.assert_array_equal(fast[0], slow[0])


def test_wide_queries_take_the_popcount_scan():
    q = plane_queries(np.ones((2, 70), np.uint8), 7)
    assert not use_lut(q.planes, "planes")
