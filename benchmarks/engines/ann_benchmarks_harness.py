"""bbqlib in the real ann-benchmarks harness, next to the harness's own hnswlib and faiss IVF.

Every step is the harness's code (erikbern/ann-benchmarks at f402b2c, ``../shared/peers``),
run in a subprocess as a contributor runs it:

1. copy ``../shared/peers/ann-benchmarks`` to ``--workdir``;
2. ``python -m bbqlib ann-benchmarks-plugin WORKDIR`` (module.py, config.yml, Dockerfile);
3. register debian-minilm-384 as an angular data set (train = ``base.npy``, test = the first
   ``--queries`` queries; neighbours and distances by the harness's ``write_output``);
4. fill numba's cache as the plugin's Docker image does when it is built (``warm_up()``);
5. ``run_algorithm.py`` (what the Docker image runs) for every bbqlib definition of the
   plugin's config.yml and the chosen hnswlib / faiss-ivf definitions of the harness's own
   config.yml files, one process at a time, ``--runs R --count 10``;
6. ``data_export.py`` scores them; this script writes its rows as markdown.

``--cold`` instead measures the first query with an empty numba cache (``NUMBA_CACHE_DIR``
pointing at a new empty folder for each process): the first entry of the harness's stored
per-query ``times``. ``--before REV`` adds the same runs of bbqlib as it was at git revision
REV, through the glue the issue describes (a module.py and ``BaseANN.get_memory_usage``),
interleaved with the current code.

Usage (from the repository root)::

    python benchmarks/engines/ann_benchmarks_harness.py             # the table, ~1 h on 2 cores
    python benchmarks/engines/ann_benchmarks_harness.py --quick     # 100 queries, a few runs
    python benchmarks/engines/ann_benchmarks_harness.py --cold --before 97db595

Writes ``benchmarks/results/ann_benchmarks.md`` (``ann_benchmarks_cold.md`` with ``--cold``).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent  # benchmarks/, on sys.path instead of HERE (see common.py)
sys.path[:] = [str(BENCH), *(p for p in sys.path if Path(p or ".").resolve() != HERE)]

import common  # noqa: E402

from bbqlib.integrations.ann_benchmarks_plugin import MODULE, register_dataset  # noqa: E402

REPO = common.repo_root()
PEERS = Path(os.environ.get("BBQLIB_PEERS", REPO.parent / "shared" / "peers"))
DATASET = "debian-minilm-384-angular"

#: Peers from the harness's own config.yml files: algorithm name -> keep(build arguments).
#: faiss-ivf at n_list 1024 fails in the harness here: with nprobe 1 some lists hold fewer than
#: 10 vectors, its wrapper returns faiss's -1 padding, and the runner's duplicate check stops.
PEER_DEFINITIONS = {
    "hnswlib": lambda args: args[1]["M"] == 16,
    "faiss-ivf": lambda args: args[1] == 256,
}
#: --quick: (algorithm, build arguments after the metric, query argument groups kept).
QUICK = [
    ("bbqlib-flat", [1], [[1], [3]]),
    ("bbqlib-ivf", [1, 384], [[2], [8]]),
    ("hnswlib", [{"M": 16, "efConstruction": 500}], [[20], [80]]),
]
#: --cold: (algorithm, constructor, build arguments, one query argument group).
COLD = [
    ("bbqlib-flat", "BBQFlat", ["angular", 1], [3]),
    ("bbqlib-ivf", "BBQIVF", ["angular", 1, 384], [8]),
    ("bbqlib-usearch", "BBQUSearch", ["angular", 1, 16, 128], [128]),
]
#: The issue's glue for the wrappers before it (their module path did not load, and
#: get_memory_usage returned None before fit).
BEFORE_GLUE = """from bbqlib.integrations import ann_benchmarks as _b

from ..base.module import BaseANN


class BBQFlat(_b.BBQFlat, BaseANN):
    get_memory_usage = BaseANN.get_memory_usage


class BBQIVF(_b.BBQIVF, BaseANN):
    get_memory_usage = BaseANN.get_memory_usage


class BBQUSearch(_b.BBQUSearch, BaseANN):
    get_memory_usage = BaseANN.get_memory_usage
