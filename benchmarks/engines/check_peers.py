"""Check that the peers in ``engines/peers.py`` reproduce the reference figures, and time them.

Run from the repository root::

    python benchmarks/engines/check_peers.py         # recall check + single-thread timings
    python benchmarks/engines/check_peers.py --all   # also hnswlib, usearch, rabitqlib smoke runs

1. Recall@10 on the first 300 queries of both shared data sets (debian-minilm-384 with
   cosine against ``gt_ip``, spacy-wordvec-300 with euclidean against ``gt_l2``) for faiss
   RR + ``IndexRaBitQ`` at 1/2/4/7 bits (qb=4), raw and with ``IndexRefineFlat`` k_factor 3,
   and faiss ``SQ8`` / ``SQ4``, compared with ``../shared/data/README.md``. Raw recall is read
   from the refined index at ``k_factor=1``: IndexRefine then rescores exactly the k
   candidates of the quantized scan, so the id set (all recall sees) is the raw one.
2. Single-thread scans, 64 queries x all vectors, top-10: faiss ``IndexRaBitQ`` and
   ``IndexRaBitQFastScan`` (1-bit, qb=4, RR in front) and ``SQ8``, on debian-minilm-384 and on
   synthetic isotropic Gaussian data (``common.synthetic_gaussian``: default_rng(0),
   n=100,000, d=1024, rows normalized, cosine). Medians of ``--repeats`` runs; FastScan vs
   IndexRaBitQ and 1 vs 2 threads as interleaved ratios.
3. Encode throughput: ``IndexRaBitQ.add`` (1-bit) single-thread, vectors per second, on
   already-rotated input (codes only) and through RR (rotation + codes).

Writes ``benchmarks/results/peers_reference.md``; exits with status 1 when a recall figure is
further than ``--tol`` from the reference.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

import numpy as np

from bbqlib.analysis.recall import recall_at_k

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent  # benchmarks/, on sys.path instead of HERE (see common.py)
sys.path[:] = [str(BENCH), *(p for p in sys.path if Path(p or ".").resolve() != HERE)]

import common  # noqa: E402
from engines import peers  # noqa: E402

# ../shared/data/README.md, "Reference figures (recall@10, 300 queries)".
REFERENCE = {
    "debian-minilm-384": {
        ("RaBitQ", 1, 1): 0.763,
        ("RaBitQ", 1, 3): 0.966,
        ("RaBitQ", 2, 1): 0.873,
        ("RaBitQ", 2, 3): 0.997,
        ("RaBitQ", 4, 1): 0.952,
        ("RaBitQ", 7, 1): 0.994,
        ("SQ8", 8, 1): 0.994,
        ("SQ4", 4, 1): 0.921,
    },
    "spacy-wordvec-300": {
        ("RaBitQ", 1, 1): 0.641,
        ("RaBitQ", 1, 3): 0.890,
        ("RaBitQ", 2, 1): 0.802,
        ("RaBitQ", 2, 3): 0.985,
        ("RaBitQ", 4, 1): 0.933,
        ("RaBitQ", 7, 1): 0.988,
        ("SQ8", 8, 1): 0.992,
        ("SQ4", 4, 1): 0.867,
    },
}
DATASETS = list(REFERENCE)
K = 10


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ----------------------------------------------------------------------------- recall
def check_recall(n_queries: int, tol: float) -> tuple[list[dict], bool]:
    rows, ok_all = [], True
    for name in DATASETS:
        ds = common.load_dataset(name, n_queries)
        ref = REFERENCE[name]
        results = {}
        for bits in (1, 2, 4, 7):
            log(f"{name}: faiss RR+IndexRaBitQ {bits}-bit + IndexRefineFlat")
            p = peers.faiss_rabitq(ds.base, ds.similarity, bits=bits, qb=4, k_factor=3)
            for kf in (1, 3):
                p.set_search_params(k_factor=kf)
                _, ids = p.search(ds.queries, K)
                results[("RaBitQ", bits, kf)] = (recall_at_k(ids, ds.gt_ids, K), p)
        for qtype, bits in (("SQ8", 8), ("SQ4", 4)):
            log(f"{name}: faiss {qtype}")
            p = peers.faiss_sq(ds.base, ds.similarity, qtype=qtype)
            _, ids = p.search(ds.queries, K)
            results[(qtype, bits, 1)] = (recall_at_k(ids, ds.gt_ids, K), p)
        for key, (rec, p) in results.items():
            kind, bits, kf = key
            method = f"faiss {kind}"
            if kind == "RaBitQ":
                method = f"faiss RR+IndexRaBitQ {bits}-bit qb=4"
            expected = ref.get(key)
            diff = None if expected is None else rec - expected
            ok = diff is None or abs(diff) <= tol
            ok_all &= ok
            rows.append(
                {
                    "data": name,
                    "method": method,
                    "rerank": "raw" if kf == 1 else f"{kf}x (IndexRefineFlat)",
                    "bytes": p.bytes_per_vector,
                    "recall": rec,
                    "reference": expected,
                    "diff": diff,
                    "status": "–" if expected is None else ("ok" if ok else "OFF"),
                }
            )
        gc.collect()
    return rows, ok_all


# ----------------------------------------------------------------------------- timing
def median_time(fn, repeats: int) -> float:
    return float(np.median(common.time_call(fn, repeats=repeats, warmup=1)))


def time_dataset(ds: common.Dataset, repeats: int) -> tuple[list[dict], list[dict]]:
    Q = ds.queries[:64]
    n, d = ds.base.shape
    scan_rows, encode_rows = [], []
    with common.single_thread():
        log(f"{ds.name}: building 1-bit IndexRaBitQ, IndexRaBitQFastScan, SQ8 (1 thread)")
        built = [
            peers.faiss_rabitq(ds.base, ds.similarity, bits=1, qb=4),
            peers.faiss_rabitq_fastscan(ds.base, ds.similarity, bits=1, qb=4),
            peers.faiss_sq(ds.base, ds.similarity, qtype="SQ8"),
        ]
        medians = {}
        for p in built:
            log(f"{ds.name}: timing {p.name}")
            t = median_time(lambda p=p: p.search(Q, K), repeats)
            medians[p.name] = t
            scan_rows.append(
                {
                    "data": ds.name,
                    "index": p.name,
                    "bytes": p.bytes_per_vector,
                    "ms": 1e3 * t,
                    "us_q": 1e6 * t / len(Q),
                    "mvec_s": n * len(Q) / t / 1e6,
                    "build_s": p.build_seconds,
                }
            )
        rbq, fs = built[0], built[1]
        ratio = common.interleaved_ratio(
            lambda: fs.search(Q, K), lambda: rbq.search(Q, K), repeats=repeats
        )
        scan_rows.append(
            {
                "data": ds.name,
                "index": "ratio FastScan / IndexRaBitQ time (interleaved)",
                "ms": None,
                "ratio": ratio.ratio,
            }
        )

        # Encode: IndexRaBitQ.add alone on rotated vectors, and through the RR transform.
        log(f"{ds.name}: timing IndexRaBitQ.add")
        import faiss

        X = peers._prepare(ds.base, ds.similarity)  # what the peers feed faiss
        rr = faiss.RandomRotationMatrix(d, d)
        rr.train(X)
        Xr = rr.apply(X)
        metric = faiss.METRIC_INNER_PRODUCT if ds.metric == "ip" else faiss.METRIC_L2
        raw = faiss.IndexRaBitQ(d, metric, 1)
        raw.train(Xr)
        wrapped = faiss.IndexPreTransform(rr, faiss.IndexRaBitQ(d, metric, 1))
        wrapped.train(X)

        def add_raw():
            raw.reset()
            raw.add(Xr)

        def add_wrapped():
            wrapped.reset()
            wrapped.add(X)

        for label, fn in (
            ("IndexRaBitQ.add (rotated input)", add_raw),
            ("RR + IndexRaBitQ add", add_wrapped),
        ):
            t = median_time(fn, max(3, repeats // 2))
            encode_rows.append({"data": ds.name, "call": label, "s": t, "vec_s": n / t})

    # 1 vs 2 threads for the two scans, interleaved.
    for p in built[:2]:

        def one(p=p):
            with common.threads(1):
                p.search(Q, K)

        def two(p=p):
            with common.threads(2):
                p.search(Q, K)

        r = common.interleaved_ratio(one, two, repeats=repeats)
        scan_rows.append(
            {
                "data": ds.name,
                "index": f"speed-up 2 threads / 1 thread, {p.name}",
                "ms": None,
                "ratio": r.ratio,
            }
        )
    return scan_rows, encode_rows


# ----------------------------------------------------------------------------- other peers
def smoke_other_peers(n_queries: int) -> list[dict]:
    rows = []
    for name in DATASETS:
        ds = common.load_dataset(name, n_queries)
        nlist = max(1, round(ds.n / 384))
        specs = [
            ("faiss_ivf_rabitq", dict(nlist=nlist, nprobe=16, bits=1, k_factor=3)),
            ("hnswlib_hnsw", dict(M=16, ef_construction=200, ef=64)),
            ("usearch_hnsw", dict(dtype="f32")),
            ("usearch_hnsw", dict(dtype="i8")) if ds.similarity == "cosine" else None,
            ("rabitqlib_ivf", dict(nlist=nlist, nprobe=16, bits=1)),
            ("rabitqlib_ivf", dict(nlist=nlist, nprobe=16, bits=4)),
        ]
        for spec in filter(None, specs):
            kind, params = spec
            log(f"{name}: {kind} {params}")
            p = peers.build(kind, ds.base, ds.similarity, **params)
            t0 = time.perf_counter()
            _, ids = p.search(ds.queries, K)
            t = time.perf_counter() - t0
            rows.append(
                {
                    "data": name,
                    "index": p.name,
                    "bytes": p.bytes_per_vector,
                    "recall": recall_at_k(ids, ds.gt_ids, K),
                    "build_s": p.build_seconds,
                    "qps": len(ds.queries) / t,
                }
            )
            del p
            gc.collect()
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--tol", type=float, default=0.005, help="allowed |recall - reference|")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--synthetic-n", type=int, default=100_000)
    ap.add_argument("--synthetic-d", type=int, default=1024)
    ap.add_argument("--skip-timing", action="store_true")
    ap.add_argument("--all", action="store_true", help="also smoke-run hnswlib, usearch, rabitqlib")
    ap.add_argument("--out", default=str(BENCH / "results" / "peers_reference.md"))
    args = ap.parse_args(argv)

    recall_rows, ok = check_recall(args.queries, args.tol)
    tables = [
        f"## Recall@10 against the data README (first {args.queries} queries, tol "
        f"{args.tol})\n\n"
        + common.markdown_table(
            recall_rows,
            [
                ("data", "data"),
                ("method", "method"),
                ("rerank", "rerank"),
                ("bytes", "code B/vec", ".0f"),
                ("recall", "recall@10"),
                ("reference", "README"),
                ("diff", "diff", "+.3f"),
                ("status", "status"),
            ],
        )
    ]
    notes = [
        "Similarity: debian-minilm-384 cosine (normalize + inner product) against gt_ip; "
        "spacy-wordvec-300 euclidean against gt_l2.",
        "faiss RandomRotationMatrix with faiss's default seed; qb=4; code bytes are faiss "
        "`code_size` (1-bit: d/8 sign bytes + 8 B; multi-bit: + 20 B and the extra bits).",
        "Raw recall is the refined index at k_factor=1 (same candidate set as the raw scan).",
    ]

    if not args.skip_timing:
        scan_rows, encode_rows = [], []
        sets = [
            common.load_dataset("debian-minilm-384", None),
            common.synthetic_gaussian(args.synthetic_n, args.synthetic_d, 64, seed=0),
        ]
        for ds in sets:
            s, e = time_dataset(ds, args.repeats)
            scan_rows += s
            encode_rows += e
            gc.collect()
        tables.append(
            "## Single-thread scan: 64 queries x all vectors, top-10\n\n"
            + common.markdown_table(
                scan_rows,
                [
                    ("data", "data"),
                    ("index", "index"),
                    ("bytes", "code B/vec", ".0f"),
                    ("ms", "ms / 64 queries", ".1f"),
                    ("us_q", "µs / query", ".0f"),
                    ("mvec_s", "M vectors/s", ".1f"),
                    ("ratio", "ratio", ".2f"),
                    ("build_s", "build s (1 thread)", ".2f"),
                ],
            )
        )
        tables.append(
            "## Encode throughput, single thread, 1-bit\n\n"
            + common.markdown_table(
                encode_rows,
                [
                    ("data", "data"),
                    ("call", "call"),
                    ("s", "seconds", ".3f"),
                    ("vec_s", "vectors/s", ",.0f"),
                ],
            )
        )
        notes += [
            "Timings: median of "
            f"{args.repeats} runs after one warm-up; faiss OpenMP, numba and BLAS limited to "
            "1 thread (`common.single_thread`). The machine is shared: compare ratios "
            "measured in one run, not absolute times across runs.",
            "Ratio rows: median of interleaved per-pair time ratios (`common.interleaved_ratio`)"
            "; FastScan / IndexRaBitQ < 1 means FastScan is faster; '2 threads / 1 thread' is "
            "time(1 thread) / time(2 threads); it is only meaningful when the load average "
            "above is below 1 (another process on the second core halves it).",
            f"Synthetic data: {sets[1].note}; Gaussian data has no structure, use it for time "
            "only.",
            "The scans include the RR rotation of the 64 queries (d^2 multiply-adds each, "
            "negligible next to the scan).",
        ]

    if args.all:
        other = smoke_other_peers(args.queries)
        tables.append(
            f"## Other peers, default-ish settings (smoke run, {args.queries} queries, "
            "threads = numba default)\n\n"
            + common.markdown_table(
                other,
                [
                    ("data", "data"),
                    ("index", "index"),
                    ("bytes", "B/vec", ".1f"),
                    ("recall", "recall@10"),
                    ("build_s", "build s", ".1f"),
                    ("qps", "QPS", ".0f"),
                ],
            )
        )
        notes += [
            "Other peers: IVF nlist = round(n / 384); hnswlib/usearch bytes are the stored "
            "vectors (graph excluded), rabitqlib bytes are its saved file / n. Builds and "
            "searches use all cores here: these rows show the wrappers work, not speed.",
        ]

    notes.append(
        "Recall check: "
        + (
            "all reference figures reproduced."
            if ok
            else "SOME FIGURES ARE OFF (status OFF above)."
        )
    )
    command = "python benchmarks/engines/check_peers.py " + " ".join(argv or sys.argv[1:])
    path = common.write_result(
        args.out,
        "Peer reference figures (faiss RaBitQ / SQ, and other peers)",
        command.strip(),
        tables,
        notes,
    )
    log(f"wrote {path}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
