"""The bundled sample (issue 13): unit rows after float16 decoding, so every similarity,
``dot_product`` included, accepts it."""

from __future__ import annotations

import numpy as np

import bbqlib
from bbqlib._validation import UNIT_NORM_TOLERANCE
from bbqlib.datasets import load_demo_sample


def test_sample_shapes_and_texts():
    s = load_demo_sample()
    assert s["base"].shape == (4000, 384) and s["queries"].shape == (200, 384)
    assert s["base"].dtype == s["queries"].dtype == np.float32
    assert len(s["base_texts"]) == 4000 and len(s["query_texts"]) == 200
    assert "MiniLM" in s["source"]


def test_sample_rows_are_unit_length():
    s = load_demo_sample()
    for name in ("base", "queries"):
        sq = np.einsum("ij,ij->i", s[name].astype(np.float64), s[name].astype(np.float64))
        # float32 rounding of a unit vector: |‖v‖² - 1| ~ d·2^-24, far inside the 1e-4 check.
        assert np.abs(sq - 1).max() < 1e-5 < UNIT_NORM_TOLERANCE, name


def test_sample_stays_close_to_the_stored_float16():
    from importlib import resources

    with resources.files("bbqlib").joinpath("data/demo_sample.npz").open("rb") as f:
        raw = np.load(f)["base"].astype(np.float32)
    # Renormalizing rescales each row by at most 1e-4: values move by a relative 1e-4 or less.
    np.testing.assert_allclose(load_demo_sample()["base"], raw, rtol=1e-4, atol=1e-7)


def test_readme_rabitq_dot_product_runs_on_the_sample():
    """The README's RaBitQ snippet failed here: 'dot_product requires unit-length vectors'."""
    s = load_demo_sample()
    X, Q = s["base"][:500], s["queries"][:5]
    rq = bbqlib.RaBitQQuantizer(bits=1, query_bits=None, similarity="dot_product", seed=0).fit(X)
    est, lower, upper = rq.estimate(Q, rq.encode(X), return_bounds=True)
    assert est.shape == (5, 500) and np.all(lower <= upper)


def test_cli_keeps_the_old_import_path():
    from bbqlib.cli import load_demo_sample as old

    assert old is load_demo_sample
