"""Statistical properties of RaBitQ's estimator (spec ../shared/spec/rabitq.md §1.2, §2.5).

Data: synthetic unit vectors (normalized Gaussians, as in spec §2.5: 400 vectors x 50 queries,
true inner products mostly near 0), fixed seeds. Thresholds:

* coverage of the eps0 = 1.9 interval: P(|Z| <= 1.9) = 0.9426 for a Gaussian error, asserted
  94 +- 1.5% per pair (the issue's figure) at d = 384 and 768 for every bit width 1..8;
* error sd of <o, q> at d = 768: within 5% of the spec's table for 1..4 bits;
* unbiasedness over rotation seeds: the pooled mean error inside its 99.9% t-interval, and the
  number of pairs whose own 95% interval excludes 0 consistent with Binomial(pairs, 0.05)
  (two-sided p > 0.001).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from bbqlib.quantizers.rabitq.quantizer import RaBitQQuantizer
from bbqlib.transforms import DenseRotation

pytestmark = pytest.mark.slow

#: Spec §2.5, sd of the <o, q> error at d = 768 with a float query, bits 1..4.
SPEC_SD_768 = {1: 0.0271, 2: 0.0132, 3: 0.0072, 4: 0.0039}
#: Two-sided Gaussian coverage of +-1.9 sd.
GAUSS_COVERAGE = 2 * stats.norm.cdf(1.9) - 1


@pytest.fixture(scope="module", autouse=True)
def _single_blas_thread():
    """A busy shared machine makes multi-threaded OpenBLAS QR 100x slower; one thread."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    with threadpoolctl.threadpool_limits(1, user_api="blas"):
        yield


def _unit(n, d, seed, mean=0.0):
    g = np.random.default_rng(seed).normal(mean, 1.0, size=(n, d))
    return (g / np.linalg.norm(g, axis=1, keepdims=True)).astype(np.float32)


def _errors(q, X, Q, exact):
    """Normalized errors of <o, q> (estimate error / (r_o r_q)) and the bound's hits."""
    enc = q.encode(X)
    est, lower, upper = q.estimate(Q, enc, return_bounds=True, eps0=1.9)
    c = q.centroid_.astype(np.float64)
    r_o = np.linalg.norm(q.rotate(X) - c, axis=1)
    r_q = np.linalg.norm(q.rotate(Q) - c, axis=1)
    err = (est - exact) / (r_q[:, None] * r_o[None, :])
    covered = (lower <= exact) & (exact <= upper)
    return err, covered


@pytest.fixture(scope="module")
def spec_runs():
    """Per (d, query_bits, bits): normalized errors and coverage on the spec's setup."""
    out = {}
    for d in (384, 768):
        X, Q = _unit(400, d, 1), _unit(50, d, 2)
        exact = Q.astype(np.float64) @ X.T.astype(np.float64)
        rotation = DenseRotation(seed=0).fit(d)
        for bits in range(1, 9):
            q = RaBitQQuantizer(
                bits=bits, query_bits=None, similarity="dot_product", rotation=rotation
            ).fit(X)
            out[d, None, bits] = _errors(q, X, Q, exact)
        for bits in (1, 4):
            q = RaBitQQuantizer(
                bits=bits, query_bits=4, similarity="dot_product", rotation=rotation
            ).fit(X)
            out[d, 4, bits] = _errors(q, X, Q, exact)
    return out


@pytest.mark.parametrize("d", [384, 768])
@pytest.mark.parametrize("bits", range(1, 9))
def test_bound_coverage_float_query(spec_runs, d, bits):
    err, covered = spec_runs[d, None, bits]
    assert abs(covered.mean() - 0.94) <= 0.015, f"coverage {covered.mean():.4f}"
    # and it is the Gaussian figure: eps0 is a z-score
    assert abs(covered.mean() - GAUSS_COVERAGE) <= 0.012


@pytest.mark.parametrize("d", [384, 768])
@pytest.mark.parametrize("bits", [1, 4])
def test_bound_coverage_quantized_query_includes_rounding(spec_runs, d, bits):
    """With 4-bit queries the half-width adds the rounding term (r_o/a_o) ||e|| / sqrt(d) in
    quadrature; coverage stays at the float-query level."""
    _, covered = spec_runs[d, 4, bits]
    assert abs(covered.mean() - 0.94) <= 0.015, f"coverage {covered.mean():.4f}"


@pytest.mark.parametrize("bits", [1, 2, 3, 4])
def test_error_sd_matches_spec_table(spec_runs, bits):
    err, _ = spec_runs[768, None, bits]
    sd = err.std()
    assert abs(sd / SPEC_SD_768[bits] - 1) <= 0.05, f"sd {sd:.5f} vs {SPEC_SD_768[bits]}"


def test_error_halves_per_bit(spec_runs):
    sds = [spec_runs[768, None, b][0].std() for b in range(1, 9)]
    ratios = np.array(sds[:-1]) / np.array(sds[1:])
    # 1 - a_o^2 shrinks about 4x per bit, so the error about 2x (spec §2.4)
    assert np.all((ratios > 1.7) & (ratios < 2.3)), ratios


@pytest.mark.parametrize("bits,query_bits", [(1, None), (2, None), (4, None), (8, None), (1, 4)])
def test_unbiased_over_rotation_seeds(bits, query_bits):
    d, seeds = 128, 40
    X, Q = _unit(100, d, 3, mean=0.1), _unit(20, d, 4, mean=0.1)
    exact = Q.astype(np.float64) @ X.T.astype(np.float64)
    E = np.empty((seeds, len(Q), len(X)))
    for s in range(seeds):
        q = RaBitQQuantizer(bits=bits, query_bits=query_bits, similarity="dot_product", seed=s).fit(
            X
        )
        E[s] = q.estimate(Q, q.encode(X)) - exact
    # pooled mean: seeds are independent, pairs within a seed are not -> t over seed means
    per_seed = E.reshape(seeds, -1).mean(axis=1)
    se = per_seed.std(ddof=1) / np.sqrt(seeds)
    assert abs(per_seed.mean()) <= stats.t.ppf(0.9995, seeds - 1) * se
    # each pair's own 95% interval over seeds excludes 0 about 5% of the time
    t = E.mean(axis=0) / (E.std(axis=0, ddof=1) / np.sqrt(seeds))
    excluded = int((np.abs(t) > stats.t.ppf(0.975, seeds - 1)).sum())
    assert stats.binomtest(excluded, t.size, 0.05).pvalue > 1e-3, excluded
