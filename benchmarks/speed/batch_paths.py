"""Batch search speed per family, Flat and IVF, of one or more checkouts of bbqlib, interleaved.

Did a change slow the batch paths? Each checkout runs in its own process (``PYTHONPATH`` set
to it), round after round, so that drifts of the machine's speed fall on every checkout; the
table gives the median over rounds of the time of one ``search`` call with every query
(divided by the queries), one thread, default options, k = 10, on debian-minilm-384, and each
checkout's ratio to the first. Run from the repository root::

    python benchmarks/speed/batch_paths.py --checkouts $BEFORE,. --rounds 3
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

#: (index, family, constructor of the quantizer given bbqlib and the similarity).
CELLS = (
    ("Flat", "BBQ 1-bit", "b.BBQQuantizer(bits=1, similarity=s)"),
    ("Flat", "BBQ 4-bit", "b.BBQQuantizer(bits=4, similarity=s)"),
    ("Flat", "RaBitQ 2-bit", "b.RaBitQQuantizer(bits=2, similarity=s, seed=0)"),
    ("Flat", "int8 per_dim", "b.ScalarQuantizer(bits=8, method='per_dim', similarity=s)"),
    ("IVF", "BBQ 1-bit", "b.BBQQuantizer(bits=1, similarity=s)"),
    ("IVF", "BBQ 2-bit", "b.BBQQuantizer(bits=2, similarity=s)"),
    ("IVF", "RaBitQ 2-bit q4", "b.RaBitQQuantizer(bits=2, query_bits=4, similarity=s, seed=0)"),
    ("IVF", "int8 per_dim", "b.ScalarQuantizer(bits=8, method='per_dim', similarity=s)"),
)

_CHILD = """
import json, sys, time, numpy as np
sys.path.insert(0, {bench!r})
import common as C
import bbqlib as b
b.set_num_threads(1)
data = C.load_dataset("debian-minilm-384", n_queries={queries})
s = data.similarity
out = {{}}
for kind, family, make in {cells!r}:
    q = eval(make)
    index = b.FlatIndex(q) if kind == "Flat" else b.IVFIndex(q)
    index.add(data.base)
    b.warmup(index)
    index.search(data.queries, 10)
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        index.search(data.queries, 10)
        times.append(time.perf_counter() - t0)
    out[kind + " " + family] = min(times) / data.queries.shape[0]
print(json.dumps(out))
"""


def run(checkout: Path, queries: int) -> dict:
    code = _CHILD.format(bench=str(HERE.parent), queries=queries, cells=CELLS)
    env = {**__import__("os").environ, "PYTHONPATH": str(checkout)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True,
                          text=True, check=True)  # fmt: skip
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None) -> int:
    import statistics

    import common as C

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--checkouts", required=True, help="comma-separated checkout folders")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--out", default=str(HERE.parent / "results" / "batch_paths.md"))
    args = ap.parse_args(argv)
    checkouts = [Path(c).resolve() for c in args.checkouts.split(",")]
    runs = {c: [] for c in checkouts}
    for r in range(args.rounds):
        for c in checkouts:
            t0 = time.perf_counter()
            runs[c].append(run(c, args.queries))
            print(f"round {r + 1} {c.name}: {time.perf_counter() - t0:.0f} s", flush=True)
    names = [f"{k} {f}" for k, f, _ in CELLS]
    median = {c: {n: statistics.median(x[n] for x in runs[c]) for n in names} for c in checkouts}
    labels = [f"checkout {i + 1}" for i in range(len(checkouts))]
    head = "| cell | " + " | ".join(f"{lab} µs / query" for lab in labels)
    head += " | " + " | ".join(f"{lab} / checkout 1" for lab in labels[1:]) + " |"
    rows = [head, "|" + "---|" * (1 + 2 * len(checkouts) - 1)]
    for n in names:
        base = median[checkouts[0]][n]
        cells = [f"{median[c][n] * 1e6:.0f}" for c in checkouts]
        cells += [f"{median[c][n] / base:.3f}" for c in checkouts[1:]]
        rows.append(f"| {n} | " + " | ".join(cells) + " |")
    notes = [
        "debian-minilm-384, one thread, default options, k = 10; each cell the median over "
        f"{args.rounds} interleaved rounds of the best of 3 batch calls of {args.queries} "
        "queries (after warmup(index)).",
        "checkouts: "
        + ", ".join(f"{lab} = `{c.name}`" for lab, c in zip(labels, checkouts, strict=True)),
    ]
    C.write_result(Path(args.out), "Batch search per family: checkouts side by side",
                   "python benchmarks/speed/batch_paths.py " + " ".join(argv or sys.argv[1:]),
                   "\n".join(rows), notes)  # fmt: skip
    print(Path(args.out).read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
