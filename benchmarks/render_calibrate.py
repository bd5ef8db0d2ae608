"""Markdown tables of benchmarks/bench_calibrate.py's JSON results."""

from __future__ import annotations

import statistics
from collections import Counter

MB = 1 << 20

#: Protocol notes printed under the tables.
NOTES = [
    "Target: recall@10 >= 0.95 as the one-sided 95% bootstrap lower bound over the 200 "
    "calibration queries; a split passes when the chosen configuration, built afresh "
    "(report.build(), add(base)) and searched with its defaults, has mean recall@10 >= 0.945 "
    "on the other 800 queries.",
    "Wall time is one plain bbqlib.calibrate(base, queries[:200], ...) call, exact ground "
    "truth included. CPU s is the process's CPU time over all its threads in that call: this "
    "shared 2-core machine ran other jobs at the same time (load average in the table), so "
    "wall times are inflated several-fold; most of calibration is single-thread search, so "
    "on an idle machine its wall time is near the CPU figure.",
    "Splits reuse one bbqlib.calibration.Calibrator per data set and index: encodes, IVF "
    "lists and per-query results of queries seen in an earlier split are kept (each split's "
    "choice is made from its own 200 queries' recalls, the same values a fresh calibration "
    "measures).",
    "Grid: search='grid' measures every point of the same space at every oversample and "
    "visit budget, on the first split's 200 queries; its cheapest configuration meeting the "
    "target is compared with the smart walk's choice on the same queries.",
]


def _table(header: list[str], rows: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(str(x) for x in r) + " |" for r in rows]
    return "\n".join(lines)


def _load(text: str) -> str:
    return " / ".join(f"{float(x):.1f}" for x in text.strip("()").split(","))


def _wall_rows(shared, synthetic):
    rows = []
    items = list((shared or {}).items())
    if synthetic and "wall_seconds" in synthetic:
        items.append(("synthetic-clustered-1M ivf", {**synthetic, "n": 1_000_000, "d": 384}))
    for key, r in items:
        t = r["wall_timings"]
        gt = t.get("ground_truth", 0.0)
        lists = sum(v for k, v in t.items() if k.endswith("reference"))
        enc = sum(v for k, v in t.items() if k.endswith("encode"))
        search = sum(v for k, v in t.items() if k.endswith("search"))
        c = r["wall_chosen"]
        cpu = r.get("cpu_seconds")
        cpu = "-" if cpu is None else f"{cpu:.0f}"
        rows.append([key, f"{r['n']:,} x {r['d']}", f"{r['wall_seconds']:.0f}", cpu, f"{gt:.0f}",
                     f"{lists:.0f}", f"{enc:.0f}", f"{search:.0f}", r["wall_candidates"],
                     c["label"], f"{c['bytes_per_vector']:.0f}", f"{c['recall_low']:.3f}",
                     _load(r["wall_load"])])  # fmt: skip
    return _table(["data / index", "n x d", "wall s", "CPU s (all threads)", "ground truth s",
                   "IVF lists s", "encodes s", "searches s", "configs measured", "chosen",
                   "B/vector", "recall lower bound", "load avg"], rows)  # fmt: skip


def _split_rows(shared, synthetic, target, slack):
    rows = []
    items = list((shared or {}).items())
    if synthetic and synthetic.get("splits"):
        items.append(("synthetic-clustered-1M ivf", synthetic))
    for key, r in items:
        sp = r["splits"]
        fresh = [s["fresh_recall"] for s in sp if "fresh_recall" in s]
        if not fresh:
            continue
        passes = sum(bool(s.get("passes")) for s in sp)
        labels = Counter(f"{s['label']} ({s['bytes_per_vector']:.0f} B)" for s in sp)
        chosen = "; ".join(f"{n}x {lab}" for lab, n in labels.most_common())
        secs = statistics.median(s["seconds"] for s in sp)
        rows.append([key, f"{passes} / {len(sp)}", f"{min(fresh):.4f}",
                     f"{statistics.median(fresh):.4f}",
                     f"{statistics.median(s['recall_low'] for s in sp):.4f}",
                     f"{secs:.0f}", chosen])  # fmt: skip
    return _table(["data / index", f"splits with fresh recall >= {target - slack:.3f}",
                   "min fresh recall", "median fresh recall", "median calibration lower bound",
                   "median s per split", "chosen (times)"], rows)  # fmt: skip


