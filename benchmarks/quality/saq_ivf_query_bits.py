"""IVF SAQ per query width and list scan: recall@10 and the entries the two-pass scan
re-scores (issue 15; no timing, so it runs at the lowest priority outside the bench lock).

Debian-minilm-384, first 300 queries, default ``IVFIndex`` (SOAR). Rows: float queries with
the float lookup-table scan ("plain") and with the two-pass 4-bit scan (the default), 4-bit
queries (one 4-bit pass) and 8-bit queries (float tables of the 8-bit query).

    BBQLIB_DATA=../shared/data PYTHONPATH=$PWD python benchmarks/quality/saq_ivf_query_bits.py
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent  # benchmarks/, on sys.path instead of HERE (see common.py)
sys.path[:] = [str(BENCH), *(p for p in sys.path if Path(p or ".").resolve() != HERE)]
import common  # noqa: E402

import bbqlib  # noqa: E402
from bbqlib.analysis import recall_at_k  # noqa: E402
from bbqlib.quantizers.saq import lists as SI  # noqa: E402

ROWS = (("float", None, "plain"), ("float", None, "two-pass"), ("4-bit", 4, "fastscan"),
        ("8-bit", 8, "plain"))  # fmt: skip


def main() -> None:
    os.setpriority(os.PRIO_PROCESS, 0, 19)
    ds = common.load_dataset("debian-minilm-384", 300)
    Q = ds.queries
    seen = []
    scan_pairs = SI.scan_pairs

    def spy(*a, **kw):  # keep what the two-pass scan re-scored
        r = scan_pairs(*a, **kw)
        if r is not None:
            seen.append(r)
        return r

    SI.scan_pairs = spy  # the scanner calls it through the module
    print("| bits | query | scan | visit % | recall@10 no rerank | recall@10 default rerank | "
          "re-scored entries / query (no rerank, rerank) |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for bits in (2.0, 4.0):
        ix = bbqlib.IVFIndex(bbqlib.SAQQuantizer(bits=bits, similarity=ds.similarity))
        ix.add(ds.base)
        base_q = ix.quantizer
        for label, qb, mode in ROWS:
            ix.quantizer = base_q if qb is None else base_q.with_query_bits(qb)
            SI.IVF_SCAN = mode
            for vp in (1.0, 2.0, 4.0, 8.0):
                out = []
                for kw in ({"rerank": False}, {}):
                    seen.clear()
                    ids = ix.search(Q, 10, visit_percentage=vp, **kw)[1]
                    out.append((recall_at_k(ids, ds.gt_ids, 10), np.concatenate(seen).mean()
                                if seen else None))  # fmt: skip
                n = ", ".join("-" if r is None else f"{r:.0f}" for _, r in out)
                print(f"| {bits:g} | {label} | {mode} | {vp:g} | {out[0][0]:.3f} | "
                      f"{out[1][0]:.3f} | {n} |", flush=True)  # fmt: skip
        ix.quantizer = base_q
    SI.IVF_SCAN = "auto"


if __name__ == "__main__":
    main()