"""

_DEFINITIONS = """
import json, sys
from ann_benchmarks.definitions import get_definitions
print(json.dumps([
    dict(algorithm=d.algorithm, module=d.module, constructor=d.constructor,
         arguments=d.arguments, query_args=d.query_argument_groups, disabled=d.disabled)
    for d in get_definitions(int(sys.argv[1]), "float", "angular", 10)
]))
"""


def _env(pythonpath: Path = REPO, **extra) -> dict:
    return {**os.environ, "PYTHONPATH": str(pythonpath), **extra}


def _python(args, cwd, env=None, log=None) -> str:
    done = subprocess.run(
        [sys.executable, *map(str, args)],
        cwd=cwd,
        env=env or _env(),
        capture_output=True,
        text=True,
    )
    if log is not None:
        log.write(done.stdout + done.stderr)
    if done.returncode:
        raise RuntimeError(f"{args} failed:\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}")
    return done.stdout


def _loadavg() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def prepare(workdir: Path, n_queries: int, resume: bool = False) -> Path:
    """Steps 1-3: the harness copy with the plugin and the data set.

    ``resume`` keeps an earlier copy, its data set and results (the plugin is written again).
    """
    source = PEERS / "ann-benchmarks"
    if not (source / "run_algorithm.py").is_file():
        raise SystemExit(f"ann-benchmarks source not found at {source} (set BBQLIB_PEERS)")
    root = workdir / "ann-benchmarks"
    if resume and (root / "data" / f"{DATASET}.hdf5").is_file():
        print(_python(["-m", "bbqlib", "ann-benchmarks-plugin", root], cwd=REPO), flush=True)
        return root
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(source, root, ignore=shutil.ignore_patterns(".git", "data", "results"))
    print(_python(["-m", "bbqlib", "ann-benchmarks-plugin", root], cwd=REPO), flush=True)
    data = common.DATA_DIR / "debian-minilm-384"
    train = np.load(data / "base.npy")
    test = np.load(data / "queries.npy")[:n_queries]
    print(f"writing {DATASET}: {train.shape} train, {test.shape} test", flush=True)
    register_dataset(root, DATASET, train, test, "angular")
    return root


def definitions(root: Path) -> list[dict]:
    """bbqlib's and the chosen peers' definitions, by the harness's own loader."""
    found = json.loads(_python(["-c", _DEFINITIONS, 384], cwd=root))
    keep = []
    for d in found:
        if d["module"] == MODULE or (
            d["algorithm"] in PEER_DEFINITIONS and PEER_DEFINITIONS[d["algorithm"]](d["arguments"])
        ):
            keep.append(d)
    return keep


def result_path(root: Path, d: dict, query_args) -> Path:
    """Where the harness stores one run (``ann_benchmarks.results.build_result_filepath``)."""
    data = re.sub(r"\W+", "_", json.dumps(d["arguments"] + query_args, sort_keys=True))
    return root / "results" / DATASET / "10" / d["algorithm"] / (data.strip("_") + ".hdf5")


def run_definition(root: Path, d: dict, query_args, runs: int, log, env=None) -> float:
    """Step 5 for one definition; returns its wall time."""
    t0 = time.perf_counter()
    _python(
        [
            "run_algorithm.py",
            *("--dataset", DATASET, "--algorithm", d["algorithm"]),
            *("--module", d["module"], "--constructor", d["constructor"]),
            *("--runs", runs, "--count", 10),
            json.dumps(d["arguments"]),
            *map(json.dumps, query_args),
        ],
        cwd=root,
        env=env,
        log=log,
    )
    return time.perf_counter() - t0


def result_attrs(root: Path) -> dict:
    """name -> attributes of each stored result (get_additional's values among them)."""
    import h5py

    out = {}
    for path in (root / "results" / DATASET / "10").glob("*/*.hdf5"):
        with h5py.File(path, "r") as f:
            attrs = dict(f.attrs)
            times = np.array(f["times"])
        attrs["first_ms"] = 1e3 * float(times[0])
        attrs["median_ms"] = 1e3 * float(np.median(times[1:] if len(times) > 1 else times))
        out[str(attrs["name"])] = attrs
    return out


