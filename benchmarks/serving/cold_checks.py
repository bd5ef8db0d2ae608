"""What each check on the IVF serving path costs on a cold page cache.

An index opened from files checks what it reads: the header whole at open (its container
CRC32s: centroids, list CRCs, the vector rows' CRC32 table, ids and deletions live in it or in
the posting file's small sections), each posting list's CRC32 at its first scan, and each
reranked row's CRC32 at its first read. This measures, in fresh processes on a cold page cache
(``drop_caches`` before each), the open and the first single-query searches with every check,
with the list checks or the row checks marked done in advance (nothing read for them), and
with neither: latency (p50, p90, p99), and bytes read from the disk (``/proc/self/io``
``read_bytes``: page faults and read-ahead included) at open and per query.

Needs root (``drop_caches``) and the 1M index and data of ``ivf/memory.py``::

    python benchmarks/ivf/memory.py --n 1000000 --workdir /tmp/bbqlib-ivf-mem --libs bbqlib
    python benchmarks/serving/cold_checks.py --workdir /tmp/bbqlib-ivf-mem
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

VARIANTS = ("all checks", "no list checks", "no row checks", "no checks")
MB = 1 << 20


def _read_bytes() -> int:
    with open("/proc/self/io") as f:
        for line in f:
            if line.startswith("read_bytes:"):
                return int(line.split()[1])
    return 0


def serve(args) -> int:
    """Child: warm the kernels on a throwaway index, wait for 'go', open, search."""
    import numba

    import bbqlib

    numba.set_num_threads(1)
    queries = np.load(args.queries)[: args.queries_n]
    over, vp = float(args.oversample), float(args.visit)
    warm = bbqlib.IVFIndex.open(args.warm)
    warm.search(queries[0], 10, visit_percentage=vp, oversample=over)
    warm.search(queries[:2], 10, visit_percentage=vp, oversample=over)
    del warm
    print("ready", flush=True)
    if sys.stdin.readline().strip() != "go":
        return 1
    r0, t0 = _read_bytes(), time.perf_counter()
    index = bbqlib.IVFIndex.open(args.index)
    open_s, open_bytes = time.perf_counter() - t0, _read_bytes() - r0
    if args.variant in ("no list checks", "no checks"):
        index._postings.mark_verified()
    if args.variant in ("no row checks", "no checks"):
        for seg in index._segments:
            if seg.blocks is not None:
                seg.blocks._checked[:] = True
    lat, reads = [], []
    for q in queries:
        r0, t0 = _read_bytes(), time.perf_counter()
        index.search(q, 10, visit_percentage=vp, oversample=over)
        lat.append(time.perf_counter() - t0)
        reads.append(_read_bytes() - r0)
    print(json.dumps({"open_s": open_s, "open_bytes": open_bytes, "lat": lat, "reads": reads}))
    return 0


def drop_caches() -> None:
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def run(variant: str, args) -> dict:
    work = Path(args.workdir)
    cmd = [sys.executable, __file__, "--serve", "--variant", variant,
           "--index", str(work / "bbqlib-ivf"), "--warm", str(work / "warm-ivf"),
           "--queries", str(next(work.glob("queries-*.npy"))),
           "--queries-n", str(args.queries_n), "--visit", str(args.visit),
           "--oversample", str(args.oversample)]  # fmt: skip
    child = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline().strip() == "ready"
    drop_caches()
    child.stdin.write("go\n")
    child.stdin.flush()
    out = json.loads(child.stdout.readline())
    child.wait()
    lat = np.array(out["lat"][1:]) * 1000  # the first query apart: it pays the first faults
    reads = np.array(out["reads"][1:]) / 1024
    return {
        "variant": variant,
        "open_ms": out["open_s"] * 1000,
        "open_mb": out["open_bytes"] / MB,
        "first_ms": out["lat"][0] * 1000,
        "p50_ms": float(np.median(lat)),
        "p90_ms": float(np.percentile(lat, 90)),
        "p99_ms": float(np.percentile(lat, 99)),
        "kb_per_query": float(reads.mean()),
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workdir", default="/tmp/bbqlib-ivf-mem")
    ap.add_argument("--visit", type=float, default=0.1)
    ap.add_argument("--oversample", type=float, default=5.0)
    ap.add_argument("--queries-n", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--out", default=str(BENCH / "results" / "cold_checks.md"))
    ap.add_argument("--serve", action="store_true")
    ap.add_argument("--variant")
    ap.add_argument("--index")
    ap.add_argument("--warm")
    ap.add_argument("--queries")
    args = ap.parse_args(argv)
    if args.serve:
        return serve(args)
    import common

    if os.geteuid() != 0:
        raise SystemExit("needs root (drop_caches)")
    rows = []
    for rep in range(args.repeats):  # variants interleaved: the machine drifts
        for variant in VARIANTS:
            row = run(variant, args)
            row["run"] = rep + 1
            rows.append(row)
            print(json.dumps(row), flush=True)
    head = ("| run | checks | open ms | open MB read | first query ms | p50 ms | p90 ms | p99 ms "
            "| KB read / query |\n|---|---|---|---|---|---|---|---|---|")  # fmt: skip
    table = "\n".join(
        [head]
        + [
            f"| {r['run']} | {r['variant']} | {r['open_ms']:.0f} | {r['open_mb']:.1f} | "
            f"{r['first_ms']:.1f} | {r['p50_ms']:.2f} | {r['p90_ms']:.2f} | {r['p99_ms']:.2f} | "
            f"{r['kb_per_query']:.0f} |"
            for r in rows
        ]
    )
    names = {args.workdir: "$WORKDIR", args.out: "$OUT"}
    command = "python benchmarks/serving/cold_checks.py " + " ".join(
        names.get(a, a) for a in (argv or sys.argv[1:])
    )
    notes = [
        "Each row: a fresh process (kernels loaded on a small throwaway index), the page "
        "cache dropped, then IVFIndex.open and single-query searches of the 1M x 384 index "
        f"of ivf/memory.py (1-bit, visit {args.visit}%, oversample {args.oversample}), "
        "one thread, uncapped. The first query is reported apart; p50/p90/p99 and the bytes "
        "read are over the others.",
        "'no list checks' / 'no row checks': the posting lists' / vector rows' CRC32s marked "
        "checked right after open, so searches read nothing for them (what serving without "
        "that check would cost).",
    ]
    common.write_result(
        Path(args.out), "What each serving-path check costs on a cold cache (1M x 384 IVF)",
        command, table, notes=notes,
    )  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
