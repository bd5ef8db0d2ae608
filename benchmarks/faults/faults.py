"""Faults, measured (issue 12): mutated files, kill -9 during saves, concurrent threads, and
what each new check costs.

1. **Mutation fuzzer**: seeded mutations (bit flips, random bytes, zeroed runs, truncation)
   of flat index files, IVF directories (one file of it each time: MANIFEST, header,
   postings, vectors), vector files (.npy, .fvecs, .fbin) and ann-benchmarks HDF5 files;
   each outcome is a clean error (CorruptFileError/ValueError), the same results as the
   clean file, silently wrong results, a crash (another exception, or the process died) or a
   hang (no answer within ``--hang-seconds``). Mutations run in worker subprocesses, so a
   segfault or a hang is counted, not fatal. ``--baseline DIR`` runs the same against
   another checkout (e.g. main before this work).
2. **kill -9 during each kind of save** (flat save, vector file write, IVF add, IVF delete,
   IVF save of a whole generation): a child saves in a loop and is killed at a random moment;
   the next open must find an intact index and no leftover file.
3. **Concurrency stress**: one writer and three searching threads for ``--stress-seconds``
   per index kind (in a subprocess: a crash is counted); exceptions, lost rows, invalid ids,
   searches per second during writes against the same threads without a writer.
5. **Races, swaps, first builds** (issue 27; ``tests/race_harness.py``): ``races``, opens
   of a flat file and of an IVF directory while a child process saves two versions of it
   over the same path in a loop (``--race-loads`` opens each: errors and opens equal to
   neither version must be 0); ``swaps``, files of another index, copy or generation put in
   an IVF directory (each must fail at open: 0 silent); ``firstbuild``, ``kill -9`` of a
   child building a path-backed IVF index at a random moment (``--first-builds``), then
   ``repair`` or an open (0 bytes must be left).
4. **The cost of each new check** on search, add, save and open speed, as the median ratio
   of interleaved runs with the check and without it (monkeypatched off), single process;
   ``hdf5cost``: reading a real ann-benchmarks file through the HDF5 guard (libhdf5 in a
   worker process) against in-process h5py as before.
5. **The lock cases** (issue 27, ``tests/lock_harness.py``): each class ``--lock-trials``
   times in a worker process per tree: a lock file that cannot be opened (EACCES, EROFS;
   flat save, IVF add), a stopped lock holder (flat save, IVF add), saves through a symlink,
   a symlink loop, a dangling link, ``repair`` where the lock cannot be taken. Each trial is
   ``named`` (an error naming the cause, or the write went to the link's target), ``vague``,
   ``silent`` (written without the lock or in the wrong place, or a false "busy") or
   ``hang``; the goal is 0 silent and 0 hangs.

    python benchmarks/faults/faults.py --baseline /tmp/fx2      # writes results/faults.md
    python benchmarks/faults/faults.py --only fuzz,kill --mutations 300 --kills 5   # quick
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parents[1]  # benchmarks/ (common.py)
ROOT = BENCH.parent
OUTCOMES = ("clean", "same", "wrong", "crash", "hang")
STRESS_KINDS = ("flat", "ivf_ram", "ivf_dir")


def _env(tree: Path) -> dict:
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), str(ROOT / "tests")]))


def _worker(args: list[str], tree: Path) -> subprocess.Popen:
    cmd = [sys.executable, str(Path(__file__)), "--worker", *args]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=_env(tree))


# --------------------------------------------------------------------------- 1. fuzzer


def fuzz_target(target: str, n: int, seed: int, tree: Path, hang_seconds: float) -> dict:
    """Counts of outcomes (and per mutated file) of ``n`` mutations, workers restarted after
    a crash or a hang."""
    counts, by_label = Counter(), {}
    start = 0
    while start < n:
        work = Path(tempfile.mkdtemp(prefix="bbqfuzz"))
        proc = _worker(["fuzz", target, str(n), str(seed), str(start), str(work)], tree)
        ready, _, _ = select.select([proc.stdout], [], [], 600)
        if not ready or proc.stdout.readline().strip() != b"ready":
            proc.kill()
            raise RuntimeError(f"the {target} fuzz worker of {tree} did not start")
        last = start - 1
        while True:
            ready, _, _ = select.select([proc.stdout], [], [], hang_seconds)
            line = proc.stdout.readline() if ready else None
            if not line:
                break
            i, label, outcome = line.decode().split()
            last = int(i)
            counts[outcome] += 1
            by_label.setdefault(label, Counter())[outcome] += 1
        proc.kill()
        proc.wait()
        shutil.rmtree(work, ignore_errors=True)
        if last + 1 >= n:
            break
        counts["hang" if line is None else "crash"] += 1  # mutation last + 1
        by_label.setdefault("?", Counter())["hang" if line is None else "crash"] += 1
        start = last + 2
    return {"counts": counts, "by_label": by_label}


def _run_fuzz_worker(target: str, n: int, seed: int, start: int, work: Path) -> None:
    import fault_harness as H

    t = H.TARGETS[target](work, seed=0)
    print("ready", flush=True)

    def report(i, label, outcome):
        print(i, label.replace(" ", "_"), outcome, flush=True)

    H.fuzz(t, n, seed, start=start, report=report)


# --------------------------------------------------------------------------- 2. kill -9


def kill_runs(kind: str, trials: int, tree: Path, seed: int) -> dict:
    """``trials`` kills of a child saving ``kind``; counts of corrupt and leaked after the
    next open, and of trials whose kill left something to clean up. One worker process runs
    every trial of a kind (a fresh child saver per trial), printing one line per trial."""
    code = (
        "import sys, json, pathlib, shutil, tempfile, numpy as np, fault_harness as H\n"
        "kind, trials, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])\n"
        "rng = np.random.default_rng(seed)\n"
        "for _ in range(trials):\n"
        "    work = pathlib.Path(tempfile.mkdtemp(prefix='bbqkill'))\n"
        "    try:\n"
        "        corrupt, leaked = H.kill_trial(kind, H.fresh(work / 't'), rng.uniform(0, 0.5))\n"
        "        print(json.dumps([corrupt, sorted(leaked), sorted(H.kill_trial.left),\n"
        "                          H.kill_trial.phase]), flush=True)\n"
        "    except Exception as err:\n"
        "        print(json.dumps({'error': repr(err)}), flush=True)\n"
        "    finally:\n"
        "        shutil.rmtree(work, ignore_errors=True)\n"
    )
    out = {"trials": 0, "corrupt": 0, "leaked_trials": 0, "leaked_files": 0, "left_trials": 0}
    cmd = [sys.executable, "-c", code, kind, str(trials), str(seed)]
    with tempfile.TemporaryDirectory(prefix="bbqkillcwd") as cwd:  # not the repository:
        # ``python -c`` puts the cwd first on sys.path, which would shadow ``tree``'s bbqlib
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=_env(tree), cwd=cwd)  # fmt: skip
        for line in proc.stdout:  # one line per trial, echoed: a long run shows progress
            print(kind, line.decode().strip(), flush=True)
            row = json.loads(line)
            if isinstance(row, dict):
                out.setdefault("errors", []).append(row["error"][-300:])
                continue
            corrupt, leaked, left, phase = row
            out[phase] = out.get(phase, 0) + 1
            out["trials"] += 1
            out["corrupt"] += bool(corrupt)
            out["leaked_trials"] += bool(leaked)
            out["leaked_files"] += len(leaked)
            out["left_trials"] += bool(left)
        stderr = proc.stderr.read()
        if proc.wait() != 0:
            out.setdefault("errors", []).append(stderr.decode()[-300:])
    return out


# --------------------------------------------------------------------------- 5. races (27)


def race_run(what: str, tree: Path, loads: int, builds: int, seed: int) -> dict:
    """``what`` (``flat``/``ivf`` opens during saves, ``swaps``, ``firstbuild``) in one worker
    process importing ``tree``'s bbqlib; its result row."""
    cmd = [sys.executable, str(Path(__file__)), "--worker", "race", what, str(loads),
           str(builds), str(seed)]  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bbqracecwd") as cwd:  # not the repository
        proc = subprocess.run(cmd, capture_output=True, env=_env(tree), cwd=cwd)
    try:
        return json.loads(proc.stdout.decode().strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"what": what, "error": proc.stderr.decode()[-300:]}


