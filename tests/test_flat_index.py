"""FlatIndex: incremental add, search with oversample and exact rerank, filters, files."""

from __future__ import annotations

import json
import math
import os
import struct

import numpy as np
import pytest

import bbqlib
from bbqlib import BBQQuantizer, CorruptFileError, FlatIndex, NotFittedError
from bbqlib.search.rerank import OVERSAMPLE_LIMIT, candidate_count
from bbqlib.similarity import Similarity, scores_from_raw
from bbqlib.storage import container

SIMILARITIES = ["euclidean", "dot_product", "cosine", "max_inner_product"]


def vectors_for(similarity, make_vectors, n=400, d=24, nq=6):
    kind = "unit" if similarity == "dot_product" else "clustered"
    return make_vectors(n, d, kind, seed=1), make_vectors(nq, d, kind, seed=2)


def exact_raw(similarity, Q, X):
    Q, X = Q.astype(np.float64), X.astype(np.float64)
    if similarity == "cosine":
        Q = Q / np.linalg.norm(Q, axis=1, keepdims=True)
        X = X / np.linalg.norm(X, axis=1, keepdims=True)
    if similarity == "euclidean":
        return ((Q[:, None, :] - X[None, :, :]) ** 2).sum(axis=2)
    return Q @ X.T


def exact_topk(similarity, Q, X, k, allowed=None):
    raw = exact_raw(similarity, Q, X)
    key = -raw if similarity == "euclidean" else raw
    cols = np.arange(X.shape[0]) if allowed is None else np.flatnonzero(allowed)
    ids = np.array([cols[np.lexsort((cols, -row[cols]))[:k]] for row in key])
    return np.take_along_axis(raw, ids, axis=1), ids


# ----------------------------------------------------------------------------- building
def test_add_in_batches_equals_one_batch(make_vectors):
    X, Q = vectors_for("cosine", make_vectors)
    one = FlatIndex(bits=2)
    one.add(X)
    q = BBQQuantizer(bits=2).fit(X)
    many = FlatIndex(q)
    for part in np.array_split(X, [7, 150, 151, 390]):
        many.add(part)
    assert many.ntotal == len(many) == one.ntotal == 400
    np.testing.assert_array_equal(many.codes.codes, one.codes.codes)
    np.testing.assert_array_equal(many.codes.corrections, one.codes.corrections)
    for rerank in (True, False):
        s1, i1 = one.search(Q, 10, rerank=rerank)
        s2, i2 = many.search(Q, 10, rerank=rerank)
        np.testing.assert_array_equal(i1, i2)
        np.testing.assert_array_equal(s1, s2)


def test_first_add_fits_and_fixes_the_centroid(make_vectors):
    X = make_vectors(100, 16)
    index = FlatIndex(bits=1, similarity="euclidean")
    assert not index.quantizer.is_fitted
    index.add(X[:50])
    centroid = index.quantizer.centroid_.copy()
    np.testing.assert_allclose(centroid, X[:50].mean(axis=0), rtol=1e-5, atol=1e-6)
    index.add(X[50:] + 10.0)
    np.testing.assert_array_equal(index.quantizer.centroid_, centroid)
    assert index.bytes_per_vector == 8 + 14


def test_constructor_errors():
    with pytest.raises(TypeError, match="Quantizer"):
        FlatIndex("bbq")
    with pytest.raises(ValueError, match="bits"):
        FlatIndex(bits=9).add(np.ones((2, 4), np.float32))


