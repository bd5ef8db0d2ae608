"""Running per-band error sums and the two-way cluster-robust standard error of the bias."""

from __future__ import annotations

import math

import numpy as np

from .ranks import _kendall, _spearman
from .reports import BandStats


class _BandAccumulator:
    """Running sums of one band, enough for the two-way cluster-robust variance at the end."""

    def __init__(self, name: str, nq: int, n: int, bounds: bool):
        self.name = name
        self.count = 0
        self.sum = 0.0
        self.sumsq = 0.0
        self.sum_abs = 0.0
        self.rel_sum = 0.0
        self.rel_count = 0
        self.q_sum = np.zeros(nq)
        self.q_count = np.zeros(nq)
        self.v_sum = np.zeros(n)
        self.v_count = np.zeros(n)
        self.spearman: list[np.ndarray] = []
        self.kendall: list[np.ndarray] = []
        self.bounds = bounds
        self.covered = 0
        self.half_sum = 0.0

    def add(self, q_rows, ids, f: dict, rng, rank_sample: int | None) -> None:
        """Add a block: ``q_rows`` [nb] global query rows; ``ids`` and ``f``'s arrays [nb, m].

        ``f`` holds ``est``, ``exact``, ``err`` (maybe normalized), ``raw`` (raw error) and,
        with bounds, ``half`` and ``inside``.
        """
        err, exact = f["err"], f["exact"]
        nb, m = err.shape
        if m == 0:
            return
        self.count += err.size
        self.sum += float(err.sum())
        self.sumsq += float(np.square(err).sum())
        self.sum_abs += float(np.abs(err).sum())
        nz = exact != 0
        self.rel_sum += float((np.abs(f["raw"][nz]) / np.abs(exact[nz])).sum())
        self.rel_count += int(nz.sum())
        self.q_sum[q_rows] += err.sum(axis=1)
        self.q_count[q_rows] += m
        self.v_sum += np.bincount(ids.ravel(), weights=err.ravel(), minlength=self.v_sum.size)
        self.v_count += np.bincount(ids.ravel(), minlength=self.v_count.size)
        if self.bounds:
            self.covered += int(f["inside"].sum())
            self.half_sum += float(f["half"].sum())
        est = f["est"]
        self.kendall.append(_kendall(est, exact, rng))
        if rank_sample is not None and m > rank_sample:
            cols = np.sort(rng.choice(m, rank_sample, replace=False))
            est, exact = est[:, cols], exact[:, cols]
        self.spearman.append(_spearman(est, exact))

    def stats(self, confidence: float) -> BandStats:
        from scipy import stats

        n = self.count
        nan = float("nan")
        if n == 0:
            return BandStats(
                self.name,
                0,
                nan,
                (nan, nan),
                nan,
                nan,
                nan,
                nan,
                nan,
                nan,
                nan,
                nan if self.bounds else None,
                nan if self.bounds else None,
            )
        mean = self.sum / n
        var_pairs = max(self.sumsq / n - mean * mean, 0.0)
        sd = math.sqrt(var_pairs * n / (n - 1)) if n > 1 else nan
        se, df = _two_way_se(self, mean)
        half = stats.t.ppf(0.5 + confidence / 2, df) * se if df > 0 else nan
        return BandStats(
            name=self.name,
            n_pairs=n,
            bias=mean,
            bias_ci=(mean - half, mean + half),
            bias_se=se,
            sd=sd,
            rmse=math.sqrt(self.sumsq / n),
            mean_abs=self.sum_abs / n,
            rel_error=self.rel_sum / self.rel_count if self.rel_count else nan,
            spearman=_nanmean(self.spearman),
            kendall=_nanmean(self.kendall),
            coverage=self.covered / n if self.bounds else None,
            mean_half_width=self.half_sum / n if self.bounds else None,
        )


def _nanmean(parts: list[np.ndarray]) -> float:
    if not parts:
        return float("nan")
    x = np.concatenate(parts)
    x = x[~np.isnan(x)]
    return float(x.mean()) if x.size else float("nan")


def _two_way_se(acc: _BandAccumulator, mean: float) -> tuple[float, int]:
    """Standard error of the pooled mean, clustered on queries and on vectors.

    ``V = V_query + V_vector - V_pairs`` (Cameron, Gelbach & Miller 2011), each the sandwich
    ``Σ_g (Σ_{i in g} (e_i - ē))² / N²`` with the small-sample factor ``G / (G - 1)``; when
    the difference falls below either one-way variance (possible in small samples), the larger
    one-way variance is used. Degrees of freedom: the smaller cluster count minus one.
    """
    n = acc.count

    def one_way(sums, counts):
        used = counts > 0
        g = int(used.sum())
        if g < 2:
            return float("nan"), g
        dev = sums[used] - counts[used] * mean
        return g / (g - 1) * float(np.square(dev).sum()) / (n * n), g

    v_q, g_q = one_way(acc.q_sum, acc.q_count)
    v_v, g_v = one_way(acc.v_sum, acc.v_count)
    v_0 = (acc.sumsq - n * mean * mean) / (n - 1) / n if n > 1 else float("nan")
    if math.isnan(v_q) or math.isnan(v_v):
        return float("nan"), 0
    var = max(v_q + v_v - v_0, v_q, v_v)
    return math.sqrt(max(var, 0.0)), min(g_q, g_v) - 1