def _race_worker(what: str, loads: int, builds: int, seed: int) -> dict:
    import race_harness as R

    work = Path(tempfile.mkdtemp(prefix="bbqrace"))
    try:
        if what in ("flat", "ivf"):
            c = R.loads_during_saves(what, work, seconds=float("inf"), loads=loads)
            first = next((k for k in c if k.startswith("error:")), "")
            return {"what": f"{what}: opens during saves", "tried": loads, "a": c["a"],
                    "b": c["b"], "errors": c["error"], "wrong": c["wrong"],
                    "first_error": first}  # fmt: skip
        if what == "swaps":
            return {"what": "swaps", **R.swap_outcomes(work)}
        rng = np.random.default_rng(seed)
        out = {"what": "killed first builds", "tried": builds, "killed": 0, "left_bytes": 0,
               "after_bytes": 0, "files_after": []}  # fmt: skip
        for i in range(builds):
            then = ("repair", "open")[i % 2]
            r = R.killed_first_build(work / str(i), float(rng.uniform(0, 1.5)), then=then)
            out["killed"] += r["killed"]
            out["left_bytes"] += r["left"]
            out["after_bytes"] += r["after"]
            out["files_after"] += r["files_after"]
        return out
    finally:
        shutil.rmtree(work, ignore_errors=True)


