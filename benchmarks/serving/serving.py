"""Serving benchmark (issue 14): bbqlib as an engine calls it, in sections.

Sections (``--sections``, default all; each rewrites only its own part of the results file,
so sections can be run, and added, separately):

* ``contention`` - a CPU-bound process on each core (``python -c 'while True: pass'``, one
  per usable core, always killed afterwards), then p50 / p90 / max latency of
  ``FlatIndex(bits=1).search`` with default thread settings and inside
  ``bbqlib.thread_limit(1)``, interleaved call by call: batches of 200 and of 5 queries,
  over the bundled 4,000-vector sample and over debian-minilm-384 (60,710 vectors). Each
  threading layer that loads (TBB, OpenMP) is measured in its own process under the same
  load; the same measurement without the load process comes first for reference. Target:
  default p50 and p90 <= 1.3x the ``thread_limit(1)`` figures.
* ``startup`` - (a) a fresh process with a warm kernel cache: ``import bbqlib`` (reported
  apart), then from ``bbqlib.load`` to the first result of a one-query search, against the
  steady one-query latency in the same process (target <= 3x steady + 50 ms), for a saved
  ``FlatIndex`` and ``IVFIndex`` (``preload`` off and on); (b) an empty kernel cache
  (``BBQLIB_CACHE_DIR`` set to a new folder): first ``add``, first search (one query, as a
  server's first) and a 200-query search of a ``FlatIndex(bits=1)`` on the bundled sample
  (target: first search <= 3 s), then the single-query path's compile, and the compile time
  of each kernel.

* ``latency`` - one query per call (``benchmarks/serving/latency.py``): p50 / p99 at recall
  0.90 and 0.95 for bbqlib IVF, faiss IVF-RaBitQ + refine, hnswlib and faiss HNSWFlat on
  debian-minilm-384 and 1M synthetic clustered vectors; two Python threads vs one; the
  FlatIndex per-call time above its scan.

Run from the repository root::

    python benchmarks/serving/serving.py [--sections contention,startup] [--quick]

On a machine shared with other work, start it at low priority and give it the shared lock:
builds and recall sweeps then run niced, and each timing part waits for the lock and runs at
nice 0 while it holds it (the 1M set's IVF builds are kept in ``--workdir`` for later runs)::

    nice -n 19 python benchmarks/serving/serving.py --sections latency --no-1m \
        --lock $LOCKS/bench.lock

Results: ``benchmarks/results/serving.md`` (command, date, machine, load average).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent  # benchmarks/, on sys.path instead of HERE (see common.py)
sys.path[:] = [str(BENCH), *(p for p in sys.path if Path(p or ".").resolve() != HERE)]
import common  # noqa: E402

ROOT = common.repo_root()
RESULT = ROOT / "benchmarks" / "results" / "serving.md"
TITLE = "Serving: single-query latency, threads under contention, start-up"


# ============================================================================ helpers
def _env(**extra) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH", "")]))
    env.update({k: v for k, v in extra.items() if v is not None})
    return env


def _worker(args: list[str], timeout: float = 1800, **env) -> dict:
    """Run this script as a worker in a fresh process; its last stdout line is JSON."""
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", *args]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=timeout, env=_env(**env), cwd=ROOT
    )
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or ["failed"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


@contextlib.contextmanager
def cpu_load(n: int):
    """``n`` CPU-bound processes for the duration of the block, killed whatever happens."""
    hogs = []
    try:
        for _ in range(n):
            hogs.append(subprocess.Popen([sys.executable, "-c", "while True: pass"]))
        time.sleep(1.0)  # let the scheduler settle them on the cores
        yield hogs
    finally:
        for h in hogs:
            h.kill()
        for h in hogs:
            h.wait()


def _stats(ms: list[float]) -> dict:
    a = np.asarray(ms)
    return {
        "p50": float(np.percentile(a, 50)),
        "p90": float(np.percentile(a, 90)),
        "max": float(a.max()),
        "n": int(a.size),
    }


def _loadavg() -> str:
    return " / ".join(f"{x:.2f}" for x in os.getloadavg())


def _demo():
    from bbqlib.cli import load_demo_sample

    s = load_demo_sample()
    return s["base"], s["queries"]


def _debian():
    d = common.DATA_DIR / "debian-minilm-384"
    base = np.ascontiguousarray(np.load(d / "base.npy"), dtype=np.float32)
    queries = np.ascontiguousarray(np.load(d / "queries.npy")[:200], dtype=np.float32)
    return base, queries


# ============================================================================ contention
CASES = (("4,000 (sample)", "demo"), ("60,710 (debian)", "debian"))
BATCHES = (200, 5)


def contention_worker(quick: bool) -> dict:
    """In a fresh process: p50/p90/max of default vs thread_limit(1), interleaved."""
    import bbqlib

    out = {"layer": bbqlib.runtime.threads.threading_layer(), "threads": bbqlib.get_num_threads()}
    rows = []
    for label, name in CASES:
        if name == "debian" and not (common.DATA_DIR / "debian-minilm-384").exists():
            out["skipped"] = f"{label}: no data at {common.DATA_DIR} (set BBQLIB_DATA)"
            continue
        X, Q = _demo() if name == "demo" else _debian()
        index = bbqlib.FlatIndex(bits=1, similarity="cosine")
        index.add(X)
        bbqlib.warmup(index)  # both kernel variants compiled or loaded before timing
        for nq in BATCHES:
            q = Q[:nq]
            reps = 60 if (nq == 200 and name == "debian") else (150 if nq == 200 else 400)
            if quick:
                reps = max(10, reps // 5)
            times = {"default": [], "thread_limit(1)": []}
            for _ in range(3):  # compile / load both variants, warm the caches
                index.search(q, 10)
                with bbqlib.thread_limit(1):
                    index.search(q, 10)
            for r in range(reps):
                order = ("default", "thread_limit(1)")
                for setting in order if r % 2 == 0 else order[::-1]:
                    limit = bbqlib.thread_limit(1) if setting != "default" else None
                    with limit or contextlib.nullcontext():
                        t0 = time.perf_counter()
                        index.search(q, 10)
                        times[setting].append((time.perf_counter() - t0) * 1e3)
            for setting, ms in times.items():
                rows.append({"vectors": label, "queries": nq, "setting": setting, **_stats(ms)})
    out["rows"] = rows
    return out


def _layers() -> list[str]:
    return ["tbb", "omp"]


def contention_section(args) -> tuple[list[str], list[str]]:
    ncores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    tables, notes = [], []
    phases = [("no load process", 0), (f"{ncores} CPU-bound processes", ncores)]
    for phase, hogs in phases:
        for layer in _layers():
            with timed_hold(f"contention {layer}"):
                before = _loadavg()
                with cpu_load(hogs):
                    res = _worker(
                        ["contention"] + (["--quick"] if args.quick else []),
                        NUMBA_THREADING_LAYER=layer,
                    )
                after = _loadavg()
            head = f"### {phase}, numba layer `{layer}`"
            if "error" in res:
                tables.append(f"{head}\n\nnot measured: {res['error']}")
                continue
            body = _contention_table(res["rows"])
            if "skipped" in res:
                body += f"\n\nskipped {res['skipped']}"
            tables.append(
                f"{head} ({res['threads']} threads allowed; load average before {before}, "
                f"after {after})\n\n{body}"
            )
            print(tables[-1], flush=True)
    notes.append(
        "Latency of one `search` call in ms; `default` and `thread_limit(1)` alternate call "
        "by call. ratio = default / thread_limit(1) (target <= 1.3 for p50 and p90)."
    )
    notes.append(
        "The load processes run at the same priority as the benchmark; the machine is shared, "
        "so other work adds to the load (load averages above)."
    )
    return tables, notes


def _contention_table(rows: list[dict]) -> str:
    by = {(r["vectors"], r["queries"], r["setting"]): r for r in rows}
    lines = []
    for (vec, nq, setting), r in by.items():
        if setting != "default":
            continue
        one = by[(vec, nq, "thread_limit(1)")]
        lines.append(
            {
                "case": f"{vec}, {nq} queries",
                "d50": r["p50"],
                "d90": r["p90"],
                "dmax": r["max"],
                "o50": one["p50"],
                "o90": one["p90"],
                "omax": one["max"],
                "r50": r["p50"] / one["p50"],
                "r90": r["p90"] / one["p90"],
                "n": r["n"],
            }
        )
    return common.markdown_table(
        lines,
        [
            ("case", "vectors, batch"),
            ("d50", "default p50", ".2f"),
            ("d90", "default p90", ".2f"),
            ("dmax", "default max", ".2f"),
            ("o50", "1 thread p50", ".2f"),
            ("o90", "1 thread p90", ".2f"),
            ("omax", "1 thread max", ".2f"),
            ("r50", "ratio p50", ".2f"),
            ("r90", "ratio p90", ".2f"),
            ("n", "calls each"),
        ],
    )


# ============================================================================ start-up
def startup_build(folder: str) -> dict:
    """Save the indexes the warm-start workers open (one FlatIndex file, one IVF folder)."""
    import bbqlib

    X, _ = _debian()
    flat = bbqlib.FlatIndex(bits=1, similarity="cosine")
    flat.add(X)
    flat.save(Path(folder) / "flat.bbq")
    ivf = bbqlib.IVFIndex(bits=1, similarity="cosine")
    ivf.add(X)
    ivf.save(Path(folder) / "ivf")
    return {"ok": True}


def startup_warm_worker(folder: str, kind: str, runtime_first: bool) -> dict:
    """Fresh process, warm cache: import, (runtime start), open -> first result, steady."""
    t0 = time.perf_counter()
    import bbqlib

    t_import = time.perf_counter() - t0
    _, Q = _debian()
    q = Q[0]
    t_runtime = bbqlib.warmup() if runtime_first else 0.0
    t1 = time.perf_counter()
    if kind == "flat":
        index = bbqlib.load(Path(folder) / "flat.bbq")
    else:
        index = bbqlib.IVFIndex.open(Path(folder) / "ivf", preload=(kind == "ivf-preload"))
    index.search(q, 10)
    t_first = time.perf_counter() - t1
    steady = []
    for i in range(1, 101):
        t = time.perf_counter()
        index.search(Q[i % len(Q)], 10)
        steady.append(time.perf_counter() - t)
    return {
        "import": t_import,
        "runtime": t_runtime,
        "first": t_first,
        "steady": float(np.median(steady)),
    }


def startup_cold_worker() -> dict:
    """Empty kernel cache (the parent sets BBQLIB_CACHE_DIR): first add, first searches,
    compile time per kernel."""
    from numba.core import event

    import bbqlib

    compiles: list[tuple[str, float, float, int]] = []
    stack: list[tuple[float, float]] = []

    class Listener(event.Listener):
        def on_start(self, ev):
            stack.append((time.perf_counter(), time.process_time()))

        def on_end(self, ev):
            w0, c0 = stack.pop()
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            disp = ev.data.get("dispatcher")
            f = getattr(disp, "py_func", None)
            name = f"{f.__module__}.{f.__qualname__}" if f is not None else "?"
            if f is not None and not disp.targetoptions.get("parallel"):
                name += " (single-threaded)" if _is_twin(f) else ""
            compiles.append((name, wall, cpu, len(stack)))

    def _is_twin(f) -> bool:
        from bbqlib._kernels.policy import ParallelKernel

        mod = sys.modules.get(f.__module__)
        return isinstance(getattr(mod, f.__name__, None), ParallelKernel)

    event.register("numba:compile", Listener())
    X, Q = _demo()
    steps = {}

    def timed(name, fn):
        w, c = time.perf_counter(), time.process_time()
        fn()
        steps[name] = (time.perf_counter() - w, time.process_time() - c)

    from bbqlib.index.tiers import FLAT_TIER

    index = bbqlib.FlatIndex(bits=1, similarity="cosine")
    timed("add", lambda: index.add(X))
    timed("search1", lambda: index.search(Q[0], 10))  # a server's first query
    timed("search200", lambda: index.search(Q, 10))
    FLAT_TIER.open()  # as after COMPILE_SINGLE_AFTER seconds of one-query searches
    timed("single", lambda: index.search(Q[1], 10))
    top = [(n, w, c) for n, w, c, depth in compiles if depth == 0 and n.startswith("bbqlib")]
    return {"steps": steps, "kernels": top}


def _cold_start() -> list[str]:
    """Empty kernel cache: first add and searches, compile time per kernel."""
    tables = []
    with tempfile.TemporaryDirectory(prefix="bbqlib-cold-cache-") as cache:
        before = _loadavg()
        res = _worker(["startup-cold"], BBQLIB_CACHE_DIR=cache)
        if "error" in res:
            tables.append(f"### Empty kernel cache\n\nnot measured: {res['error']}")
        else:
            labels = {
                "add": "first add (4,000 vectors: fit + encode)",
                "search1": "first search: one query, k=10 (the batch path's kernels)",
                "search200": "then a 200-query search",
                "single": "then the single-query path's kernels (warmup(index), or the "
                "tier-up after COMPILE_SINGLE_AFTER s of one-query searches)",
            }
            tables.append(
                f"### Empty kernel cache (bundled sample, FlatIndex(bits=1); load average "
                f"{before} before, {_loadavg()} after)\n\n"
                + common.markdown_table(
                    [
                        {"step": labels[k], "wall": w, "cpu": c}
                        for k, (w, c) in res["steps"].items()
                    ],
                    [("step", "step"), ("wall", "wall s", ".2f"), ("cpu", "CPU s", ".2f")],
                )
            )
            kern = sorted(res["kernels"], key=lambda x: -x[2])
            tables.append(
                "### Compile time per kernel (empty cache, the run above)\n\n"
                + common.markdown_table(
                    [{"kernel": n, "wall": w, "cpu": c} for n, w, c in kern],
                    [
                        ("kernel", "kernel (callees included)"),
                        ("wall", "wall s", ".2f"),
                        ("cpu", "CPU s", ".2f"),
                    ],
                )
            )
    return tables


def _warm_start(folder: str, reps: int) -> str:
    """Fresh processes on a warm kernel cache: open -> first result against steady."""
    rows = []
    for kind in ("flat", "ivf", "ivf-preload"):
        for runtime_first in (True, False):
            label = kind + (", after bbqlib.warmup()" if runtime_first else "")
            args = ["startup-warm", folder, kind, str(int(runtime_first))]
            _worker(args)  # the first run fills the kernel cache
            runs = [_worker(args) for _ in range(reps)]
            runs = [r for r in runs if "error" not in r]
            if not runs:
                continue
            med = {k: float(np.median([r[k] for r in runs])) for k in runs[0]}
            bound = 3 * med["steady"] + 0.050
            rows.append(
                {
                    "index": label,
                    "import": med["import"] * 1e3,
                    "runtime": med["runtime"] * 1e3 if runtime_first else None,
                    "first": med["first"] * 1e3,
                    "steady": med["steady"] * 1e3,
                    "bound": bound * 1e3,
                    "ok": "yes" if med["first"] <= bound else "no",
                }
            )
    return (
        f"### Warm kernel cache, fresh process (debian-minilm-384, one query, median of "
        f"{reps} processes; load average {_loadavg()})\n\n"
        + common.markdown_table(
            rows,
            [
                ("index", "index"),
                ("import", "import bbqlib (ms)", ".0f"),
                ("runtime", "bbqlib.warmup() (ms)", ".0f"),
                ("first", "open -> first result (ms)", ".1f"),
                ("steady", "steady search (ms)", ".3f"),
                ("bound", "3x steady + 50 ms", ".1f"),
                ("ok", "within"),
            ],
        )
    )


def startup_section(args) -> tuple[list[str], list[str]]:
    tables, notes = [], []
    reps = 3 if args.quick else 7
    with tempfile.TemporaryDirectory(prefix="bbqlib-serving-") as folder:
        res = _worker(["startup-build", folder])  # outside the lock (--lock)
        if "error" in res:
            return [f"### warm start\n\nnot measured: {res['error']}"], notes
        with timed_hold("startup"):
            tables.append(_warm_start(folder, reps))
            tables += _cold_start()
    notes.append(
        "Warm start: each figure is a new Python process; the kernel cache was filled by a "
        "previous process. `open -> first result` is `bbqlib.load` / `IVFIndex.open` plus the "
        "first one-query search; `steady` is the median of the next 100 one-query searches. "
        "`import bbqlib` starts numba's code-generation target (numba would start it inside "
        "the first kernel call; most of it is numba importing its array library and SciPy's "
        "BLAS bindings), so the import figure includes it. `bbqlib.warmup()` (no index) starts "
        "numba's thread pool and loads the single-query kernels of saved default indexes that "
        "the kernel cache holds (a probe index of each kind); without it the first result "
        "loads the index's kernel."
    )
    return tables, notes


# ============================================================================ main
from serving.latency import latency_section, timed_hold  # noqa: E402

SECTIONS = {
    "contention": contention_section,
    "startup": startup_section,
    "latency": latency_section,
}


def _merge(path: Path, new: dict[str, str], command: str) -> None:
    """Rewrite ``path`` with the sections in ``new``, keeping the others it holds."""
    old = path.read_text() if path.exists() else ""
    parts = dict(re.findall(r"<!-- section: (\w+) -->\n(.*?)<!-- /section -->", old, re.S))
    parts.update(new)
    body = [
        f"<!-- section: {name} -->\n{parts[name]}<!-- /section -->"
        for name in [*SECTIONS, "latency_1m"] + sorted(set(parts) - {*SECTIONS, "latency_1m"})
        if name in parts
    ]
    common.write_result(path, TITLE, command, body)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--sections", default=",".join(SECTIONS))
    ap.add_argument("--quick", action="store_true", help="fewer repeats (a smoke run)")
    ap.add_argument("--no-1m", action="store_true", help="latency: debian only, no 1M set")
    ap.add_argument("--no-debian", action="store_true", help="latency: the 1M set only")
    ap.add_argument("--oversample", type=float, default=3.0, help="latency: IVF rerank depth")
    ap.add_argument("--no-graphs", action="store_true", help="latency: IVF systems only")
    ap.add_argument("--oversample-1m", type=float, help="latency: the 1M set's rerank depth")
    ap.add_argument("--no-1m-graphs", action="store_true", help="latency: 1M, IVF systems only")
    ap.add_argument(
        "--no-1m-faiss", action="store_true", help="latency: 1M, bbqlib IVF only (no faiss)"
    )
    ap.add_argument("--workdir", default="/tmp/bbqlib-serving", help="latency: 1M data cache")
    ap.add_argument(
        "--lock",
        help="hold this lock file (flock) at nice 0 for each timing part only; builds and "
        "recall sweeps run at the starting priority (start the script with nice -n 19)",
    )
    ap.add_argument("--out", default=str(RESULT))
    ap.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    from serving import latency as serving_latency

    serving_latency.OVERSAMPLE = args.oversample
    serving_latency.GRAPHS = not args.no_graphs
    serving_latency.OVERSAMPLE_1M = args.oversample_1m
    serving_latency.GRAPHS_1M = False if args.no_1m_graphs else None
    serving_latency.LOCK = args.lock
    serving_latency.FAISS_1M = not args.no_1m_faiss
    if args.worker:
        kind, *rest = args.worker
        if kind == "contention":
            out = contention_worker(args.quick)
        elif kind == "startup-build":
            out = startup_build(rest[0])
        elif kind == "startup-warm":
            out = startup_warm_worker(rest[0], rest[1], rest[2] == "1")
        elif kind == "startup-cold":
            out = startup_cold_worker()
        else:
            raise SystemExit(f"unknown worker {kind}")
        print(json.dumps(out))
        return 0
    names = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = set(names) - set(SECTIONS)
    if unknown:
        ap.error(f"unknown sections {sorted(unknown)}; choose from {sorted(SECTIONS)}")
    done = {}
    cmd = "python benchmarks/serving/serving.py " + " ".join(argv or sys.argv[1:])
    for name in names:
        print(f"== {name}", flush=True)
        started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        tables, notes = SECTIONS[name](args)
        if name == "latency" and args.no_debian:
            name = "latency_1m"  # its own part of the file: a debian run keeps it
        text = f"## {name}\n\n`{cmd.strip()}`, started {started}\n\n" + "\n\n".join(tables) + "\n"
        if notes:
            text += "\n" + "\n".join(f"- {n}" for n in notes) + "\n"
        done[name] = text
    _merge(Path(args.out), done, cmd.strip())
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
