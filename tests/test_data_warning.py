"""bbqlib.DataWarning (issue 30): the first add warns, naming the fix, only when the
defaults will not cope (too few bits per vector, variance on few coordinates without a
rotation);
never on ordinary data (the bundled sample, the shared MiniLM and word-vector sets)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from paths import SHARED

import bbqlib
from bbqlib.datasets import load_demo_sample
from bbqlib.quantizers.data_checks import LOW_BITS, data_findings

DATA = SHARED / "data"


def added(index, X):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        index.add(X)
    return [w for w in caught if issubclass(w.category, bbqlib.DataWarning)]


def test_datawarning_is_public_and_a_userwarning():
    assert "DataWarning" in bbqlib.__all__
    assert issubclass(bbqlib.DataWarning, UserWarning)


@pytest.mark.parametrize("similarity", ["cosine", "euclidean", "max_inner_product"])
def test_no_warning_on_the_bundled_sample(similarity):
    X = load_demo_sample()["base"]
    assert added(bbqlib.FlatIndex(bits=1, similarity=similarity), X) == []
    assert added(bbqlib.IVFIndex(bits=1, similarity=similarity), X) == []


def test_no_warning_on_the_shared_sets():
    if not (DATA / "debian-minilm-384").exists() or not (DATA / "spacy-wordvec-300").exists():
        pytest.skip("shared data not present")
    debian = np.load(DATA / "debian-minilm-384" / "base.npy", mmap_mode="r")
    spacy = np.load(DATA / "spacy-wordvec-300" / "base.npy")
    assert added(bbqlib.FlatIndex(bits=1, similarity="cosine"), debian[:20000]) == []
    assert added(bbqlib.FlatIndex(bits=1, similarity="euclidean"), spacy) == []


@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_low_bits_per_vector_warns_with_the_fix(kind):
    X = load_demo_sample()["base"][:, :32].copy()
    cls = bbqlib.FlatIndex if kind == "flat" else bbqlib.IVFIndex
    caught = added(cls(bits=1, similarity="euclidean"), X)
    assert len(caught) == 1
    text = str(caught[0].message)
    assert "32 bits per vector" in text and "bits=4" in text and "oversample" in text
    assert ("IVFIndex" in text) == (kind == "flat")
    assert caught[0].filename == __file__  # points at the caller's add
    # enough bits: silent
    assert added(cls(bits=4, similarity="euclidean"), X) == []


def test_low_bits_threshold():
    X = np.random.default_rng(0).normal(size=(500, LOW_BITS + 1)).astype(np.float32)
    q = bbqlib.BBQQuantizer(bits=1, similarity="euclidean").fit(X)
    assert data_findings(q, X) == []
    q = bbqlib.BBQQuantizer(bits=1, similarity="euclidean").fit(X[:, :LOW_BITS])
    assert [f.name for f in data_findings(q, X[:, :LOW_BITS])] == ["low_bits"]


def test_norm_spread_under_max_inner_product_does_not_warn():
    # measured: wide norms make max_inner_product easier for the defaults, not harder
    rng = np.random.default_rng(1)
    X = load_demo_sample()["base"] * np.exp(1.5 * rng.normal(size=(4000, 1)))
    X = X.astype(np.float32)
    assert added(bbqlib.FlatIndex(bits=1, similarity="max_inner_product"), X) == []


def test_one_outlier_does_not_warn():
    # the robust centre handles it: nothing for the user to change
    X = load_demo_sample()["base"].copy()
    X[5] *= 1e6
    assert added(bbqlib.FlatIndex(bits=1, similarity="max_inner_product"), X) == []


def test_variance_on_few_coordinates_warns_without_a_rotation():
    X = load_demo_sample()["base"].copy()
    X[:, ::10] *= 10.0  # a tenth of the coordinates 10x wider
    caught = added(bbqlib.FlatIndex(bits=1, similarity="euclidean"), X)
    assert len(caught) == 1 and "precondition=True" in str(caught[0].message)
    # a rotation (BBQ's precondition, RaBitQ's own) or per-dimension int8 grids cope: silent
    assert added(bbqlib.FlatIndex(bits=1, similarity="euclidean", precondition=True), X) == []
    rabitq = bbqlib.RaBitQQuantizer(bits=1, similarity="euclidean")
    assert added(bbqlib.FlatIndex(rabitq), X) == []
    per_dim = bbqlib.ScalarQuantizer(method="per_dim", similarity="euclidean")
    assert added(bbqlib.FlatIndex(per_dim), X) == []