# ----------------------------------------------------------------------------- searching
@pytest.mark.parametrize("similarity", SIMILARITIES)
def test_search_shapes_and_exact_rerank(similarity, make_vectors):
    X, Q = vectors_for(similarity, make_vectors)
    index = FlatIndex(bits=1, similarity=similarity)
    index.add(X)
    scores, ids = index.search(Q, 10, scores="similarity")
    assert scores.shape == ids.shape == (6, 10)
    assert scores.dtype == np.float32 and ids.dtype == np.int64
    assert (ids >= 0).all() and (np.diff(scores, axis=1) <= 0).all()
    # reranked scores are the exact mapped scores of the returned ids
    raw = np.take_along_axis(exact_raw(similarity, Q, X), ids, axis=1)
    np.testing.assert_allclose(scores, scores_from_raw(Similarity(similarity), raw), rtol=1e-6)
    # the default: the exact raw values themselves
    raw_scores, raw_ids = index.search(Q, 10)
    np.testing.assert_array_equal(raw_ids, ids)
    np.testing.assert_allclose(raw_scores, raw, rtol=1e-5, atol=1e-5)
    if similarity == "euclidean":  # the documented mapping
        np.testing.assert_allclose(scores, 1 / (1 + raw), rtol=1e-6)
    # one query as a 1-D array
    s1, i1 = index.search(Q[0], 10)
    assert s1.shape == (1, 10)
    np.testing.assert_array_equal(i1[0], ids[0])


@pytest.mark.parametrize("similarity", SIMILARITIES)
def test_rerank_false_returns_the_quantized_top_k(similarity, make_vectors):
    X, Q = vectors_for(similarity, make_vectors)
    index = FlatIndex(bits=1, similarity=similarity)
    index.add(X)
    scores, ids = index.search(Q, 8, rerank=False, scores="similarity")
    q = index.quantizer
    est = q.estimate(Q, index.codes).astype(np.float64)
    key = -est if similarity == "euclidean" else est
    expected = np.array([np.lexsort((np.arange(400), -row))[:8] for row in key])
    np.testing.assert_array_equal(ids, expected)
    np.testing.assert_allclose(
        scores, np.take_along_axis(q.similarity_scores(Q, index.codes), ids, axis=1), rtol=1e-6
    )


@pytest.mark.parametrize("similarity", SIMILARITIES)
@pytest.mark.parametrize("bits", [1, 2, 4, 7])
def test_full_oversample_is_exact_search(similarity, bits, make_vectors):
    """When every vector is a candidate the rerank returns the exact top k (ties: lower id)."""
    X, Q = vectors_for(similarity, make_vectors, n=200)
    index = FlatIndex(bits=bits, similarity=similarity)
    index.add(X)
    scores, ids = index.search(Q, 10, oversample=20.0, scores="similarity")  # 200 candidates
    raw, expected = exact_topk(similarity, Q, X, 10)
    np.testing.assert_array_equal(ids, expected)
    np.testing.assert_allclose(scores, scores_from_raw(Similarity(similarity), raw), rtol=1e-6)


def test_exact_rerank_breaks_ties_by_lower_id(make_vectors):
    X = make_vectors(50, 16)
    X = np.concatenate([X, X[:10], X[:10]])  # ids i, 50 + i, 60 + i are identical
    index = FlatIndex(bits=1, similarity="euclidean")
    index.add(X)
    scores, ids = index.search(X[:3], 3, oversample=100.0, scores="similarity")
    for r in range(3):
        assert ids[r].tolist() == [r, 50 + r, 60 + r]
        assert scores[r, 0] == scores[r, 1] == scores[r, 2] == 1.0


def test_k_capped_at_the_index_size_and_filters_pad(make_vectors):
    X, Q = vectors_for("cosine", make_vectors, n=5)
    index = FlatIndex(bits=1)
    index.add(X)
    for rerank in (True, False):
        scores, ids = index.search(Q, 8, rerank=rerank, pad_to_k=False)
        assert scores.shape == ids.shape == (6, 5)  # k capped at ntotal before allocating
        assert np.isfinite(scores).all() and sorted(ids[0]) == list(range(5))
        assert index.search(Q, 10**12, rerank=rerank, pad_to_k=False)[1].shape == (6, 5)
        scores, ids = index.search(Q, 4, rerank=rerank, filter=np.array([1, 3]))
        assert (ids[:, 2:] == -1).all() and np.isneginf(scores[:, 2:]).all()
        assert (np.sort(ids[:, :2], axis=1) == [1, 3]).all()


