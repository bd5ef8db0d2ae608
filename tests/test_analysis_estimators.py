"""Tests of bbqlib.analysis.estimators (and the plot helpers) on quantizers with known errors.

The mocks return exact values plus an error whose law we choose, so every figure the report
gives has a known true value; tolerances are derived from the sampling error (stated per test).
"""

from __future__ import annotations

import json
import math
import zlib

import numpy as np
import pytest
from scipy import stats

import bbqlib
from bbqlib.analysis import (
    ErrorReport,
    compare_table,
    estimation_error,
    unbiasedness_test,
)
from bbqlib.analysis.estimators import estimation as est_mod
from bbqlib.analysis.estimators import ranks as ranks_mod
from bbqlib.similarity import exact_raw, resolve_similarity


class KnownError:
    """A 'quantizer' whose estimate is ``exact + bias + u_query + v_vector + sd * noise``.

    ``u_query`` ~ N(0, query_sd²) is a function of the query row, ``v_vector`` ~ N(0,
    vector_sd²) of the vector's position, and the pair noise of (query row, seed): all fixed
    whatever the blocks estimation_error uses. ``top_bias`` is added to each query's true
    top-``top_k`` pairs. ``bound_sd`` adds bounds ``est ∓ eps0 · bound_sd``.
    """

    def __init__(
        self,
        similarity="euclidean",
        *,
        bias=0.0,
        sd=0.0,
        query_sd=0.0,
        vector_sd=0.0,
        top_bias=0.0,
        top_k=10,
        bound_sd=None,
        seed=0,
        centre=None,
        scaled=False,
    ):
        self.similarity = similarity
        self.bias, self.sd, self.query_sd, self.vector_sd = bias, sd, query_sd, vector_sd
        self.top_bias, self.top_k, self.bound_sd, self.seed = top_bias, top_k, bound_sd, seed
        self.centre, self.scaled = centre, scaled
        self.is_fitted = False

    def fit(self, X):
        self.similarity_ = resolve_similarity(self.similarity)
        self.is_fitted = True
        if self.centre is not None:
            self.centroid_ = np.asarray(self.centre, dtype=np.float32)
        return self

    def encode(self, X):
        rng = np.random.default_rng([self.seed, 1])
        return np.asarray(X, np.float64), rng.normal(size=len(X)) * self.vector_sd

    def _row_rng(self, row):
        return np.random.default_rng([self.seed, zlib.crc32(np.ascontiguousarray(row).tobytes())])

    def _estimate(self, Q, enc):
        X, v = enc
        exact = exact_raw(self.similarity_, Q, X)
        err = np.empty_like(exact)
        for i, row in enumerate(Q):  # per query: the noise is a function of the row
            rng = self._row_rng(row)
            u = rng.normal() * self.query_sd
            err[i] = self.bias + u + v + self.sd * rng.normal(size=X.shape[0])
        if self.top_bias:
            key = -exact if self.similarity_.is_distance else exact
            top = np.argsort(-key, axis=1, kind="stable")[:, : self.top_k]
            np.put_along_axis(err, top, err.take(0, axis=1)[:, None] * 0 + self.top_bias, axis=1)
        if self.scaled:  # errors in units of |q - c| |x - c| (twice for squared L2)
            c = self.centroid_.astype(np.float64)
            s = np.linalg.norm(Q - c, axis=1)[:, None] * np.linalg.norm(X - c, axis=1)[None, :]
            err *= s * (2.0 if self.similarity_.is_distance else 1.0)
        return exact + err

    def estimate(self, Q, enc, *, return_bounds=False, eps0=1.9):
        est = self._estimate(np.asarray(Q, np.float64), enc)
        if not return_bounds:
            return est
        if self.bound_sd is None:
            raise ValueError("KnownError has no bounds (bound_sd=None)")
        half = eps0 * self.bound_sd
        return est, est - half, est + half


class KnownErrorWithBounds(KnownError):
    # Declared capabilities, as bbqlib.Quantizer subclasses declare them.
    has_error_bound = True
    default_eps0 = 1.9

    def error_sd(self, Q, enc):
        return np.full((len(Q), len(enc[0])), self.bound_sd)


