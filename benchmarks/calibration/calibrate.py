"""Calibration (issue 18): wall time, fresh-query recall over random splits, the smart walk
against the exhaustive grid, the recall cost of cheaper rerank vectors, and sizing against
what a 1M-vector index measures on disk and in RAM under a memory cgroup.

Parts (each writes ``<workdir>/calibrate-<part>.json``; ``render`` turns them into
``benchmarks/results/calibrate.md``)::

    python benchmarks/calibration/calibrate.py shared    # both shared sets, flat and IVF
    python benchmarks/calibration/calibrate.py grid      # smart walk vs exhaustive grid, timed
    python benchmarks/calibration/calibrate.py stores    # recall of float32 / float16 / int8 rerank
    python benchmarks/calibration/calibrate.py synthetic # 1M x 384 clustered, IVF
    python benchmarks/calibration/calibrate.py sizing    # 1M: sizing vs disk and cgroup RSS (root)
    python benchmarks/calibration/calibrate.py render

Protocol. Target recall@10 >= 0.95 (the one-sided 95% bootstrap lower bound). *Wall time*:
one plain ``bbqlib.calibrate(base, queries[:200], ...)`` call, exact ground truth included.
*Splits*: the 1,000 queries are shuffled 20 times (seeds 0-19); calibration runs on 200 of
them (a :class:`bbqlib.calibration.Calibrator` keeps the encodes between splits; exact ground
truth from the data set's files), the chosen configuration is then built afresh
(``report.build()``, ``add(base)``) and searched with its defaults for the other 800; a
split passes when their mean recall@10 is >= target - 0.005. *Grid*: on the first splits
the same space is measured exhaustively (every point at every oversample and visit
budget) and its cheapest configuration's bytes per vector compared with the smart walk's.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent  # benchmarks/, on sys.path instead of HERE (see common.py)
sys.path[:] = [str(BENCH), *(p for p in sys.path if Path(p or ".").resolve() != HERE)]

import common  # noqa: E402

import bbqlib  # noqa: E402
from bbqlib.analysis.recall import recall_per_query  # noqa: E402
from bbqlib.calibration import Calibrator  # noqa: E402

TARGET = 0.95
K = 10
SPLITS = 20
CAL_QUERIES = 200
SLACK = 0.005
MB = 1 << 20


def uptime() -> str:
    return os.getloadavg().__repr__()


def _dump(workdir: Path, part: str, data: dict) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / f"calibrate-{part}.json").write_text(json.dumps(data, indent=1, default=str))


def _load(workdir: Path, part: str) -> dict | None:
    path = workdir / f"calibrate-{part}.json"
    return json.loads(path.read_text()) if path.exists() else None


def _config_key(c) -> tuple:
    return (c.index, c.family, c.bits, c.query_bits, str(c.precondition), str(c.store_vectors),
            c.oversample, c.visit_percentage)  # fmt: skip


def _summary(c) -> dict:
    if c is None:
        return {"label": None}
    return {"label": c.label(), "bytes_per_vector": c.bytes_per_vector, "recall": c.recall,
            "recall_low": c.recall_low, "latency_ms": c.latency_ms}  # fmt: skip


def fresh_recall(index, queries, gt_ids, gt_scores) -> float:
    _, ids = index.search(queries, K)
    return float(recall_per_query(ids, gt_ids, K, gt_scores=gt_scores).mean())


def run_splits(base, queries, gt_ids, gt_scores, similarity, kind, *, splits, grid_splits,
               log, cluster_size=384, built=None, progress=None):  # fmt: skip
    """Calibrate on 200 queries, measure on the other 800, ``splits`` times.

    The exhaustive grids (on the first ``grid_splits`` splits) run after every split, so a
    long grid never holds the splits back; ``progress(rows)`` is called after each step.
    """
    cal = Calibrator(base, similarity=similarity, index=kind, cluster_size=cluster_size,
                     progress=False)  # fmt: skip
    built = {} if built is None else built
    rows = []
    perms = [np.random.default_rng(s).permutation(len(queries)) for s in range(splits)]
    for s, perm in enumerate(perms):
        c_q, t_q = perm[:CAL_QUERIES], perm[CAL_QUERIES:]
        t0 = time.perf_counter()
        rep = cal.run(queries[c_q], k=K, target_recall=TARGET,
                      ground_truth=(gt_ids[c_q], gt_scores[c_q]))  # fmt: skip
        seconds = time.perf_counter() - t0
        row = {"split": s, "seconds": seconds, "candidates": len(rep.candidates),
               "load": uptime(), **_summary(rep.chosen)}  # fmt: skip
        if rep.chosen is not None:
            key = _config_key(rep.chosen)
            if key not in built:
                t1 = time.perf_counter()
                index = rep.build()
                index.add(base)
                built[key] = index
                row["build_seconds"] = time.perf_counter() - t1
            row["fresh_recall"] = fresh_recall(built[key], queries[t_q], gt_ids[t_q],
                                               gt_scores[t_q])  # fmt: skip
            row["passes"] = row["fresh_recall"] >= TARGET - SLACK
        log(f"{kind} split {s}: {row}")
        rows.append(row)
        if progress is not None:
            progress(rows)
    built.clear()
    for s, perm in enumerate(perms[:grid_splits]):
        c_q = perm[:CAL_QUERIES]
        t1 = time.perf_counter()
        grid = cal.run(queries[c_q], k=K, target_recall=TARGET, search="grid",
                       ground_truth=(gt_ids[c_q], gt_scores[c_q]))  # fmt: skip
        row = rows[s]
        row["grid_seconds"] = time.perf_counter() - t1
        row["grid_load"] = uptime()
        row["grid_candidates"] = len(grid.candidates)
        row["grid"] = _summary(grid.chosen)
        log(f"{kind} grid {s}: {row['grid']} in {row['grid_seconds']:.0f} s")
        if progress is not None:
            progress(rows)
    return rows


# ----------------------------------------------------------------------------- parts
def part_shared(args) -> None:
    out = _load(args.workdir, "shared") or {}
    for name in args.datasets:
        ds = common.load_dataset(name, n_queries=None)
        gt_ids, gt_scores = ds.gt_ids.astype(np.int64), ds.gt_scores
        for kind in args.indexes:
            key = f"{name} {kind}"
            log = _logger(key)
            grid_splits = args.grid_splits if (kind == "flat" or "spacy" in name) else \
                args.grid_splits_ivf_minilm  # fmt: skip
            out[key] = {**out.get(key, {}), "n": ds.n, "d": ds.d, "similarity": ds.similarity,
                        "splits": []}  # fmt: skip
            if not args.no_wall:  # the timed call (run it under the benchmark lock)
                t0, c0 = time.perf_counter(), time.process_time()
                rep = bbqlib.calibrate(ds.base, ds.queries[:CAL_QUERIES], k=K, index=kind,
                                       similarity=ds.similarity, target_recall=TARGET)  # fmt: skip
                wall, cpu = time.perf_counter() - t0, time.process_time() - c0
                log(f"wall {wall:.1f} s: {rep.chosen and rep.chosen.label()}")
                out[key].update(wall_seconds=wall, cpu_seconds=cpu, wall_load=uptime(),
                                wall_timings=rep.timings, wall_candidates=len(rep.candidates),
                                wall_chosen=_summary(rep.chosen),
                                wall_table=rep.table("markdown"))  # fmt: skip

            def progress(rows, key=key):
                out[key]["splits"] = rows
                _dump(args.workdir, "shared", out)

            progress([])
            run_splits(ds.base, ds.queries, gt_ids, gt_scores, ds.similarity, kind,
                       splits=args.splits, grid_splits=grid_splits, log=log,
                       progress=progress)  # fmt: skip


def part_grid(args) -> None:
    """Smart walk against the exhaustive grid on the same 200 queries (split 0's), timed.

    Each search runs on a fresh :class:`Calibrator` (nothing shared: the grid's time is what
    a user would wait), ground truth from the data set's files for both. First, untimed, a
    grid on 1,000 of the vectors loads (or compiles) every kernel the space uses, so
    the first timed search does not pay for it alone.
    """
    out = _load(args.workdir, "grid") or {}
    for name in args.datasets:
        ds = common.load_dataset(name, n_queries=None)
        gt_ids, gt_scores = ds.gt_ids.astype(np.int64), ds.gt_scores
        c_q = np.random.default_rng(0).permutation(len(ds.queries))[:CAL_QUERIES]
        gt = (gt_ids[c_q], gt_scores[c_q])
        for kind in args.indexes:
            key = f"{name} {kind}"
            row = {"n": ds.n, "d": ds.d, **out.get(key, {})}
            if args.warm_up:  # load every kernel first, so neither search pays for it
                t0 = time.perf_counter()
                sub = np.asarray(ds.base[:: max(1, ds.n // 1000)][:1000])
                Calibrator(sub, similarity=ds.similarity, index=kind, progress=False).run(
                    ds.queries[:10], k=K, target_recall=TARGET, search="grid"
                )
                row["warm_up_seconds"] = time.perf_counter() - t0  # wall, untimed
                print(f"[{key}] warm-up {row['warm_up_seconds']:.1f} s", flush=True)
            for search in args.searches:
                cal = Calibrator(ds.base, similarity=ds.similarity, index=kind, progress=False)
                load0 = uptime()
                t0, c0 = time.perf_counter(), time.process_time()
                rep = cal.run(ds.queries[c_q], k=K, target_recall=TARGET, search=search,
                              ground_truth=gt)  # fmt: skip
                row[search] = {"seconds": time.perf_counter() - t0,
                               "cpu_seconds": time.process_time() - c0,
                               "load_before": load0, "load_after": uptime(),
                               "candidates": len(rep.candidates),
                               **_summary(rep.chosen)}  # fmt: skip
                print(f"[{key}] {search}: {row[search]}", flush=True)
                del cal, rep
            out[key] = row
            _dump(args.workdir, "grid", out)


def part_stores(args) -> None:
    """Recall@10 of the same codes reranked on float32, float16 and int8 vectors."""
    out = []
    for name in ("spacy-wordvec-300", "debian-minilm-384"):
        ds = common.load_dataset(name, n_queries=None)
        gt_ids, gt_scores = ds.gt_ids.astype(np.int64), ds.gt_scores
        for kind in ("flat",):  # IVFIndex keeps float32 vectors only (for now)
            for over in (2.0, 5.0, 10.0):
                row = {"data": name, "index": kind, "oversample": over}
                for store in ("float32", "float16", "int8"):
                    if kind == "flat":
                        index = bbqlib.FlatIndex(bits=1, similarity=ds.similarity,
                                                 store_vectors=store, oversample=over)  # fmt: skip
                    else:
                        index = bbqlib.IVFIndex(bits=1, similarity=ds.similarity, seed=0,
                                                store_vectors=store, oversample=over,
                                                visit_percentage=10.0)  # fmt: skip
                    index.add(ds.base)
                    row[store] = fresh_recall(index, ds.queries, gt_ids, gt_scores)
                print(row, flush=True)
                out.append(row)
    _dump(args.workdir, "stores", {"rows": out})


def _synthetic(args):
    from common import make_clustered

    d = args.workdir
    paths = [d / f"synth1m_{x}.npy" for x in ("base", "queries", "gt_ids", "gt_scores")]
    if not all(p.exists() for p in paths):
        X = make_clustered(args.n + 1000, 384, 1000, seed=0)
        np.save(paths[0], X[: args.n])
        np.save(paths[1], X[args.n :])
        from bbqlib.analysis.ground_truth import exact_knn

        scores, ids = exact_knn(
            np.load(paths[0], mmap_mode="r"), X[args.n :], 20, "cosine", scores_first=True
        )
        np.save(paths[2], ids)
        np.save(paths[3], scores)
    base = np.load(paths[0], mmap_mode="r")
    return base, *(np.load(p) for p in paths[1:])


def part_synthetic(args) -> None:
    base, queries, gt_ids, gt_scores = _synthetic(args)
    out = _load(args.workdir, "synthetic") or {}
    log = _logger("1M ivf")
    if "wall_seconds" not in out:
        t0, c0 = time.perf_counter(), time.process_time()
        rep = bbqlib.calibrate(base, queries[:CAL_QUERIES], similarity="cosine", k=K,
                               target_recall=TARGET, index="ivf", progress=True)  # fmt: skip
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        out.update(wall_seconds=wall, cpu_seconds=cpu, wall_load=uptime(), wall_timings=rep.timings,
                   wall_candidates=len(rep.candidates), wall_chosen=_summary(rep.chosen),
                   wall_table=rep.table("markdown"), chosen_code=rep.chosen and rep.chosen.code(),
                   chosen=rep.chosen and rep.chosen.__dict__)  # fmt: skip
        _dump(args.workdir, "synthetic", out)
        del rep
    if args.splits:
        rows = run_splits(base, queries, gt_ids, gt_scores, "cosine", "ivf", splits=args.splits,
                          grid_splits=0, log=log)  # fmt: skip
        out["splits"] = rows
        _dump(args.workdir, "synthetic", out)


# ----------------------------------------------------------------------------- sizing
def _smaps(pid: int) -> dict:
    """Resident bytes per mapped file (and anonymous) of a process."""
    out: dict = {}
    name = "[anon]"
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 5 and "-" in parts[0] and ":" in parts[3]:
                name = parts[5] if len(parts) >= 6 else "[anon]"
            elif parts[0] == "Rss:":
                out[name] = out.get(name, 0) + int(parts[1]) * 1024
    return out


def serve(args) -> int:
    """Child: warm up, report ready RSS, wait, open the index, serve, report RSS by file."""
    from bbqlib._kernels.threads import limited_threads

    queries = np.load(args.queries)
    warm = bbqlib.load(args.warm)
    warm.search(queries[:2], K)
    if isinstance(warm, bbqlib.IVFIndex):
        warm.search(queries[:2], K, visit_percentage=100.0, rerank=False)
    del warm
    import gc

    gc.collect()
    print(json.dumps({"ready": _smaps(os.getpid())}), flush=True)
    if sys.stdin.readline().strip() != "go":
        return 1
    with limited_threads(1):
        if args.kind == "ivf":
            index = bbqlib.IVFIndex.open(args.index)
            index.search(queries[:4], K, visit_percentage=100.0, rerank=False)  # every list
        else:
            index = bbqlib.FlatIndex.load(args.index, mmap=False)
        t0 = time.perf_counter()
        for i in range(len(queries)):
            index.search(queries[i : i + 1], K)
        ms = 1000 * (time.perf_counter() - t0) / len(queries)
    print(json.dumps({"served": _smaps(os.getpid()), "latency_ms": ms}), flush=True)
    return 0


def _measure_serving(kind, index_path, warm_path, queries_path, cap_mb) -> dict:
    from ivf.memory import CGROUP_ROOT, _cg_read, _cg_write, drop_caches

    drop_caches()
    cmd = [sys.executable, __file__, "serve", "--kind", kind, "--index", str(index_path),
           "--warm", str(warm_path), "--queries", str(queries_path)]  # fmt: skip
    child = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    cg = CGROUP_ROOT / f"bbqlib_calib_{kind}_{os.getpid()}"
    try:
        ready = json.loads(child.stdout.readline())["ready"]
        drop_caches()
        cg.mkdir()
        _cg_write(cg, "cgroup.procs", child.pid)
        _cg_write(cg, "memory.limit_in_bytes", cap_mb * MB)
        child.stdin.write("go\n")
        child.stdin.flush()
        line = child.stdout.readline()
        child.wait()
        if not line:
            return {"status": "died (OOM?)", "cap_mb": cap_mb}
        served = json.loads(line)
        peak = int(_cg_read(cg, "memory.max_usage_in_bytes"))
        return {"status": "ok", "cap_mb": cap_mb, "ready": ready, "served": served["served"],
                "latency_ms": served["latency_ms"], "cgroup_peak": peak}  # fmt: skip
    finally:
        if child.poll() is None:
            child.kill()
        if cg.exists():
            cg.rmdir()


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in Path(path).iterdir() if f.is_file())


def _small_scale(base, queries, chosen, fields, n_small: int):
    """The chosen IVF configuration built on a seeded ``n_small`` subsample and measured
    there (list shape, build time, single-thread latency): what ``sizing`` scales from.
    Returns it as measured (no list density point) and with the list density rule's
    point for ``len(base)`` (``bbqlib.calibration.density.entries_at``, timed)."""
    from bbqlib._validation import prepare_for_similarity
    from bbqlib.calibration import Configuration
    from bbqlib.calibration.density import entries_at
    from bbqlib.calibration.measure import timed_search
    from bbqlib.similarity import resolve_similarity

    rows = np.sort(np.random.default_rng(0).choice(base.shape[0], n_small, replace=False))
    sub = np.asarray(base[rows])
    t0 = time.perf_counter()
    index = chosen.build()
    index.add(sub)
    build = time.perf_counter() - t0
    index.search(queries[:2], K)
    _, seconds = timed_search(index, queries[:CAL_QUERIES], K)
    epv = len(index._postings) / n_small
    vpl = n_small / index.n_lists
    plain = Configuration(**{**fields, "n_measured": n_small, "entries_per_vector": epv,
                             "vectors_per_list": vpl, "build_seconds": build,
                             "latency_ms": 1000.0 * seconds / CAL_QUERIES,
                             "entries_at": ()})  # fmt: skip
    W = prepare_for_similarity(sub, resolve_similarity(chosen.similarity), "X")
    t0 = time.perf_counter()
    at = entries_at(W, base.shape[0], chosen.cluster_size, seed=chosen.seed)
    density_seconds = time.perf_counter() - t0
    return plain, Configuration(**{**plain.__dict__, "entries_at": (at,)}), density_seconds


def part_sizing(args) -> None:
    """Build the 1M calibrated configuration (IVF on disk, and its flat twin) and measure."""
    base, queries, gt_ids, gt_scores = _synthetic(args)
    syn = _load(args.workdir, "synthetic")
    if not syn or not syn.get("chosen"):
        raise SystemExit("run the synthetic part first (it records the chosen configuration)")
    from bbqlib.calibration import Configuration

    fields = dict(syn["chosen"])
    fields.pop("extra", None)
    fields["recall_ci"] = tuple(fields["recall_ci"])
    chosen = Configuration(**fields)
    wd = args.workdir
    qpath = wd / "serve_queries.npy"
    np.save(qpath, queries[200:700])
    out = {"config": chosen.label(), "rows": []}
    import shutil

    fields["entries_at"] = ()
    chosen = Configuration(**fields)
    scaled, ruled, density_s = _small_scale(base, queries, chosen, fields, args.small)
    out["small"] = {"n": args.small, "entries_per_vector": scaled.entries_per_vector,
                    "vectors_per_list": scaled.vectors_per_list,
                    "build_seconds": scaled.build_seconds,
                    "latency_ms": scaled.latency_ms, "entries_at": ruled.entries_at,
                    "density_seconds": density_s, "load": uptime()}  # fmt: skip
    print("small-scale run:", out["small"], flush=True)

    for kind in ("ivf", "flat"):
        c = chosen if kind == "ivf" else Configuration(**{**fields, "index": "flat",
                                                          "visit_percentage": None})  # fmt: skip
        path = wd / f"sized-{kind}"
        warm = wd / f"warm-{kind}"
        for p in (path, warm):
            if p.exists():
                shutil.rmtree(p) if p.is_dir() else p.unlink()
        t0 = time.perf_counter()
        batch_ms = None
        if kind == "ivf":
            index = c.build(path=path)
            index.add(base)
            disk = _dir_bytes(path)
            build = time.perf_counter() - t0
            from bbqlib.calibration.measure import timed_search

            index.search(queries[:2], K)
            _, seconds = timed_search(index, queries[:CAL_QUERIES], K)
            batch_ms = 1000.0 * seconds / CAL_QUERIES
            small = c.build(path=warm)
            small.add(np.asarray(base[:5000]))
        else:
            index = c.build()
            index.add(base)
            path = index.save(wd / "sized-flat.bbq")
            disk = path.stat().st_size
            build = time.perf_counter() - t0
            small = c.build()
            small.add(np.asarray(base[:5000]))
            warm = small.save(wd / "warm-flat.bbq")
        del index, small
        size = bbqlib.sizing(base.shape[0], base.shape[1], c)

        def flat_twin(x):  # bytes only (no flat timing)
            return Configuration(**{
                **x.__dict__, "index": "flat", "visit_percentage": None, "latency_ms": None,
                "build_seconds": None, "entries_per_vector": None, "vectors_per_list": None,
                "entries_at": ()})  # fmt: skip

        c_small = scaled if kind == "ivf" else flat_twin(scaled)
        c_ruled = ruled if kind == "ivf" else flat_twin(ruled)
        size_small = bbqlib.sizing(base.shape[0], base.shape[1], c_small)
        size_ruled = bbqlib.sizing(base.shape[0], base.shape[1], c_ruled)
        m = _measure_serving(kind, path, warm, qpath, args.cap_mb)
        row = {"index": kind, "build_seconds": build, "disk": disk, "sizing": size.__dict__,
               "sizing_small": size_small.__dict__, "sizing_rule": size_ruled.__dict__,
               "batch_latency_ms": batch_ms, "serving": m, "load": uptime()}  # fmt: skip
        print(json.dumps(row, default=str)[:2000], flush=True)
        out["rows"].append(row)
        _dump(wd, "sizing", out)


# ----------------------------------------------------------------------------- render
def _logger(prefix: str):
    def log(message):
        print(f"[{prefix}] {message}", flush=True)

    return log


def _merge_shared(found: list[dict]) -> dict:
    """One entry per data set and index from several runs: the timed call's fields from the
    newest run that has them, the splits of the run with the most splits."""
    out: dict = {}
    for part in found:
        for key, r in part.items():
            cur = out.setdefault(key, {"splits": []})
            if "wall_seconds" in r:
                cur.update({k: v for k, v in r.items() if k != "splits"})
            else:
                cur.update({k: v for k, v in r.items() if k not in ("splits",) and k not in cur})
            if len(r.get("splits", [])) >= len(cur["splits"]):
                cur["splits"] = r.get("splits", [])
    return out


def render(args) -> None:
    from calibration.render import NOTES, carry_over, render_markdown

    parts = {p: _load(args.workdir, p) for p in ("stores", "synthetic", "sizing", "grid")}
    found = [_load(args.workdir, "shared") or {}]
    for sub in sorted(p for p in args.workdir.iterdir() if p.is_dir()):
        found.append(_load(sub, "shared") or {})  # parts run in their own workdirs
        parts["grid"] = {**(parts["grid"] or {}), **(_load(sub, "grid") or {})}
    for extra in args.shared_json or ():
        found.insert(0, json.loads(Path(extra).read_text()))  # earlier runs first
    parts["shared"] = _merge_shared(found)
    tables, notes = render_markdown(parts, TARGET, SLACK)
    if args.carry:  # keep the committed rows and tables this run did not measure
        tables = carry_over(tables, Path(args.carry).read_text())
    common.write_result(
        BENCH / "results" / "calibrate.md",
        "Calibration: the cheapest configuration meeting recall@10 >= 0.95, measured",
        "python benchmarks/calibration/calibrate.py stores --workdir W\n"
        "python benchmarks/calibration/calibrate.py shared --datasets spacy-wordvec-300 "
        "--grid-splits 0 --workdir W/spacy   # and --indexes ivf, --workdir W/spacy_ivf\n"
        "python benchmarks/calibration/calibrate.py shared --datasets debian-minilm-384 "
        "--indexes flat --no-wall --grid-splits 0 --workdir W/debian20\n"
        "python benchmarks/calibration/calibrate.py shared --datasets debian-minilm-384 "
        "--indexes ivf --no-wall --grid-splits-ivf-minilm 0 --workdir W/debian20ivf\n"
        "flock $LOCKS/bench.lock python benchmarks/calibration/calibrate.py synthetic "
        "--splits 0 --workdir W\n"
        "flock $LOCKS/bench.lock python benchmarks/calibration/calibrate.py grid "
        "--datasets D --indexes I --workdir W/grid   # one hold per data set and index\n"
        "python benchmarks/calibration/calibrate.py sizing --workdir W   # root: cgroup v1\n"
        "python benchmarks/calibration/calibrate.py render --workdir W "
        "[--shared-json earlier.json ...] [--carry benchmarks/results/calibrate.md]",
        tables,
        [*NOTES, *notes],
    )


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("part", choices=("shared", "grid", "stores", "synthetic", "sizing",
                                    "render", "serve"))  # fmt: skip
    p.add_argument("--workdir", type=Path, default=Path("/tmp/bbqlib-calibrate"))
    p.add_argument("--splits", type=int, default=SPLITS)
    p.add_argument("--grid-splits", type=int, default=3)
    p.add_argument("--grid-splits-ivf-minilm", type=int, default=1)
    p.add_argument("--indexes", nargs="+", default=["flat", "ivf"])
    p.add_argument("--datasets", nargs="+", default=["spacy-wordvec-300", "debian-minilm-384"])
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument(
        "--no-wall",
        action="store_true",
        help="shared: skip the timed calibration, run only the splits and grids",
    )
    p.add_argument("--cap-mb", type=int, default=4096)
    p.add_argument(
        "--searches",
        nargs="+",
        default=["smart", "grid"],
        help="grid: which searches (full-grid: every bytes group)",
    )
    p.add_argument(
        "--no-warm-up",
        dest="warm_up",
        action="store_false",
        help="grid: skip the untimed grid on 1,000 vectors that loads every kernel "
        "before the timed searches",
    )
    p.add_argument("--shared-json", nargs="*", help="render: earlier shared results")
    p.add_argument(
        "--carry",
        help="render: the committed results file whose rows and tables this run did not "
        "measure are kept",
    )
    p.add_argument("--small", type=int, default=100_000, help="sizing: small-scale n")
    p.add_argument("--kind", default="ivf")
    p.add_argument("--index")
    p.add_argument("--warm")
    p.add_argument("--queries")
    args = p.parse_args()
    parts = {"shared": part_shared, "grid": part_grid, "stores": part_stores,
             "synthetic": part_synthetic, "sizing": part_sizing, "render": render,
             "serve": serve}  # fmt: skip
    return parts[args.part](args) or 0


if __name__ == "__main__":
    sys.exit(main())
