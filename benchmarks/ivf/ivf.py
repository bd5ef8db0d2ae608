"""IVF benchmark: bbqlib IVFIndex vs faiss IndexIVFRaBitQ (+refine) vs hnswlib, one run.

On ``debian-minilm-384`` (cosine, ``gt_ip``, first 500 queries), single thread, one batch of
500 queries per search call:

* recall@10 against ``visit_percentage`` for bbqlib IVF at 1 and 2 bits (default rerank:
  oversample 3.0 / 1.5);
* faiss ``RR + IndexIVFRaBitQ`` (same bits, ``qb = 4``, ``nlist`` = bbqlib's list count,
  nprobe 1..128) wrapped in ``IndexRefineFlat`` with ``k_factor`` = bbqlib's oversample;
* hnswlib (M = 16, efConstruction = 200, ef sweep);
* queries per second at recall 0.90 and 0.95 (best setting reaching the recall) and build
  times;
* ``--oversample 1.5,2,3``: every rerank depth for bbqlib (``oversample``) and faiss
  (``k_factor``) alike, crossed with the visit / nprobe grid (default: the encoding's
  oversample only), so each library is judged at its best setting.

Timing on a shared machine: every search setting of every library is timed once per round,
rounds interleave the libraries, and the median over rounds is reported, so background load
hits all of them alike.

Run from the repository root::

    python benchmarks/ivf/ivf.py [--rounds 3] [--out benchmarks/results/ivf.md]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent  # benchmarks/, on sys.path instead of HERE (see common.py)
sys.path[:] = [str(BENCH), *(p for p in sys.path if Path(p or ".").resolve() != HERE)]
import common  # noqa: E402
from engines import peers  # noqa: E402

import bbqlib  # noqa: E402
from bbqlib.analysis.recall import recall_at_k  # noqa: E402

VISIT = [0.5, 1, 1.5, 2, 2.5, 3, 4, 5, 6, 7, 8, 10, 12, 15, 20, 30, 50]
NPROBE = [1, 2, 3, 4, 6, 8, 10, 12, 14, 16, 20, 24, 28, 32, 40, 48, 56, 64, 96, 128]
EF = [10, 16, 24, 32, 48, 64, 96, 128, 192, 256]
TARGETS = (0.90, 0.95)


def _recall(ids, gt) -> float:
    return float(recall_at_k(ids, gt, 10))


def build_bbqlib(X, bits=1, quantizer=None):
    t0 = time.perf_counter()
    if quantizer is None:
        index = bbqlib.IVFIndex(bits=bits, similarity="cosine")
    else:
        index = bbqlib.IVFIndex(quantizer)
    index.add(X)
    return index, time.perf_counter() - t0


def qps_at(rows, target):
    """Best QPS among settings whose recall reaches ``target`` (None if none does)."""
    ok = [r["qps"] for r in rows if r["recall"] >= target]
    return max(ok) if ok else None


def best_setting(rows, target) -> str | None:
    """The setting of :func:`qps_at`'s QPS, as "param / xoversample"."""
    ok = [r for r in rows if r["recall"] >= target]
    if not ok:
        return None
    r = max(ok, key=lambda r: r["qps"])
    return f"{r['param']}" + ("" if r.get("over") is None else f" / x{r['over']:g}")


def _overs(args, default: float) -> list[float]:
    return [float(v) for v in args.oversample.split(",")] if args.oversample else [default]


def _sweep(index, Q, overs, **kw):
    """(param, oversample, search) over the visit grid crossed with the rerank depths."""
    return [
        (vp, o, lambda vp=vp, o=o: index.search(Q, 10, visit_percentage=vp, oversample=o, **kw))
        for o in overs
        for vp in [None, *VISIT]
    ]


