"""The result of a calibration: every configuration tried, the chosen one, a table, a plot."""

from __future__ import annotations

from dataclasses import dataclass, field

from .record import Configuration
from .sizing import Sizing

__all__ = ["CalibrationReport"]

_MB = 1 << 20


@dataclass(frozen=True)
class CalibrationReport:
    """What :func:`bbqlib.calibrate` measured.

    Attributes
    ----------
    candidates : tuple of Configuration
        Every configuration measured, in the order tried (``chosen`` among them).
    chosen : Configuration or None
        The cheapest (bytes per vector, then latency) whose recall lower bound meets
        ``target_recall``; None when nothing in the space does.
    target_recall, k, n : float, int, int
        The target, the depth, and the vector count RAM and disk are sized for.
    sizes : tuple of Sizing
        :func:`bbqlib.sizing` of each candidate at ``n`` (same order).
    seconds : float
        Wall time of the calibration, ground truth included.
    timings : dict
        Seconds spent on ground truth, IVF lists, encodes, searches.
    """

    candidates: tuple[Configuration, ...]
    chosen: Configuration | None
    target_recall: float
    k: int
    n: int
    sizes: tuple[Sizing, ...]
    seconds: float
    timings: dict = field(default_factory=dict)
    search: str = "smart"

    def build(self, path=None):
        """The chosen configuration's index, empty, its search parameters as defaults."""
        if self.chosen is None:
            raise ValueError(
                f"no configuration met recall@{self.k} >= {self.target_recall}; relax the "
                "target, raise max_bytes_per_vector / max_latency_ms, or widen the space"
            )
        return self.chosen.build(path)

    # ------------------------------------------------------------------ tables
    def rows(self) -> list[dict]:
        """One dict per candidate (the table's columns), cheapest first."""
        out = []
        mixed = len({c.n_measured for c in self.candidates}) > 1
        for c, s in zip(self.candidates, self.sizes, strict=True):
            lo, hi = c.recall_ci
            out.append({
                **({"n measured": f"{c.n_measured:,}"} if mixed else {}),
                "index": c.index,
                "codes": f"{c.family} {c.bits:g}x{'f' if c.query_bits is None else c.query_bits}",
                "precondition": "-" if c.precondition is None else str(c.precondition),
                "rerank": c.store_vectors or "-",
                "oversample": "-" if c.oversample is None else f"{c.oversample:g}",
                "visit %": "-" if c.visit_percentage is None else f"{c.visit_percentage:g}",
                f"recall@{self.k}": f"{c.recall:.3f}",
                "95% CI": f"{lo:.3f}-{hi:.3f}",
                "lower bound": f"{c.recall_low:.3f}",
                "B/vector": f"{c.bytes_per_vector:.0f}",
                "QPS/core": f"{c.qps:,.0f}",
                f"RAM MB @{self.n:,}": f"{s.ram_bytes / _MB:,.0f}",
                f"disk MB @{self.n:,}": f"{s.disk_bytes / _MB:,.0f}",
                "": "<- chosen" if c is self.chosen else "",
            })  # fmt: skip
        order = sorted(range(len(out)), key=lambda i: (self.candidates[i].bytes_per_vector,
                                                       -self.candidates[i].recall))  # fmt: skip
        return [out[i] for i in order]

    def table(self, fmt: str = "text") -> str:
        """The candidates as a plain-text (``"text"``) or GitHub markdown (``"markdown"``) table."""
        rows = self.rows()
        if not rows:
            return "(no candidates)"
        cols = list(rows[0])
        widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in cols]
        if fmt == "markdown":
            lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
            lines += ["| " + " | ".join(str(r[c]) for c in cols) + " |" for r in rows]
            return "\n".join(lines)
        head = "  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True))
        body = ["  ".join(str(r[c]).ljust(w) for c, w in zip(cols, widths, strict=True))
                for r in rows]  # fmt: skip
        return "\n".join([head, "-" * len(head), *body])

    def pareto(self) -> list[Configuration]:
        """Candidates no other beats on all of recall, bytes per vector and QPS."""
        cs = list(self.candidates)

        def beats(a, b):
            ge = (a.recall >= b.recall and a.bytes_per_vector <= b.bytes_per_vector
                  and a.qps >= b.qps)  # fmt: skip
            gt = a.recall > b.recall or a.bytes_per_vector < b.bytes_per_vector or a.qps > b.qps
            return ge and gt

        return [c for c in cs if not any(beats(o, c) for o in cs)]

    def plot(self, ax=None):
        """Recall against bytes per vector, QPS per core as colour, the Pareto front drawn.

        matplotlib is imported here (``pip install 'bbqlib[plot]'``). Returns the Axes.
        """
        try:
            import matplotlib.pyplot as plt
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(
                "CalibrationReport.plot needs matplotlib; install it with pip install "
                "'bbqlib[plot]'"
            ) from exc
        if ax is None:
            _, ax = plt.subplots(figsize=(7.0, 4.5))
        cs = list(self.candidates)
        sc = ax.scatter(
            [c.bytes_per_vector for c in cs], [c.recall for c in cs],
            c=[c.qps for c in cs], cmap="viridis", s=18, norm="log",
        )  # fmt: skip
        front = sorted(self.pareto(), key=lambda c: c.bytes_per_vector)
        best = []
        for c in front:  # the recall/bytes staircase of the front
            if not best or c.recall > best[-1].recall:
                best.append(c)
        ax.step([c.bytes_per_vector for c in best], [c.recall for c in best], where="post",
                color="0.4", lw=1, label="Pareto front")  # fmt: skip
        ax.axhline(self.target_recall, color="tab:red", lw=0.8, ls="--", label="target")
        if self.chosen is not None:
            ax.scatter([self.chosen.bytes_per_vector], [self.chosen.recall], s=120,
                       facecolors="none", edgecolors="tab:red", label="chosen")  # fmt: skip
        ax.set_xscale("log")
        ax.set_xlabel("bytes per vector")
        ax.set_ylabel(f"recall@{self.k}")
        ax.figure.colorbar(sc, ax=ax, label="QPS per core")
        ax.legend(loc="lower right")
        return ax

    def __repr__(self) -> str:
        lines = [
            f"CalibrationReport: {len(self.candidates)} configurations measured in "
            f"{self.seconds:.1f} s ({self.search} search), target recall@{self.k} >= "
            f"{self.target_recall} (one-sided 95% bootstrap lower bound)",
            self.table(),
        ]
        if self.chosen is None:
            lines.append("chosen: none meets the target")
        else:
            s = self.chosen.sizing(self.n)
            lines += [f"chosen: {self.chosen.label()}", repr(s), "", self.chosen.code()]
        return "\n".join(lines)
