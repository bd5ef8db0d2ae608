"""The quantizer family's shared contract: scikit-learn by duck typing, declared capabilities,
one parameter check, files of every family and width."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

import bbqlib
from bbqlib.encoding import ENCODINGS
from bbqlib.quantizers import quantizer_from_state

sklearn_base = pytest.importorskip("sklearn.base")
sklearn_validation = pytest.importorskip("sklearn.utils.validation")

FACTORIES = {
    "bbq": lambda: bbqlib.BBQQuantizer(bits=2, similarity="euclidean"),
    "bbq3": lambda: bbqlib.BBQQuantizer(bits=3, precondition="hadamard", seed=1),
    "rabitq": lambda: bbqlib.RaBitQQuantizer(bits=2, similarity="euclidean", seed=0),
    "int8_osq": lambda: bbqlib.ScalarQuantizer(method="osq", similarity="euclidean"),
    "int8_per_dim": lambda: bbqlib.ScalarQuantizer(method="per_dim", similarity="euclidean"),
    "int8_global": lambda: bbqlib.ScalarQuantizer(method="global", similarity="euclidean"),
    "saq": lambda: bbqlib.SAQQuantizer(bits=1.5, similarity="euclidean"),
}


@pytest.fixture(scope="module")
def data():
    g = np.random.default_rng(0)
    return g.normal(size=(300, 40)).astype(np.float32), g.normal(size=(4, 40)).astype(np.float32)


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_clone_and_check_is_fitted(name, data):
    X, Q = data
    q = FACTORIES[name]()
    with pytest.raises(sklearn_validation.NotFittedError):
        sklearn_validation.check_is_fitted(q)
    c = sklearn_base.clone(q)
    assert type(c) is type(q) and c.get_params() == q.get_params() and c is not q
    q.fit(X)
    sklearn_validation.check_is_fitted(q)
    assert q.__sklearn_is_fitted__() and not sklearn_base.clone(q).is_fitted
    assert q.get_params(deep=True) == q.get_params(deep=False)
    fitted = [k for k in vars(q) if k.endswith("_") and not k.startswith("_")]
    assert {"encoding_", "similarity_", "dim_", "transform_", "fingerprint_"} <= set(fitted)


def test_clone_then_set_params_example():
    """The issue's example, verbatim."""
    c = sklearn_base.clone(bbqlib.BBQQuantizer(bits=2)).set_params(query_bits=8)
    assert c.get_params()["query_bits"] == 8 and c.get_params()["bits"] == 2


def test_set_params_discards_a_fit_only_when_a_value_changes(data):
    X, _ = data
    q = bbqlib.BBQQuantizer(bits=1).fit(X)
    assert q.set_params(bits=1) is q and q.is_fitted
    q.set_params(bits=4)
    assert not q.is_fitted
    with pytest.raises(bbqlib.NotFittedError, match="fit"):
        q.encode(X)
    assert q.fit(X).encoding_.doc_bits == 4
    with pytest.raises(ValueError, match="invalid parameter 'bitz'.*valid parameters"):
        q.set_params(bitz=2)


def test_not_fitted_error_keeps_scikit_learn_bases():
    assert issubclass(bbqlib.NotFittedError, ValueError)
    assert issubclass(bbqlib.NotFittedError, AttributeError)


@pytest.mark.parametrize(
    ("cls", "has_bound", "eps0"),
    [
        (bbqlib.BBQQuantizer, False, None),
        (bbqlib.RaBitQQuantizer, True, 1.9),
        (bbqlib.ScalarQuantizer, False, None),
        (bbqlib.SAQQuantizer, True, 1.9),
    ],
)
def test_declared_capabilities(cls, has_bound, eps0):
    assert cls.has_error_bound is has_bound and cls.default_eps0 == eps0
    q = cls()
    widths = {None, *range(2, 17)} if cls is bbqlib.SAQQuantizer else {4, 7, 8, None}
    assert set(q.supported_query_bits) <= widths


def test_scalar_quantizer_is_a_factory_of_one_class_per_method():
    kinds = {m: type(bbqlib.ScalarQuantizer(method=m)) for m in ("osq", "per_dim", "global")}
    assert [c.__name__ for c in kinds.values()] == [
        "OSQScalarQuantizer",
        "PerDimScalarQuantizer",
        "GlobalScalarQuantizer",
    ]
    assert all(issubclass(c, bbqlib.ScalarQuantizer) for c in kinds.values())
    assert repr(bbqlib.ScalarQuantizer(method="per_dim")).startswith(
        "ScalarQuantizer(bits=8, method='per_dim'"
    )
    q = bbqlib.ScalarQuantizer(method="per_dim").set_params(method="global")
    with pytest.raises(ValueError, match="build a new ScalarQuantizer"):
        q.fit(np.ones((4, 3), np.float32))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"iters": -1}, r"iters must be an integer >= 0, got -1"),
        ({"iters": 2.5}, r"iters must be an integer >= 0"),
        ({"lam": 1.5}, r"lam must be a finite number in \[0, 1\], got 1.5"),
        ({"lam": float("nan")}, r"lam must be a finite number"),
        ({"seed": "x"}, r"seed must be one of None or an integer, got 'x'"),
    ],
)
def test_one_error_template(kwargs, match):
    X = np.ones((5, 3), np.float32)
    with pytest.raises(ValueError, match=match) as info:
        bbqlib.BBQQuantizer(**kwargs).fit(X)
    assert isinstance(info.value, TypeError)  # InvalidParameterError is both


@pytest.mark.parametrize("bits", range(1, 9))
@pytest.mark.parametrize("similarity", ["cosine", "euclidean", "max_inner_product"])
def test_flat_index_at_every_osq_width(bits, similarity, data, tmp_path):
    """Every OSQ width is a registry row: FlatIndex, search, save and load need nothing else."""
    X, Q = data
    index = bbqlib.FlatIndex(bits=bits, similarity=similarity)
    index.add(X)
    row = index.quantizer.encoding_
    assert row is ENCODINGS[("osq", bits, row.query_bits)]
    assert index.bytes_per_vector == row.bytes_per_vector(X.shape[1])
    scores, ids = index.search(X[:5], k=3)
    assert ids[:, 0].tolist() == [0, 1, 2, 3, 4]
    raw_scores, raw_ids = index.search(Q, k=5, rerank=False)
    index.save(tmp_path / "i.bbq")
    back = bbqlib.load(tmp_path / "i.bbq")
    s2, i2 = back.search(Q, k=5, rerank=False)
    np.testing.assert_array_equal(i2, raw_ids)
    np.testing.assert_array_equal(s2, raw_scores)


@pytest.mark.parametrize("name", sorted(FACTORIES))
def test_state_round_trip_every_family(name, data):
    X, Q = data
    q = FACTORIES[name]().fit(X)
    enc = q.encode(X)
    params, arrays = q.get_state()
    back = quantizer_from_state(params, arrays)
    assert type(back) is type(q) and back.fingerprint_ == q.fingerprint_
    np.testing.assert_array_equal(back.estimate(Q, enc), q.estimate(Q, enc))


def test_import_does_not_load_scikit_learn():
    code = "import sys, bbqlib; print('sklearn' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False"]
