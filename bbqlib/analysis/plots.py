"""Plots of estimator errors and recall against size (matplotlib, the ``plot`` extra).

matplotlib is imported when a function is called, not with this module; without it the
functions raise an ImportError that names the extra: ``pip install "bbqlib[plot]"``.
Every function draws into ``ax`` when given (else a new figure) and returns the Axes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from .estimators import ErrorReport

__all__ = ["plot_error_histogram", "plot_error_vs_similarity", "plot_recall_vs_bytes"]


def _pyplot():
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(
            "bbqlib.analysis.plots needs matplotlib; install it with pip install 'bbqlib[plot]'"
        ) from exc
    return plt


def _axes(ax, figsize=(6.0, 4.0)):
    if ax is not None:
        return ax
    _, ax = _pyplot().subplots(figsize=figsize)
    return ax


def _items(reports) -> list[tuple[str, ErrorReport]]:
    if isinstance(reports, ErrorReport):
        return [(reports.method, reports)]
    if isinstance(reports, Mapping):
        items = list(reports.items())
    else:
        items = [(r.method, r) for r in reports]
    for label, r in items:
        if not isinstance(r, ErrorReport):
            raise TypeError(
                f"reports must be ErrorReport objects from estimation_error; {label!r} is a "
                f"{type(r).__name__}"
            )
        if r.pairs is None or len(r.pairs) == 0:
            raise ValueError(
                f"report {label!r} kept no pairs; run estimation_error with pairs_per_query > 0"
            )
    return items


def plot_error_histogram(
    reports: ErrorReport | Mapping[str, ErrorReport] | Sequence[ErrorReport],
    *,
    band: str = "all",
    bins: int = 60,
    ax=None,
    density: bool = True,
):
    """Histogram of the estimation error, one outline per method.

    Parameters
    ----------
    reports : ErrorReport, mapping label -> ErrorReport, or sequence of them
    band : str
        ``"all"`` (the uniform pair sample), ``"top-10"``, ``"top-100"`` (every top pair) or
        ``"rest"``. The legend gives each method's bias over *all* the band's pairs (the
        report's figure); for ``"all"`` and ``"rest"``, which are drawn from a sample, also the
        mean of the plotted sample.
    bins : int
        Bins shared by all methods (their range covers the 0.5-99.5% quantiles of all errors).
    ax : matplotlib Axes, optional
    density : bool
        Normalize each histogram (methods with different pair counts stay comparable).
    """
    items = _items(reports)
    errs = [(label, r.pairs.error[r.pairs.band(band, r.top)]) for label, r in items]
    pooled = np.concatenate([e for _, e in errs]) if errs else np.empty(0)
    if pooled.size == 0:
        raise ValueError(f"no pairs kept in band {band!r}")
    lo, hi = np.quantile(pooled, [0.005, 0.995])
    if lo == hi:
        lo, hi = lo - 0.5, hi + 0.5
    edges = np.linspace(lo, hi, int(bins) + 1)
    ax = _axes(ax)
    sampled = band in ("all", "rest")  # a uniform sample of the band's pairs is drawn
    for (label, e), (_, r) in zip(errs, items, strict=True):
        # The legend gives the band's bias over all its pairs (the report's) and, for a
        # sampled band, the mean of the plotted sample too: the two differ by sampling error.
        whole = r[band].bias if band in r.band_names else float("nan")
        text = f"bias {whole:+.3g}" + (f", plotted sample {e.mean():+.3g}" if sampled else "")
        ax.hist(e, bins=edges, histtype="step", density=density, label=f"{label} ({text})")
    ax.axvline(0.0, color="0.3", lw=0.8, ls="--")
    r0 = items[0][1]
    ax.set_xlabel(f"estimate − exact ({r0.scale})")
    ax.set_ylabel("density" if density else "pairs")
    shown = errs[0][1].size
    if sampled:
        ax.set_title(f"{band} pairs: uniform sample of {shown:,} (bias over all pairs)")
    else:
        ax.set_title(f"{band} pairs: all {shown:,} per method")
    ax.legend(fontsize="small")
    return ax


def plot_error_vs_similarity(
    report: ErrorReport,
    *,
    kind: str = "hexbin",
    gridsize: int = 50,
    ax=None,
    show_top: bool = True,
):
    """Error against the exact value: is the error (or its bias) larger for near neighbours?

    Parameters
    ----------
    report : ErrorReport
    kind : {"hexbin", "scatter"}
        Density of the uniform pair sample (log counts) or its points.
    gridsize : int
        Hexagons across (hexbin).
    ax : matplotlib Axes, optional
    show_top : bool
        Overlay each query's top-10 pairs (the ones that decide recall@10) as points.
    """
    ((label, r),) = _items([report])
    if kind not in ("hexbin", "scatter"):
        raise ValueError(f"kind must be 'hexbin' or 'scatter', got {kind!r}")
    p = r.pairs
    uni = p.band("all")
    sample_label = f"all pairs: uniform sample of {int(uni.sum()):,}"
    ax = _axes(ax)
    if kind == "hexbin":
        ax.hexbin(p.exact[uni], p.error[uni], gridsize=gridsize, bins="log", cmap="Blues",
                  mincnt=1, label=sample_label)  # fmt: skip
    else:
        ax.scatter(p.exact[uni], p.error[uni], s=2, alpha=0.3, color="C0", label=sample_label)
    if show_top and r.top:
        k = min(10, r.top)
        top = p.band(f"top-{k}")
        ax.scatter(p.exact[top], p.error[top], s=3, alpha=0.5, color="C3",
                   label=f"top-{k} pairs: all {int(top.sum()):,}")  # fmt: skip
        ax.legend(fontsize="small", loc="best")
    ax.axhline(0.0, color="0.3", lw=0.8, ls="--")
    exact_name = "squared L2" if r.similarity == "euclidean" else "inner product"
    ax.set_xlabel(f"exact {exact_name}")
    ax.set_ylabel(f"estimate − exact ({r.scale})")
    ax.set_title(label)
    return ax


def plot_recall_vs_bytes(
    rows: Sequence[Mapping],
    *,
    x: str = "bytes_per_vector",
    y: str = "recall",
    group: str = "family",
    label: str | None = "method",
    ax=None,
    logx: bool = True,
):
    """Recall against bytes per vector: one line per group (e.g. quantizer family).

    Parameters
    ----------
    rows : sequence of mappings
        One per configuration, e.g. ``{"family": "BBQ", "method": "BBQ 1x4",
        "bytes_per_vector": 62, "recall": 0.76}`` (a pandas DataFrame's
        ``to_dict("records")`` works).
    x, y, group : str
        Keys of the size, the recall and the line grouping.
    label : str or None
        Key annotated next to each point (None: no annotations).
    ax : matplotlib Axes, optional
    logx : bool
        Logarithmic size axis (sizes double with each bit).
    """
    rows = list(rows)
    if not rows:
        raise ValueError("rows is empty; pass one mapping per configuration")
    for key in (x, y, group):
        if key not in rows[0]:
            raise KeyError(f"rows need a {key!r} key; the first row has {sorted(rows[0])}")
    ax = _axes(ax)
    groups: dict = {}
    for row in rows:
        groups.setdefault(row[group], []).append(row)
    for name, members in groups.items():
        members = sorted(members, key=lambda r: r[x])
        xs = [m[x] for m in members]
        ys = [m[y] for m in members]
        ax.plot(xs, ys, marker="o", label=str(name))
        if label is not None:
            for m in members:
                if label in m:
                    ax.annotate(
                        str(m[label]),
                        (m[x], m[y]),
                        fontsize=6,
                        xytext=(3, -8),
                        textcoords="offset points",
                    )
    if logx:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(x.replace("_", " "))
    ax.set_ylabel(y.replace("_", " "))
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    return ax
