"""The public API (scipy's test_public_api idea): the names external checks call must exist."""

from __future__ import annotations

import importlib
import inspect
import subprocess
import sys
from collections.abc import Mapping

import numpy as np
import pytest

import bbqlib

#: Names issue 2 promises; other issues add more, so this is a lower bound, not the full list.
REQUIRED = {
    "BBQQuantizer",
    "FlatIndex",
    "EncodedVectors",
    "load",
    "get_encoding",
    "ENCODINGS",
    "Similarity",
    "NotFittedError",
    "CorruptFileError",
    "repair",
}


def test_required_names_are_public():
    missing = REQUIRED - set(bbqlib.__all__)
    assert not missing, f"missing from bbqlib.__all__: {sorted(missing)}"


@pytest.mark.parametrize("name", sorted(bbqlib.__all__))
def test_every_public_name_imports(name):
    assert hasattr(bbqlib, name), f"bbqlib.__all__ lists {name!r} but bbqlib has no such name"
    module = importlib.import_module("bbqlib")
    assert getattr(module, name) is getattr(bbqlib, name)


def test_all_has_no_duplicates():
    assert len(bbqlib.__all__) == len(set(bbqlib.__all__))


def test_star_import():
    namespace: dict = {}
    exec("from bbqlib import *", namespace)
    assert REQUIRED <= set(namespace)


def test_kinds_of_the_required_names():
    assert inspect.isclass(bbqlib.BBQQuantizer) and inspect.isclass(bbqlib.FlatIndex)
    assert inspect.isclass(bbqlib.EncodedVectors)
    assert callable(bbqlib.load) and callable(bbqlib.get_encoding)
    assert isinstance(bbqlib.ENCODINGS, Mapping) and (1, 4) in bbqlib.ENCODINGS
    assert {s.value for s in bbqlib.Similarity} >= {
        "euclidean",
        "dot_product",
        "cosine",
        "max_inner_product",
    }
    assert issubclass(bbqlib.NotFittedError, ValueError)
    assert issubclass(bbqlib.CorruptFileError, ValueError)
    assert isinstance(bbqlib.__version__, str)


def test_issue_example_runs(tmp_path):
    """The snippet of issue 2, verbatim apart from the data."""
    g = np.random.default_rng(0)
    X = g.normal(size=(500, 32)).astype(np.float32)
    Q = g.normal(size=(4, 32)).astype(np.float32)
    q = bbqlib.BBQQuantizer(bits=1, query_bits=4, similarity="cosine").fit(X)
    enc = q.encode(X)
    assert enc.codes.dtype == np.uint8 and enc.codes.shape == (500, 8)
    assert enc.corrections.shape == (500,)
    est = q.estimate(Q, enc)
    s = q.similarity_scores(Q, enc)
    assert est.shape == s.shape == (4, 500)
    for index in (bbqlib.FlatIndex(q), bbqlib.FlatIndex(bits=1, similarity="cosine")):
        index.add(X)
        scores, ids = index.search(Q, k=10)
        assert scores.shape == ids.shape == (4, 10)
        scores, ids = index.search(Q, k=10, rerank=False)
        path = tmp_path / "index.bbq"
        index.save(path)
        index = bbqlib.load(path)
        assert index.ntotal == 500


def test_import_is_light():
    """Importing bbqlib imports no optional engine (they load lazily inside their adapters)."""
    code = (
        "import sys, bbqlib; "
        "bad = [m for m in ('faiss', 'hnswlib', 'usearch', 'matplotlib', 'h5py', 'pyarrow') "
        "if m in sys.modules]; print(','.join(bad))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"optional engines imported eagerly: {out.stdout}"