# --------------------------------------------------------------------------- 3. stress


def _stress(kind: str, seconds: float) -> dict:
    """One writer + 3 readers for ``seconds``; then the same readers alone as long."""
    from fault_harness import unit_rows

    import bbqlib

    d = 64
    pool = unit_rows(40_000, d, 1)
    work = Path(tempfile.mkdtemp(prefix="bbqstress"))
    if kind == "flat":
        index = bbqlib.FlatIndex(bits=4, similarity="cosine")
    else:
        path = work / "ivf" if kind == "ivf_dir" else None
        index = bbqlib.IVFIndex(bits=1, similarity="cosine", cluster_size=128, seed=7, path=path)
    index.add(pool[:5000])
    state = {"n": 5000, "deleted": [], "writes": 0}
    errors, bad = [], Counter()
    stop = threading.Event()
    searches = Counter()
    rng_w = np.random.default_rng(3)

    def writer():
        try:
            while not stop.is_set() and state["n"] + 100 <= pool.shape[0]:
                n = state["n"]
                if kind != "flat" and rng_w.integers(0, 4) == 0:
                    live = np.setdiff1d(np.arange(n), state["deleted"])
                    gone = rng_w.choice(live, 10, replace=False)
                    index.delete(gone)
                    state["deleted"].extend(gone.tolist())
                else:
                    index.add(pool[n : n + 100])
                    state["n"] = n + 100
                state["writes"] += 1
        except Exception as err:  # noqa: BLE001 - counted
            errors.append(repr(err))

    def reader(seed, phase):
        rng = np.random.default_rng(seed)
        kw = {} if kind == "flat" else {"visit_percentage": 10.0}
        while not stop.is_set():
            forbidden = np.array(state["deleted"])
            try:
                _, ids = index.search(pool[rng.integers(0, state["n"], 4)], 10, **kw)
            except Exception as err:  # noqa: BLE001 - counted
                errors.append(repr(err))
                continue
            searches[phase] += 1
            n_now = index.ntotal
            for row in ids:
                v = row[row >= 0]
                bad["duplicate"] += int(v.size != np.unique(v).size)
                bad["beyond ntotal"] += int((v >= n_now).any())
                bad["deleted"] += int(np.isin(v, forbidden).any())

    out = {"kind": kind}
    for phase, with_writer in (("during writes", True), ("no writer", False)):
        stop.clear()
        threads = [threading.Thread(target=reader, args=(s, phase)) for s in range(3)]
        if with_writer:
            threads.append(threading.Thread(target=writer))
        for t in threads:
            t.start()
        time.sleep(seconds)
        stop.set()
        for t in threads:
            t.join()
        out[f"searches/s {phase}"] = searches[phase] / seconds
    n, gone = state["n"], np.array(state["deleted"], dtype=np.int64)
    live = np.setdiff1d(np.arange(n), gone)
    kw = {"oversample": 5.0} if kind == "flat" else {"visit_percentage": 100.0, "oversample": 20}
    found = np.concatenate([index.search(pool[live[i : i + 2000]], 1, **kw)[1][:, 0]
                            for i in range(0, live.size, 2000)])  # fmt: skip
    out.update(writes=state["writes"], rows=n, exceptions=len(errors),
               first_exception=errors[0] if errors else None,
               lost_rows=int((found != live).sum()), invalid_ids=sum(bad.values()),
               ntotal_ok=index.ntotal == n)  # fmt: skip
    shutil.rmtree(work, ignore_errors=True)
    return out