def _data(nq, n, d=8, seed=0):
    rng = np.random.default_rng(seed)
    return (
        rng.normal(size=(nq, d)).astype(np.float32),
        rng.normal(size=(n, d)).astype(np.float32),
    )


# --------------------------------------------------------------------------- bias and spread
def test_recovers_injected_bias_and_sd_iid():
    Q, X = _data(200, 500)
    q = KnownError(bias=0.3, sd=1.0).fit(X)
    rep = estimation_error(q, Q, X)
    b = rep.overall
    n = 200 * 500
    assert b.n_pairs == n
    se_true = 1.0 / math.sqrt(n)
    # se estimated from >= 200 clusters: relative sd about 1/sqrt(2 * 199) = 5%; allow 4 sd.
    assert 0.8 * se_true < b.bias_se < 1.25 * se_true
    assert abs(b.bias - 0.3) < 4 * se_true
    assert b.bias_ci[0] < 0.3 < b.bias_ci[1]
    # sd of a sample sd is about sd / sqrt(2N).
    assert abs(b.sd - 1.0) < 4 / math.sqrt(2 * n)
    assert abs(b.rmse - math.sqrt(1 + 0.09)) < 4 / math.sqrt(2 * n) * 1.1
    assert abs(b.mean_abs - stats.foldnorm(0.3).mean()) < 4 / math.sqrt(n)
    assert rep.eps0 is None and b.coverage is None


@pytest.mark.parametrize("which", ["query", "vector"])
def test_cluster_robust_interval_accounts_for_shared_errors(which):
    # Errors share a per-query (or per-vector) component of sd 0.5 on top of pair noise 1.0:
    # the mean's true se is sqrt(0.25 / G + 1 / N), far wider than the iid sqrt(1.25 / N).
    nq, n = (200, 300) if which == "query" else (60, 400)
    Q, X = _data(nq, n, seed=1)
    kw = {"query_sd": 0.5} if which == "query" else {"vector_sd": 0.5}
    q = KnownError(bias=-0.2, sd=1.0, **kw).fit(X)
    rep = estimation_error(q, Q, X, bands=())
    g = nq if which == "query" else n
    se_true = math.sqrt(0.25 / g + 1.0 / (nq * n))
    se_iid = math.sqrt(1.25 / (nq * n))
    b = rep.overall
    assert se_true > 3 * se_iid  # the case is one where ignoring clusters matters
    # Relative sd of a cluster-robust se with G >= 200 clusters is about 5%; allow 4 sd.
    assert 0.8 * se_true < b.bias_se < 1.25 * se_true
    assert b.bias_ci[0] < -0.2 < b.bias_ci[1]
    assert rep.band_names == ["all"]


def test_rank_correlation_is_one_for_exact_estimates_and_drops_with_noise():
    Q, X = _data(20, 300)
    exact = estimation_error(KnownError().fit(X), Q, X, rank_sample=None)
    for b in exact.bands:
        assert b.spearman == pytest.approx(1.0) and b.kendall == pytest.approx(1.0)
        assert b.bias == 0.0 and b.sd == 0.0 and b.rel_error == 0.0
    noisy = estimation_error(KnownError(sd=5.0).fit(X), Q, X)
    assert 0 < noisy.overall.kendall < noisy.overall.spearman < 1


@pytest.mark.parametrize("n", [100, 400])
def test_rank_correlations_match_scipy(n):
    nq = 15
    Q, X = _data(nq, n, seed=13)
    q = KnownError(sd=2.0).fit(X)
    est = np.round(q.estimate(Q, q.encode(X)), 0)  # rounded: ties, as quantized estimates have
    rep = estimation_error(_Fixed(q, est), Q, X, bands=(), rank_sample=None)
    exact = exact_raw(q.similarity_, Q, X)
    rho = np.mean([stats.spearmanr(e, x).statistic for e, x in zip(est, exact, strict=True)])
    tau = np.mean([stats.kendalltau(e, x).statistic for e, x in zip(est, exact, strict=True)])
    assert rep.overall.spearman == pytest.approx(rho, abs=1e-12)
    if n <= ranks_mod._KENDALL_DENSE:
        assert rep.overall.kendall == pytest.approx(tau, abs=1e-12)
    else:
        # 10,000 sampled pairs: sd <= 1 / sqrt(10,000) = 0.01 per query, and at most that for
        # the mean over queries (the pairs are shared); allow 4 sd.
        assert rep.overall.kendall == pytest.approx(tau, abs=0.04)


