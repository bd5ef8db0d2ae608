"""Rerank vectors stored as float32, float16 or int8 (bbqlib.search.stored) in both indexes."""

from __future__ import annotations

import numpy as np
import pytest

import bbqlib
from bbqlib import CorruptFileError, FlatIndex, IVFIndex
from bbqlib.analysis.ground_truth import exact_knn
from bbqlib.search.rerank import exact_mode, exact_values
from bbqlib.search.stored import (
    check_store_vectors,
    stored_exact_values,
    stored_kind_of,
    stored_row_bytes,
    stored_rows,
    to_stored,
)
from bbqlib.similarity import Similarity

KINDS = ("float32", "float16", "int8")


def _blobs(n, d, seed):
    g = np.random.default_rng(seed)
    centres = g.standard_normal((30, d))
    X = centres[g.integers(0, 30, n)] + 0.5 * g.standard_normal((n, d))
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


def _recall(ids, gt, k):
    return float(np.mean([len(set(a[:k]) & set(b[:k])) / k for a, b in zip(ids, gt, strict=True)]))


# ----------------------------------------------------------------------------- the kinds
def test_check_store_vectors():
    assert check_store_vectors(True) == "float32" and check_store_vectors(False) is False
    assert check_store_vectors(np.bool_(True)) == "float32"
    for kind in KINDS:
        assert check_store_vectors(kind) == kind
    for bad in ("int4", "f32", None, 1, 0.5):
        with pytest.raises(ValueError, match="store_vectors must be one of"):
            check_store_vectors(bad)


@pytest.mark.parametrize("d", [1, 7, 64, 65, 384])
def test_int8_rows_are_within_half_a_step(d):
    g = np.random.default_rng(d)
    X = g.normal(size=(50, d)).astype(np.float32) * np.exp(g.uniform(-9, 9, (50, 1)))
    X = X.astype(np.float32)
    X[0] = 0.0  # a zero vector: scale 0, codes 0, exact
    X[1] = 5.0  # a constant vector: exact
    S = to_stored(X, "int8")
    assert stored_kind_of(S) == "int8" and S.dtype.itemsize == stored_row_bytes("int8", d) == d + 4
    back = stored_rows(S)
    step = S["scale"][:, None]
    assert np.all(np.abs(back - X) <= 0.5 * step * (1 + 1e-5) + 1e-30)
    np.testing.assert_array_equal(back[0], 0.0)
    np.testing.assert_allclose(back[1], 5.0, rtol=1e-6)
    assert np.all(np.abs(S["codes"]) <= 127)
    assert to_stored(X, "float32") is not None and stored_row_bytes(False, d) == 0
    assert stored_row_bytes("float16", d) == 2 * d and stored_row_bytes("float32", d) == 4 * d


def test_to_stored_does_not_write_into_the_input():
    X = np.random.default_rng(0).normal(size=(20, 9)).astype(np.float32)
    before = X.copy()
    for kind in KINDS:
        to_stored(X, kind)
    np.testing.assert_array_equal(X, before)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("sim", [Similarity.EUCLIDEAN, Similarity.DOT_PRODUCT])
def test_stored_exact_values_match_numpy_on_the_stored_rows(kind, sim):
    g = np.random.default_rng(3)
    X = g.normal(size=(300, 65)).astype(np.float32)
    Q = g.normal(size=(7, 65)).astype(np.float32)
    S = to_stored(X, kind)
    cand = g.integers(0, 300, size=(7, 11))
    cand[2, 4:] = -1  # padding
    got = stored_exact_values(Q, S, cand, exact_mode(sim))
    rows = stored_rows(S).astype(np.float64)
    R = rows[np.maximum(cand, 0)]
    if sim.is_distance:
        want = ((R - Q[:, None, :].astype(np.float64)) ** 2).sum(-1)
    else:
        want = np.einsum("qmd,qd->qm", R, Q.astype(np.float64))
    live = cand >= 0
    np.testing.assert_allclose(got[live], want[live], rtol=1e-5, atol=1e-5)
    assert np.isnan(got[~live]).all()
    if kind != "int8":
        np.testing.assert_array_equal(got, exact_values(Q, S, cand, exact_mode(sim)))


@pytest.mark.parametrize("kind", ["float16", "int8"])
@pytest.mark.parametrize("mode", [0, 1, 2])
@pytest.mark.parametrize("parallel", [True, False])
def test_stored_kernels_equal_the_reference_bit_for_bit(kind, mode, parallel, numba_threads):
    """float16 bit patterns widened in the lane loop, int8 rows dequantized in the kernel:
    the values are the NumPy reference's on the dequantized float32 rows, bit for bit, also
    on adversarial rows (zeros, one-hot, huge and tiny scales, a zero scale, odd d)."""
    from reference.rerank import exact_candidates as ref_exact

    g = np.random.default_rng(11)
    for d in (1, 7, 8, 65):
        X = g.normal(size=(200, d)).astype(np.float32)
        X[0] = 0.0 if mode != 2 else 1e-3  # cosine rows are never zero (indexes refuse them)
        X[1] = 0.0
        X[1, d - 1] = 1.0
        X[2] *= 1e4
        X[3] *= 1e-4
        Q = g.normal(size=(9, d)).astype(np.float32)
        S = to_stored(X, kind)
        cand = g.integers(0, 200, size=(9, 13))
        cand[:, :4] = np.arange(4)  # the adversarial rows in every list
        cand[2, 5:] = -1
        cand[3] = -1
        got = stored_exact_values(Q, S, cand, mode, parallel=parallel)
        rows = stored_rows(S)
        want = ref_exact(Q, rows, cand, is_l2=(mode == 1))
        if mode == 2:  # cosine over raw rows: the inner product over the row's norm
            norms = np.sqrt(ref_exact(rows, rows, np.arange(len(rows))[:, None], False))[:, 0]
            with np.errstate(invalid="ignore", divide="ignore"):
                want = want / norms[np.maximum(cand, 0)]
        np.testing.assert_array_equal(got, want)