def test_empty_fitted_index(make_vectors):
    X = make_vectors(10, 8)
    index = FlatIndex(BBQQuantizer(similarity="euclidean").fit(X))
    scores, ids = index.search(X[:2], 3, pad_to_k=True)  # raw squared L2: +inf pads
    assert ids.shape == (2, 3) and (ids == -1).all() and np.isposinf(scores).all()
    assert scores.dtype == np.float32
    scores, _ = index.search(X[:2], 3, scores="similarity", pad_to_k=True)
    assert scores.shape == (2, 3) and np.isneginf(scores).all()
    assert index.search(X[:2], 3, pad_to_k=False)[1].shape == (2, 0)
    with pytest.raises(NotFittedError, match="this FlatIndex is empty; call add"):
        FlatIndex().search(X[:2], 3)


# ----------------------------------------------------------------------------- oversample
@pytest.mark.parametrize(
    ("k", "oversample", "n", "expected"),
    [
        (10, 1.0, 1000, 10),
        (10, 1.5, 1000, 15),
        (10, 3.0, 1000, 30),
        (10, 1.1, 1000, 11),  # 10 * 1.1 = 11.000000000000002: the 1e-9 keeps it at 11
        (3, 1.1, 1000, 4),
        (7, 2.9, 1000, 21),  # 20.299999999999997 -> 21
        (10, 3.0, 25, 25),  # capped by n
        (10, 3.0, 5, 5),
        (5000, 3.0, 10**6, OVERSAMPLE_LIMIT),  # Elasticsearch's cap
        (20000, 1.0, 10**6, 20000),  # never fewer than k: the cap only limits the extra
        (10, 1.0, 3, 3),
    ],
)
def test_candidate_count(k, oversample, n, expected):
    assert candidate_count(k, oversample, n) == expected
    formula = min(math.ceil(k * oversample - 1e-9), OVERSAMPLE_LIMIT, n)
    assert expected == max(formula, min(k, n))


def test_search_uses_candidate_count(make_vectors, monkeypatch):
    X, Q = vectors_for("cosine", make_vectors)
    depths = []
    for bits, default in [(1, 3.0), (2, 1.5), (4, 1.0), (7, 1.0)]:
        index = FlatIndex(bits=bits)
        index.add(X)
        q = index.quantizer
        original = q.topk_keys

        def spy(*args, _original=original, **kwargs):
            depths.append(args[2])
            return _original(*args, **kwargs)

        monkeypatch.setattr(q, "topk_keys", spy)
        assert q.default_oversample == default
        index.search(Q, 10)
        assert depths[-1] == math.ceil(10 * default)
        index.search(Q, 10, oversample=1.1)
        assert depths[-1] == 11
        index.search(Q, 10, rerank=False)
        assert depths[-1] == 10
        index.search(Q, 10, oversample=1000.0)
        assert depths[-1] == 400


@pytest.mark.parametrize("oversample", [0.5, 0.0, -1.0, float("nan"), float("inf"), "3", True])
def test_bad_oversample(oversample, make_vectors):
    index = FlatIndex()
    index.add(make_vectors(20, 8))
    with pytest.raises(ValueError, match="oversample"):
        index.search(make_vectors(1, 8), 5, oversample=oversample)


@pytest.mark.parametrize("k", [0, -3, 2.5, "10", None, True])
def test_bad_k(k, make_vectors):
    index = FlatIndex()
    index.add(make_vectors(20, 8))
    with pytest.raises(ValueError, match="k must be"):
        index.search(make_vectors(1, 8), k)


def test_bad_queries(make_vectors):
    index = FlatIndex()
    index.add(make_vectors(20, 8))
    with pytest.raises(ValueError, match="dimension"):
        index.search(make_vectors(2, 9), 3)
    with pytest.raises(TypeError, match="float"):
        index.search(np.ones((2, 8), np.int32), 3)
    with pytest.raises(ValueError, match="zero vector"):
        index.search(np.zeros((1, 8), np.float32), 3)
    with pytest.raises(ValueError, match="rerank"):
        index.search(make_vectors(1, 8), 3, rerank="yes")
    with pytest.raises(ValueError, match="dimension"):
        index.add(make_vectors(2, 9))


