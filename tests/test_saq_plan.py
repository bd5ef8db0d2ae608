"""SAQ's plan: the dynamic program against brute force, the budget, the error models, PCA."""

from __future__ import annotations

import math

import numpy as np
import pytest
from reference import saq as ref

from bbqlib.quantizers.saq.plan import (
    FACTOR_BITS,
    PlanStats,
    SAQPlan,
    budget_bits,
    error_table,
    fit_pca,
    neighbour_stats,
    plan_segments,
)


def _spectrum(rng, d, decay):
    return np.sort(rng.gamma(1.0, 1.0, d) * np.exp(-decay * np.arange(d) / d))[::-1]


@pytest.mark.parametrize("seed", range(12))
def test_dp_equals_brute_force_on_small_problems(seed):
    """min_gain = 0: the DP's error is the exact minimum over all segmentations."""
    rng = np.random.default_rng(seed)
    block = int(rng.choice([8, 16]))
    nb = int(rng.integers(2, 6))
    Dp = nb * block
    max_bits = 4
    max_segs = int(rng.integers(1, nb + 2))
    bits = float(rng.choice([0.5, 1.0, 1.5, 2.0, 2.75, 3.0]))
    budget = budget_bits(bits, Dp)
    if seed % 2:  # a random (not monotone) table exercises the DP's bookkeeping
        table = rng.uniform(0.0, 1.0, (nb + 1, nb + 1, max_bits + 1))
    else:
        v = np.zeros(Dp)
        v[:] = _spectrum(rng, Dp, 4.0)
        table = error_table("reference", PlanStats(v), block, max_bits)
    want = ref.brute_force_plan(table, block, budget, FACTOR_BITS, max_segs, max_bits)
    try:
        plan = plan_segments(
            table,
            dim=Dp,
            padded_dim=Dp,
            block=block,
            budget=budget,
            max_segs=max_segs,
            min_gain=0.0,
            max_bits=max_bits,
        )
    except ValueError:
        assert math.isinf(want)
        return
    assert plan.error == pytest.approx(want, rel=1e-12, abs=1e-15)
    # the plan's error re-evaluated from the table is what the DP reported
    err = sum(table[s.start // block, s.stop // block, s.bits] for s in plan.segments)
    if plan.coded_dims < Dp:
        err += table[plan.coded_dims // block, nb, 0]
    assert err == pytest.approx(plan.error, rel=1e-12, abs=1e-15)


def test_min_gain_rule_stays_within_one_percent_per_segment():
    rng = np.random.default_rng(0)
    v = _spectrum(rng, 384, 6.0)
    table = error_table("reference", PlanStats(v), 32)
    kw = dict(dim=384, padded_dim=384, block=32, budget=budget_bits(2.0, 384), max_segs=12)
    exact = plan_segments(table, min_gain=0.0, **kw)
    rule = plan_segments(table, **kw)
    assert len(rule.segments) <= len(exact.segments)
    assert rule.error <= exact.error / 0.99 ** len(exact.segments) + 1e-12


@pytest.mark.parametrize("d", [1, 7, 64, 65, 300, 384, 1000])
@pytest.mark.parametrize("bits", [0.5, 0.75, 1.0, 1.5, 2.0, 3.3, 4.0, 7.0, 8.0])
def test_plan_never_exceeds_budget(d, bits):
    rng = np.random.default_rng(d)
    Dp = -(-d // 64) * 64
    v = np.zeros(Dp)
    v[:d] = _spectrum(rng, d, 5.0)
    for block in (32, 64):
        table = error_table("reference", PlanStats(v), block)
        if block + FACTOR_BITS > budget_bits(bits, Dp):  # not even one block at 1 bit fits
            with pytest.raises(ValueError, match="raise bits"):
                plan_segments(
                    table,
                    dim=d,
                    padded_dim=Dp,
                    block=block,
                    budget=budget_bits(bits, Dp),
                    max_segs=Dp // block,
                )
            continue
        plan = plan_segments(
            table,
            dim=d,
            padded_dim=Dp,
            block=block,
            budget=budget_bits(bits, Dp),
            max_segs=8,
        )
        plan.validate()
        assert plan.cost_bits <= budget_bits(bits, Dp)
        assert plan.code_bits <= bits * Dp + 1e-9  # one segment's factors are free
        assert plan.code_bits % block == 0
        # stored bytes never exceed Extended RaBitQ's bits * D_p / 8 + 14
        stored = plan.code_bytes + 4 + 8 * len(plan.segments)
        assert stored <= bits * Dp / 8 + 12


def test_reference_examples_of_the_spec():
    """spec §2 table: debian-like spectra give leading segments more bits, a dropped tail."""
    rng = np.random.default_rng(3)
    v = _spectrum(rng, 384, 8.0)
    table = error_table("reference", PlanStats(v), 64)
    plan = plan_segments(
        table, dim=384, padded_dim=384, block=64, budget=budget_bits(2.0, 384), max_segs=6
    )
    widths = [s.bits for s in plan.segments]
    assert widths == sorted(widths, reverse=True)
    assert plan.describe().endswith("@0") or plan.coded_dims == 384


def test_plan_round_trip_and_validation():
    plan = SAQPlan.from_dict(
        {
            "segments": [[0, 64, 5], [64, 192, 2]],
            "dim": 384,
            "padded_dim": 384,
            "block": 64,
            "budget": budget_bits(2.0, 384),
        }
    )
    assert plan.describe() == "64@5, 192@2, 128@0"
    assert SAQPlan.from_dict(plan.to_dict()) == plan
    with pytest.raises(ValueError, match="plan"):
        SAQPlan.from_dict({**plan.to_dict(), "segments": [[0, 64, 5], [32, 64, 2]]})
    with pytest.raises(ValueError, match="budget"):
        SAQPlan.from_dict({**plan.to_dict(), "budget": 100})


def test_custom_error_model_is_called_and_obeyed():
    calls = []

    def flat(stats, start, stop, bits):
        calls.append((start, stop, bits))
        return (stop - start) / 2.0**bits if bits else 1e9 * (stop - start)  # never drop

    table = error_table(flat, PlanStats(np.ones(128)), 32, 4)
    assert calls and all(s % 32 == 0 and e % 32 == 0 for s, e, _ in calls)
    plan = plan_segments(
        table,
        dim=128,
        padded_dim=128,
        block=32,
        budget=budget_bits(2.0, 128),
        max_segs=4,
        max_bits=4,
    )
    assert plan.coded_dims == 128  # the model forbids a dropped tail
    with pytest.raises(ValueError, match="error_model"):
        error_table("nope", PlanStats(np.ones(64)), 32)


def test_neighbour_model_table_follows_its_definition():
    """Coded: κ_B E[‖o_s‖² ‖q_s‖²] / (d_s - 1) over the pairs; tail: the within-query
    variance of the dropped <o_tail, q_tail> over each query's neighbours, averaged."""
    from bbqlib.quantizers.saq.plan import kappa

    rng = np.random.default_rng(0)
    n, d, block = 600, 64, 16
    Y = rng.standard_normal((n, d)) * np.linspace(2.0, 0.1, d)
    st = neighbour_stats(Y, Y.var(0), is_l2=True, n_queries=30, k=5)
    assert st.pair_q.shape == (150, d) and np.bincount(st.pair_query).tolist() == [5] * 30
    # the neighbours are the true 5 nearest other rows of each query
    q0 = st.pair_q[0]
    dist = ((Y - q0) ** 2).sum(1)
    dist[dist == 0] = np.inf
    np.testing.assert_allclose(np.sort(((st.pair_o[:5] - q0) ** 2).sum(1)), np.sort(dist)[:5])
    T = error_table("neighbour", st, block, 4)
    i, j, b = 1, 3, 2
    s = slice(i * block, j * block)
    prod = ((st.pair_q[:, s] ** 2).sum(1) * (st.pair_o[:, s] ** 2).sum(1)).mean()
    assert T[i, j, b] == pytest.approx(kappa(b) * prod / (2 * block - 1))
    tail = (st.pair_q[:, 2 * block :] * st.pair_o[:, 2 * block :]).sum(1).reshape(30, 5)
    assert T[2, 4, 0] == pytest.approx(tail.var(axis=1).mean())


@pytest.mark.parametrize("n, d", [(500, 7), (300, 64), (50, 100)])
def test_fit_pca_matches_svd(n, d):
    rng = np.random.default_rng(d)
    X = (rng.standard_normal((n, d)) @ rng.standard_normal((d, d)) + 3.0).astype(np.float32)
    mean, W, var = fit_pca(X, chunk=37)
    Xc = X.astype(np.float64) - X.mean(0, dtype=np.float64)
    s = np.linalg.svd(Xc, compute_uv=False)
    want = np.zeros(d)
    want[: len(s)] = s**2 / n  # n < d: rank n - 1, the rest is 0
    np.testing.assert_allclose(var, want, rtol=1e-7, atol=1e-9 * s[0] ** 2)
    np.testing.assert_allclose(W.T @ W, np.eye(d), atol=1e-10)
    proj = Xc @ W
    np.testing.assert_allclose(proj.var(axis=0), var, rtol=1e-6, atol=1e-9 * s[0] ** 2)
    assert np.all(np.diff(var) <= 1e-12)
