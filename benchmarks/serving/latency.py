"""The ``latency`` section of ``serving/serving.py``: one query per call, as engines call.

For each data set (debian-minilm-384; seeded 1M x 384 clustered synthetic vectors unless
``--no-1m``), single thread everywhere:

1. every system's recall@10 over a parameter sweep, batched (500 queries in one call);
2. at recall 0.90 and 0.95, the smallest setting of each system reaching it, then per round
   one batched call and one query per call over the same 500 queries, systems interleaved
   round by round: p50 and p99 latency, and the batched cost per query (median of rounds);
3. two Python threads issuing single queries (each thread its half, one kernel thread per
   call) against one thread: the QPS ratio, for bbqlib IVF and hnswlib;
4. the per-call time outside the compiled calls of the single-query path (Python, which
   holds the GIL; numba dispatch counts as compiled): bbqlib IVF at the 0.95 setting, and
   ``FlatIndex`` (debian), whose figure is its per-call overhead above the scan.

Systems: bbqlib ``IVFIndex(bits=1)`` (default 3x rerank, ``visit_percentage`` sweep), faiss
``RR + IndexIVFRaBitQ`` 1-bit + ``IndexRefineFlat`` x3 (nlist = bbqlib's list count, nprobe
sweep), hnswlib and faiss ``IndexHNSWFlat`` (M 16, efConstruction 200, ef sweep).
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import statistics
import threading
import time
from pathlib import Path

import common
import numpy as np
from engines import peers

N_QUERIES = 500
# The 1M set's indexes are built with both cores (HNSW builds take many minutes on one);
# every search is single-threaded.
BUILD_THREADS = 2
# Rerank depth of both IVF systems (x k) and whether the graph peers are built; the CLI sets
# them (``--oversample``, ``--no-graphs``: a rerun of the IVF systems alone).
OVERSAMPLE = 3.0
GRAPHS = True
# The same for the 1M set alone (None: as above): ``--oversample-1m``, ``--no-1m-graphs``
# (one run of debian at x3 with its graph peers and of the 1M set's IVF systems at x10).
OVERSAMPLE_1M: float | None = None
GRAPHS_1M: bool | None = None
# ``--no-1m-faiss``: the 1M set's bbqlib IVF alone (no faiss build: its ~5 GB need the
# big-memory lock and minutes of CPU); its rows are then compared with an earlier run's.
FAISS_1M = True
_BASE = {}
# ``--lock PATH``: builds and recall sweeps run at the priority the script started with (nice
# 19 on a shared machine); each timing part takes this lock and runs at nice 0 (timed_hold).
LOCK: str | None = None


def _renice(value: int) -> None:
    """Set every thread of this process to nice ``value`` (Linux nice values are per thread:
    ``setpriority(PRIO_PROCESS, 0)`` alone would leave numba's pool and others behind)."""
    tasks = Path("/proc/self/task")
    tids = [int(t) for t in os.listdir(tasks)] if tasks.exists() else [0]
    for tid in tids:
        with contextlib.suppress(OSError):  # a thread that ended, or no permission
            os.setpriority(os.PRIO_PROCESS, tid, value)


@contextlib.contextmanager
def timed_hold(what: str):
    """Hold ``LOCK`` (when set) at nice 0 for a timing part, then release it and return to
    the starting nice value; prints the wait, the hold and the load average at both ends."""
    if LOCK is None:
        yield
        return
    start_nice = os.getpriority(os.PRIO_PROCESS, 0)
    t0 = time.time()
    with open(LOCK, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        t1 = time.time()
        print(f"  [{what}: lock after {t1 - t0:.0f} s, load {_loadavg()}]", flush=True)
        _renice(0)
        try:
            yield
        finally:
            _renice(start_nice)
            fcntl.flock(f, fcntl.LOCK_UN)
            print(f"  [{what}: held {time.time() - t1:.0f} s, load {_loadavg()}]", flush=True)


def _dataset_settings(big: bool) -> None:
    """Set ``OVERSAMPLE`` / ``GRAPHS`` for the data set about to run."""
    global OVERSAMPLE, GRAPHS
    if not _BASE:
        _BASE.update(oversample=OVERSAMPLE, graphs=GRAPHS)
    OVERSAMPLE, GRAPHS = _BASE["oversample"], _BASE["graphs"]
    if big and OVERSAMPLE_1M is not None:
        OVERSAMPLE = OVERSAMPLE_1M
    if big and GRAPHS_1M is not None:
        GRAPHS = GRAPHS_1M


def _ivf_name() -> str:
    return f"bbqlib IVF 1-bit x{OVERSAMPLE:g}"


TARGETS = (0.90, 0.95)
# Below 0.5 for the 1M set (its x10 rerank reached 0.98 at 0.5); debian needs more.
VISIT = [0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 1, 1.5, 2, 3, 4, 5, 6, 8, 10,
         15, 20, 30]  # fmt: skip
NPROBE = [1, 2, 3, 4, 6, 8, 10, 12, 16, 20, 24, 32, 48, 64, 96, 128]
EF = [10, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384]


_SHARE_COLUMNS = [
    ("search p50 us", "search(q) p50 us", ",.1f"),
    ("kernels p50 us", "compiled calls us", ",.1f"),
    ("overhead us", "Python (GIL held) p50 us", ",.1f"),
    ("overhead p10 us", "Python p10 us", ",.1f"),
    ("share", "Python share (p50)", ".2f"),
]


def _recall(ids, gt) -> float:
    pairs = zip(ids, gt, strict=True)
    return float(np.mean([len(set(a[:10]) & set(b[:10])) / 10 for a, b in pairs]))


def _datasets(one_million: bool, workdir: Path, debian: bool = True):
    if debian:
        ds = common.load_dataset("debian-minilm-384", N_QUERIES)
        yield "debian-minilm-384 (60,710)", ds.base, ds.queries, ds.gt_ids[:, :10]
    if not one_million:
        return
    from common import make_clustered

    from bbqlib.analysis.ground_truth import exact_knn

    workdir.mkdir(parents=True, exist_ok=True)
    n = 1_000_000
    cache = workdir / "latency-1m.npz"
    if cache.exists():
        z = np.load(cache)
        X, Q, gt = z["X"], z["Q"], z["gt"]
    else:
        Y = make_clustered(n + N_QUERIES, 384, 1000, seed=0)
        X, Q = Y[:n], Y[n:]
        _, gt = exact_knn(X, Q, 10, "ip", scores_first=True)
        np.savez(cache, X=X, Q=Q, gt=np.asarray(gt))
    yield "synthetic clustered 1M x 384", X, Q, np.asarray(gt)


def _bbqlib_ivf(X, similarity, cache: Path | None):
    """bbqlib ``IVFIndex(bits=1)`` over ``X`` and its build seconds; with ``cache`` (the 1M
    set) saved there after its build and opened from there (verified) by later runs."""
    import json

    import bbqlib

    if cache is not None and (cache / "build.json").exists():
        ivf = bbqlib.IVFIndex.open(cache / "index", preload=True)
        ivf.verify()  # every block checked once: each query is then one compiled call
        return ivf, json.loads((cache / "build.json").read_text())["seconds"]
    t0 = time.perf_counter()
    ivf = bbqlib.IVFIndex(bits=1, similarity=similarity)
    ivf.add(X)
    build = time.perf_counter() - t0
    if cache is not None:
        ivf.save(cache / "index")
        (cache / "build.json").write_text(json.dumps({"seconds": build}))
    return ivf, build


def _faiss_ivf_rabitq(X, similarity, nlist: int, cache: Path | None):
    """faiss IVFRaBitQ 1-bit + RFlat (``peers.faiss_ivf_rabitq``); with ``cache`` written
    there after its build (``faiss.write_index``) and read back by later runs, its search
    parameters then set through ``faiss.ParameterSpace``."""
    import json

    if cache is not None and (cache / "build.json").exists():
        import faiss

        index = faiss.read_index(str(cache / "faiss.index"))
        space = faiss.ParameterSpace()

        class Cached:
            build_seconds = json.loads((cache / "build.json").read_text())["seconds"]

            def set_search_params(self, nprobe):
                space.set_index_parameter(index, "nprobe", int(nprobe))

            def search(self, Q, k):
                return index.search(peers._prepare(Q, similarity, "queries"), k)

        faiss.downcast_index(index).k_factor = float(OVERSAMPLE)  # also in the file
        return Cached()
    peer = peers.faiss_ivf_rabitq(X, similarity, nlist=nlist, bits=1, qb=4, k_factor=OVERSAMPLE)
    if cache is not None:
        import faiss

        cache.mkdir(parents=True, exist_ok=True)
        faiss.write_index(peer.index, str(cache / "faiss.index"))
        (cache / "build.json").write_text(json.dumps({"seconds": peer.build_seconds}))
    return peer


def _systems(X, similarity="cosine", cache: Path | None = None):
    """``name -> (build seconds, [(param, batch_fn, one_fn)], extra)``. ``cache``: a folder
    where the IVF systems' builds are kept between runs (the 1M set)."""
    import bbqlib

    out = {}
    ivf, build = _bbqlib_ivf(X, similarity, None if cache is None else cache / "bbqlib-ivf")
    bbqlib.warmup(ivf)
    os_ = OVERSAMPLE
    out[_ivf_name()] = (
        build,
        [
            (vp, (lambda Q, vp=vp: ivf.search(Q, 10, visit_percentage=vp, oversample=os_)[1]),
             (lambda q, vp=vp: ivf.search(q, 10, visit_percentage=vp, oversample=os_)[1]))
            for vp in VISIT
        ],
        {"index": ivf},
    )  # fmt: skip
    if cache is not None and not FAISS_1M:
        return out
    fcache = None if cache is None else cache / f"faiss-ivf-rabitq-x{OVERSAMPLE:g}"
    fr = _faiss_ivf_rabitq(X, similarity, ivf.n_lists, fcache)

    def fr_set(p):
        fr.set_search_params(nprobe=p)

    out[f"faiss IVFRaBitQ 1-bit +RFlat x{OVERSAMPLE:g}"] = (
        fr.build_seconds,
        [
            (p, (lambda Q, p=p: (fr_set(p), fr.search(Q, 10)[1])[1]),
             (lambda q, p=p: fr.search(q, 10)[1]), lambda p=p: fr_set(p))
            for p in NPROBE
        ],
        {},
    )  # fmt: skip
    if not GRAPHS:
        return out
    hsaved = None if cache is None else cache / "hnswlib-M16-efC200"
    hn = peers.hnswlib_hnsw(X, similarity, M=16, ef_construction=200, saved=hsaved)

    def hn_set(e):
        hn.set_search_params(ef=e)

    out["hnswlib M16 efC200"] = (
        hn.build_seconds,
        [
            (e, (lambda Q, e=e: (hn_set(e), hn.search(Q, 10)[1])[1]),
             (lambda q, e=e: hn.search(q, 10)[1]), lambda e=e: hn_set(e))
            for e in EF
        ],
        {"peer": hn},
    )  # fmt: skip
    if len(X) > 100_000:  # 1M: hnswlib is the graph peer (a second HNSW build costs ~10 min)
        return out
    fh = peers.faiss_hnsw_flat(X, similarity, M=16, ef_construction=200)

    def fh_set(e):
        fh.set_search_params(ef=e)

    out["faiss HNSWFlat M16 efC200"] = (
        fh.build_seconds,
        [
            (e, (lambda Q, e=e: (fh_set(e), fh.search(Q, 10)[1])[1]),
             (lambda q, e=e: fh.search(q, 10)[1]), lambda e=e: fh_set(e))
            for e in EF
        ],
        {},
    )  # fmt: skip
    return out


def _setter(setting):
    return setting[3] if len(setting) > 3 else (lambda: None)


def _single_times(one_fn, Q, before=lambda: None) -> list[float]:
    before()
    times = []
    for i in range(len(Q)):
        q = Q[i : i + 1]
        t0 = time.perf_counter()
        one_fn(q)
        times.append(time.perf_counter() - t0)
    return times


def _two_threads(one_fn, Q, before=lambda: None, seconds: float = 0.5) -> tuple[float, float]:
    """QPS with one Python thread and with two (each its half of ``Q``), single queries;
    ``Q`` is gone through as many times as make the one-thread run last about ``seconds``
    (500 fast queries alone last ~50 ms: a scheduler tick on a shared machine moved it)."""
    import bbqlib

    before()

    def run(part, out, i, passes):
        with bbqlib.thread_limit(1):
            t0 = time.perf_counter()
            for _ in range(passes):
                for j in range(len(part)):
                    one_fn(part[j : j + 1])
            out[i] = time.perf_counter() - t0

    res = [0.0, 0.0]
    run(Q, res, 0, 1)  # a warm pass sizes the runs
    passes = max(1, math.ceil(seconds / max(res[0], 1e-6)))
    run(Q, res, 0, passes)
    qps1 = passes * len(Q) / res[0]
    halves = [Q[0::2], Q[1::2]]
    res = [0.0, 0.0]
    threads = [threading.Thread(target=run, args=(h, res, i, passes)) for i, h in enumerate(halves)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    qps2 = passes * len(Q) / (time.perf_counter() - t0)
    return qps1, qps2


class _CompiledTime:
    """Time spent inside the single-query path's compiled calls (``bbqlib._kernels.single``,
    numba dispatch included), wrapped while the block runs: the rest of a call is Python,
    which holds the GIL."""

    def __enter__(self):
        from bbqlib._kernels import single as KO

        self.mod, self.ns = KO, 0
        self.saved = {n: getattr(KO, n) for n in KO.__all__}
        for name, f in self.saved.items():
            setattr(KO, name, self._timed(f))
        return self

    def _timed(self, f):
        def run(*args):
            t0 = time.perf_counter_ns()
            try:
                return f(*args)
            finally:
                self.ns += time.perf_counter_ns() - t0

        return run

    def __exit__(self, *exc):
        for name, f in self.saved.items():
            setattr(self.mod, name, f)


def _python_share(one_fn, Q, rounds: int) -> dict:
    """``search(q)`` p50 and, per call, the time outside the compiled calls: p50 and p10
    (preemption on a busy machine lands in either part; p10 shows the work itself)."""
    full, python = [], []
    with _CompiledTime() as ct:
        for _ in range(rounds):
            for i in range(len(Q)):
                ct.ns = 0
                t0 = time.perf_counter_ns()
                one_fn(Q[i])
                t = time.perf_counter_ns() - t0
                full.append(t)
                python.append(t - ct.ns)
    med = statistics.median
    return {
        "search p50 us": med(full) / 1e3,
        "kernels p50 us": (med(full) - med(python)) / 1e3,
        "overhead us": med(python) / 1e3,
        "overhead p10 us": float(np.percentile(python, 10)) / 1e3,
        "share": med(python) / med(full),
    }


def _flat_index(X):
    """The FlatIndex(bits=1) whose per-call time above its compiled calls (validation, query
    codes + scan, exact rerank + best k) ``_python_share`` measures."""
    import bbqlib

    index = bbqlib.FlatIndex(bits=1, similarity="cosine")
    index.add(X)
    bbqlib.warmup(index, batch=False)
    return index


def _timed_part(label, Q, systems, chosen, flat, rounds) -> list[str]:
    """Every timing of one data set (the caller holds the lock): single vs batched latency,
    two threads, the time outside the compiled calls. Returns the tables."""
    tables, rows = [], []
    load_before = _loadavg()
    # Batched and single queries, systems interleaved round by round.
    lat = {key: [] for key in chosen}
    batched_times = {key: [] for key in chosen}
    for _ in range(rounds):
        for key, (s, _) in chosen.items():
            _setter(s)()
            t0 = time.perf_counter()
            s[1](Q)
            batched_times[key].append((time.perf_counter() - t0) / len(Q))
            lat[key] += _single_times(s[2], Q, _setter(s))
    load_single = _loadavg()
    chosen = {
        key: (s, rec, statistics.median(batched_times[key])) for key, (s, rec) in chosen.items()
    }
    for (name, t), (s, rec, batched) in chosen.items():
        ms = np.asarray(lat[(name, t)]) * 1e6
        rows.append(
            {
                "system": name,
                "target": t,
                "param": s[0],
                "recall": rec,
                "p50": float(np.percentile(ms, 50)),
                "p99": float(np.percentile(ms, 99)),
                "batched": batched * 1e6,
                "ratio": float(np.percentile(ms, 50)) / (batched * 1e6),
                "build": systems[name][0],
            }
        )
    tables.append(
        f"### {label}: one query per call, single thread (load average {load_before} before, "
        f"{load_single} after)\n\n"
        + common.markdown_table(
            rows,
            [
                ("system", "system"),
                ("target", "recall target", ".2f"),
                ("param", "setting"),
                ("recall", "recall@10", ".3f"),
                ("p50", "p50 us", ",.0f"),
                ("p99", "p99 us", ",.0f"),
                ("batched", "batched us/query", ",.0f"),
                ("ratio", "p50 / batched", ".2f"),
                ("build", "build s", ".1f"),
            ],
        )
    )
    scale = []
    runs = {}  # system -> [(qps1, qps2)], systems interleaved run by run
    for _ in range(rounds if rounds == 1 else 5):
        for name in (_ivf_name(), "hnswlib M16 efC200"):
            key = (name, 0.95)
            if key in chosen:
                s = chosen[key][0]
                runs.setdefault(name, []).append(_two_threads(s[2], Q, _setter(s)))
    for name, pairs in runs.items():
        qps1 = statistics.median(p[0] for p in pairs)
        qps2 = statistics.median(p[1] for p in pairs)
        ratio = statistics.median(p[1] / p[0] for p in pairs)
        scale.append({"system": name, "param": chosen[(name, 0.95)][0][0], "qps1": qps1,
                      "qps2": qps2, "ratio": ratio})  # fmt: skip
    if len(scale) == 2:
        scale[0]["vs"] = scale[0]["ratio"] / scale[1]["ratio"]
    tables.append(
        f"### {label}: two Python threads issuing single queries (recall 0.95 setting)\n\n"
        + common.markdown_table(
            scale,
            [
                ("system", "system"),
                ("param", "setting"),
                ("qps1", "QPS 1 thread", ",.0f"),
                ("qps2", "QPS 2 threads", ",.0f"),
                ("ratio", "2 / 1", ".2f"),
                ("vs", "scaling vs hnswlib's", ".2f"),
            ],
        )
    )
    key = (_ivf_name(), 0.95)
    if key in chosen:
        s = chosen[key][0]
        share = _python_share(s[2], Q[:200], rounds)
        tables.append(
            f"### {label}: IVF one query per call, time outside the compiled calls "
            f"(recall 0.95 setting, visit_percentage {s[0]})\n\n"
            + common.markdown_table([share], _SHARE_COLUMNS)
        )
    if flat is not None:
        ov = _python_share(lambda q: flat.search(q, 10), Q[:200], rounds)
        tables.append(
            "### FlatIndex(bits=1), debian: per-call time above the compiled calls\n\n"
            + common.markdown_table([ov], _SHARE_COLUMNS)
        )
    tables[-1] += f"\n\n(load average at the end of this timing part: {_loadavg()})"
    return tables


def latency_section(args) -> tuple[list[str], list[str]]:
    tables, notes = [], []
    rounds = 1 if args.quick else 3
    workdir = Path(getattr(args, "workdir", "/tmp/bbqlib-serving"))
    with common.single_thread():
        for label, X, Q, gt in _datasets(
            not getattr(args, "no_1m", False), workdir, not getattr(args, "no_debian", False)
        ):
            _dataset_settings(len(X) > 100_000)
            print(f"  {label}: building", flush=True)
            big = len(X) > 100_000
            with common.threads(BUILD_THREADS if big else 1):
                systems = _systems(X, cache=workdir / "builds-1m" if big else None)
            print(f"  {label}: recall sweeps", flush=True)
            chosen = {}  # (system, target) -> setting
            for name, (_build, settings, _extra) in systems.items():
                sweep = []
                for s in settings:  # ascending parameter: ascending cost
                    sweep.append((s, _recall(s[1](Q), gt)))
                    if sweep[-1][1] >= max(TARGETS):
                        break  # larger settings are never chosen
                for t in TARGETS:
                    ok = [x for x in sweep if x[1] >= t]
                    if ok:
                        chosen[(name, t)] = ok[0]  # the smallest setting reaching the target
            flat = _flat_index(X) if label.startswith("debian") else None
            with timed_hold(label.split(" ")[0]):
                tables += _timed_part(label, Q, systems, chosen, flat, rounds)
            del systems, flat
    notes += [
        "Single thread everywhere (numba, faiss OpenMP, hnswlib num_threads) except the 1M "
        f"set's builds ({BUILD_THREADS} threads: its `build s` is not comparable with "
        "debian's; faiss HNSWFlat is left out there, hnswlib being the graph peer); batched: all "
        f"{N_QUERIES} queries in one call, median over the rounds. Settings: the smallest "
        "parameter of each sweep (visit percentage, nprobe, ef: cost grows with it) reaching "
        f"the target recall@10 over the {N_QUERIES} queries.",
        f"Single-query latencies: {rounds} round(s) over the {N_QUERIES} queries, each round "
        "one batched call then the single queries of every system in turn. "
        "bbqlib.warmup(index) ran before the timings.",
        "Two threads: median over 5 rounds (each run one thread, then two; systems "
        "interleaved run by run) of QPS and of the 2 / 1 ratio; each run goes through the "
        "queries as many times as make the one-thread run last about 0.5 s.",
        "Timing parts: "
        + (
            f"each held `{LOCK}` at nice 0 (builds and recall sweeps ran outside it, at the "
            "script's starting priority); "
            if LOCK
            else ""
        )
        + "other work on the shared machine was not paused (load averages above): ratios "
        "measured in the same run, not absolute figures.",
    ]
    return tables, notes


def _loadavg() -> str:
    import os

    return " / ".join(f"{x:.2f}" for x in os.getloadavg())
