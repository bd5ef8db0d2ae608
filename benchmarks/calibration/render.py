"""Markdown tables of benchmarks/calibration/calibrate.py's JSON results."""

from __future__ import annotations

import statistics
from collections import Counter

MB = 1 << 20

#: Protocol notes printed under the tables.
NOTES = [
    "Sessions (SAQ in the search space from session 6: average budgets 1, 1.5, 2, 3, 4, 5, "
    "6 bits per dimension, float queries): session 7 (the date above) made every wall-time "
    "row and candidate table, the spacy-wordvec-300 splits (flat and IVF, untimed, nice 19), "
    "the smart walk against the grid (all four timed) and the sizing table; session 6 the "
    "debian-minilm-384 splits (flat and IVF); session 5, whose space had no SAQ, the "
    "rerank-store recalls. Rows of earlier sessions are carried over from the committed file "
    "(render --carry). Code of session 7's runs: bbqlib at 870b0f3 (benchmark script of "
    "53f4cc9) for everything timed and the spacy-wordvec-300 splits; the 1M splits ran on "
    "abe6dd6, after main's 4-bit lookup-table scan of SAQ in the IVF was merged (IVF SAQ "
    "latencies, hence calibration and grid times, may differ on that code; recall and bytes "
    "do not depend on it). The 1M splits (20 planned, untimed, nice 19) stopped at split 3: "
    "the fresh-query search of the chosen IVF (SAQ 6 bits, float queries, two-pass list "
    "scan) raised in ivf_fastscan_saq (numba array analysis: 'Sizes of bigger ... do not "
    "match' at the candidate buffer's growth, saq_fastscan.py as of abe6dd6; fixed in "
    "7ef44b1 and 6cb0a3b, not re-measured at 1M); the row shows the 3 splits measured before "
    "it.",
    "Target: recall@10 >= 0.95 as the one-sided 95% bootstrap lower bound over the 200 "
    "calibration queries; a split passes when the chosen configuration, built afresh "
    "(report.build(), add(base)) and searched with its defaults, has mean recall@10 >= 0.945 "
    "on the other 800 queries.",
    "Wall time is one plain bbqlib.calibrate(base, queries[:200], ...) call, exact ground "
    "truth included, the first call of its process (kernels loaded from numba's cache). CPU "
    "s is the process's CPU time over all its threads in that call (above the wall time "
    "where encodes and ground truth ran on both cores). Other jobs ran at nice 19 beside it "
    "(load average in the table). Session 5's wall times of the shared sets (load 16-21, "
    "other timed jobs competing, no SAQ in the space) were 18-42x these; its 1M call, "
    "280 s, ran with every other job paused.",
    "Splits reuse one bbqlib.calibration.Calibrator per data set and index: encodes, IVF "
    "lists and per-query results of queries seen in an earlier split are kept (each split's "
    "choice is made from its own 200 queries' recalls, the same values a fresh calibration "
    "measures).",
    "Sizing: the 1M IVF of the calibrated configuration is built on disk, its flat twin saved; "
    "a fresh process warms up (imports, kernels) on a 5,000-vector index, is then moved into a "
    "cgroup v1 memory cgroup (4 GiB cap), opens the index, touches every list (a search at "
    "visit 100%) and serves 500 single queries. Measured RSS growth is the process's resident "
    "bytes (smaps) after serving minus before opening (anonymous + index files). 'sized from "
    "1M calibration': bbqlib.sizing(1_000_000, 384, report.chosen) of the 1M calibration; "
    "'100,000 build': the same configuration built on a seeded 100,000-vector subsample, its "
    "list shape, build time and latency measured there and scaled by sizing's rules "
    "('entries as measured': its posting entries per vector taken as they are; '+ list density "
    "rule': with bbqlib.calibration.density.entries_at, the subsample clustered into the lists "
    "1M vectors will have, as bbqlib.calibrate(..., n=1_000_000) does). Measured latency: per "
    "query of a 200-query batch searched in the building process right after the build "
    "(batch, what calibration and sizing time) and one query per call in the serving process "
    "(single, Python overhead included).",
    "Timed parts (the wall-time calls, the grid part, sizing) ran holding "
    "$LOCKS/bench.lock (the 1M calibration and sizing also $LOCKS/bigmem.lock). "
    "Until session 5 $LOCKS/bench_guard.py paused every process at nice >= 10 while the "
    "lock was held; from session 6 nothing is paused: other helpers' jobs ran at nice 19 "
    "beside the timed runs (load average 8-15 in session 7, in each row). A nice-19 job "
    "takes little CPU from a nice-0 one, so the timed process had most of the two cores.",
    "Grid: search='grid' measures every point of the same space at every oversample and "
    "visit budget (no pruning, no monotonicity assumed), in groups of equal bytes from the "
    "cheapest up, and stops after the first group where some setting meets the target (no "
    "more expensive group can hold the cheapest configuration). Smart walk and grid each run "
    "on a fresh Calibrator (nothing shared) on split 0's 200 queries with the data set's "
    "exact ground truth, under the benchmark lock; first, untimed, a grid on 1,000 of the "
    "vectors loads every kernel, so neither timed search pays for it (without it, in a run "
    "before, the first search, the walk, took 9-24 s more on spacy-wordvec-300).",
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
        if "wall_timings" not in r:  # splits only (run with --no-wall)
            continue
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


def _grid_rows(grid):
    rows = []
    for key, r in (grid or {}).items():
        sm, g = r.get("smart"), r.get("grid")
        if not sm or not g:
            continue
        ratio = (sm["bytes_per_vector"] / g["bytes_per_vector"]) if g.get("label") else float("nan")
        if r.get("untimed"):  # ran at nice 19 outside the lock: CPU s only are figures
            key += " (untimed, nice 19)"
        rows.append([key, sm["label"], f"{sm['bytes_per_vector']:.0f}", g["label"],
                     f"{g['bytes_per_vector']:.0f}", f"{ratio:.3f}",
                     f"{sm['seconds']:.1f} / {sm['cpu_seconds']:.1f}", sm["candidates"],
                     f"{g['seconds']:.1f} / {g['cpu_seconds']:.1f}", g["candidates"],
                     _load(sm["load_before"]), _load(g["load_after"])])  # fmt: skip
        full = r.get("full-grid")
        if full:
            rows.append([key + " (full grid)", "", "", full["label"],
                         f"{full['bytes_per_vector']:.0f}",
                         f"{sm['bytes_per_vector'] / full['bytes_per_vector']:.3f}", "", "",
                         f"{full['seconds']:.1f} / {full['cpu_seconds']:.1f}",
                         full["candidates"], _load(full["load_before"]),
                         _load(full["load_after"])])  # fmt: skip
    return _table(["data / index", "smart: chosen", "B/vector", "grid: cheapest", "B/vector",
                   "smart / grid bytes", "smart wall / CPU s", "smart configs",
                   "grid wall / CPU s", "grid configs", "load before", "load after"],
                  rows)  # fmt: skip


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
    small_n = (sizing or {}).get("small", {}).get("n")
    for r in (sizing or {}).get("rows", []):
        m = r["serving"]
        if m.get("status") != "ok":
            rows.append([r["index"], m.get("status"), "", "", "", "", "", "", "", "", ""])
            continue
        g = _served(m)
        measured = g["anon"] + g["postings"] + g["other"]
        sources = [("1M calibration", r["sizing"])]
        if r.get("sizing_small"):
            plain = "entries as measured" if r.get("sizing_rule") else ""
            sources.append((f"{small_n:,} build {plain}".strip(), r["sizing_small"]))
        if r.get("sizing_rule"):
            sources.append((f"{small_n:,} build + list density rule", r["sizing_rule"]))
        batch = r.get("batch_latency_ms")
        batch = "" if batch is None else f"{batch:.2f} / "
        for source, s in sources:
            # The flat twin reuses the IVF configuration's record: its timings are not its own.
            timed = r["index"] != "flat"
            lat = "-" if s["latency_ms"] is None or not timed else f"{s['latency_ms']:.2f}"
            build = "-" if s["build_seconds"] is None or not timed else f"{s['build_seconds']:.0f}"
            rows.append([
                r["index"], source, f"{s['disk_bytes'] / MB:,.0f}", f"{r['disk'] / MB:,.0f}",
                f"{s['disk_bytes'] / r['disk']:.3f}", f"{s['ram_bytes'] / MB:,.0f}",
                f"{measured / MB:,.0f}", f"{s['ram_bytes'] / max(1, measured):.3f}",
                f"{m['cgroup_peak'] / MB:,.0f}", f"{lat} / {batch}{m['latency_ms']:.2f}",
                f"{build} / {r['build_seconds']:.0f}",
            ])  # fmt: skip
    return _table(["index", "sized from", "sizing disk MB", "measured disk MB", "ratio",
                   "sizing RAM MB", "measured RSS growth MB (serving)", "ratio",
                   "cgroup peak MB", "latency ms sizing / measured (batch / single)",
                   "build s sizing / measured"], rows)  # fmt: skip


def render_markdown(parts: dict, target: float, slack: float):
    shared, stores = parts.get("shared"), parts.get("stores")
    synthetic, sizing = parts.get("synthetic"), parts.get("sizing")
    tables = [
        "### Wall time of one calibration (200 held-out queries, ground truth included)\n\n"
        + _wall_rows(shared, synthetic),
        "### Chosen configuration on fresh queries (calibrate on 200, measure on 800)\n\n"
        + _split_rows(shared, synthetic, target, slack),
        "### Smart walk against the exhaustive grid (same space, same 200 queries)\n\n"
        + _grid_rows(parts.get("grid")),
        "### Recall@10 of the same codes reranked on float32, float16 and int8 vectors "
        "(1,000 queries)\n\n" + _store_rows(stores),
    ]
    if sizing:
        tables.append(f"### Sizing at 1,000,000 x 384 against measurement ({sizing['config']})"
                      "\n\n" + _sizing_rows(sizing))  # fmt: skip
    if synthetic and synthetic.get("wall_table"):
        tables.append("### The 1M calibration's candidates\n\n" + synthetic["wall_table"])
    for key, r in (shared or {}).items():
        if r.get("wall_table"):
            tables.append(f"### Candidates of the wall-time calibration: {key}\n\n"
                          + r["wall_table"])  # fmt: skip
    return tables, []


# ----------------------------------------------------------------------------- carry-over
#: Tables whose rows are one per data set and index: a re-rendered file keeps the committed
#: rows of the data sets and indexes the new run did not measure (their session is stated in
#: the notes). Every other table is replaced whole when the new run has it, else kept.
KEYED = (
    "### Wall time of one calibration",
    "### Chosen configuration on fresh queries",
    "### Smart walk against the exhaustive grid",
)
_UNTIMED = " (untimed, nice 19)"


def _sections(text: str) -> dict[str, str]:
    """``{heading line: body}`` of the ``###`` sections before ``## Notes``."""
    text = text.split("\n## Notes", 1)[0]
    out: dict[str, str] = {}
    for chunk in text.split("\n### ")[1:]:
        head, _, body = chunk.partition("\n")
        out["### " + head.strip()] = body.strip("\n")
    return out


def _head_key(head: str) -> str:
    """A heading without its parenthesised tail (the sizing table names its configuration)."""
    return head.split(" (", 1)[0]


def _row_key(line: str) -> str:
    return line.strip().strip("|").split("|")[0].strip().replace(_UNTIMED, "")


def _merge_rows(new_body: str, old_body: str) -> str:
    new_lines = new_body.strip("\n").splitlines()
    old_lines = [x for x in old_body.strip("\n").splitlines() if x.startswith("|")]
    if len(old_lines) < 2 or new_lines[:1] != old_lines[:1]:  # other columns: keep new only
        return new_body
    have = {_row_key(x) for x in new_lines[2:]}
    kept = [x for x in old_lines[2:] if _row_key(x) not in have]
    return "\n".join(new_lines + kept)


def carry_over(tables: list[str], old_text: str) -> list[str]:
    """``tables`` (this run's sections) merged into the committed file ``old_text``.

    Sections keep the committed file's order; a keyed table (:data:`KEYED`) gets the
    committed rows whose data set and index this run did not measure; a section this run
    did not produce is kept as committed; new sections come last.
    """
    new = {}
    for t in tables:
        head, _, body = t.partition("\n")
        new[_head_key(head.strip())] = (head.strip(), body.strip("\n"))
    out = []
    for head, body in _sections(old_text).items():
        if _head_key(head) in new:
            head, nb = new.pop(_head_key(head))
            if head.startswith(KEYED):
                nb = _merge_rows(nb, body)
            out.append(f"{head}\n\n{nb}")
        else:
            out.append(f"{head}\n\n{body}")
    out += [f"{head}\n\n{body}" for head, body in new.values()]
    return out
