"""IVFIndex rerank vectors stored as float32, float16 or int8 (IVF format 6).

The kinds themselves (``bbqlib.search.stored``) and the FlatIndex are tested in
``tests/test_stored_vectors.py``; here: builds in memory and on disk, several segments,
save / open round trips with the search defaults, block CRC32s over the stored bytes,
re-clustering on growth from decoded rows, exact scores of decoded rows, and the recall each
kind costs on the bundled sample.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from bbqlib import CorruptFileError, IVFIndex
from bbqlib.analysis.ground_truth import exact_knn
from bbqlib.datasets import load_demo_sample
from bbqlib.search.stored import stored_kind_of, stored_rows, to_stored
from bbqlib.storage.container import read_container, write_container

KINDS = ("float32", "float16", "int8")


def _blobs(n, d, seed):
    g = np.random.default_rng(seed)
    centres = g.standard_normal((20, d))
    X = centres[g.integers(0, 20, n)] + 0.5 * g.standard_normal((n, d))
    return X.astype(np.float32)


def _recall(ids, gt, k):
    return float(np.mean([len(set(a[:k]) & set(b[:k])) / k for a, b in zip(ids, gt, strict=True)]))


@pytest.fixture(scope="module")
def data():
    return _blobs(1800, 37, 1), _blobs(12, 37, 2)


def _header(path):
    manifest = json.loads((path / "MANIFEST").read_text())
    return manifest, path / manifest["header"]


@pytest.mark.parametrize("on_disk", [False, True], ids=["memory", "disk"])
@pytest.mark.parametrize("kind", KINDS)
def test_kinds_build_grow_save_and_open(kind, on_disk, data, tmp_path):
    X, Q = data
    path = tmp_path / "live" if on_disk else None
    kw = dict(bits=1, similarity="euclidean", cluster_size=64, seed=5)
    index = IVFIndex(**kw, path=path, store_vectors=kind, oversample=6.0, visit_percentage=60.0)
    index.add(X[:600])
    index.add(X[600:])  # lists grow past 2 · cluster_size: re-clustered from decoded rows
    assert index.n_lists > 600 // 64 and len(index._segments) == 2
    assert {stored_kind_of(s.array) for s in index._segments} == {kind}
    scores, ids = index.search(Q, 10)
    one = index.search(Q[0], 10)
    np.testing.assert_array_equal(one[1][0], ids[0])
    np.testing.assert_allclose(one[0][0], scores[0], rtol=1e-6)
    saved = index.save(tmp_path / "copy")
    for where in (saved, path) if on_disk else (saved,):
        manifest, header = _header(where)
        assert manifest["format_version"] >= 6
        meta = read_container(header, mmap=False)[1]
        assert meta["vector_dtype"] == kind and meta["oversample"] == 6.0
        back = IVFIndex.open(where)
        assert (back.store_vectors, back.oversample, back.visit_percentage) == (kind, 6.0, 60.0)
        assert back.verify()["vector_segments"] == 2
        s2, i2 = back.search(Q, 10)
        np.testing.assert_array_equal(i2, ids)
        np.testing.assert_array_equal(s2, scores)
    back = IVFIndex.open(saved)
    back.add(X[:50])  # a third segment, of the same kind, in the opened directory
    again = IVFIndex.open(saved)
    assert [stored_kind_of(s.array) for s in again._segments] == [kind] * 3
    again.verify()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("sim", ["euclidean", "cosine", "max_inner_product"])
def test_reranked_scores_are_exact_on_the_decoded_rows(kind, sim, data):
    X, Q = data
    index = IVFIndex(bits=2, similarity=sim, cluster_size=64, store_vectors=kind)
    index.add(X)
    scores, ids = index.search(Q, 7, visit_percentage=50.0)
    P = X / np.linalg.norm(X, axis=1, keepdims=True) if sim == "cosine" else X
    decoded = stored_rows(to_stored(P, kind)).astype(np.float64)
    Qd = Q / np.linalg.norm(Q, axis=1, keepdims=True) if sim == "cosine" else Q
    Qd = Qd.astype(np.float64)
    for q, row_ids, row_scores in zip(Qd, ids, scores, strict=True):
        v = decoded[row_ids]
        want = ((v - q) ** 2).sum(1) if sim == "euclidean" else v @ q
        np.testing.assert_allclose(row_scores, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kind", ["float16", "int8"])
@pytest.mark.parametrize("sim", ["euclidean", "cosine", "dot_product", "max_inner_product"])
def test_single_query_rerank_of_stored_rows_equals_the_batch(kind, sim, data):
    """One query per call reads float16 / int8 rows in the exact kernel as the batch does:
    the same rows and the same scores, bit for bit."""
    X, Q = data
    if sim == "dot_product":
        X = X / np.linalg.norm(X, axis=1, keepdims=True)
        Q = Q / np.linalg.norm(Q, axis=1, keepdims=True)
    index = IVFIndex(bits=1, similarity=sim, cluster_size=64, store_vectors=kind, seed=3)
    index.add(X)
    for score_kind in ("similarity", "raw"):
        scores, ids = index.search(Q, 10, visit_percentage=40.0, scores=score_kind)
        for i, q in enumerate(Q):
            one_scores, one_ids = index.search(q, 10, visit_percentage=40.0, scores=score_kind)
            np.testing.assert_array_equal(one_ids[0], ids[i])
            np.testing.assert_array_equal(one_scores[0], scores[i])


def test_cheaper_vectors_make_smaller_directories(data, tmp_path):
    X, _ = data
    n, d = X.shape
    sizes = {}
    for kind in (*KINDS, False):
        index = IVFIndex(bits=1, similarity="cosine", cluster_size=64, store_vectors=kind)
        index.add(X)
        index.save(tmp_path / str(kind))
        sizes[kind] = sum(f.stat().st_size for f in (tmp_path / str(kind)).glob("vectors.*"))
    assert sizes[False] == 0
    assert sizes["float32"] - sizes["float16"] == pytest.approx(2 * n * d, abs=256)
    assert sizes["int8"] == pytest.approx(n * (d + 4), abs=256)


def test_damaged_row_of_an_int8_segment_is_caught_on_first_read(data, tmp_path):
    X, Q = data
    index = IVFIndex(bits=1, similarity="euclidean", cluster_size=64, store_vectors="int8")
    index.add(X)
    index.save(tmp_path / "d")
    (seg,) = (tmp_path / "d").glob("vectors.*.npy")
    raw = bytearray(seg.read_bytes())
    row = len(X) - 2  # the first and the last row are checked at open (format 9)
    raw[-5 - (X.shape[1] + 4)] ^= 0x40  # a code byte of that row
    seg.write_bytes(bytes(raw))
    back = IVFIndex.open(tmp_path / "d")
    with pytest.raises(CorruptFileError, match=f"row {row} fails its CRC32"):
        back.search(Q, 10, visit_percentage=100.0, oversample=200.0)
    with pytest.raises(CorruptFileError):
        IVFIndex.open(tmp_path / "d").verify()


def test_header_naming_another_kind_is_corrupt(data, tmp_path):
    X, _ = data
    index = IVFIndex(bits=1, similarity="euclidean", cluster_size=64, store_vectors="float16")
    index.add(X[:300])
    index.save(tmp_path / "h")
    _, header = _header(tmp_path / "h")
    for wrong, match in (("int8", "expected int8"), ("bfloat16", "malformed")):
        kind, meta, arrays = read_container(header, mmap=False)
        meta["vector_dtype"] = wrong
        write_container(header, kind, meta, arrays)
        with pytest.raises(CorruptFileError, match=match):
            IVFIndex.open(tmp_path / "h")


def test_recall_of_the_kinds_on_the_bundled_sample():
    s = load_demo_sample()
    X, Q = s["base"], s["queries"]
    _, gt = exact_knn(X, Q, 10, "cosine", scores_first=True)
    recall = {}
    for kind in KINDS:
        index = IVFIndex(bits=1, similarity="cosine", cluster_size=128, store_vectors=kind)
        index.add(X)
        recall[kind] = _recall(
            index.search(Q, 10, visit_percentage=30.0, oversample=5.0)[1], gt, 10
        )
    assert recall["float32"] >= 0.9, recall
    assert recall["float16"] >= recall["float32"] - 0.002, recall
    assert recall["int8"] >= recall["float32"] - 0.01, recall
