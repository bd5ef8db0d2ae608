"""bbqlib.diagnose (issue 30): the statistics are sane on data of known shape, each finding
comes with its fix, and the recommendation is calibrate's."""

from __future__ import annotations

import numpy as np
import pytest

import bbqlib
from bbqlib.datasets import load_demo_sample


def names(report):
    return [f.name for f in report.findings]


def test_bundled_sample_has_no_finding():
    report = bbqlib.diagnose(load_demo_sample()["base"], "cosine", n_queries=100)
    assert names(report) == []
    assert report.n == 4000 and report.dim == 384 and report.sample_rows == 4000
    assert 20 < report.effective_dimension < 384
    assert report.bits_per_vector == {1: 384, 2: 768, 4: 1536, 7: 2688}
    assert report.outliers == 0 and report.duplicate_rate == 0.0
    assert report.norm_spread == pytest.approx(1.0, abs=1e-3)
    assert report.default_recall >= 0.9
    assert "no finding" in repr(report)


def test_isotropic_gaussian():
    X = np.random.default_rng(0).normal(size=(4000, 128)).astype(np.float32)
    report = bbqlib.diagnose(X, "euclidean", measure=False)
    # participation ratio of a sample covariance of 4000 x 128: close to 128
    assert 100 < report.effective_dimension <= 128
    assert report.anisotropy < 2.0
    assert report.coordinate_participation > 0.95
    assert report.mean_offset < 0.2
    assert report.default_recall is None
    assert names(report) == []


def test_low_dimension_and_anisotropy_and_duplicates():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(3000, 24)).astype(np.float32)
    report = bbqlib.diagnose(X, "euclidean", measure=False)
    assert names(report) == ["low_bits"] and "bits=4" in str(report.findings[0])
    Y = rng.normal(size=(3000, 256)) * np.r_[60.0, np.ones(255)]
    Y[:300] = Y[300:600]  # 10% exact duplicates
    report = bbqlib.diagnose(Y.astype(np.float32), "euclidean", measure=False)
    assert report.anisotropy > 50
    assert report.duplicate_rate == pytest.approx(0.1, abs=1e-3)
    assert report.coordinate_participation < 0.1
    assert {"coordinate_spread", "duplicates"} <= set(names(report))
    assert all(f.fix for f in report.findings)


def test_one_outlier_is_reported_and_does_not_skew_the_statistics():
    X = load_demo_sample()["base"].copy()
    clean = bbqlib.diagnose(X, "euclidean", measure=False)
    X[7] *= 1e6
    report = bbqlib.diagnose(X, "euclidean", measure=False)
    assert report.outliers == 1 and "outliers" in names(report)
    assert report.effective_dimension == pytest.approx(clean.effective_dimension, rel=0.01)


def test_recommended_is_calibrates_choice():
    X = load_demo_sample()["base"][:2000, :32].copy()
    report = bbqlib.diagnose(X, "euclidean", recommend=True, n_queries=100)
    assert "low_bits" in names(report)
    chosen = report.recommended
    assert chosen is not None and chosen is report.calibration.chosen
    assert chosen.recall_low >= 0.95
    assert "index.add(X)" in chosen.code()
    assert "recommended" in repr(report)
    assert report.default_recall < chosen.recall