def test_caller_arrays_are_never_modified(make_vectors):
    X, Q = make_vectors(60, 12, "wide"), make_vectors(3, 12, "wide", seed=5)
    X_copy, Q_copy = X.copy(), Q.copy()
    index = FlatIndex(bits=1, similarity="cosine")
    index.add(X)
    index.search(Q, 4)
    index.search(Q, 4, rerank=False)
    np.testing.assert_array_equal(X, X_copy)
    np.testing.assert_array_equal(Q, Q_copy)
    _, vectors = index._parts()
    assert not np.shares_memory(vectors, X)


# ----------------------------------------------------------------------------- filters
def test_filter_mask_and_ids(make_vectors):
    X, Q = vectors_for("euclidean", make_vectors, n=300)
    index = FlatIndex(bits=1, similarity="euclidean")
    index.add(X)
    g = np.random.default_rng(0)
    mask = g.uniform(size=300) < 0.3
    allowed_ids = np.flatnonzero(mask)
    s_mask, i_mask = index.search(Q, 10, filter=mask, oversample=100.0)
    s_ids, i_ids = index.search(Q, 10, filter=allowed_ids, oversample=100.0)
    np.testing.assert_array_equal(i_mask, i_ids)
    np.testing.assert_array_equal(s_mask, s_ids)
    assert np.isin(i_mask, allowed_ids).all()
    _, expected = exact_topk("euclidean", Q, X, 10, allowed=mask)
    np.testing.assert_array_equal(i_mask, expected)
    # quantized-only search respects it too; a filter with fewer than k ids pads
    _, raw_ids = index.search(Q, 10, filter=mask, rerank=False)
    assert np.isin(raw_ids, allowed_ids).all()
    s, i = index.search(Q, 10, filter=[3, 7, 11])
    assert (np.sort(i[:, :3], axis=1) == [3, 7, 11]).all() and (i[:, 3:] == -1).all()
    assert np.isposinf(s[:, 3:]).all()  # raw squared L2 pads with +inf


def test_bad_filters(make_vectors):
    index = FlatIndex()
    index.add(make_vectors(20, 8))
    Q = make_vectors(1, 8)
    with pytest.raises(ValueError, match="shape"):
        index.search(Q, 3, filter=np.ones(19, bool))
    with pytest.raises(ValueError, match="filter ids"):
        index.search(Q, 3, filter=[0, 20])
    with pytest.raises(ValueError, match="filter ids"):
        index.search(Q, 3, filter=[-1])
    with pytest.raises(TypeError, match="filter"):
        index.search(Q, 3, filter=np.array([0.5, 1.0]))


# ----------------------------------------------------------------------------- store_vectors
def test_store_vectors_false(make_vectors, tmp_path):
    X, Q = vectors_for("cosine", make_vectors)
    index = FlatIndex(bits=1, store_vectors=False)
    index.add(X)
    with pytest.raises(ValueError, match="store_vectors=False"):
        index.search(Q, 5, rerank=True)
    scores, ids = index.search(Q, 5, rerank=False)
    np.testing.assert_array_equal(index.search(Q, 5)[1], ids)  # default: no rerank here
    path = index.save(tmp_path / "codes_only.bbq")
    loaded = bbqlib.load(path)
    assert not loaded.store_vectors
    s2, i2 = loaded.search(Q, 5, rerank=False)
    np.testing.assert_array_equal(i2, ids)
    np.testing.assert_array_equal(s2, scores)
    with_vectors = FlatIndex(bits=1)
    with_vectors.add(X)
    assert path.stat().st_size < with_vectors.save(tmp_path / "full.bbq").stat().st_size


# ----------------------------------------------------------------------------- files
@pytest.fixture
def saved(make_vectors, tmp_path):
    X, Q = vectors_for("max_inner_product", make_vectors, n=300)
    index = FlatIndex(bits=2, query_bits=8, similarity="mip")
    index.add(X[:100])
    index.add(X[100:])
    path = tmp_path / "index.bbq"
    assert index.save(path) == path
    return index, path, Q