def export(root: Path) -> list[dict]:
    """Step 6: the harness's data_export.py."""
    _python(["data_export.py", "--output", "export.csv"], cwd=root)
    with open(root / "export.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["dataset"] == DATASET]
    for r in rows:
        for key in ("k-nn", "qps", "p50", "p99", "build", "indexsize"):
            r[key] = float(r[key])
    return rows


def summary(rows: list[dict], floors=(0.90, 0.95)) -> list[dict]:
    """Fastest run of each algorithm reaching each recall floor, and its ratio to hnswlib's."""
    out = []
    best = {}
    for floor in floors:
        for algo in sorted({r["algorithm"] for r in rows}):
            ok = [r for r in rows if r["algorithm"] == algo and r["k-nn"] >= floor]
            top = max(ok, key=lambda r: r["qps"]) if ok else None
            best[(algo, floor)] = top
    for floor in floors:
        ref = best.get(("hnswlib", floor))
        for algo in sorted({r["algorithm"] for r in rows}):
            top = best[(algo, floor)]
            out.append(
                {
                    "floor": f">= {floor:.2f}",
                    "algorithm": algo,
                    "parameters": top["parameters"] if top else "not reached",
                    "recall": top["k-nn"] if top else None,
                    "qps": top["qps"] if top else None,
                    "vs": top["qps"] / ref["qps"] if top and ref else None,
                    "p50": top["p50"] if top else None,
                    "vs50": ref["p50"] / top["p50"] if top and ref else None,
                    "indexsize": top["indexsize"] if top else None,
                }
            )
    return out


def run_table(args) -> int:
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    load_start = _loadavg()
    t_start = time.perf_counter()
    root = prepare(workdir, args.queries, resume=args.resume)
    # Step 4: numba's cache filled once, as `docker build` does for the plugin's image.
    t0 = time.perf_counter()
    _python(
        ["-c", "from bbqlib.integrations.ann_benchmarks_plugin import warm_up; warm_up()"], cwd=root
    )
    warm = time.perf_counter() - t0
    todo = definitions(root)
    if args.quick:
        quick = {(a, json.dumps(b)): q for a, b, q in QUICK}
        todo = [
            dict(d, query_args=quick[key])
            for d in todo
            if (key := (d["algorithm"], json.dumps(d["arguments"][1:]))) in quick
        ]
    walls = []
    with open(workdir / "run.log", "a") as log:
        for d in todo:
            if args.resume and all(result_path(root, d, q).is_file() for q in d["query_args"]):
                print(f"{d['algorithm']} {d['arguments']}: results kept", flush=True)
                continue
            print(f"{d['algorithm']} {d['arguments']} ({_loadavg()})", flush=True)
            wall = run_definition(root, d, d["query_args"], args.runs, log)
            walls.append((d["algorithm"], d["arguments"], wall))
    rows = export(root)
    attrs = result_attrs(root)
    for r in rows:
        a = attrs.get(r["parameters"], {})
        r["bpv"] = a.get("index_bytes_per_vector")
        r["warm_kb"] = a.get("warm_up_kb")
        r["first_ms"] = a.get("first_ms")
    rows.sort(key=lambda r: (r["algorithm"], r["parameters"].split("(")[0], -r["qps"]))
    columns = [
        ("algorithm", "algorithm"),
        ("parameters", "parameters (str(algo))"),
        ("k-nn", "recall@10", ".3f"),
        ("qps", "QPS", ",.0f"),
        ("p50", "p50 ms", ".2f"),
        ("p99", "p99 ms", ".2f"),
        ("build", "build s", ".1f"),
        ("indexsize", "index size kB", ",.0f"),
        ("bpv", "bbqlib code B/vector", ".1f"),
        ("warm_kb", "bbqlib kernels kB", ",.0f"),
    ]
    n_queries = "all" if args.queries >= 1000 else f"the first {args.queries} of the"
    tables = [
        f"### {DATASET} (n = 60,710, d = 384, {n_queries} 1,000 held-out queries, "
        f"k = 10, --runs {args.runs})\n\n"
        "Summary: the fastest run (data_export.py's QPS, the mean over the queries of the best "
        "run) of each algorithm at a recall floor, its QPS ratio to hnswlib's fastest run at the "
        "same floor, and the ratio of their median latencies (p50, steadier than the mean on a "
        "loaded machine); same process layout, same machine, same hour.\n\n"
        + common.markdown_table(
            summary(rows),
            [
                ("floor", "recall@10"),
                ("algorithm", "algorithm"),
                ("parameters", "fastest run"),
                ("recall", "recall", ".3f"),
                ("qps", "QPS", ",.0f"),
                ("vs", "vs hnswlib", ".2f"),
                ("p50", "p50 ms", ".2f"),
                ("vs50", "p50 speed vs hnswlib", ".2f"),
                ("indexsize", "index size kB", ",.0f"),
            ],
        ),
        "Every run, as data_export.py scores it (columns `k-nn`, `qps`, `p50`, `p99`, `build`, "
        "`indexsize`; the last two columns are bbqlib's get_additional values stored in the "
        "harness's result files):\n\n" + common.markdown_table(rows, columns),
    ]
    lscpu = subprocess.run(["lscpu"], capture_output=True, text=True).stdout.splitlines()[:10]
    notes = [
        "Harness: erikbern/ann-benchmarks at f402b2c (../shared/peers), copied unmodified; "
        "bbqlib added by `python -m bbqlib ann-benchmarks-plugin`, the data set by "
        "bbqlib.integrations.ann_benchmarks_plugin.register_dataset (the harness's write_output, "
        "one DATASETS entry appended to ann_benchmarks/datasets.py).",
        "Each definition ran as `python run_algorithm.py --dataset "
        f"{DATASET} --algorithm NAME --module M --constructor C --runs {args.runs} --count 10 "
        "BUILD_ARGS QUERY_ARGS...` (what the harness's Docker image runs; no Docker here), one "
        "process at a time, single queries (no --batch). Scores, QPS (best of the runs), "
        "latencies and index size are data_export.py's.",
        "Peers are the harness's own wrappers and configs: hnswlib (M 16, efConstruction "
        "500; its wrapper builds on all threads and queries on one) and faiss-ivf (n_list 256, "
        "IndexIVFFlat; faiss's OpenMP threads untouched by its wrapper). faiss-ivf at n_list "
        "1024 stops in the harness: at nprobe 1 some lists hold fewer than 10 vectors, its "
        "wrapper returns faiss's -1 padding and the runner's duplicate check fails.",
        "Index size is the harness's measure: the process's resident-set growth over fit, in "
        "kB. For bbqlib it includes the float vectors kept for the exact rerank (60,710 x 384 "
        "x 4 B = 91,066 kB for angular, a normalized copy) and numba's kernels "
        "(`bbqlib kernels kB`, loaded inside fit by the warm-up), next to the codes "
        "(`bbqlib code B/vector` x n). hnswlib's includes its float vectors and graph.",
        f"numba's cache was filled before the runs ({warm:.0f} s), as the plugin's Dockerfile "
        "does at image build; --cold measures a first query with an empty cache.",
        f"load average at start {load_start}, at end {_loadavg()} (2 cores, shared with other "
        "sessions: QPS ratios within this run are the figures to compare).",
        "lscpu | head: " + "; ".join(" ".join(line.split()) for line in lscpu),
        "wall time per definition (s): "
        + ", ".join(f"{a} {b[1:]} {w:.0f}" for a, b, w in walls)
        + f"; total {time.perf_counter() - t_start:.0f} s",
    ]
    cmd = "python benchmarks/engines/ann_benchmarks_harness.py" + (" --quick" if args.quick else "")
    if args.queries != 1000 and not args.quick:
        cmd += f" --queries {args.queries}"
    if args.runs != 3:
        cmd += f" --runs {args.runs}"
    if args.resume:
        cmd += "  # --resume: results of an interrupted run kept, the missing ones run"
    out = Path(args.out) / ("ann_benchmarks_quick.md" if args.quick else "ann_benchmarks.md")
    md = common.write_result(
        out,
        "bbqlib in the real ann-benchmarks harness (run_algorithm.py + data_export.py)",
        cmd,
        tables,
        notes,
    )
    print(md)
    return 0


# ----------------------------------------------------------------------------- --cold
def _old_checkout(rev: str, into: Path) -> Path:
    """bbqlib's files at ``rev`` (git archive), for the --before runs."""
    archive = into / "before.tar"
    with open(archive, "wb") as f:
        subprocess.run(["git", "archive", rev], cwd=REPO, stdout=f, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "before", filter="data")
    return into / "before"


def run_cold(args) -> int:
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    load_start = _loadavg()
    root = prepare(workdir, args.queries)
    variants = [("after", REPO, MODULE)]
    if args.before:
        old = _old_checkout(args.before, workdir)
        glue = root / "ann_benchmarks" / "algorithms" / "bbqlib_before"
        glue.mkdir()
        (glue / "module.py").write_text(BEFORE_GLUE)
        variants.insert(0, ("before", old, "ann_benchmarks.algorithms.bbqlib_before"))
    rows = []
    with open(workdir / "cold.log", "w") as log:
        for repeat in range(args.repeats):
            for algorithm, constructor, build, query in COLD:
                for label, path, module in variants:
                    cache = Path(tempfile.mkdtemp(prefix="numba-cache-"))
                    d = dict(
                        algorithm=f"{algorithm}-{label}-{repeat}",
                        module=module,
                        constructor=constructor,
                        arguments=build,
                    )
                    env = _env(path, NUMBA_CACHE_DIR=str(cache))
                    print(f"{d['algorithm']} ({_loadavg()})", flush=True)
                    run_definition(root, d, [query], 1, log, env=env)
                    shutil.rmtree(cache)
                    rows.append((algorithm, label, repeat))
    attrs = result_attrs(root)
    table = []
    for a in attrs.values():
        algo = str(a["algo"])
        base, label, repeat = algo.rsplit("-", 2)
        table.append(
            {
                "algorithm": base,
                "code": label,
                "repeat": int(repeat),
                "name": a["name"],
                "build": a["build_time"],
                "first": a["first_ms"],
                "median": a["median_ms"],
                "size": a["index_size"],
            }
        )
    table.sort(key=lambda r: (r["algorithm"], r["repeat"], r["code"]))
    md_table = (
        f"### First query with an empty numba cache ({DATASET}, first {args.queries} queries)\n\n"
        + common.markdown_table(
            table,
            [
                ("algorithm", "algorithm"),
                ("code", "bbqlib"),
                ("repeat", "repeat"),
                ("name", "run (str(algo))"),
                ("build", "build s", ".1f"),
                ("first", "first query ms", ",.1f"),
                ("median", "median of the others ms", ".2f"),
                ("size", "index size kB", ",.0f"),
            ],
        )
    )
    notes = [
        "Each run: `run_algorithm.py ... --runs 1` with NUMBA_CACHE_DIR set to a new empty "
        "folder; `first query` is times[0] of the harness's result file (the first timed "
        "query after fit), `median` the median of the other queries.",
        f"before = bbqlib at {args.before} through the issue's glue (module.py, "
        "BaseANN.get_memory_usage); after = this checkout's plugin. Runs interleaved."
        if args.before
        else "after = this checkout's plugin.",
        f"load average at start {load_start}, at end {_loadavg()} (2 shared cores).",
    ]
    cmd = "python benchmarks/engines/ann_benchmarks_harness.py --cold" + (
        f" --before {args.before}" if args.before else ""
    )
    cmd += f" --queries {args.queries} --repeats {args.repeats}"
    md = common.write_result(
        Path(args.out) / "ann_benchmarks_cold.md",
        "bbqlib in ann-benchmarks: the first query with an empty numba cache",
        cmd,
        md_table,
        notes,
    )
    print(md)
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=1000, help="first N of the 1,000 queries")
    ap.add_argument("--runs", type=int, default=3, help="run_algorithm.py --runs (best of)")
    ap.add_argument("--quick", action="store_true", help="100 queries, a few definitions")
    ap.add_argument("--cold", action="store_true", help="first-query times, empty numba cache")
    ap.add_argument("--before", help="with --cold: also bbqlib at this git revision")
    ap.add_argument("--repeats", type=int, default=1, help="with --cold: repeats")
    ap.add_argument(
        "--resume", action="store_true", help="keep the workdir's results, run what is missing"
    )
    ap.add_argument(
        "--workdir", default=str(Path(tempfile.gettempdir()) / "bbqlib-ann-benchmarks-harness")
    )
    ap.add_argument("--out", default=str(REPO / "benchmarks" / "results"))
    args = ap.parse_args(argv)
    if args.quick:
        args.queries, args.runs = 100, 1
    return run_cold(args) if args.cold else run_table(args)


if __name__ == "__main__":
    raise SystemExit(main())