class _Fixed:
    """Wraps a mock to return given estimates (for the rows of Q in order)."""

    def __init__(self, q, est):
        self.similarity_, self._est, self.is_fitted = q.similarity_, est, True

    def encode(self, X):
        return X

    def estimate(self, Q, enc):
        return self._est[: len(Q)]


def test_relative_error_is_mean_abs_error_over_abs_exact():
    Q, X = _data(10, 50)
    q = KnownError(bias=0.5).fit(X)
    rep = estimation_error(q, Q, X, bands=())
    d2 = exact_raw(q.similarity_, Q, X)
    assert rep.overall.rel_error == pytest.approx(float(np.mean(0.5 / d2)), rel=1e-9)


# --------------------------------------------------------------------------- bands
def test_band_split_isolates_errors_on_the_true_top_neighbours():
    nq, n = 30, 400
    Q, X = _data(nq, n, seed=2)
    q = KnownError(top_bias=1.0, top_k=10).fit(X)
    rep = estimation_error(q, Q, X, bands=(100, 10))
    assert rep.band_names == ["all", "top-10", "top-100", "rest"]
    assert rep["top-10"].n_pairs == nq * 10
    assert rep["top-100"].n_pairs == nq * 100
    assert rep["rest"].n_pairs == nq * (n - 100)
    assert rep["top-10"].bias == pytest.approx(1.0)
    assert rep["top-10"].sd == pytest.approx(0.0, abs=1e-12)
    assert rep["top-100"].bias == pytest.approx(0.1)
    assert rep["rest"].bias == 0.0
    assert rep.overall.bias == pytest.approx(10 / n)


@pytest.mark.parametrize("similarity", ["euclidean", "cosine", "max_inner_product"])
def test_bands_follow_the_similarity_orientation(similarity):
    Q, X = _data(10, 200, seed=3)
    q = KnownError(similarity, top_bias=2.0, top_k=5).fit(X)
    rep = estimation_error(q, Q, X, bands=(5,))
    assert rep["top-5"].bias == pytest.approx(2.0)
    assert rep["rest"].bias == pytest.approx(0.0)


def test_bands_at_or_above_n_are_dropped():
    Q, X = _data(5, 50)
    rep = estimation_error(KnownError().fit(X), Q, X, bands=(10, 100))
    assert rep.band_names == ["all", "top-10", "rest"]
    with pytest.raises(KeyError, match="top-100"):
        rep["top-100"]


def test_blocking_does_not_change_the_report(monkeypatch):
    Q, X = _data(37, 120, seed=4)
    q = KnownError(sd=1.0, query_sd=0.3, vector_sd=0.2).fit(X)
    whole = estimation_error(q, Q, X, bands=(10,), rank_sample=None, pairs_per_query=0)
    monkeypatch.setattr(est_mod, "_PAIRS_PER_BLOCK", 5 * 120)  # blocks of 5 queries
    parts = estimation_error(q, Q, X, bands=(10,), rank_sample=None, pairs_per_query=0)
    for a, b in zip(whole.bands, parts.bands, strict=True):
        for key, va in a.to_dict().items():
            vb = b.to_dict()[key]
            if isinstance(va, float):
                assert va == pytest.approx(vb, rel=1e-9, abs=1e-12), key
            else:
                assert va == pytest.approx(vb), key


# --------------------------------------------------------------------------- coverage
@pytest.mark.parametrize("eps0", [None, 1.0, 2.58])
def test_coverage_matches_the_gaussian_probability(eps0):
    nq, n = 100, 500
    Q, X = _data(nq, n, seed=5)
    q = KnownErrorWithBounds(sd=0.7, bound_sd=0.7).fit(X)
    rep = estimation_error(q, Q, X, eps0=eps0)
    z = 1.9 if eps0 is None else eps0
    p = 2 * stats.norm.cdf(z) - 1
    assert rep.eps0 == pytest.approx(z)
    # iid pairs: binomial sd sqrt(p (1 - p) / N); allow 4 sd.
    assert abs(rep.overall.coverage - p) < 4 * math.sqrt(p * (1 - p) / (nq * n))
    assert rep.overall.mean_half_width == pytest.approx(z * 0.7)
    assert "coverage (eps0=" in rep.table()


