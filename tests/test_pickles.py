"""Pickles written before keep loading and serving the same results.

The fixtures under tests/fixtures/pickles were written by scripts/make_pickle_fixtures.py with
the bbqlib that ``info.json`` names: flat indexes of every family, in-memory IVF indexes,
bare quantizers and an ``EncodedVectors``, each pickled after searches (with the caches those
searches fill). A pickle names its classes by module path, so these tests catch a module move
without a shim at the old path (issue 28). A ``FutureWarning`` from such a shim is allowed.
"""

from __future__ import annotations

import json
import pickle
import warnings

import numpy as np
import pytest
from paths import FIXTURES

import bbqlib
from bbqlib.index import tiers as single

PICKLES = FIXTURES / "pickles"
INFO = json.loads((PICKLES / "info.json").read_text())
K = INFO["k"]
IVF_SEARCH = {"visit_percentage": 50.0}


def _load(name: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # an old path served by a shim
        return pickle.loads((PICKLES / f"{name}.pkl").read_bytes())


def _cases(prefix: str) -> list[str]:
    return [name for name in INFO["cases"] if name.startswith(prefix)]


def _assert_same(scores, ids, expected_scores, expected_ids):
    np.testing.assert_array_equal(ids, expected_ids)
    np.testing.assert_allclose(scores, expected_scores, rtol=1e-6, atol=1e-7)


def _assert_index_serves(index, expected, **kwargs):
    Q = expected["queries"]
    for rerank in (True, False):
        scores, ids = index.search(Q, k=K, rerank=rerank, scores="raw", **kwargs)
        tag = f"rerank{int(rerank)}"
        _assert_same(scores, ids, expected[f"scores_{tag}"], expected[f"ids_{tag}"])
    scores, ids = index.search(Q[0], k=K, scores="raw", **kwargs)
    _assert_same(scores, ids, expected["scores_one"], expected["ids_one"])


def test_every_family_has_fixtures():
    families = {name.split("_", 1)[1] for name in _cases("flat_")}
    assert families == {
        "bbq1_cosine", "rabitq2_euclidean", "int8_osq_cosine", "int8_per_dim_euclidean",
        "int8_global_cosine", "saq2_euclidean",
    }  # fmt: skip
    assert {name.split("_", 1)[1] for name in _cases("quantizer_")} == families
    assert set(_cases("ivf_")) == {"ivf_bbq1_cosine", "ivf_rabitq2_euclidean", "ivf_saq2_euclidean"}


@pytest.mark.parametrize("name", _cases("flat_") + _cases("ivf_"))
def test_old_index_pickles_load_and_serve_the_recorded_results(name, monkeypatch):
    monkeypatch.setattr(single, "COMPILE_SINGLE_AFTER", 0.0)  # the one-query path, as written
    index = _load(name)
    expected = np.load(PICKLES / f"{name}.expected.npz")
    _assert_index_serves(index, expected, **(IVF_SEARCH if name.startswith("ivf_") else {}))
    before = index.ntotal
    index.add(expected["queries"])  # still writable: the guard came back
    assert index.ntotal == before + len(expected["queries"])


@pytest.mark.parametrize("name", _cases("quantizer_"))
def test_old_quantizer_pickles_encode_and_search_as_before(name):
    quantizer = _load(name)
    expected = np.load(PICKLES / f"{name}.expected.npz")
    enc = quantizer.encode(expected["vectors"])
    scores, rows = quantizer.search(expected["queries"], enc, K)
    _assert_same(scores, rows, expected["scores"], expected["rows"])
    np.testing.assert_allclose(
        quantizer.estimate(expected["queries"], enc), expected["estimate"], rtol=1e-6, atol=1e-6
    )


def test_old_encoded_vectors_pickle_searches_as_before():
    quantizer = _load("quantizer_bbq1_cosine")  # the quantizer that encoded them
    enc = _load("encoded_bbq1_cosine")
    assert isinstance(enc, bbqlib.EncodedVectors)
    expected = np.load(PICKLES / "encoded_bbq1_cosine.expected.npz")
    scores, rows = quantizer.search(expected["queries"], enc, K)
    _assert_same(scores, rows, expected["scores"], expected["rows"])


# --------------------------------------------------------------------------- derived state

#: What a search derives and keeps, which pickles leave out (made again on first use);
#: ``bbqlib.layouts.codes`` is the module of the kernel layouts ``EncodedVectors`` cache.
DERIVED = (b"_single_mask", b"_single_state", b"_live_cache", b"_live_per_list",
           b"_saq_fastscan", b"bbqlib.layouts.codes")  # fmt: skip


def _encoded_in(obj, depth: int = 3) -> list:
    """The ``EncodedVectors`` an object holds, in its attributes, lists and tuples."""
    if isinstance(obj, bbqlib.EncodedVectors):
        return [obj]
    if depth == 0:
        return []
    items = obj if isinstance(obj, (list, tuple)) else getattr(obj, "__dict__", {}).values()
    return [enc for item in items for enc in _encoded_in(item, depth - 1)]


def _assert_lean(blob: bytes):
    found = [name.decode() for name in DERIVED if name in blob]
    assert not found, f"the pickle holds derived state: {found}"
    caches = [enc._cache for enc in _encoded_in(pickle.loads(blob))]
    assert not any(caches), "an EncodedVectors kept its cache"


def _searched(index, Q, **kwargs) -> list:
    """Every kind of search the fixtures record, in order (they fill the caches)."""
    out = []
    for rerank in (True, False):
        out += index.search(Q, k=K, rerank=rerank, scores="raw", **kwargs)
    out += index.search(Q[0], k=K, scores="raw", **kwargs)
    return out


def _same_results(a: list, b: list):
    for x, y in zip(a, b, strict=True):
        np.testing.assert_array_equal(x, y)


@pytest.mark.parametrize("name", _cases("flat_") + _cases("ivf_") + ["encoded_bbq1_cosine"])
def test_old_pickles_pickle_again_without_their_caches(name):
    _assert_lean(pickle.dumps(_load(name)))


@pytest.mark.parametrize(
    "kind, make",
    [
        ("flat", lambda: bbqlib.FlatIndex(bits=1, similarity="cosine")),
        ("flat", lambda: bbqlib.FlatIndex(bbqlib.SAQQuantizer(bits=2.0, similarity="euclidean"))),
        ("ivf", lambda: bbqlib.IVFIndex(bits=1, similarity="cosine", cluster_size=64, seed=7)),
        (
            "ivf",
            lambda: bbqlib.IVFIndex(
                bbqlib.SAQQuantizer(bits=2.0, similarity="euclidean"), cluster_size=64, seed=7
            ),
        ),  # fmt: skip
    ],
    ids=["flat-bbq", "flat-saq", "ivf-bbq", "ivf-saq"],
)
def test_searched_index_pickles_without_derived_state_and_searches_the_same(
    kind, make, monkeypatch
):
    monkeypatch.setattr(single, "COMPILE_SINGLE_AFTER", 0.0)
    rng = np.random.default_rng(5)
    X = rng.normal(size=(256, 16)).astype(np.float32)
    Q = rng.normal(size=(4, 16)).astype(np.float32)
    kwargs = IVF_SEARCH if kind == "ivf" else {}
    index = make()
    index.add(X)
    index.search(Q[0], k=K, **kwargs)  # the IVF's one-query path runs only without deletes
    index.delete(np.array([3, 5]))
    before = _searched(index, Q, **kwargs)
    blob = pickle.dumps(index)
    _assert_lean(blob)
    again = pickle.loads(blob)
    _same_results(_searched(again, Q, **kwargs), before)
    _same_results(_searched(again, Q, **kwargs), before)  # from the caches made again
    for each in (index, again):  # a delete after loading drops what the searches made
        each.delete(np.array([7]))
    _same_results(_searched(again, Q, **kwargs), _searched(index, Q, **kwargs))


def test_encoded_vectors_pickle_without_their_cache():
    rng = np.random.default_rng(6)
    X = rng.normal(size=(64, 16)).astype(np.float32)
    quantizer = bbqlib.BBQQuantizer(bits=1, similarity="cosine").fit(X)
    enc = quantizer.encode(X)
    before = quantizer.search(X[:3], enc, K)
    assert enc._cache  # the search filled it
    blob = pickle.dumps(enc)
    _assert_lean(blob)
    again = pickle.loads(blob)
    assert again._cache == {}
    _same_results(quantizer.search(X[:3], again, K), before)
    assert again._cache  # made again on use