@pytest.mark.parametrize("mmap", [True, False])
def test_save_load_round_trip(saved, mmap):
    index, path, Q = saved
    for loaded in (FlatIndex.load(path, mmap=mmap), bbqlib.load(path, mmap=mmap)):
        assert isinstance(loaded, FlatIndex) and loaded.ntotal == 300
        assert loaded.quantizer.fingerprint_ == index.quantizer.fingerprint_
        assert loaded.quantizer.encoding_ is index.quantizer.encoding_
        for kwargs in ({}, {"rerank": False}, {"oversample": 5.0}):
            s1, i1 = index.search(Q, 7, **kwargs)
            s2, i2 = loaded.search(Q, 7, **kwargs)
            np.testing.assert_array_equal(i1, i2)
            np.testing.assert_array_equal(s1, s2)


def test_loaded_index_keeps_growing(saved, make_vectors):
    index, path, Q = saved
    loaded = bbqlib.load(path)
    extra = make_vectors(20, 24, "clustered", seed=9)
    loaded.add(extra)
    index.add(extra)
    np.testing.assert_array_equal(loaded.search(Q, 5)[1], index.search(Q, 5)[1])


def test_save_is_deterministic(saved, tmp_path):
    """write-read-write gives identical bytes."""
    index, path, _ = saved
    again = bbqlib.load(path, mmap=False).save(tmp_path / "again.bbq")
    assert path.read_bytes() == again.read_bytes()


def test_save_unfitted_is_an_error(tmp_path):
    with pytest.raises(NotFittedError):
        FlatIndex().save(tmp_path / "x.bbq")
    assert not (tmp_path / "x.bbq").exists()


def _layout(path):
    """(header start, header end, sections, footer start) of a container file."""
    raw = path.read_bytes()
    _, _, header_len, _, _ = struct.unpack_from("<8sIIII", raw)
    header = json.loads(raw[24 : 24 + header_len])
    return 24, 24 + header_len, header["sections"], len(raw) - 24


def _flip(path, offset, bit=0):
    raw = bytearray(path.read_bytes())
    raw[offset] ^= 1 << bit
    path.write_bytes(bytes(raw))


def test_corrupted_files(saved, tmp_path):
    _, path, _ = saved
    good = path.read_bytes()
    h0, h1, sections, footer = _layout(path)
    by_name = {s["name"]: s for s in sections}
    assert {"codes", "corrections", "vectors", "quantizer.centroid"} <= set(by_name)
    offsets = {
        "magic": 0,
        "version": 8,
        "header length": 12,
        "header crc": 16,
        "header start": h0 + 2,
        "header middle": (h0 + h1) // 2,
        "codes": by_name["codes"]["offset"] + 5,
        "corrections": by_name["corrections"]["offset"] + by_name["corrections"]["nbytes"] - 1,
        "vectors": by_name["vectors"]["offset"] + 100,
        "centroid": by_name["quantizer.centroid"]["offset"],
        "footer magic": footer,
        "footer crc": footer + 8,
        "footer size": footer + 16,
    }
    for region, offset in offsets.items():
        for bit in (0, 7):
            path.write_bytes(good)
            _flip(path, offset, bit)
            with pytest.raises(CorruptFileError):
                bbqlib.load(path, mmap=False)
                pytest.fail(f"flip of bit {bit} in {region} went unnoticed (mmap=False)")
            with pytest.raises(CorruptFileError):
                # memory-mapped vectors are checked by block on first read: verify() reads all
                bbqlib.load(path).verify()
                pytest.fail(f"flip of bit {bit} in {region} went unnoticed")
    # truncated anywhere
    for size in (0, 5, 24, h1 - 1, h1 + 10, by_name["vectors"]["offset"] + 3, len(good) - 1):
        path.write_bytes(good[:size])
        with pytest.raises(CorruptFileError):
            bbqlib.load(path)
    # appended garbage
    path.write_bytes(good + b"\x00" * 8)
    with pytest.raises(CorruptFileError):
        bbqlib.load(path)
    # a foreign file and an empty file
    np.save(tmp_path / "foreign.npy", np.ones(100))
    empty = tmp_path / "empty.bbq"
    empty.write_bytes(b"")
    for p in (tmp_path / "foreign.npy", empty):
        with pytest.raises(CorruptFileError, match="not a bbqlib file"):
            bbqlib.load(p)
    with pytest.raises(FileNotFoundError):
        bbqlib.load(tmp_path / "missing.bbq")
    # without verification a flipped section byte is only noticed by the checksum pass
    path.write_bytes(good)
    _flip(path, offsets["vectors"])
    FlatIndex.load(path, verify=False).verify()  # verify=False: no checksums kept
    with pytest.raises(CorruptFileError, match="checksum|CRC32"):
        FlatIndex.load(path, verify=True).verify()