def test_bounds_requested_from_a_quantizer_without_them_raise():
    Q, X = _data(5, 50)
    q = bbqlib.BBQQuantizer(bits=4, similarity="euclidean").fit(X)
    with pytest.raises(ValueError, match="no error bound"):
        estimation_error(q, Q, X, bounds=True)
    rep = estimation_error(q, Q, X)  # auto: no bounds
    assert rep.eps0 is None and rep.overall.coverage is None


def test_normalized_errors_divide_by_the_centred_norms():
    Q, X = _data(20, 100, seed=6)
    centre = X.mean(axis=0)
    for sim in ("euclidean", "max_inner_product"):
        q = KnownError(sim, bias=0.05, centre=centre, scaled=True).fit(X)
        rep = estimation_error(q, Q, X, normalize=True, bands=())
        assert rep.scale == "normalized"
        assert rep.overall.bias == pytest.approx(0.05, rel=1e-9)
        assert rep.overall.sd == pytest.approx(0.0, abs=1e-9)


# --------------------------------------------------------------------------- report objects
def test_report_serializes_and_renders():
    Q, X = _data(20, 150)
    rep = estimation_error(KnownErrorWithBounds(sd=1.0, bound_sd=1.0).fit(X), Q, X, label="mock")
    assert isinstance(rep, ErrorReport)
    d = json.loads(json.dumps(rep.to_dict()))
    assert [b["name"] for b in d["bands"]] == rep.band_names
    assert d["method"] == "mock" and d["eps0"] == 1.9
    table = rep.table()
    assert table.count("\n") == 1 + len(rep.bands)
    assert "mock" in str(rep)
    other = estimation_error(KnownError(bias=1.0).fit(X), Q, X, label="biased")
    cmp = compare_table({"a": rep, "b": other}, band="top-10")
    assert cmp.splitlines()[2].startswith("| a |") and "coverage" in cmp.splitlines()[0]
    with pytest.raises(AttributeError):
        rep.method = "x"  # frozen


def test_pair_sample_holds_top_pairs_and_a_uniform_sample():
    nq, n = 12, 300
    Q, X = _data(nq, n, seed=7)
    rep = estimation_error(KnownError(sd=1.0).fit(X), Q, X, bands=(10, 50), pairs_per_query=40)
    p = rep.pairs
    assert len(p) == nq * (50 + 40)
    assert p.band("top-10").sum() == nq * 10
    assert p.band("all").sum() == nq * 40
    exact = exact_raw(resolve_similarity("euclidean"), Q, X)
    assert np.allclose(p.exact, exact[p.query, p.index])
    ranks = np.argsort(np.argsort(exact, axis=1, kind="stable"), axis=1)[p.query, p.index]
    assert np.array_equal(np.minimum(ranks, 50), p.rank)


def test_real_quantizer_report():
    Q, X = _data(20, 400, d=32, seed=8)
    q = bbqlib.BBQQuantizer(bits=4, query_bits=None, similarity="euclidean").fit(X)
    enc = q.encode(X)
    rep = estimation_error(q, Q, X, encoded=enc)
    assert rep.bytes_per_vector == enc.bytes_per_vector
    assert rep.method == "BBQ 4xfloat"
    assert rep["top-10"].spearman > 0.5 and rep.overall.spearman > 0.9


# --------------------------------------------------------------------------- validation
def test_validation_errors_name_the_parameter():
    Q, X = _data(5, 50)
    q = KnownError().fit(X)
    with pytest.raises(ValueError, match="confidence"):
        estimation_error(q, Q, X, confidence=1.5)
    with pytest.raises(ValueError, match="bands"):
        estimation_error(q, Q, X, bands=(0,))
    with pytest.raises(ValueError, match="rank_sample"):
        estimation_error(q, Q, X, rank_sample=1)
    with pytest.raises(ValueError, match="dimension|dim"):
        estimation_error(q, Q[:, :3], X)
    with pytest.raises(ValueError, match="not fitted"):
        estimation_error(KnownError(), Q, X)
    with pytest.raises(ValueError, match="seeds"):
        unbiasedness_test(lambda s: KnownError(seed=s), [0], Q, X)
    with pytest.raises(ValueError, match="alpha"):
        unbiasedness_test(lambda s: KnownError(seed=s), [0, 1], Q, X, alpha=2.0)


