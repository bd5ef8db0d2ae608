"""bbqlib.analysis on SAQ: bands, bounds and the unbiasedness test see SAQ like RaBitQ."""

from __future__ import annotations

import numpy as np

from bbqlib import SAQQuantizer
from bbqlib.analysis import compare_table, estimation_error, unbiasedness_test


def _data(n, d, seed):
    g = np.random.default_rng(seed)
    return (g.standard_normal((n, d)) * np.geomspace(2.0, 0.02, d)).astype(np.float32)


def test_estimation_error_reports_saq_by_band():
    X = _data(1500, 64, 0)
    q = SAQQuantizer(bits=1.5, similarity="euclidean").fit(X)
    rep = estimation_error(q, X[:40], X, bands=(10, 100))
    assert rep.band_names == ["all", "top-10", "top-100", "rest"]
    assert rep.method == f"SAQ 1.5xfloat [{q.plan_.describe()}]"
    assert rep.bytes_per_vector == q.encoding_.bytes_per_vector(64)
    assert rep.eps0 == 1.9 and 0.85 < rep["rest"].coverage <= 1.0
    assert rep["all"].spearman > 0.9
    assert "SAQ 1.5xfloat" in compare_table([rep])


def test_unbiasedness_test_on_a_plan_without_a_tail():
    """Isotropic data: every dimension is coded, so the whole estimate is unbiased."""
    g = np.random.default_rng(1)
    X = g.standard_normal((150, 64)).astype(np.float32)
    Q = g.standard_normal((8, 64)).astype(np.float32)
    res = unbiasedness_test(
        lambda s: SAQQuantizer(bits=2, similarity="euclidean", seed=s), range(24), Q, X
    )
    assert res.unbiased, str(res)
