"""One query against a batch, per quantizer family, on Flat and IVF (issue 28's measure).

For every family (BBQ 1-bit and 2-bit, RaBitQ 2-bit, int8 ``osq`` / ``per_dim`` /
``global``, SAQ 2 bits per dimension, TurboQuant 4-bit MSE) and both indexes
(``FlatIndex``, in-memory ``IVFIndex``)
on debian-minilm-384, one thread, default options, ``k = 10``, after ``bbqlib.warmup(index)``:

* **batch**: one ``search`` call with every query, its time divided by the number of queries
  (median of ``--repeats`` calls);
* **one query**: the p50 of ``search`` calls of one query each, over the queries (the
  one-query fast path where the family has one);
* **ratio** one query / batch per query. Issue 28 asks for <= 1.3 for every family.

Interleaved per family (batch, then the one-query pass, ``--repeats`` times) so that drifts of
the machine's speed fall on both. Run from the repository root with the shared data beside the
checkout (or ``BBQLIB_DATA``)::

    python benchmarks/serving/single_query.py --repeats 3
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent  # benchmarks/, on sys.path instead of HERE (see common.py)
sys.path[:] = [str(BENCH), *(p for p in sys.path if Path(p or ".").resolve() != HERE)]

#: (name, constructor of the quantizer) for every family measured.
FAMILIES = (
    ("BBQ 1-bit", lambda b, sim: b.BBQQuantizer(bits=1, similarity=sim)),
    ("BBQ 2-bit", lambda b, sim: b.BBQQuantizer(bits=2, similarity=sim)),
    ("RaBitQ 2-bit", lambda b, sim: b.RaBitQQuantizer(bits=2, similarity=sim, seed=0)),
    ("int8 osq", lambda b, sim: b.ScalarQuantizer(bits=8, method="osq", similarity=sim)),
    ("int8 per_dim", lambda b, sim: b.ScalarQuantizer(bits=8, method="per_dim", similarity=sim)),
    ("int8 global", lambda b, sim: b.ScalarQuantizer(bits=8, method="global", similarity=sim)),
    ("SAQ 2 bits/dim", lambda b, sim: b.SAQQuantizer(bits=2.0, similarity=sim, seed=0)),
    ("TurboQuant 4-bit", lambda b, sim: b.TurboQuantQuantizer(bits=4, similarity=sim, seed=0)),
)


def _time_batch(index, Q) -> float:
    t0 = time.perf_counter()
    index.search(Q, 10)
    return (time.perf_counter() - t0) / Q.shape[0]


def _time_one(index, Q) -> float:
    lat = np.empty(Q.shape[0])
    for i in range(Q.shape[0]):
        t0 = time.perf_counter()
        index.search(Q[i], 10)
        lat[i] = time.perf_counter() - t0
    return float(np.median(lat))


def measure(kind: str, family: str, make, data, repeats: int) -> dict:
    import bbqlib

    X, Q, sim = data.base, data.queries, data.similarity
    q = make(bbqlib, sim)
    index = bbqlib.FlatIndex(q) if kind == "Flat" else bbqlib.IVFIndex(q)
    t0 = time.perf_counter()
    index.add(X)
    build = time.perf_counter() - t0
    t0 = time.perf_counter()
    bbqlib.warmup(index)
    warm = time.perf_counter() - t0
    index.search(Q[:2], 10)
    index.search(Q[0], 10)
    batch, one = [], []
    for _ in range(repeats):
        batch.append(_time_batch(index, Q))
        one.append(_time_one(index, Q))
    b, o = float(np.median(batch)), float(np.median(one))
    return {"index": kind, "family": family, "batch_us": b * 1e6, "one_us": o * 1e6,
            "ratio": o / b, "build_s": build, "warmup_s": warm}  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--indexes", default="Flat,IVF")
    ap.add_argument("--out", default=str(BENCH / "results" / "single_query.md"))
    args = ap.parse_args(argv)
    import common as C

    import bbqlib

    bbqlib.set_num_threads(1)
    data = C.load_dataset("debian-minilm-384", n_queries=args.queries)
    rows = []
    for kind in args.indexes.split(","):
        for family, make in FAMILIES:
            row = measure(kind, family, make, data, args.repeats)
            rows.append(row)
            print(row, flush=True)
    head = ("| index | family | batch µs / query | one query p50 µs | one / batch | build s "
            "| warmup(index) s |\n|---|---|---|---|---|---|---|")  # fmt: skip
    table = "\n".join(
        [head] + [
            f"| {r['index']} | {r['family']} | {r['batch_us']:.0f} | {r['one_us']:.0f} | "
            f"{r['ratio']:.2f} | {r['build_s']:.1f} | {r['warmup_s']:.1f} |"
            for r in rows
        ]
    )  # fmt: skip
    notes = [
        f"debian-minilm-384 ({data.n} x {data.d}, {data.queries.shape[0]} queries, "
        f"{data.similarity}), one thread, default options of every index and quantizer, k = 10 "
        "(default rerank); IVF in memory.",
        "batch: one search() call with every query, time / queries; one query: the p50 of "
        f"search() calls of one query each; median of {args.repeats} interleaved passes. "
        "warmup(index): its time in this process (kernels already in the disk cache or not).",
    ]
    C.write_result(Path(args.out), "One query against a batch, per family (Flat and IVF)",
                   "python benchmarks/serving/single_query.py " + " ".join(argv or sys.argv[1:]),
                   table, notes)  # fmt: skip
    print(Path(args.out).read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