# --------------------------------------------------------------------------- unbiasedness
def test_unbiasedness_test_does_not_reject_an_unbiased_estimator():
    Q, X = _data(20, 100, seed=9)
    res = unbiasedness_test(lambda s: KnownError(sd=1.0, seed=s), range(30), Q, X)
    assert res.n_seeds == 30 and res.n_pairs == 2000
    assert res.mean_ci_contains_zero
    # Pair noise is iid here, so the count is exactly Binomial(2000, 0.05): 100 ± 10.
    assert abs(res.n_excluding_zero - 100) < 40
    assert res.binomial_p > 0.05 and res.unbiased
    assert res.mean_pair_sd == pytest.approx(1.0, rel=0.05)
    assert json.loads(json.dumps(res.to_dict()))["unbiased"] is True
    assert "pairs exclude 0" in str(res)


def test_unbiasedness_test_rejects_a_biased_estimator():
    Q, X = _data(20, 100, seed=9)
    # bias 0.1 sd: pooled mean's se over seeds is ~1/sqrt(30 * 2000); each pair's t test has
    # power ~0.085 against 0.05, i.e. ~170 of 2000 against 100 ± 10.
    res = unbiasedness_test(lambda s: KnownError(bias=0.1, sd=1.0, seed=s), range(30), Q, X)
    assert not res.mean_ci_contains_zero
    assert res.n_excluding_zero > 130 and res.binomial_p < 1e-3
    assert not res.unbiased


def test_unbiasedness_test_counts_every_pair_of_a_deterministic_biased_estimator():
    Q, X = _data(10, 50, seed=10)
    res = unbiasedness_test(lambda s: KnownError(bias=0.01), [0, 1, 2], Q, X)
    assert res.n_excluding_zero == res.n_pairs and res.se == 0.0
    assert not res.unbiased


@pytest.mark.slow
def test_rabitq_float_query_is_unbiased_over_rotations():
    rabitq = pytest.importorskip("bbqlib.quantizers.rabitq")
    rng = np.random.default_rng(11)
    X = rng.normal(size=(200, 64)).astype(np.float32)
    Q = rng.normal(size=(10, 64)).astype(np.float32)

    def make(seed):
        return rabitq.RaBitQQuantizer(bits=1, query_bits=None, similarity="euclidean", seed=seed)

    res = unbiasedness_test(make, range(40), Q, X, normalize=True)
    assert res.mean_ci_contains_zero, str(res)
    assert res.binomial_p > 1e-3, str(res)


# --------------------------------------------------------------------------- plots
def test_plots_draw_and_return_axes():
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from bbqlib.analysis import plots

    Q, X = _data(15, 200, seed=12)
    r1 = estimation_error(KnownError(sd=1.0).fit(X), Q, X, label="a")
    r2 = estimation_error(KnownError(bias=0.5, sd=0.5).fit(X), Q, X, label="b")
    ax = plots.plot_error_histogram({"a": r1, "b": r2}, band="top-10")
    assert len(ax.patches) == 2
    ax = plots.plot_error_vs_similarity(r1, kind="scatter")
    assert ax.get_title() == "a"
    plots.plot_error_vs_similarity(r2)
    rows = [
        {"family": "BBQ", "method": "1x4", "bytes_per_vector": 30, "recall": 0.6},
        {"family": "BBQ", "method": "4x4", "bytes_per_vector": 110, "recall": 0.9},
        {"family": "RaBitQ", "method": "1", "bytes_per_vector": 30, "recall": 0.65},
    ]
    ax = plots.plot_recall_vs_bytes(rows)
    assert len(ax.get_lines()) == 2
    with pytest.raises(KeyError, match="recall"):
        plots.plot_recall_vs_bytes([{"family": "x", "bytes_per_vector": 1}])
    plt.close("all")


def test_plots_name_the_extra_when_matplotlib_is_missing(monkeypatch):
    import sys

    from bbqlib.analysis import plots

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(ImportError, match=r"bbqlib\[plot\]"):
        plots.plot_recall_vs_bytes([{"family": "x", "bytes_per_vector": 1, "recall": 1.0}])
