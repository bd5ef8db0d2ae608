"""How good is a quantizer's estimator? Bias, spread, rank agreement and bound coverage.

Every bbqlib quantizer estimates a *raw* value per (query, vector) pair: the squared L2
distance (euclidean) or the inner product (cosine, dot_product, max_inner_product).
:func:`estimation_error` compares those estimates with the exact float64 values and
summarizes the per-pair error ``est - exact``; :func:`unbiasedness_test` repeats the
measurement over random rotations to test the claim "the estimator is unbiased".

What is measured (per band of true neighbours, see :func:`estimation_error`):

``bias``
    Pooled mean error with a confidence interval. Errors of one query are correlated (one
    query vector, one quantized query), and so are errors of one stored vector across queries
    (one code), so the pairs are not independent: the interval is **two-way cluster-robust**
    (Cameron, Gelbach & Miller 2011), clustered on queries and on vectors.
``sd``, ``rmse``, ``mean_abs``
    Spread of the error.
``rel_error``
    Mean of ``|est - exact| / |exact|`` over pairs with ``exact != 0``. It is the usual figure
    for distances; inner products near 0 make it large, so for them read it in the top bands.
``spearman``, ``kendall``
    Rank correlation (ties averaged; Kendall's tau-b) between estimates and exact values,
    within each query's band, averaged over queries. Large bands are subsampled (see
    ``rank_sample``).
``coverage``, ``mean_half_width``
    Share of pairs with ``lower <= exact <= upper`` and the mean half-width of the bound, for
    quantizers that return error bounds (:class:`~bbqlib.RaBitQQuantizer`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from .._validation import check_vectors, prepare_for_similarity
from ..similarity import Similarity, exact_raw, resolve_similarity

__all__ = [
    "BandStats",
    "ErrorReport",
    "PairSample",
    "UnbiasednessResult",
    "compare_table",
    "estimation_error",
    "unbiasedness_test",
]

#: Default neighbour bands: each query's true top-10 and top-100 (nested), and the rest.
DEFAULT_BANDS = (10, 100)
# Pairs scored per block of queries (bounds the dense [nq_block, n] temporaries to ~40 MB each).
_PAIRS_PER_BLOCK = 1 << 22
# Bands up to this many vectors per query get Kendall's tau from every pair of vectors;
# larger ones from _KENDALL_PAIRS random pairs per query. _KENDALL_CHUNK bounds temporaries.
_KENDALL_DENSE = 128
_KENDALL_PAIRS = 10_000
_KENDALL_CHUNK = 1 << 21


# ----------------------------------------------------------------------------- records
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


# ----------------------------------------------------------------------------- accumulation
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


def _kendall(a: np.ndarray, b: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Kendall's tau-b of each row pair of two [nb, m] arrays.

    Exact (all pairs of columns) up to ``_KENDALL_DENSE`` columns; above, estimated from
    ``_KENDALL_PAIRS`` random pairs of distinct columns (drawn once per chunk of rows):
    ``Σ sa·sb / sqrt(Σ|sa| Σ|sb|)`` with ``sa = sign(a_i - a_j)``, the sample version of the
    same ratio (unbiased numerator and denominators; sd about ``1 / sqrt(pairs)`` per row).
    """
    nb, m = a.shape
    if m < 2:
        return np.full(nb, np.nan)
    out = np.empty(nb)
    if m <= _KENDALL_DENSE:
        i, j = np.triu_indices(m, 1)
    step = max(1, _KENDALL_CHUNK // (len(i) if m <= _KENDALL_DENSE else _KENDALL_PAIRS))
    for r0 in range(0, nb, step):
        ar, br = a[r0 : r0 + step], b[r0 : r0 + step]
        if m > _KENDALL_DENSE:
            # One draw of column pairs per chunk of rows: each row's estimate is unbiased.
            i = rng.integers(0, m, size=_KENDALL_PAIRS)
            j = rng.integers(0, m - 1, size=_KENDALL_PAIRS)
            j += j >= i  # distinct columns
        sa = np.sign(ar[:, i] - ar[:, j])
        sb = np.sign(br[:, i] - br[:, j])
        num = (sa * sb).sum(axis=1)
        den = np.sqrt(np.abs(sa).sum(axis=1) * np.abs(sb).sum(axis=1))
        with np.errstate(invalid="ignore", divide="ignore"):
            out[r0 : r0 + step] = num / den
    return out


def _average_ranks(x: np.ndarray) -> np.ndarray:
    """Ranks along rows, ties sharing their average rank (as ``scipy.stats.rankdata``)."""
    nb, m = x.shape
    order = np.argsort(x, axis=1, kind="stable")
    s = np.take_along_axis(x, order, axis=1)
    new = np.ones((nb, m), dtype=bool)
    new[:, 1:] = s[:, 1:] != s[:, :-1]
    flat = new.ravel()
    group = np.cumsum(flat) - 1  # every row starts a new group
    starts = np.flatnonzero(flat)
    sizes = np.diff(np.append(starts, flat.size))
    avg = (starts % m) + (sizes - 1) / 2.0
    ranks = np.empty((nb, m))
    np.put_along_axis(ranks, order, avg[group].reshape(nb, m), axis=1)
    return ranks


def _spearman(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Spearman's rho of each row pair (Pearson correlation of average ranks)."""
    nb, m = a.shape
    if m < 2:
        return np.full(nb, np.nan)
    ra = _average_ranks(a)
    rb = _average_ranks(b)
    ra -= ra.mean(axis=1, keepdims=True)
    rb -= rb.mean(axis=1, keepdims=True)
    den = np.sqrt((ra * ra).sum(axis=1) * (rb * rb).sum(axis=1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return (ra * rb).sum(axis=1) / den


# ----------------------------------------------------------------------------- helpers
def _supports_bounds(quantizer) -> bool:
    # The convention FlatIndex uses for rerank="bound": quantizers with bounds provide these.
    return hasattr(quantizer, "search_bound_rerank") or hasattr(quantizer, "error_sd")


def _describe(quantizer) -> str:
    name = type(quantizer).__name__.replace("Quantizer", "")
    enc = getattr(quantizer, "encoding_", None)
    if enc is None:
        return name
    qb = "float" if enc.query_bits is None else enc.query_bits
    extra = ""
    method = getattr(quantizer, "method", None)
    if isinstance(method, str):
        extra += f" {method}"
    pre = getattr(quantizer, "precondition", None)
    if pre not in (None, False):
        extra += f", {pre if isinstance(pre, str) else type(pre).__name__}"
    return f"{name} {enc.doc_bits}x{qb}{extra}"


def _centre(quantizer, X: np.ndarray) -> np.ndarray:
    """The quantizer's centre in the input space (its ``centroid_`` un-rotated), else the mean."""
    c = getattr(quantizer, "centroid_", None)
    if c is None or np.shape(c) != (X.shape[1],):
        return X.mean(axis=0, dtype=np.float64)
    c = np.asarray(c, dtype=np.float32)[None, :]
    t = getattr(quantizer, "transform_", None)
    if t is not None:
        c = t.inverse_transform(c)
    return c[0].astype(np.float64)


def _check_confidence(confidence) -> float:
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float, np.floating)):
        raise TypeError(f"confidence must be a float in (0, 1), got {confidence!r}")
    if not 0.0 < float(confidence) < 1.0:
        raise ValueError(f"confidence must be in (0, 1) (e.g. 0.95), got {confidence!r}")
    return float(confidence)


def _check_bands(bands, n: int) -> tuple[int, ...]:
    """Sorted unique band sizes below ``n`` (a band of every vector is just "all")."""
    bands = list(bands)
    for b in bands:
        if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b < 1:
            raise ValueError(f"bands must be positive integers (e.g. (10, 100)), got {bands!r}")
    return tuple(b for b in sorted({int(b) for b in bands}) if b < n)


def _similarity_of(quantizer) -> Similarity:
    sim = getattr(quantizer, "similarity_", None)
    if sim is None:
        fitted = getattr(quantizer, "is_fitted", None)
        if fitted is False:
            raise ValueError(
                f"the {type(quantizer).__name__} passed as quantizer is not fitted; call "
                "quantizer.fit(vectors) first"
            )
        sim = getattr(quantizer, "similarity", None)
    if sim is None:
        raise TypeError(
            f"quantizer must be a fitted bbqlib quantizer (with similarity_, encode and "
            f"estimate), got {type(quantizer).__name__}"
        )
    return resolve_similarity(sim)


# ----------------------------------------------------------------------------- main API
def estimation_error(
    quantizer,
    queries,
    vectors,
    *,
    encoded=None,
    bands: Iterable[int] = DEFAULT_BANDS,
    eps0: float | None = None,
    bounds: bool | None = None,
    normalize: bool = False,
    confidence: float = 0.95,
    rank_sample: int | None = 2000,
    pairs_per_query: int = 200,
    seed: int = 0,
    label: str | None = None,
) -> ErrorReport:
    """Per-pair estimation error of a fitted quantizer against exact values, summarized.

    Parameters
    ----------
    quantizer : fitted Quantizer
        Any bbqlib quantizer (``estimate(Q, enc)`` gives raw values: squared L2 for
        euclidean, inner products otherwise).
    queries : float array [nq, d]
    vectors : float array [n, d]
        The stored vectors (the exact values are computed from them, in float64, after the
        similarity's rule: cosine normalizes).
    encoded : EncodedVectors, optional
        ``quantizer.encode(vectors)``, when already at hand.
    bands : sequence of int
        Top-``k`` bands of true neighbours per query (nested: ``top-10`` is inside
        ``top-100``); ``"rest"`` is every pair beyond the largest. Bands of ``n`` or more
        vectors are dropped.
    eps0 : float, optional
        Confidence multiplier of the error bound (the quantizer's default, 1.9 for RaBitQ, when
        None). Only used when bounds are measured.
    bounds : bool, optional
        Measure bound coverage. ``None``: when the quantizer has bounds. ``True`` on a quantizer
        without bounds raises its error.
    normalize : bool
        Divide each error by ``‖q − c‖·‖o − c‖`` (twice that for squared L2), ``c`` the
        quantizer's centre: the error of the estimated cosine of the centred pair, the scale of
        RaBitQ's error bound (Gao & Long, SIGMOD 2024). Relative errors and coverage do not change.
    confidence : float
        Level of the bias interval (0.95).
    rank_sample : int or None
        Spearman's rho of bands with more vectors per query than this (``"all"``, ``"rest"``)
        is computed on a seeded random subsample of that many vectors per query (ranking all
        costs O(n log n) per query); None uses every vector. Kendall's tau uses every pair of
        vectors in bands of up to 128, else 10,000 random pairs per query.
    pairs_per_query : int
        Uniformly sampled pairs per query kept in ``report.pairs`` for plots (besides every
        pair of the largest top band).
    seed : int
        Seed of the subsamples.
    label : str, optional
        Name of the method in tables (default: class, bits, query bits, precondition).

    Returns
    -------
    ErrorReport

    Notes
    -----
    The bias interval is two-way cluster-robust (Cameron, Gelbach & Miller, "Robust inference
    with multiway clustering", 2011): errors that share a query or a stored vector are allowed
    to be correlated, which an independent-pairs interval would ignore (it is typically several
    times too narrow here). The pairs are a fixed sample of queries and vectors; the interval
    speaks about the population they come from, for this one fitted quantizer. For the mean over
    random rotations use :func:`unbiasedness_test`.

    Examples
    --------
    >>> import numpy as np, bbqlib
    >>> from bbqlib.analysis import estimation_error
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(500, 32)).astype(np.float32)
    >>> q = bbqlib.BBQQuantizer(bits=4, similarity="euclidean").fit(X)
    >>> rep = estimation_error(q, X[:20], X, bands=(10,))
    >>> rep.band_names
    ['all', 'top-10', 'rest']
    >>> bool(rep["top-10"].spearman > 0.5)
    True
    """
    similarity = _similarity_of(quantizer)
    confidence = _check_confidence(confidence)
    if rank_sample is not None and (
        isinstance(rank_sample, bool) or not isinstance(rank_sample, int) or rank_sample < 2
    ):
        raise ValueError(f"rank_sample must be an int >= 2 or None, got {rank_sample!r}")
    if isinstance(pairs_per_query, bool) or not isinstance(pairs_per_query, int):
        raise TypeError(f"pairs_per_query must be an int >= 0, got {pairs_per_query!r}")
    if pairs_per_query < 0:
        raise ValueError(f"pairs_per_query must be >= 0, got {pairs_per_query}")
    X = prepare_for_similarity(check_vectors(vectors, "vectors"), similarity, "vectors")
    Q = prepare_for_similarity(
        check_vectors(queries, "queries", dim=X.shape[1]), similarity, "queries"
    )
    nq, n = Q.shape[0], X.shape[0]
    tops = _check_bands(bands, n)
    top = tops[-1] if tops else 0
    if encoded is None:
        encoded = quantizer.encode(X)
    if bounds is None:
        bounds = _supports_bounds(quantizer)
    bounds = bool(bounds)

    scale_q = scale_x = None
    if normalize:
        c = _centre(quantizer, X)
        scale_x = np.linalg.norm(X.astype(np.float64) - c, axis=1)
        scale_q = np.linalg.norm(Q.astype(np.float64) - c, axis=1)
        if similarity.is_distance:
            scale_q = 2.0 * scale_q

    names = ["all"] + [f"top-{k}" for k in tops] + (["rest"] if top and top < n else [])
    accs = {name: _BandAccumulator(name, nq, n, bounds) for name in names}
    rng = np.random.default_rng(seed)
    kept: list[tuple] = []
    X64 = X.astype(np.float64)
    block = max(1, min(nq, _PAIRS_PER_BLOCK // max(n, 1)))
    used_eps0 = None
    for q0 in range(0, nq, block):
        Qb = Q[q0 : q0 + block]
        nb = Qb.shape[0]
        q_rows = np.arange(q0, q0 + nb)
        if bounds:
            kwargs = {} if eps0 is None else {"eps0": eps0}
            est, lower, upper = quantizer.estimate(Qb, encoded, return_bounds=True, **kwargs)
            lower = np.asarray(lower, dtype=np.float64)
            upper = np.asarray(upper, dtype=np.float64)
        else:
            est = quantizer.estimate(Qb, encoded)
        est = np.asarray(est, dtype=np.float64)
        exact = exact_raw(similarity, Qb, X64)
        raw_err = est - exact
        if normalize:
            s = scale_q[q0 : q0 + nb, None] * scale_x[None, :]
            safe = np.where(s > 0, s, 1.0)
            err = np.where(s > 0, raw_err / safe, 0.0)
        else:
            s = safe = None
            err = raw_err
        half = inside = None
        if bounds:
            inside = (lower <= exact) & (exact <= upper)
            half = (upper - lower) / 2.0
            if normalize:
                half = np.where(s > 0, half / safe, 0.0)

        fields = {"est": est, "exact": exact, "err": err, "raw": raw_err}
        if bounds:
            fields.update(half=half, inside=inside)
        top_ids = _top_ids(exact, top, similarity) if top else np.empty((nb, 0), np.int64)
        ids_all = np.broadcast_to(np.arange(n), (nb, n))
        accs["all"].add(q_rows, ids_all, fields, rng, rank_sample)
        for k in tops:
            idx = top_ids[:, :k]
            band = {key: np.take_along_axis(a, idx, axis=1) for key, a in fields.items()}
            accs[f"top-{k}"].add(q_rows, idx, band, rng, rank_sample)
        if "rest" in accs:
            mask = np.ones((nb, n), dtype=bool)
            mask[np.arange(nb)[:, None], top_ids] = False
            shape = (nb, n - top)
            band = {key: a[mask].reshape(shape) for key, a in fields.items()}
            accs["rest"].add(q_rows, ids_all[mask].reshape(shape), band, rng, rank_sample)
        # Pairs kept for plots: every top pair, plus a uniform sample (with replacement).
        if top:
            kept.append(_keep(q_rows, top_ids, exact, err, np.arange(top)[None, :], False))
        if pairs_per_query:
            cols = rng.integers(0, n, size=(nb, pairs_per_query))
            ranks = np.full(cols.shape, top, dtype=np.int64)
            if top:
                hit = cols[:, :, None] == top_ids[:, None, :]  # [nb, m, top]: small
                found = hit.any(axis=2)
                ranks[found] = hit.argmax(axis=2)[found]
            kept.append(_keep(q_rows, cols, exact, err, ranks, True))
    if bounds:
        used_eps0 = float(eps0) if eps0 is not None else _default_eps0(quantizer)

    pairs = _join_kept(kept)
    sim_scale = (
        "normalized" if normalize else ("squared L2" if similarity.is_distance else "inner product")
    )
    bpv = getattr(encoded, "bytes_per_vector", None)
    return ErrorReport(
        method=label if label is not None else _describe(quantizer),
        similarity=similarity.value,
        scale=sim_scale,
        n_queries=nq,
        n_vectors=n,
        bytes_per_vector=None if bpv is None else int(bpv),
        eps0=used_eps0,
        confidence=confidence,
        ci_method="two-way cluster-robust (queries and vectors), t with min(G)-1 df",
        bands=tuple(accs[name].stats(confidence) for name in names),
        top=top,
        pairs=pairs,
    )


def _default_eps0(quantizer) -> float | None:
    import inspect

    try:
        p = inspect.signature(quantizer.estimate).parameters.get("eps0")
    except (TypeError, ValueError):
        p = None
    if p is not None and isinstance(p.default, (int, float)) and not isinstance(p.default, bool):
        return float(p.default)
    mod = inspect.getmodule(type(quantizer))
    val = getattr(mod, "DEFAULT_EPS0", None)
    return float(val) if isinstance(val, (int, float)) else None


def _top_ids(exact: np.ndarray, k: int, similarity: Similarity) -> np.ndarray:
    """Ids of each row's true top ``k`` [nb, k], best first, ties by the lower id."""
    key = -exact if similarity.is_distance else exact
    nb, n = key.shape
    rows = np.arange(nb)[:, None]
    part = np.argpartition(-key, k - 1, axis=1)[:, :k] if k < n else np.tile(np.arange(n), (nb, 1))
    order = np.lexsort((part, -key[rows, part]), axis=1)
    return part[rows, order]


def _keep(q_rows, idx, exact, err, ranks, uniform: bool):
    """Columns of a :class:`PairSample` for the pairs ``idx`` [nb, m] of a block."""
    ranks = np.broadcast_to(ranks, idx.shape)
    return (
        np.repeat(q_rows, idx.shape[1]),
        idx.ravel().astype(np.int64),
        np.take_along_axis(exact, idx, axis=1).ravel(),
        np.take_along_axis(err, idx, axis=1).ravel(),
        ranks.ravel().astype(np.int64),
        np.full(idx.size, uniform),
    )


def _join_kept(kept) -> PairSample:
    if not kept:
        e = np.empty(0)
        ei = np.empty(0, np.int64)
        return PairSample(ei, ei, e, e, ei, np.empty(0, bool))
    cols = [np.concatenate(c) for c in zip(*kept, strict=True)]
    return PairSample(*cols)


# ----------------------------------------------------------------------------- over seeds
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


def unbiasedness_test(
    make_quantizer: Callable[[int], object],
    seeds: Iterable[int],
    queries,
    vectors,
    *,
    normalize: bool = False,
    alpha: float = 0.05,
    confidence: float = 0.95,
) -> UnbiasednessResult:
    """Is the estimator unbiased over its randomness (the rotation seed)?

    For each seed, ``make_quantizer(seed)`` is fitted on ``vectors`` (unless it comes back
    fitted), encodes them, and estimates every (query, vector) pair. The errors are pooled.

    Parameters
    ----------
    make_quantizer : callable seed -> quantizer
        E.g. ``lambda s: bbqlib.RaBitQQuantizer(bits=1, query_bits=None, seed=s)``.
    seeds : iterable of int
        At least 2 seeds (20 or more for a useful per-pair test).
    queries, vectors : float arrays [nq, d], [n, d]
        Memory: two float64 arrays of ``nq * n`` are kept.
    normalize : bool
        As in :func:`estimation_error` (the centre of each seed's fit).
    alpha : float
        Level of each pair's test.
    confidence : float
        Level of the pooled interval.

    Returns
    -------
    UnbiasednessResult

    Notes
    -----
    Two checks, as issue 3 asks. (1) The pooled mean error: each seed's mean over the fixed
    pairs is one independent draw, so the t interval over seeds is exact up to normality. (2)
    Per pair: an unbiased estimator has zero mean error for *every* pair over the rotation, so
    each pair's t test rejects with probability about ``alpha`` and the count of rejections is
    about ``Binomial(n_pairs, alpha)``. Pairs sharing a rotation are not independent, so the
    count varies more than a binomial; treat a p-value near the threshold with care. A
    deterministic quantizer (BBQ without preconditioning) has zero spread over seeds: its
    pooled interval collapses to its mean and every pair with a non-zero error counts.
    """
    from scipy import stats

    seeds = list(seeds)
    if len(seeds) < 2:
        raise ValueError(f"seeds must hold at least 2 seeds (20+ recommended), got {len(seeds)}")
    confidence = _check_confidence(confidence)
    alpha = float(alpha)
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1) (e.g. 0.05), got {alpha!r}")

    mean = m2 = None
    seed_means = []
    scale_name = None
    for i, seed in enumerate(seeds):
        q = make_quantizer(seed)
        if getattr(q, "is_fitted", True) is False:
            q.fit(vectors)
        rep_err, scale_name = _pair_errors(q, queries, vectors, normalize)
        seed_means.append(float(rep_err.mean()))
        if mean is None:
            mean = np.zeros_like(rep_err)
            m2 = np.zeros_like(rep_err)
        delta = rep_err - mean  # Welford: stable per-pair mean and variance over seeds
        mean += delta / (i + 1)
        m2 += delta * (rep_err - mean)
    s = len(seeds)
    seed_means = np.asarray(seed_means)
    pooled = float(seed_means.mean())
    se = float(seed_means.std(ddof=1) / math.sqrt(s))
    t_ci = stats.t.ppf(0.5 + confidence / 2, s - 1)
    pair_var = m2 / (s - 1)
    pair_se = np.sqrt(pair_var / s)
    t_pair = stats.t.ppf(1 - alpha / 2, s - 1)
    # An exactly repeatable error (zero spread) is a bias whenever it is not zero.
    tiny = 1e-12 * max(float(np.abs(mean).max(initial=0.0)), 1e-300)
    excl = np.where(pair_se > tiny, np.abs(mean) > t_pair * pair_se, np.abs(mean) > tiny)
    count = int(excl.sum())
    n_pairs = int(mean.size)
    p = float(stats.binomtest(count, n_pairs, alpha, alternative="greater").pvalue)
    return UnbiasednessResult(
        n_seeds=s,
        n_pairs=n_pairs,
        mean=pooled,
        ci=(pooled - t_ci * se, pooled + t_ci * se),
        se=se,
        mean_pair_sd=float(np.sqrt(pair_var.mean())),
        n_excluding_zero=count,
        expected_excluding_zero=alpha * n_pairs,
        binomial_p=p,
        alpha=alpha,
        confidence=confidence,
        scale=scale_name,
    )


def _pair_errors(quantizer, queries, vectors, normalize: bool) -> tuple[np.ndarray, str]:
    """Dense error matrix ``est - exact`` [nq, n] in float64 (normalized if asked)."""
    similarity = _similarity_of(quantizer)
    X = prepare_for_similarity(check_vectors(vectors, "vectors"), similarity, "vectors")
    Q = prepare_for_similarity(
        check_vectors(queries, "queries", dim=X.shape[1]), similarity, "queries"
    )
    enc = quantizer.encode(X)
    est = np.asarray(quantizer.estimate(Q, enc), dtype=np.float64)
    err = est - exact_raw(similarity, Q, X)
    if not normalize:
        return err, "squared L2" if similarity.is_distance else "inner product"
    c = _centre(quantizer, X)
    sx = np.linalg.norm(X.astype(np.float64) - c, axis=1)
    sq = np.linalg.norm(Q.astype(np.float64) - c, axis=1) * (2.0 if similarity.is_distance else 1.0)
    s = sq[:, None] * sx[None, :]
    return np.where(s > 0, err / np.where(s > 0, s, 1.0), 0.0), "normalized"