def test_wrong_kind(tmp_path):
    path = container.write_container(tmp_path / "other.bbq", "something_else", {}, {})
    with pytest.raises(ValueError, match="something_else"):
        bbqlib.load(path)
    with pytest.raises(ValueError, match="not a flat index"):
        FlatIndex.load(path)


class _FailingFile:
    """Wraps a file object; the write that crosses ``limit`` bytes, or that writes the footer
    when ``limit`` is None, raises (a full disk)."""

    def __init__(self, f, limit):
        self._f, self._left = f, limit

    def write(self, data):
        if self._left is None:
            if bytes(data[:8]) == container.FOOTER_MAGIC:
                raise OSError(28, "No space left on device")
        else:
            self._left -= len(data)
            if self._left < 0:
                raise OSError(28, "No space left on device")
        return self._f.write(data)

    def __getattr__(self, name):
        return getattr(self._f, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return self._f.__exit__(*exc)


@pytest.mark.parametrize("where", ["prefix", "sections", "footer", "rename"])
def test_interrupted_save_keeps_the_previous_file(saved, make_vectors, monkeypatch, where):
    index, path, Q = saved
    before = path.read_bytes()
    expected = index.search(Q, 5)
    index.add(make_vectors(50, 24, "clustered", seed=4))

    if where == "rename":

        def fail(*args):
            raise OSError(5, "Input/output error")

        monkeypatch.setattr(os, "replace", fail)
    else:
        # bytes written before the failing write: inside the prefix, the sections or the footer
        limit = {"prefix": 10, "sections": len(before) // 2, "footer": None}[where]
        real_open = open
        monkeypatch.setattr(
            container,
            "open",
            lambda *a, **k: _FailingFile(real_open(*a, **k), limit),
            raising=False,
        )
    with pytest.raises(OSError):
        index.save(path)
    monkeypatch.undo()
    assert path.read_bytes() == before
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temp file left
    loaded = bbqlib.load(path)
    assert loaded.ntotal == 300
    np.testing.assert_array_equal(loaded.search(Q, 5)[1], expected[1])


def test_constructor_checks_the_default_quantizer_now_and_warns_about_ignored_options():
    """The quantizer an index is made with follows one rule everywhere
    (``bbqlib.index.base.index_quantizer``): a wrong ``bits`` fails at construction, not at
    the first ``add``; options next to a quantizer are ignored with a FutureWarning."""
    with pytest.raises(ValueError, match="bits must be one of"):
        bbqlib.FlatIndex(bits=9)
    with pytest.raises(ValueError, match="similarity"):
        bbqlib.FlatIndex(similarity="hamming")
    with pytest.raises(TypeError, match="bbqlib Quantizer"):
        bbqlib.FlatIndex("bbq")
    q = bbqlib.BBQQuantizer(bits=2)
    with pytest.warns(FutureWarning, match="FlatIndex: bits ignored"):
        assert bbqlib.FlatIndex(q, bits=4).quantizer is q
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert bbqlib.FlatIndex(q).quantizer is q  # the defaults alone: nothing to say