def qps_interp(rows, target):
    """QPS at exactly ``target`` recall, interpolated on the Pareto frontier.

    The frontier keeps the settings no other setting beats in both recall and QPS; between
    the frontier points on either side of ``target``, QPS is interpolated linearly in
    recall. None when no setting reaches ``target``.
    """
    pts = sorted(((r["recall"], r["qps"]) for r in rows), key=lambda t: (-t[0], -t[1]))
    front = []
    for rec, q in pts:  # by recall descending: keep points faster than all better ones
        if not front or q > front[-1][1]:
            front.append((rec, q))
    front.reverse()  # recall ascending, QPS descending
    if not front or front[-1][0] < target:
        return None
    for (r0, q0), (r1, q1) in zip(front, front[1:], strict=False):
        if r0 <= target <= r1:
            return q0 + (q1 - q0) * (target - r0) / (r1 - r0) if r1 > r0 else max(q0, q1)
    return front[0][1]  # every frontier point is above the target


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--out", default=str(common.repo_root() / "benchmarks/results/ivf.md"))
    ap.add_argument("--skip-hnsw", action="store_true")
    ap.add_argument(
        "--families",
        default="bbq,rabitq,sq8",
        help="bbq: BBQ 1/2-bit vs faiss IVFRaBitQ 1/2-bit; rabitq: RaBitQQuantizer 2-bit (4-bit "
        "queries, as faiss qb=4) vs faiss IVFRaBitQ 2-bit; sq8: int8 per_dim vs faiss IVF SQ8 "
        "(no rerank on either side)",
    )
    ap.add_argument(
        "--oversample",
        default="",
        help="comma-separated rerank depths for bbqlib (oversample) and faiss (k_factor) "
        "alike, crossed with the visit / nprobe grid (default: the encoding's oversample)",
    )
    args = ap.parse_args(argv)

    ds = common.load_dataset("debian-minilm-384", args.queries)
    X, Q, gt = ds.base, ds.queries, ds.gt_ids[:, :10]
    print(ds, flush=True)
    runs = {}  # label -> dict(build, settings: [(param, search_fn)], rows)
    with common.single_thread():
        warm = bbqlib.IVFIndex(bits=1, cluster_size=64)  # numba compile/load outside timings
        warm.add(X[:2000])
        warm.search(Q[:5])
        families = args.families.split(",")
        for bits in (1, 2) if "bbq" in families else ():
            index, secs = build_bbqlib(X, bits)
            print(f"bbqlib IVF {bits}-bit: {index.n_lists} lists, build {secs:.1f} s", flush=True)
            overs = _overs(args, bbqlib.get_encoding(bits).default_oversample)
            runs[f"bbqlib IVF {bits}-bit"] = dict(
                build=secs, settings=_sweep(index, Q, overs), param="visit %", index=index
            )
        if "rabitq" in families:
            rq = bbqlib.RaBitQQuantizer(bits=2, query_bits=4, similarity="cosine", seed=0)
            index, secs = build_bbqlib(X, quantizer=rq)
            print(f"bbqlib IVF RaBitQ 2-bit: build {secs:.1f} s", flush=True)
            overs = _overs(args, rq.encoding_.default_oversample)
            runs["bbqlib IVF RaBitQ 2-bit (4-bit queries)"] = dict(
                build=secs, settings=_sweep(index, Q, overs), param="visit %", index=index
            )
        if "sq8" in families:
            sq = bbqlib.ScalarQuantizer(bits=8, method="per_dim", similarity="cosine")
            index, secs = build_bbqlib(X, quantizer=sq)
            print(f"bbqlib IVF int8 per_dim: build {secs:.1f} s", flush=True)
            runs["bbqlib IVF int8 per_dim (no rerank)"] = dict(
                build=secs,
                settings=[
                    (
                        vp,
                        None,
                        lambda vp=vp, index=index: index.search(
                            Q, 10, visit_percentage=vp, rerank=False
                        ),
                    )
                    for vp in [None, *VISIT]
                ],  # fmt: skip
                param="visit %",
                index=index,
            )
        first = next(r for r in runs.values() if "index" in r)
        nlist = first["index"].n_lists
        for bits in (1, 2) if ("bbq" in families or "rabitq" in families) else ():
            if bits == 1 and "bbq" not in families:
                continue
            overs = _overs(args, bbqlib.get_encoding(bits).default_oversample)
            peer = peers.faiss_ivf_rabitq(X, "cosine", nlist=nlist, bits=bits, k_factor=overs[0])
            print(f"{peer.name}: build {peer.build_seconds:.1f} s", flush=True)

            def fs(npr, o, peer=peer):
                peer.set_search_params(nprobe=npr, k_factor=o)
                return peer.search(Q, 10)

            over_label = "x" + "/".join(f"{o:g}" for o in overs)
            runs[f"faiss IVFRaBitQ {bits}-bit +RFlat {over_label}"] = dict(
                build=peer.build_seconds,
                settings=[(n, o, lambda n=n, o=o, fs=fs: fs(n, o)) for o in overs for n in NPROBE],
                param="nprobe",
            )
        if "sq8" in families:
            peer = peers.faiss_ivf_sq(X, "cosine", nlist=nlist, qtype="SQ8")
            print(f"{peer.name}: build {peer.build_seconds:.1f} s", flush=True)

            def ss(npr, peer=peer):
                peer.set_search_params(nprobe=npr)
                return peer.search(Q, 10)

            runs["faiss IVF SQ8 (no refine)"] = dict(
                build=peer.build_seconds,
                settings=[(n, None, lambda n=n, ss=ss: ss(n)) for n in NPROBE],
                param="nprobe",
                nlist=nlist,
            )
        if not args.skip_hnsw:
            peer = peers.hnswlib_hnsw(X, "cosine", M=16, ef_construction=200)
            print(f"{peer.name}: build {peer.build_seconds:.1f} s", flush=True)

            def hs(ef, peer=peer):
                peer.set_search_params(ef=ef)
                return peer.search(Q, 10)

            runs["hnswlib M16 efC200"] = dict(
                build=peer.build_seconds,
                settings=[(e, None, lambda e=e, hs=hs: hs(e)) for e in EF],
                param="ef",
            )
        # Recall once (deterministic), then interleaved timing rounds.
        for run in runs.values():
            run["rows"] = []
            for param, over, fn in run["settings"]:
                _, ids = fn()
                run["rows"].append(
                    {"param": param, "over": over, "recall": _recall(ids, gt), "times": []}
                )
                if run.get("index") is not None:
                    run["rows"][-1]["visited"] = run["index"].last_search_stats["visited_fraction"]
                elif run.get("nlist"):  # faiss IVF: share of the lists probed
                    run["rows"][-1]["visited"] = param / run["nlist"]
        for r in range(args.rounds):
            for run in runs.values():
                for row, (_, _, fn) in zip(run["rows"], run["settings"], strict=True):
                    t0 = time.perf_counter()
                    fn()
                    row["times"].append(time.perf_counter() - t0)
            print(f"round {r + 1}/{args.rounds} done", flush=True)
    for run in runs.values():
        for row in run["rows"]:
            row["qps"] = len(Q) / statistics.median(row["times"])

    tables = []
    summary = []
    hnsw_build = runs.get("hnswlib M16 efC200", {}).get("build")
    for label, run in runs.items():
        cols = [("param", run["param"]), ("recall", "recall@10", ".3f"), ("qps", "QPS", ",.0f")]
        if "index" in run or "nlist" in run:
            cols.insert(2, ("visited", "share of vectors visited", ".4f"))
        if any(row["over"] is not None for row in run["rows"]):
            cols.insert(1, ("over", "oversample", "g"))
        for row in run["rows"]:
            if row["param"] is None:
                row["param"] = "dynamic"
        tables.append(f"### {label}\n\n" + common.markdown_table(run["rows"], cols))
        summary.append(
            {
                "method": label,
                "build": run["build"],
                "vs_hnsw": None if hnsw_build is None else hnsw_build / run["build"],
                **{f"q{int(t * 100)}": qps_at(run["rows"], t) for t in TARGETS},
                **{f"i{int(t * 100)}": qps_interp(run["rows"], t) for t in TARGETS},
                **{f"s{int(t * 100)}": best_setting(run["rows"], t) for t in TARGETS},
                "max_recall": max(r["recall"] for r in run["rows"]),
            }
        )
    head = common.markdown_table(
        summary,
        [
            ("method", "method"),
            ("build", "build s", ".1f"),
            ("vs_hnsw", "hnswlib build / this", ".1f"),
            ("q90", "QPS @ recall 0.90", ",.0f"),
            ("i90", "interpolated", ",.0f"),
            ("q95", "QPS @ recall 0.95", ",.0f"),
            ("i95", "interpolated", ",.0f"),
            ("s90", "setting @ 0.90"),
            ("s95", "setting @ 0.95"),
            ("max_recall", "best recall", ".3f"),
        ],
    )
    ix1 = next(r for r in runs.values() if "index" in r)["index"]
    notes = [
        f"{ds.note}; bbqlib IVF: cluster_size 384 -> {ix1.n_lists} lists, SOAR, "
        "7-bit centroids, query re-quantized per list (4 bits: OSQ with 1 iteration for BBQ, "
        "RaBitQ's min/max grid for RaBitQ), exact rerank on float32 vectors; oversample "
        + (
            f"swept over {args.oversample}"
            if args.oversample
            else "the encoding's default (3.0 at 1 bit, 1.5 at 2 bits)"
        )
        + ".",
        f"faiss: RR (random rotation) + IndexIVFRaBitQ, nlist {ix1.n_lists} (bbqlib's list "
        "count), qb 4, IndexRefineFlat with k_factor = bbqlib's oversample (the same sweep).",
        "QPS @ recall r: the best QPS among the settings whose recall@10 reaches r ('–': none); "
        "interpolated: QPS at exactly r, linear in recall between the two settings of the "
        "recall/QPS Pareto frontier on either side of r.",
        f"Search: one call with all {len(Q)} queries, single thread; median of {args.rounds} "
        "interleaved rounds. Build: single thread, one build each (numba compiled beforehand).",
        "The machine is shared (2 cores, other jobs running): compare ratios, not absolute "
        "figures.",
    ]
    cmd = "python benchmarks/ivf/ivf.py " + " ".join(argv or sys.argv[1:])
    common.write_result(
        args.out,
        "IVF: bbqlib IVFIndex vs faiss IVF-RaBitQ vs hnswlib (debian-minilm-384)",
        cmd.strip(),
        ["### Summary\n\n" + head, *tables],
        notes,
    )
    print(Path(args.out).read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
