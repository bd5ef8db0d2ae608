"""A neutral comparison of the quantizer families at equal bytes per vector.

:func:`compare` fits one configuration per family and byte budget on the caller's vectors
and measures, on the same queries: the estimator's mean error (bias) with its confidence
interval, its spread, error-bound coverage (families with bounds), recall@10 without and with
an exact rerank, and encode and scan speed. "Equal bytes" means, for each family, the
configuration with the most stored bytes per vector (codes plus corrections) that is not
above the budget.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from .._validation import check_vectors
from ..encoding import ENCODINGS
from ..similarity import resolve_similarity
from .estimators import ErrorReport, estimation_error
from .estimators.reports import _fmt_ci, _g, _pct
from .ground_truth import exact_knn
from .recall import recall_at_k

__all__ = ["compare", "Comparison", "FAMILIES", "CORRECTION_ALLOWANCE"]

#: Bytes added to each default budget for the per-vector corrections (norms, offsets) most
#: families store beside their codes, so that a b-bit code of every family fits "d·b/8".
CORRECTION_ALLOWANCE = 16
# Default budgets: float32 / 32, / 16, / 8 and / 4 (1, 2, 4 and 8 bits per dimension).
_DEFAULT_BITS = (1, 2, 4, 8)
# SAQ spends any average budget; its bytes are the fitted plan's, so the budget is searched.
_SAQ_MAX_BITS = 8.0
_SAQ_STEP = 1.0 / 16.0


def _bbq(bits, query_bits, similarity, seed):
    from ..quantizers import BBQQuantizer

    return BBQQuantizer(bits, query_bits, similarity, seed=seed)


def _rabitq(bits, query_bits, similarity, seed):
    from ..quantizers import RaBitQQuantizer

    return RaBitQQuantizer(bits, query_bits, similarity, rotation="hadamard", seed=seed)


def _turboquant(variant: str):
    def make(bits, query_bits, similarity, seed):
        from ..quantizers import TurboQuantQuantizer

        return TurboQuantQuantizer(bits, variant=variant, similarity=similarity, seed=seed)

    return make


def _int8(bits, query_bits, similarity, seed, method="per_dim"):
    from ..quantizers import ScalarQuantizer

    return ScalarQuantizer(bits, method, similarity, query_bits, seed=seed)


def _int8_global(bits, query_bits, similarity, seed):
    return _int8(bits, query_bits, similarity, seed, method="global")


def _saq(bits, query_bits, similarity, seed):
    from ..quantizers import SAQQuantizer

    return SAQQuantizer(bits, query_bits, similarity, seed)


@dataclass(frozen=True)
class _Family:
    """A compared family: its registry rows (each with the default query width) and makers.

    ``code`` is the constructor a row prints, with ``{bits}``, ``{query_bits}``,
    ``{method}`` (the registry name after ``int8_``), ``{similarity}`` and ``{seed}``.
    """

    name: str
    makers: dict  # registry family -> make(bits, query_bits, similarity, seed)
    code: str
    budget_family: bool = False  # SAQ: takes an average bit budget, bytes from the fit


_TAIL = "similarity={similarity!r}, seed={seed})"
_FAMILIES: dict[str, _Family] = {
    f.name: f
    for f in (
        _Family("bbq", {"osq": _bbq}, "BBQQuantizer(bits={bits}, query_bits={query_bits}, "),
        _Family("rabitq", {"rabitq": _rabitq},
                "RaBitQQuantizer(bits={bits}, query_bits={query_bits}, rotation='hadamard', "),
        _Family("saq", {"saq": _saq}, "SAQQuantizer(bits={bits}, ", budget_family=True),
        _Family("turboquant_mse", {"turboquant": _turboquant("mse")},
                "TurboQuantQuantizer(bits={bits}, variant='mse', "),
        _Family("turboquant_prod", {"turboquant_prod": _turboquant("prod")},
                "TurboQuantQuantizer(bits={bits}, variant='prod', "),
        _Family("int8", {"int8_per_dim": _int8, "int8_global": _int8_global},
                "ScalarQuantizer(bits={bits}, method={method!r}, query_bits={query_bits}, "),
    )
}  # fmt: skip
#: Names :func:`compare` accepts in ``families``, in table order.
FAMILIES: tuple[str, ...] = tuple(_FAMILIES)


@dataclass(frozen=True)
class _Config:
    family: str
    registry: str
    bits: float
    query_bits: int | None
    bytes_per_vector: int

    def quantizer(self, similarity: str, seed: int):
        make = _FAMILIES[self.family].makers[self.registry]
        return make(self.bits, self.query_bits, similarity, seed)

    def code(self, similarity: str, seed: int) -> str:
        template = "bbqlib." + _FAMILIES[self.family].code + _TAIL
        return template.format(bits=f"{self.bits:g}", query_bits=self.query_bits,
                               method=self.registry[len("int8_"):], similarity=similarity,
                               seed=seed)  # fmt: skip


def _row_configs(family: _Family, dim: int, is_l2: bool) -> list[_Config]:
    """Every registry width of a fixed-width family, each with its default query width."""
    out = []
    for reg in family.makers:
        default = ENCODINGS.family(reg).default_query_bits
        for row in ENCODINGS.rows(reg):
            if row.query_bits == default[row.doc_bits]:
                nbytes = row.bytes_per_vector(dim, is_l2)
                out.append(_Config(family.name, reg, row.doc_bits, row.query_bits, nbytes))
    return out


def _pick(configs: Sequence[_Config], budget: int) -> _Config | None:
    """The configuration with the most bytes not above ``budget`` (ties: more bits)."""
    fits = [c for c in configs if c.bytes_per_vector <= budget]
    return max(fits, key=lambda c: (c.bytes_per_vector, c.bits)) if fits else None


def _saq_fit(X, budget: int, similarity: str, seed: int):
    """SAQ's largest average budget (in 1/16 bit steps) whose fitted plan fits ``budget``.

    SAQ's bytes are about ``bits · d / 8`` plus a constant, known only after a fit: guess
    from a first fit, then step down until the plan fits. Returns ``(config, fitted)`` or
    ``(None, None)`` when even the smallest budget does not fit.
    """
    dim = X.shape[1]
    bits = min(_SAQ_MAX_BITS, math.floor(budget * 8 / dim / _SAQ_STEP) * _SAQ_STEP)
    tried: dict[float, int] = {}
    while bits >= _SAQ_STEP:
        q = _saq(bits, None, similarity, seed).fit(X)
        nbytes = int(q.encoding_.bytes_per_vector(dim, resolve_similarity(similarity).is_distance))
        tried[bits] = nbytes
        if nbytes <= budget:
            return _Config("saq", "saq", bits, None, nbytes), q
        over = math.ceil((nbytes - budget) * 8 / dim / _SAQ_STEP) * _SAQ_STEP
        bits = round(bits - max(over, _SAQ_STEP), 6)
    return None, None


@dataclass(frozen=True, eq=False)
class Comparison:
    """What :func:`compare` measured: one row per family and budget.

    Attributes
    ----------
    rows : list of dict
        One per (budget, family) with a configuration within the budget, keys: ``budget``,
        ``family``, ``method`` (label), ``code`` (how to make the quantizer),
        ``bytes_per_vector``, ``bias``, ``bias_ci_low``, ``bias_ci_high``, ``bias_se``,
        ``sd``, ``rmse``, ``coverage`` (None without bounds), ``recall_at_k``,
        ``recall_at_k_rerank``, ``encode_per_s`` (vectors per second), ``scan_qps``
        (queries per second, flat scan without rerank).
    skipped : list of (budget, family, reason)
        Families with no configuration within a budget.
    reports : dict
        ``(budget, family) -> ErrorReport`` behind each row (bands ``all``, ``top-<k>``,
        ``rest``; pairs kept for :mod:`bbqlib.analysis.plots`).
    similarity, scale : str
        The similarity and the scale of the errors (``"inner product"`` or ``"squared L2"``).
    k, oversample, confidence : the settings used.
    n_queries, n_vectors, dim : int
    """

    rows: list[dict]
    skipped: list[tuple]
    reports: dict = field(repr=False)
    similarity: str
    scale: str
    k: int
    oversample: float
    confidence: float
    n_queries: int
    n_vectors: int
    dim: int

    def table(self, digits: int = 3) -> str:
        """A markdown table, one row per budget and family."""
        k, pct = self.k, f"{self.confidence:.0%}"
        cols = ["budget B", "family", "method", "B/vec", f"bias [{pct} CI]", "sd", "coverage",
                f"recall@{k}", f"recall@{k} rerank x{self.oversample:g}", "encode vec/s",
                "scan q/s"]  # fmt: skip
        lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
        for r in self.rows:
            cells = [
                str(r["budget"]), r["family"], r["method"], str(r["bytes_per_vector"]),
                _fmt_ci(r["bias"], (r["bias_ci_low"], r["bias_ci_high"]), digits),
                _g(r["sd"], digits), _pct(r["coverage"]), f"{r['recall_at_k']:.3f}",
                f"{r['recall_at_k_rerank']:.3f}", f"{r['encode_per_s']:,.0f}",
                f"{r['scan_qps']:,.0f}",
            ]  # fmt: skip
            lines.append("| " + " | ".join(cells) + " |")
        text = "\n".join(lines)
        if self.skipped:
            miss = "; ".join(f"{fam} at {b} B" for b, fam, _ in self.skipped)
            text += f"\n\nNo configuration within the budget: {miss}."
        return text

    def __str__(self) -> str:
        return (
            f"{self.similarity}, errors of the {self.scale}, {self.n_queries} queries x "
            f"{self.n_vectors} vectors (d={self.dim})\n{self.table()}"
        )

    def plot(self, *, figsize=(15.0, 4.2)):
        """Bias with its interval, spread and recall against bytes per vector, per family.

        Needs matplotlib (``pip install "bbqlib[plot]"``). Returns the Figure.
        """
        from .plots import _pyplot

        plt = _pyplot()
        fig, axes = plt.subplots(1, 3, figsize=figsize)
        by_family: dict[str, list[dict]] = {}
        for r in self.rows:
            by_family.setdefault(r["family"], []).append(r)
        for name, rows in by_family.items():
            rows = sorted(rows, key=lambda r: r["bytes_per_vector"])
            x = np.array([r["bytes_per_vector"] for r in rows], dtype=float)
            bias = np.array([r["bias"] for r in rows])
            err = np.array(
                [[r["bias"] - r["bias_ci_low"] for r in rows],
                 [r["bias_ci_high"] - r["bias"] for r in rows]]
            )  # fmt: skip
            line = axes[0].errorbar(x, bias, yerr=err, marker="o", capsize=3, label=name)
            color = line[0].get_color()
            axes[1].plot(x, [r["sd"] for r in rows], marker="o", color=color, label=name)
            axes[2].plot(x, [r["recall_at_k"] for r in rows], marker="o", color=color,
                         label=f"{name}")  # fmt: skip
            axes[2].plot(x, [r["recall_at_k_rerank"] for r in rows], marker="o", ls="--",
                         color=color)  # fmt: skip
        axes[0].axhline(0.0, color="black", lw=0.8)
        axes[0].set_title(f"mean error, {self.confidence:.0%} CI (all pairs)")
        axes[0].set_ylabel(f"estimate − exact ({self.scale})")
        axes[1].set_title("error sd (all pairs)")
        axes[2].set_title(f"recall@{self.k}: no rerank (solid), rerank x{self.oversample:g}")
        for ax in axes:
            ax.set_xscale("log", base=2)
            ax.set_xlabel("bytes per vector")
            ax.grid(True, alpha=0.3)
        axes[0].legend(fontsize="small")
        fig.tight_layout()
        return fig


def compare(
    X,
    queries,
    *,
    similarity: str = "cosine",
    families: Sequence[str] | None = None,
    bytes: int | Sequence[int] | None = None,
    k: int = 10,
    oversample: float = 4.0,
    confidence: float = 0.95,
    seed: int = 0,
    timer: Callable[[], float] = time.perf_counter,
) -> Comparison:
    """Compare the quantizer families at equal bytes per vector on your vectors.

    Parameters
    ----------
    X : float array [n, d]
        The vectors to store.
    queries : float array [nq, d]
        Queries (held out from ``X`` for a fair recall).
    similarity : str
        ``"cosine"``, ``"dot_product"``, ``"max_inner_product"`` or ``"euclidean"``.
    families : sequence of str, optional
        Some of :data:`FAMILIES` (default all): ``"bbq"`` (OSQ with Lucene's query widths),
        ``"rabitq"`` (1 bit: RaBitQ; more: Extended RaBitQ; Hadamard rotation), ``"saq"``,
        ``"turboquant_mse"``, ``"turboquant_prod"`` and ``"int8"`` (per-dimension or global
        grid, whichever is larger within the budget).
    bytes : int or sequence of int, optional
        Budgets in stored bytes per vector. Default: ``d·b/8 + 16`` for b = 1, 2, 4, 8 bits per
        dimension (float32 / 32, / 16, / 8, / 4, plus :data:`CORRECTION_ALLOWANCE` bytes of
        per-vector corrections).
    k : int
        Recall@k and the top band of the error report.
    oversample : float
        Rerank depth ``ceil(k · oversample)`` of the "with rerank" recall (float32 vectors).
    confidence : float
        Level of the bias intervals.
    seed : int
        Seed of every quantizer and of the error report's subsamples: every column but the
        two speeds is a function of the inputs and the seed.
    timer : callable
        Clock of the speed columns.

    Returns
    -------
    Comparison
        ``.table()`` (markdown), ``.rows`` (list of dicts), ``.plot()``.

    Notes
    -----
    Per budget, each family gets its configuration with the most stored bytes (codes plus
    corrections, as :attr:`EncodedVectors.bytes_per_vector` counts them) not above the budget;
    a family whose smallest configuration is larger is listed in ``skipped``. The bias is the
    pooled mean of ``estimate − exact`` of the raw value the family estimates (inner product,
    or squared L2 for euclidean) over every (query, vector) pair; its interval is two-way
    cluster-robust on queries and vectors (:func:`~bbqlib.analysis.estimation_error`). An
    estimator built to be unbiased (TurboQuant's ``prod`` variant, RaBitQ) should have an
    interval around 0; TurboQuant's ``mse`` variant shrinks inner products (by ``2/π`` at 1 bit;
    Zandieh et al., arXiv 2504.19874, section 3). The interval is conditional on the one
    fitted quantizer (its rotation, TurboQuant's sketch): errors sharing its randomness move
    together, so a family unbiased over that randomness can still show a seed's interval away
    from 0; :func:`~bbqlib.analysis.unbiasedness_test` measures the mean over seeds.
    Speeds: ``encode`` of all ``X`` and a flat scan of all queries without rerank (after one
    untimed warm-up scan of the same queries), on the threads bbqlib uses.

    Examples
    --------
    >>> import numpy as np
    >>> from bbqlib.analysis import compare
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(600, 32)).astype(np.float32)
    >>> res = compare(X[50:], X[:50], families=["bbq", "turboquant_prod"], bytes=[24])
    >>> [(r["family"], r["bytes_per_vector"]) for r in res.rows]
    [('bbq', 22), ('turboquant_prod', 24)]
    """
    from ..index import FlatIndex

    sim = resolve_similarity(similarity)
    Xc = check_vectors(X, "X")
    Q = check_vectors(queries, "queries", dim=Xc.shape[1])
    n, dim = Xc.shape
    names = _check_families(families)
    budgets = _check_budgets(bytes, dim)
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= n:
        raise ValueError(f"k must be an int in [1, n={n}], got {k!r}")
    if not float(oversample) >= 1.0:
        raise ValueError(f"oversample must be >= 1 (e.g. 4.0), got {oversample!r}")
    metric = {"euclidean": "l2", "cosine": "cosine"}.get(sim.value, "ip")
    _, gt_ids = exact_knn(Xc, Q, k, metric=metric, scores_first=True)

    rows, skipped, reports = [], [], {}
    for budget in budgets:
        for name in names:
            fam = _FAMILIES[name]
            if fam.budget_family:
                config, quantizer = _saq_fit(Xc, budget, sim.value, seed)
            else:
                config = _pick(_row_configs(fam, dim, sim.is_distance), budget)
                quantizer = None if config is None else config.quantizer(sim.value, seed).fit(Xc)
            if config is None:
                skipped.append((budget, name, "smallest configuration is above the budget"))
                continue
            t0 = timer()
            encoded = quantizer.encode(Xc)
            encode_s = timer() - t0
            report = estimation_error(
                quantizer, Q, Xc, encoded=encoded, bands=(k,), confidence=confidence, seed=seed
            )
            index = FlatIndex(quantizer=quantizer, store_vectors="float32")
            index.add(Xc)
            index.search(Q, k, rerank=False, pad_to_k=True)  # compiles, before the clock
            t0 = timer()
            _, ids = index.search(Q, k, rerank=False, pad_to_k=True)
            scan_s = timer() - t0
            _, ids_rerank = index.search(
                Q, k, rerank=True, oversample=float(oversample), pad_to_k=True
            )
            reports[(budget, name)] = report
            rows.append(
                _row(budget, name, config, encoded, report, sim.value, seed,
                     recall_at_k(ids, gt_ids, k), recall_at_k(ids_rerank, gt_ids, k),
                     n / max(encode_s, 1e-9), Q.shape[0] / max(scan_s, 1e-9))
            )  # fmt: skip
    return Comparison(
        rows=rows,
        skipped=skipped,
        reports=reports,
        similarity=sim.value,
        scale="squared L2" if sim.is_distance else "inner product",
        k=k,
        oversample=float(oversample),
        confidence=float(confidence),
        n_queries=Q.shape[0],
        n_vectors=n,
        dim=dim,
    )


def _row(budget, name, config, encoded, report: ErrorReport, similarity, seed, recall,
         recall_rerank, encode_per_s, scan_qps) -> dict:  # fmt: skip
    band = report.overall
    return {
        "budget": int(budget),
        "family": name,
        "method": report.method,
        "code": config.code(similarity, seed),
        "bytes_per_vector": int(encoded.bytes_per_vector),
        "bias": band.bias,
        "bias_ci_low": band.bias_ci[0],
        "bias_ci_high": band.bias_ci[1],
        "bias_se": band.bias_se,
        "sd": band.sd,
        "rmse": band.rmse,
        "coverage": band.coverage,
        "recall_at_k": float(recall),
        "recall_at_k_rerank": float(recall_rerank),
        "encode_per_s": float(encode_per_s),
        "scan_qps": float(scan_qps),
    }


def _check_families(families) -> list[str]:
    if families is None:
        return list(FAMILIES)
    if isinstance(families, str):
        families = [families]
    names = list(families)
    unknown = [f for f in names if f not in _FAMILIES]
    if unknown or not names:
        raise ValueError(f"families must be some of {list(FAMILIES)}, got {names!r}")
    return list(dict.fromkeys(names))


def _check_budgets(budgets, dim: int) -> list[int]:
    if budgets is None:
        return [math.ceil(dim * b / 8) + CORRECTION_ALLOWANCE for b in _DEFAULT_BITS]
    values = [budgets] if np.isscalar(budgets) else list(budgets)
    for b in values:
        if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b < 1:
            raise ValueError(
                "bytes must be a positive int or a list of them (bytes per vector), got "
                f"{budgets!r}"
            )
    if not values:
        raise ValueError("bytes is empty; pass a budget in bytes per vector, or None")
    return sorted({int(b) for b in values})