def stress_run(kind: str, seconds: float, tree: Path) -> dict:
    proc = _worker(["stress", kind, str(seconds)], tree)
    try:
        stdout, _ = proc.communicate(timeout=20 * seconds + 900)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        return {"kind": kind, "crashed": "hung (killed)"}
    if proc.returncode != 0:
        return {"kind": kind, "crashed": f"exit {proc.returncode}"}
    return json.loads(stdout.decode().strip().splitlines()[-1])


# --------------------------------------------------------------------------- 4. costs


@contextlib.contextmanager
def _patched(obj, name, value):
    old = getattr(obj, name)
    setattr(obj, name, value)
    try:
        yield
    finally:
        setattr(obj, name, old)


def costs(repeats: int) -> list[dict]:
    """Median ratios (with check / without), interleaved; > 1 means the check costs time."""
    import common as C
    from fault_harness import unit_rows

    import bbqlib
    from bbqlib.index import guard as _locks
    from bbqlib.index.flat import files as FF
    from bbqlib.index.flat import index as FL
    from bbqlib.index.ivf import binding as BI
    from bbqlib.index.ivf import files as F
    from bbqlib.index.ivf import storage as ST
    from bbqlib.index.ivf.segments import Segment
    from bbqlib.storage import atomic
    from bbqlib.storage import container as CT

    rows = []
    work = Path(tempfile.mkdtemp(prefix="bbqcost"))
    nullctx = contextlib.nullcontext

    def ratio(what, fn, off_patches, note=""):
        def without():
            with contextlib.ExitStack() as st:
                for obj, name, value in off_patches:
                    st.enter_context(_patched(obj, name, value))
                fn()

        t = C.interleaved_ratio(fn, without, repeats=repeats, warmup=1)
        rows.append({"what": what, "ratio": t.ratio, "with": t.median_a * 1e3,
                     "without": t.median_b * 1e3, "note": note})  # fmt: skip

    d = 128
    X = unit_rows(100_000, d, 1)
    Q = unit_rows(1, d, 2)
    flat = bbqlib.FlatIndex(bits=1, similarity="cosine")
    flat.add(X)
    flat.search(Q, 10)
    no_lock = [(_locks.IndexGuard, "reading", lambda self: nullctx())]
    ratio("FlatIndex.search, 1 query, 100k x 128 (readers-writer lock)",
          lambda: [flat.search(Q, 10) for _ in range(20)], no_lock)  # fmt: skip
    E = unit_rows(20_000, d, 3) * 3
    ratio("FlatIndex.add, 20k x 128 euclidean (copy of the caller's batch)",
          lambda: bbqlib.FlatIndex(bits=1, similarity="euclidean").add(E),
          [(FL, "owned_rows", lambda rows, source: rows)])  # fmt: skip
    fpath = work / "flat.bbq"
    flat.save(fpath)
    unlocked = [(CT, "atomic_path", lambda p, lock=True: atomic.atomic_path(p, lock=False))]
    ratio("FlatIndex.save, 100k x 128 (path lock, orphan cleanup)", lambda: flat.save(fpath),
          unlocked)  # fmt: skip
    ratio("FlatIndex.load (orphan check: one listdir)", lambda: bbqlib.load(fpath),
          [(FF, "clean_orphans", lambda p: [])])  # fmt: skip

    ivf_dir = work / "ivf"
    ivf = bbqlib.IVFIndex(bits=1, similarity="cosine", cluster_size=256, seed=7, path=ivf_dir)
    ivf.add(X)
    ivf.delete(np.arange(0, 100_000, 50))
    Qs = unit_rows(16, d, 4)
    opened = bbqlib.IVFIndex.open(ivf_dir)
    opened.search(Qs, 10)
    ratio("IVFIndex.search, 16 queries, warm (readers-writer lock)",
          lambda: [opened.search(Qs, 10) for _ in range(10)], no_lock)  # fmt: skip

    def first_search():
        bbqlib.IVFIndex.open(ivf_dir).search(Qs, 10, visit_percentage=5.0)

    ratio("IVFIndex.open + first search, batch (row CRC32s of the rows reranked)",
          first_search, [(Segment, "check_rows", lambda self, r: None)],
          "warm page cache; the one-query path checks inside its kernel (cold costs: "
          "results/cold_checks.md)")  # fmt: skip
    ratio("IVFIndex.open (generation check, litter check)",
          lambda: bbqlib.IVFIndex.open(ivf_dir), [(ST, "_litter", lambda d, n: False)])  # fmt: skip
    ratio("IVFIndex.open (format 9 binding: posting file's header, first/last rows)",
          lambda: bbqlib.IVFIndex.open(ivf_dir),
          [(BI, "check_postings", lambda p, f, m: None),
           (BI, "check_segment_ends", lambda b, a: None)])  # fmt: skip
    more = unit_rows(1000, d, 5)

    def add_after_open():
        ix = bbqlib.IVFIndex.open(ivf_dir)
        ix.path = None  # measure the add, not the save
        ix.add(more)

    ratio("IVFIndex.add of 1k rows after open (CRC of every list + assignments first)",
          add_after_open, [(F, "check_before_rewrite", lambda ix: None)])  # fmt: skip

    victims = iter(range(1, 100_000, 50))

    def delete_save():
        bbqlib.IVFIndex.open(ivf_dir).delete([next(victims)])

    ratio("IVFIndex.delete with a path (directory lock, stale check, temp cleanup)",
          delete_save, [(ST, "directory_lock", lambda p, **kw: nullctx(True)),
                        (ST, "remove_temp_files_of", lambda d: [])])  # fmt: skip
    shutil.rmtree(work, ignore_errors=True)
    return rows