def _grid_rows(shared):
    rows = []
    for key, r in (shared or {}).items():
        for s in r["splits"]:
            if "grid" not in s:
                continue
            g = s["grid"]
            ratio = s["bytes_per_vector"] / g["bytes_per_vector"] if g["label"] else float("nan")
            rows.append([key, s["split"], s["label"], f"{s['bytes_per_vector']:.0f}",
                         g["label"], f"{g['bytes_per_vector']:.0f}", f"{ratio:.3f}",
                         f"{s['seconds']:.0f}", s["candidates"], f"{s['grid_seconds']:.0f}",
                         s["grid_candidates"]])  # fmt: skip
    return _table(["data / index", "split", "smart: chosen", "B/vector", "grid: cheapest",
                   "B/vector", "smart / grid bytes", "smart s", "smart configs", "grid s",
                   "grid configs"], rows)  # fmt: skip


def _store_rows(stores):
    rows = [
        [r["data"], r["index"], f"{r['oversample']:g}", f"{r['float32']:.4f}",
         f"{r['float16']:.4f}", f"{r['int8']:.4f}", f"{r['int8'] - r['float32']:+.4f}"]
        for r in (stores or {}).get("rows", [])
    ]  # fmt: skip
    return _table(["data", "index (1-bit BBQ)", "oversample", "float32", "float16", "int8",
                   "int8 - float32"], rows)  # fmt: skip


def _served(m: dict) -> dict:
    """RSS growth from ready to served, split into anonymous, postings, vectors, other."""
    out = {"anon": 0, "postings": 0, "vectors": 0, "other": 0}
    for name, v in m["served"].items():
        grow = v - m["ready"].get(name, 0)
        if name == "[anon]" or name.startswith("[") or name == "":
            out["anon"] += grow
        elif "postings." in name or "header." in name or name.endswith(".bbq"):
            out["postings"] += grow
        elif "vectors." in name:
            out["vectors"] += grow
        else:
            out["other"] += grow
    return out


def _sizing_rows(sizing):
    rows = []
    for r in (sizing or {}).get("rows", []):
        s = r["sizing"]
        m = r["serving"]
        if m.get("status") != "ok":
            rows.append([r["index"], m.get("status"), "", "", "", "", "", "", ""])
            continue
        g = _served(m)
        measured = g["anon"] + g["postings"] + g["other"]
        rows.append([
            r["index"], f"{s['disk_bytes'] / MB:,.0f}", f"{r['disk'] / MB:,.0f}",
            f"{s['disk_bytes'] / r['disk']:.3f}", f"{s['ram_bytes'] / MB:,.0f}",
            f"{measured / MB:,.0f}", f"{s['ram_bytes'] / max(1, measured):.3f}",
            f"{g['vectors'] / MB:,.0f}", f"{m['cgroup_peak'] / MB:,.0f}",
            f"{s['latency_ms']:.2f} / {m['latency_ms']:.2f}",
            f"{s['build_seconds']:.0f} / {r['build_seconds']:.0f}",
        ])  # fmt: skip
    return _table(["index", "sizing disk MB", "measured disk MB", "ratio", "sizing RAM MB",
                   "measured RSS growth MB (excl. vector pages)", "ratio",
                   "vector-file pages resident MB", "cgroup peak MB",
                   "latency ms sizing / measured", "build s sizing / measured"], rows)  # fmt: skip


def render_markdown(parts: dict, target: float, slack: float):
    shared, stores = parts.get("shared"), parts.get("stores")
    synthetic, sizing = parts.get("synthetic"), parts.get("sizing")
    tables = [
        "### Wall time of one calibration (200 held-out queries, ground truth included)\n\n"
        + _wall_rows(shared, synthetic),
        "### Chosen configuration on fresh queries (calibrate on 200, measure on 800)\n\n"
        + _split_rows(shared, synthetic, target, slack),
        "### Smart walk against the exhaustive grid (same space, same 200 queries)\n\n"
        + _grid_rows(shared),
        "### Recall@10 of the same codes reranked on float32, float16 and int8 vectors "
        "(1,000 queries)\n\n" + _store_rows(stores),
    ]
    if sizing:
        tables.append(f"### Sizing at 1,000,000 x 384 against measurement ({sizing['config']})"
                      "\n\n" + _sizing_rows(sizing))  # fmt: skip
    if synthetic and synthetic.get("wall_table"):
        tables.append("### The 1M calibration's candidates\n\n" + synthetic["wall_table"])
    for key, r in (shared or {}).items():
        tables.append(f"### Candidates of the wall-time calibration: {key}\n\n" + r["wall_table"])
    return tables, []