# ----------------------------------------------------------------------------- FlatIndex
@pytest.fixture(scope="module")
def data():
    X = _blobs(3000, 48, 1)
    Q = _blobs(40, 48, 2)
    _, gt = exact_knn(X, Q, 10, "ip", scores_first=True)
    return X, Q, gt


@pytest.mark.parametrize("kind", KINDS)
def test_flat_index_kinds_search_save_and_load(kind, data, tmp_path):
    X, Q, gt = data
    index = FlatIndex(bits=2, similarity="cosine", store_vectors=kind, oversample=10.0)
    index.add(X[:1000])
    index.add(X[1000:])
    assert index.store_vectors == kind
    scores, ids = index.search(Q, 10)
    assert _recall(ids, gt, 10) >= 0.9
    path = index.save(tmp_path / "f.bbq")
    for mmap in (True, False):
        back = FlatIndex.load(path, mmap=mmap)
        assert back.store_vectors == kind and back.oversample == 10.0
        s2, i2 = back.search(Q, 10)
        np.testing.assert_array_equal(i2, ids)
        np.testing.assert_array_equal(s2, scores)


def test_flat_index_cheaper_vectors_make_smaller_files(data, tmp_path):
    X, _, _ = data
    sizes = {}
    for kind in (*KINDS, False):
        index = FlatIndex(bits=1, similarity="cosine", store_vectors=kind)
        index.add(X)
        sizes[kind] = index.save(tmp_path / f"{kind}.bbq").stat().st_size
    n, d = X.shape
    assert sizes["float32"] - sizes["float16"] == pytest.approx(2 * n * d, abs=4096)
    assert sizes["float16"] - sizes["int8"] == pytest.approx(n * (d - 4), abs=4096)
    # int8 records (d + 4 bytes a row) and their per-row CRC32s (4 bytes a row)
    assert sizes["int8"] - sizes[False] == pytest.approx(n * (d + 4 + 4), abs=4096)


def test_flat_index_default_rerank_follows_store_vectors(data):
    X, Q, _ = data
    index = FlatIndex(bits=4, similarity="cosine", store_vectors=False)
    index.add(X)
    np.testing.assert_array_equal(index.search(Q, 5)[1], index.search(Q, 5, rerank=False)[1])
    with pytest.raises(ValueError, match="store_vectors=False"):
        index.search(Q, 5, rerank=True)


def test_flat_bound_rerank_reads_int8_rows(data):
    X, Q, gt = data
    index = FlatIndex(
        bbqlib.RaBitQQuantizer(bits=1, similarity="cosine", seed=0), store_vectors="int8"
    )
    index.add(X)
    _, ids = index.search(Q, 10, rerank="bound")
    assert _recall(ids, gt, 10) >= 0.9


def test_flat_file_with_wrong_vectors_is_corrupt(data, tmp_path):
    from bbqlib.storage.container import read_container, write_container

    X, _, _ = data
    index = FlatIndex(bits=1, similarity="cosine", store_vectors="float16")
    index.add(X[:100])
    kind, meta, arrays = read_container(index.save(tmp_path / "a.bbq"), mmap=False)
    meta["store_vectors"] = "int8"
    write_container(tmp_path / "b.bbq", kind, meta, arrays)
    with pytest.raises(CorruptFileError, match="store_vectors='int8'"):
        FlatIndex.load(tmp_path / "b.bbq")


def test_bad_store_vectors_and_defaults_fail_at_construction():
    with pytest.raises(ValueError, match="store_vectors"):
        FlatIndex(store_vectors="bf16")
    with pytest.raises(ValueError, match="store_vectors"):
        IVFIndex(store_vectors="int4")
    with pytest.raises(ValueError, match="oversample"):
        FlatIndex(oversample=0.5)
    with pytest.raises(ValueError, match="visit_percentage"):
        IVFIndex(visit_percentage=0.0)


# ----------------------------------------------------------------------------- IVFIndex
@pytest.mark.parametrize("kind", KINDS)
def test_ivf_takes_every_kind(kind):  # the IVF kinds in depth: tests/test_ivf_stored.py
    assert IVFIndex(store_vectors=kind).store_vectors == kind


def test_ivf_search_defaults(data):
    X, Q, gt = data
    kw = dict(bits=2, similarity="cosine", cluster_size=64, seed=3)
    index = IVFIndex(**kw, store_vectors=True, visit_percentage=40.0, oversample=10.0)
    assert index.store_vectors == "float32"
    index.add(X)
    scores, ids = index.search(Q, 10)
    assert _recall(ids, gt, 10) >= 0.9
    s2, i2 = index.search(Q, 10, visit_percentage=40.0, oversample=10.0, rerank=True)
    np.testing.assert_array_equal(i2, ids)
    np.testing.assert_array_equal(s2, scores)