def hdf5_costs(repeats: int) -> list[dict]:
    """The HDF5 guard (libhdf5 in a worker process) against reading in-process with h5py as
    before, on a real data set written in ann-benchmarks' layout (debian-minilm-384 from
    ../shared/data, else a random one of the same size)."""
    import common as C
    import h5py

    from bbqlib.formats import hdf5_guard
    from bbqlib.formats.ann_benchmarks import (
        read_ann_benchmarks,
        read_ann_benchmarks_metric,
        write_ann_benchmarks,
    )

    src = ROOT.parent / "shared" / "data" / "debian-minilm-384"
    if (src / "base.npy").exists():
        train, test = np.load(src / "base.npy"), np.load(src / "queries.npy")
        neighbors = np.load(src / "gt_l2.npy")[:, :100]
        distances = np.load(src / "gt_l2_dists.npy")[:, :100]
        name = f"debian-minilm-384 ({train.shape[0]} x {train.shape[1]})"
    else:
        g = np.random.default_rng(0)
        train, test = g.random((60_000, 384), np.float32), g.random((1000, 384), np.float32)
        neighbors, distances = g.integers(0, 60_000, (1000, 100)), g.random((1000, 100))
        name = "random 60000 x 384"
    work = Path(tempfile.mkdtemp(prefix="bbqh5cost"))
    path = write_ann_benchmarks(work / "data.hdf5", train, test, neighbors, distances,
                                "euclidean")  # fmt: skip
    size = path.stat().st_size / 2**20

    def inproc(mmap):  # what read_ann_benchmarks did before the guard
        def run():
            with h5py.File(path, "r") as f:
                out = []
                for n in ("train", "test", "neighbors", "distances"):
                    d = f[n]
                    if mmap:
                        out.append(np.memmap(path, dtype=d.dtype, mode="r",
                                             offset=d.id.get_offset(), shape=d.shape))  # fmt: skip
                    else:
                        out.append(d[()])
                out.append(f.attrs["distance"])
            return out

        return run

    def guarded(mmap, cold):
        def run():
            if cold:
                hdf5_guard._stop_worker()
            return (*read_ann_benchmarks(path, mmap=mmap), read_ann_benchmarks_metric(path))

        return run

    rows = []
    for mmap in (False, True):
        for cold in (False, True):
            t = C.interleaved_ratio(guarded(mmap, cold), inproc(mmap), repeats=repeats, warmup=1)
            state = "first read (worker start)" if cold else "worker running"
            what = f"read_ann_benchmarks + metric, {name}, {size:.0f} MiB, mmap={mmap}, {state}"
            note = "without = in-process h5py (before); warm page cache"
            rows.append({"what": what, "ratio": t.ratio, "with": t.median_a * 1e3,
                         "without": t.median_b * 1e3, "note": note})  # fmt: skip
    hdf5_guard._stop_worker()
    shutil.rmtree(work, ignore_errors=True)
    return rows


