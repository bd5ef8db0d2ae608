"""The records an estimator analysis returns, and their markdown tables.

:class:`BandStats` (one band), :class:`PairSample` (pairs kept for plots), :class:`ErrorReport`
(:func:`~bbqlib.analysis.estimation_error`), :class:`UnbiasednessResult`
(:func:`~bbqlib.analysis.unbiasedness_test`) and :func:`compare_table`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np


@dataclass(frozen=True)
class BandStats:
    """Error summary of one band of (query, vector) pairs.

    Attributes
    ----------
    name : str
        ``"all"``, ``"top-10"`` (each query's 10 true nearest vectors), ``"top-100"``, or
        ``"rest"`` (everything beyond the largest top band).
    n_pairs : int
    bias : float
        Pooled mean of ``est - exact``.
    bias_ci : (float, float)
        Two-sided confidence interval of the bias (two-way cluster-robust; see the module).
    bias_se : float
        Its standard error.
    sd, rmse, mean_abs : float
        Standard deviation, root mean square and mean absolute value of the error.
    rel_error : float
        Mean ``|error| / |exact|`` over pairs with ``exact != 0``.
    spearman, kendall : float
        Rank correlation of estimate and exact value within each query's band, averaged over
        queries (``nan`` when a band holds fewer than 2 vectors per query).
    coverage : float or None
        Share of pairs inside ``[lower, upper]`` (quantizers with bounds only).
    mean_half_width : float or None
        Mean ``(upper - lower) / 2`` on the scale of the errors.
    """

    name: str
    n_pairs: int
    bias: float
    bias_ci: tuple[float, float]
    bias_se: float
    sd: float
    rmse: float
    mean_abs: float
    rel_error: float
    spearman: float
    kendall: float
    coverage: float | None = None
    mean_half_width: float | None = None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["bias_ci"] = list(self.bias_ci)
        return d


@dataclass(frozen=True, eq=False)
class PairSample:
    """Some of the pairs behind a report, kept for plots.

    Each query contributes all pairs of its largest top band (``uniform`` False) and a seeded
    uniform random sample of all its pairs (``uniform`` True; a top pair may appear in both).
    Use the uniform part for distributions over all pairs.

    Attributes
    ----------
    query, index : int64 [m]
        Query row and vector row of each pair.
    exact, error : float64 [m]
        Exact raw value and estimation error (normalized when the report is).
    rank : int64 [m]
        True rank of the vector for that query (0 = nearest) when inside the largest top band,
        else the band size ``K`` (meaning "K or beyond").
    uniform : bool [m]
    """

    query: np.ndarray
    index: np.ndarray
    exact: np.ndarray
    error: np.ndarray
    rank: np.ndarray
    uniform: np.ndarray

    def __len__(self) -> int:
        return self.error.shape[0]

    def band(self, name: str, top: int | None = None) -> np.ndarray:
        """Boolean mask of the pairs representative of a band.

        ``"all"``: the uniform sample. ``"top-k"``: the non-uniform pairs of rank < k.
        ``"rest"``: uniform pairs of rank >= ``top`` (the largest band).
        """
        if name == "all":
            return self.uniform.copy()
        if name == "rest":
            return self.uniform & (self.rank >= (top if top is not None else self.rank.max()))
        if name.startswith("top-"):
            k = int(name[4:])
            return ~self.uniform & (self.rank < k)
        raise ValueError(f"band must be 'all', 'rest' or 'top-<k>', got {name!r}")


@dataclass(frozen=True, eq=False)
class ErrorReport:
    """What :func:`estimation_error` measured.

    Attributes
    ----------
    method : str
        Label of the quantizer.
    similarity : str
    scale : str
        ``"squared L2"`` / ``"inner product"`` (raw errors) or ``"normalized"`` (errors
        divided by ``‖q − c‖·‖o − c‖``, twice that for squared L2).
    n_queries, n_vectors : int
    bytes_per_vector : int or None
        Stored bytes per vector of the encoding (codes plus corrections).
    eps0 : float or None
        Confidence multiplier of the bounds, when bounds were measured.
    confidence : float
        Level of ``bias_ci``.
    ci_method : str
        How ``bias_ci`` was computed.
    bands : tuple of BandStats
        ``"all"`` first, then the top bands, then ``"rest"``.
    pairs : PairSample
        Pairs kept for plots (not part of :meth:`to_dict`).
    """

    method: str
    similarity: str
    scale: str
    n_queries: int
    n_vectors: int
    bytes_per_vector: int | None
    eps0: float | None
    confidence: float
    ci_method: str
    bands: tuple[BandStats, ...]
    top: int = 0
    pairs: PairSample | None = field(default=None, repr=False)

    def __getitem__(self, name: str) -> BandStats:
        for b in self.bands:
            if b.name == name:
                return b
        raise KeyError(f"no band {name!r}; bands are {[b.name for b in self.bands]}")

    @property
    def overall(self) -> BandStats:
        """The ``"all"`` band."""
        return self.bands[0]

    @property
    def band_names(self) -> list[str]:
        return [b.name for b in self.bands]

    def to_dict(self) -> dict:
        """Plain-Python summary (JSON-serializable; the pair sample is left out)."""
        return {
            "method": self.method,
            "similarity": self.similarity,
            "scale": self.scale,
            "n_queries": self.n_queries,
            "n_vectors": self.n_vectors,
            "bytes_per_vector": self.bytes_per_vector,
            "eps0": self.eps0,
            "confidence": self.confidence,
            "ci_method": self.ci_method,
            "bands": [b.to_dict() for b in self.bands],
        }

    def table(self, digits: int = 4) -> str:
        """One markdown row per band."""
        pct = f"{self.confidence:.0%}"
        cols = ["band", "pairs", f"bias [{pct} CI]", "sd", "rel. error", "Spearman", "Kendall"]
        bounds = self.eps0 is not None
        if bounds:
            cols += [f"coverage (eps0={self.eps0:g})", "half-width"]
        lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for b in self.bands:
            cells = [
                b.name,
                f"{b.n_pairs:,}",
                _fmt_ci(b.bias, b.bias_ci, digits),
                _g(b.sd, digits),
                _g(b.rel_error, digits),
                f"{b.spearman:.4f}",
                f"{b.kendall:.4f}",
            ]
            if bounds:
                cells += [_pct(b.coverage), _g(b.mean_half_width, digits)]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def __str__(self) -> str:
        return (
            f"{self.method}: {self.similarity}, {self.scale} errors, {self.n_queries} queries x "
            f"{self.n_vectors} vectors\n{self.table()}"
        )


def _g(x, digits: int) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    return f"{x:.{digits}g}"


def _pct(x) -> str:
    return "–" if x is None or math.isnan(x) else f"{100 * x:.2f}%"


def _fmt_ci(mean: float, ci: tuple[float, float], digits: int) -> str:
    if math.isnan(mean):
        return "–"
    return f"{mean:+.{digits}g} [{ci[0]:+.{digits}g}, {ci[1]:+.{digits}g}]"


def compare_table(
    reports: Mapping[str, ErrorReport] | Sequence[ErrorReport],
    band: str = "all",
    *,
    digits: int = 4,
) -> str:
    """A markdown table with one row per report, for one band.

    Parameters
    ----------
    reports : mapping label -> ErrorReport, or a sequence (labelled by ``report.method``)
    band : str
        ``"all"``, ``"top-10"``, ``"top-100"``, ``"rest"``...
    """
    items = (
        list(reports.items()) if isinstance(reports, Mapping) else [(r.method, r) for r in reports]
    )
    any_bounds = any(r.eps0 is not None for _, r in items)
    cols = ["method", "B/vec", "bias [CI]", "sd", "rel. error", "Spearman", "Kendall"]
    if any_bounds:
        cols += ["coverage"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for label, r in items:
        b = r[band]
        cells = [
            label,
            "–" if r.bytes_per_vector is None else str(r.bytes_per_vector),
            _fmt_ci(b.bias, b.bias_ci, digits),
            _g(b.sd, digits),
            _g(b.rel_error, digits),
            f"{b.spearman:.4f}",
            f"{b.kendall:.4f}",
        ]
        if any_bounds:
            cells.append(_pct(b.coverage))
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


@dataclass(frozen=True)
class UnbiasednessResult:
    """What :func:`unbiasedness_test` measured.

    Attributes
    ----------
    n_seeds, n_pairs : int
    mean : float
        Pooled mean error over every pair and seed.
    ci : (float, float)
        Its interval: the per-seed pooled means are independent draws (one rotation each),
        so a t interval over seeds with ``n_seeds - 1`` degrees of freedom.
    se : float
    mean_pair_sd : float
        Root mean square over pairs of each pair's error sd across seeds.
    n_excluding_zero : int
        Pairs whose own ``1 - alpha`` interval over seeds (t, ``n_seeds - 1`` df) excludes 0;
        a pair whose error does not vary across seeds "excludes 0" when its error is not 0.
    expected_excluding_zero : float
        ``alpha * n_pairs``: the count expected by chance for an unbiased estimator.
    binomial_p : float
        One-sided binomial p-value of ``n_excluding_zero`` against ``Binomial(n_pairs, alpha)``
        (``scipy.stats.binomtest``, alternative "greater").
    alpha, confidence : float
    scale : str
    """

    n_seeds: int
    n_pairs: int
    mean: float
    ci: tuple[float, float]
    se: float
    mean_pair_sd: float
    n_excluding_zero: int
    expected_excluding_zero: float
    binomial_p: float
    alpha: float
    confidence: float
    scale: str

    @property
    def mean_ci_contains_zero(self) -> bool:
        return bool(self.ci[0] <= 0.0 <= self.ci[1])

    @property
    def unbiased(self) -> bool:
        """Not rejected: the pooled interval contains 0 and the count is not significant."""
        return self.mean_ci_contains_zero and self.binomial_p >= self.alpha

    def to_dict(self) -> dict:
        d = asdict(self)
        d["ci"] = list(self.ci)
        d["unbiased"] = self.unbiased
        return d

    def __str__(self) -> str:
        pct = f"{self.confidence:.0%}"
        return (
            f"pooled mean error {self.mean:+.4g} ({pct} CI [{self.ci[0]:+.4g}, "
            f"{self.ci[1]:+.4g}], {self.n_seeds} seeds); {self.n_excluding_zero:,} of "
            f"{self.n_pairs:,} pairs exclude 0 at alpha={self.alpha:g} (expected "
            f"{self.expected_excluding_zero:,.0f}, binomial p={self.binomial_p:.3g})"
        )
