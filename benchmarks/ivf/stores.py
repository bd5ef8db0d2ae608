"""IVFIndex rerank vectors as float32, float16 or int8 (IVF format 6): recall, bytes, QPS.

Two parts, so that only the timing holds the shared benchmark lock::

    python benchmarks/ivf/stores.py build --workdir /tmp/ivfstores   # niced: no lock
    flock $LOCKS/bench.lock python benchmarks/ivf/stores.py time --workdir /tmp/ivfstores

``build`` builds one IVF directory per kind of stored rerank vectors (1-bit BBQ codes, the
same seed, so the lists and codes are identical and only the rerank rows differ), records the
bytes per vector on disk (the directory, and its vector files alone) and recall@10 over all
1,000 queries at several rerank depths. ``time`` opens the directories and times batch
searches of all queries (and one-query calls for the first 200), the kinds interleaved
(float32, float16, int8, float32, ...), and reports medians and the median per-round ratio
to float32. Both parts write ``<workdir>/ivf-stores-<part>.json`` and print a markdown table.
"""

from __future__ import annotations

import argparse
import json
import statistics
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

KINDS = ("float32", "float16", "int8")
K = 10
OVERSAMPLES = (3.0, 5.0, 10.0)
VISIT = 10.0
TIMED_OVERSAMPLE = 5.0
SINGLE = 200


def _recall(index, ds, oversample: float) -> float:
    _, ids = index.search(ds.queries, K, visit_percentage=VISIT, oversample=oversample)
    return float(np.mean(recall_per_query(ids, ds.gt_ids[:, :K], K)))


def part_build(args) -> dict:
    ds = common.load_dataset(args.dataset, n_queries=None)
    rows = []
    for kind in KINDS:
        path = args.workdir / kind
        t0 = time.perf_counter()
        index = bbqlib.IVFIndex(bits=1, similarity=ds.similarity, seed=0, store_vectors=kind)
        index.add(ds.base)
        index.save(path)
        build = time.perf_counter() - t0
        total = sum(f.stat().st_size for f in path.iterdir() if f.is_file())
        vectors = sum(f.stat().st_size for f in path.glob("vectors.*.npy"))
        index = bbqlib.IVFIndex.open(path)
        row = {"kind": kind, "B/vector": total / ds.n, "vector B/vector": vectors / ds.n,
               "build s (niced, untimed)": build}  # fmt: skip
        for over in OVERSAMPLES:
            row[f"recall x{over:g}"] = _recall(index, ds, over)
        print(row, flush=True)
        rows.append(row)
    return {"dataset": args.dataset, "n": ds.n, "d": ds.d, "visit_percentage": VISIT,
            "rows": rows}  # fmt: skip


def part_time(args) -> dict:
    ds = common.load_dataset(args.dataset, n_queries=None)
    indexes = {kind: bbqlib.IVFIndex.open(args.workdir / kind) for kind in KINDS}
    kw = {"visit_percentage": VISIT, "oversample": TIMED_OVERSAMPLE}
    Q1 = ds.queries[:SINGLE]

    def batch(index):
        return lambda: index.search(ds.queries, K, **kw)

    def single(index):
        return lambda: [index.search(q, K, **kw) for q in Q1]

    out = {"uptime_before": common._loadavg()}
    for mode, make, nq in (("batch", batch, ds.queries.shape[0]), ("single", single, SINGLE)):
        fns = {kind: make(index) for kind, index in indexes.items()}
        for fn in fns.values():  # warm-up: compilation, page cache
            fn()
        times = {kind: [] for kind in KINDS}
        for _ in range(args.repeats):
            for kind, fn in fns.items():
                t0 = time.perf_counter()
                fn()
                times[kind].append(time.perf_counter() - t0)
        rows = []
        for kind in KINDS:
            ratio = statistics.median(a / b for a, b in zip(times[kind], times["float32"],
                                                            strict=True))  # fmt: skip
            med = statistics.median(times[kind])
            rows.append({"kind": kind, "QPS": nq / med, "time / float32": ratio,
                         "times": times[kind]})  # fmt: skip
            print(mode, rows[-1]["kind"], f"{nq / med:.0f} QPS", f"x{ratio:.3f}", flush=True)
        out[mode] = rows
    out["uptime_after"] = common._loadavg()
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("part", choices=("build", "time"))
    p.add_argument("--workdir", type=Path, default=Path("/tmp/bbqlib-ivf-stores"))
    p.add_argument("--dataset", default="debian-minilm-384")
    p.add_argument("--repeats", type=int, default=7)
    args = p.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    result = (part_build if args.part == "build" else part_time)(args)
    result["machine"] = common.machine_info()
    (args.workdir / f"ivf-stores-{args.part}.json").write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