# --------------------------------------------------------------------------- 5. lock cases


def _run_lock_worker(trials: int, hang_seconds: float) -> None:
    """Every lock case ``trials`` times in this process; one JSON line of counts per case."""
    from lock_harness import LOCK_CASES, LOCK_OUTCOMES, LockFixture, lock_trial

    with tempfile.TemporaryDirectory(prefix="bbqlocks") as work:
        fix = LockFixture(Path(work))
        for case in LOCK_CASES:
            counts = Counter(lock_trial(case, fix, hang_seconds) for _ in range(trials))
            row = {"case": case, "tried": trials, **{k: counts.get(k, 0) for k in LOCK_OUTCOMES}}
            print(json.dumps(row), flush=True)


def lock_runs(trials: int, tree: Path, hang_seconds: float = 2.0) -> list[dict]:
    """Rows of :func:`_run_lock_worker` run against ``tree`` (a crash is a row too)."""
    proc = _worker(["locks", str(trials), str(hang_seconds)], tree)
    stdout, _ = proc.communicate()
    rows = [json.loads(line) for line in stdout.decode().splitlines() if line.startswith("{")]
    if proc.returncode != 0:
        rows.append({"case": f"worker exited {proc.returncode} after {len(rows)} cases"})
    return rows


# --------------------------------------------------------------------------- report


def _fuzz_rows(name: str, res: dict, tree_name: str) -> list[dict]:
    out = []
    labels = [(f"{name}: all", res["counts"])]
    labels += [(f"{name}: {k}", v) for k, v in sorted(res["by_label"].items()) if k != "?"]
    for label, c in labels:
        out.append({"tree": tree_name, "format": label, "tried": sum(c.values()),
                    **{k: c.get(k, 0) for k in OUTCOMES}})  # fmt: skip
    return out


def race_tables(only: set, trees: list, args) -> list[str]:
    """The tables of section 5 (races, swaps, killed first builds)."""
    import common as C

    tables = []
    run = [w for w, on in (("flat", "races"), ("ivf", "races"), ("swaps", "swaps"),
                           ("firstbuild", "firstbuild")) if on in only]  # fmt: skip
    rows = {w: [] for w in run}
    for tree_name, tree in trees:
        for what in run:
            r = race_run(what, tree, args.race_loads, args.first_builds, args.seed)
            print(tree_name, r, flush=True)
            rows[what].append({"tree": tree_name, **r})
    races = rows.get("flat", []) + rows.get("ivf", [])
    if races:
        cols = [("tree", "code"), ("what", "index"), ("tried", "opens"), ("a", "= version a"),
                ("b", "= version b"), ("errors", "errors"), ("wrong", "wrong (a mix)"),
                ("first_error", "first error")]  # fmt: skip
        tables.append("### Opens while another process saves the same path\n\n"
                      + C.markdown_table(races, cols))  # fmt: skip
    if rows.get("swaps"):
        swap = [{"tree": r["tree"], "file": k, "outcome": v} for r in rows["swaps"]
                for k, v in r.items() if k not in ("tree", "what")]  # fmt: skip
        cols = [("tree", "code"), ("file", "file swapped in"), ("outcome", "outcome")]
        tables.append("### Files of another index, copy or generation (clean: "
                      "CorruptFileError at open; silent: served)\n\n"
                      + C.markdown_table(swap, cols))  # fmt: skip
    if rows.get("firstbuild"):
        cols = [("tree", "code"), ("tried", "kills"), ("killed", "before the commit"),
                ("left_bytes", "bytes left"), ("after_bytes", "bytes after repair/open"),
                ("files_after", "files after")]  # fmt: skip
        tables.append(
            "### kill -9 of a first path-backed IVF build, then repair (even "
            "trials) or open (odd)\n\n" + C.markdown_table(rows["firstbuild"], cols)
        )
    return tables


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mutations", type=int, default=2000, help="per target")
    p.add_argument("--kills", type=int, default=100, help="per save kind")
    p.add_argument("--baseline-kills", type=int, default=20)
    p.add_argument("--targets", default="flat,ivf,vectors,hdf5", help="fuzz targets")
    p.add_argument("--kinds", help="save kinds to kill, comma-separated (default: all)")
    p.add_argument("--stress-seconds", type=float, default=20.0)
    p.add_argument("--repeats", type=int, default=9)
    p.add_argument("--hang-seconds", type=float, default=60.0)
    p.add_argument("--lock-trials", type=int, default=50, help="per lock case")
    p.add_argument("--baseline", type=Path, help="another checkout to compare (e.g. main)")
    p.add_argument("--only", default="fuzz,kill,stress,locks,cost,hdf5cost,races,swaps,firstbuild")
    p.add_argument("--race-loads", type=int, default=10_000, help="opens per index kind")
    p.add_argument("--first-builds", type=int, default=20, help="killed first builds")
    p.add_argument("--seed", type=int, default=2024)
    p.add_argument("--out", type=Path, default=BENCH / "results" / "faults.md")
    p.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        kind, *rest = args.worker
        sys.path.insert(0, str(ROOT / "tests"))
        if kind == "fuzz":
            target, n, seed, start, work = rest
            _run_fuzz_worker(target, int(n), int(seed), int(start), Path(work))
        elif kind == "locks":
            _run_lock_worker(int(rest[0]), float(rest[1]))
        elif kind == "race":
            print(json.dumps(_race_worker(rest[0], *map(int, rest[1:]))), flush=True)
        else:
            print(json.dumps(_stress(rest[0], float(rest[1]))), flush=True)
        return

    sys.path[:0] = [str(ROOT), str(BENCH), str(ROOT / "tests")]  # this checkout's bbqlib
    import common as C
    from fault_harness import PHASES, SAVE_KINDS

    only = set(args.only.split(","))
    trees = [("this branch", ROOT)] + ([("baseline", args.baseline)] if args.baseline else [])
    tables, notes = [], [f"uptime at start: {C._loadavg()} (1/5/15 min load on 2 cores)"]
    if "fuzz" in only:
        rows = []
        for tree_name, tree in trees:
            for target in args.targets.split(","):
                t0 = time.time()
                res = fuzz_target(target, args.mutations, args.seed, tree, args.hang_seconds)
                rows += _fuzz_rows(target, res, tree_name)
                print(tree_name, target, dict(res["counts"]), f"{time.time() - t0:.0f}s")
        cols = [("tree", "code"), ("format", "format (mutated file)"), ("tried", "tried"),
                ("clean", "clean errors"), ("same", "unchanged results"),
                ("wrong", "silent wrong"), ("crash", "crashes"), ("hang", "hangs")]  # fmt: skip
        tables.append("### Mutation fuzzer\n\n" + C.markdown_table(rows, cols))
    if "kill" in only:
        rows = []
        for tree_name, tree in trees:
            n = args.kills if tree_name == "this branch" else args.baseline_kills
            for kind in args.kinds.split(",") if args.kinds else SAVE_KINDS:
                res = kill_runs(kind, n, tree, args.seed)
                rows.append({"tree": tree_name, "kind": kind, **res})
                print(tree_name, kind, res)
        cols = [("tree", "code"), ("kind", "save kind"), ("trials", "kills"),
                ("left_trials", "kills that left files"), ("corrupt", "corrupt after"),
                ("leaked_trials", "kills leaking files after the next open"),
                ("leaked_files", "leaked files")]  # fmt: skip
        tables.append("### kill -9 during saves\n\n" + C.markdown_table(rows, cols))
        for r in rows:
            for phase in PHASES:
                r.setdefault(phase, 0)
        cols = [("tree", "code"), ("kind", "save kind"), ("trials", "kills"),
                *[(phase, phase) for phase in PHASES]]  # fmt: skip
        tables.append("### Where the kills landed (phase of the save; `fault_harness.PHASES`)"
                      "\n\n" + C.markdown_table(rows, cols))  # fmt: skip
    if "stress" in only:
        rows = []
        for tree_name, tree in trees:
            for kind in STRESS_KINDS:
                res = stress_run(kind, args.stress_seconds, tree)
                rows.append({"tree": tree_name, **res})
                print(tree_name, res)
        cols = [("tree", "code"), ("kind", "index"), ("crashed", "process crashed"),
                ("exceptions", "exceptions"), ("lost_rows", "lost rows"),
                ("invalid_ids", "invalid results"), ("writes", "writes"),
                ("searches/s during writes", "searches/s during writes", ".1f"),
                ("searches/s no writer", "searches/s, no writer", ".1f")]  # fmt: skip
        title = f"### Concurrency stress (1 writer, 3 searching threads, {args.stress_seconds:g} s)"
        tables.append(title + "\n\n" + C.markdown_table(rows, cols))
        notes.append("first exceptions: " + ("; ".join(
            f"{r['tree']} {r['kind']}: {r['first_exception']}" for r in rows
            if r.get("first_exception")) or "none"))  # fmt: skip
    if "locks" in only:
        rows = []
        for tree_name, tree in trees:
            for res in lock_runs(args.lock_trials, tree):
                rows.append({"tree": tree_name, **res})
                print(tree_name, res)
        cols = [("tree", "code"), ("case", "lock case"), ("tried", "tried"),
                ("named", "cause named"), ("vague", "vague errors"),
                ("silent", "silent writes / false busy"), ("hang", "hangs")]  # fmt: skip
        tables.append("### Lock cases (`tests/lock_harness.py`)\n\n"
                      + C.markdown_table(rows, cols))  # fmt: skip
    if "cost" in only or "hdf5cost" in only:
        rows = (costs(args.repeats) if "cost" in only else []) + (
            hdf5_costs(args.repeats) if "hdf5cost" in only else [])  # fmt: skip
        for r in rows:
            print(r)
        cols = [("what", "operation (check)"), ("ratio", "with / without", ".3f"),
                ("with", "ms with", ".2f"), ("without", "ms without", ".2f"),
                ("note", "")]  # fmt: skip
        tables.append("### Cost of the checks (median of interleaved pairs)\n\n"
                      + C.markdown_table(rows, cols))  # fmt: skip
    if only & {"races", "swaps", "firstbuild"}:
        tables += race_tables(only, trees, args)
    notes.append(f"uptime at end: {C._loadavg()}")
    command = "python benchmarks/faults/faults.py " + " ".join(sys.argv[1:])
    C.write_result(args.out, "Faults: mutated files, kill -9, threads, and what checks cost",
                   command.strip(), tables, notes)  # fmt: skip
    print("wrote", args.out)


if __name__ == "__main__":
    main()
