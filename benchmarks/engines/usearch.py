"""usearch HNSW over BBQ codes (bbqlib.integrations.usearch) next to usearch f32 / i8 and hnswlib.

On debian-minilm-384 (first 300 queries, ``gt_ip``): recall@10 and single-thread QPS over an
``expansion_search`` / ``ef`` sweep, the fastest setting of each index at matching recall, and
RAM bytes per vector. bbqlib's float vectors for the rerank are the memory-mapped
``base.npy`` and are not counted. A second section measures the scorer's overhead: 1,000
candidate ids through ``q.scorer`` against the same docs inside the bulk kernel.

Usage (from the repository root)::

    python benchmarks/engines/usearch.py                 # writes benchmarks/results/usearch.md
    python benchmarks/engines/usearch.py --quick         # 10,000 base vectors, smoke run

Builds use ``--build-threads`` threads (2 by default; reported), every search one thread.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent  # benchmarks/, on sys.path instead of HERE (see common.py)
sys.path[:] = [str(BENCH), *(p for p in sys.path if Path(p or ".").resolve() != HERE)]

import common  # noqa: E402
from engines import peers  # noqa: E402

from bbqlib.analysis.recall import recall_at_k  # noqa: E402
from bbqlib.integrations.usearch import USearchIndex  # noqa: E402

DATASET = "debian-minilm-384"
EF_SWEEP = (16, 32, 64, 128, 256, 512)
TARGETS = (0.90, 0.95, 0.98)


def _recall(ids, ds):
    return recall_at_k(ids, ds.gt_ids, 10)


def _timed_sweep(entries, Q, repeats):
    """Single-thread seconds per batch for each (name, setup, search) entry, interleaved.

    Every repeat walks all entries in turn, so load bursts on the shared machine hit all of
    them; the median over repeats is kept.
    """
    times = {name: [] for name, _, _ in entries}
    results = {}
    with common.single_thread():
        for name, setup, search in entries:  # warm-up (numba compilation, caches)
            setup()
            results[name] = search(Q)
        for _ in range(repeats):
            for name, setup, search in entries:
                setup()
                t0 = time.perf_counter()
                search(Q)
                times[name].append(time.perf_counter() - t0)
    return {name: float(np.median(t)) for name, t in times.items()}, results


def _hnswlib_bytes(index) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "h.bin")
        index.save_index(path)
        return os.path.getsize(path) / index.get_current_count()


def run_engines(ds, base_path, build_threads, repeats, ef_sweep):
    n = ds.n
    rows, memory = [], []
    entries = []
    with common.threads(build_threads):
        t0 = time.perf_counter()
        ours = USearchIndex(bits=1, similarity="cosine", store_vectors=False, threads=0)
        ours.add(ds.base)
        build_ours = time.perf_counter() - t0
        ours.attach_vectors(np.load(base_path, mmap_mode="r") if base_path else ds.base)
        ours.threads = 1
        f32 = peers.usearch_hnsw(ds.base, "cosine", dtype="f32", expansion_add=128)
        i8 = peers.usearch_hnsw(ds.base, "cosine", dtype="i8", expansion_add=128)
        hn = peers.hnswlib_hnsw(ds.base, "cosine", M=16, ef_construction=128)
    memory.append(
        {
            "index": "bbqlib USearchIndex 1-bit",
            "ram": ours.memory_usage / n,
            "file": ours._index.serialized_length / n,
            "payload": ours.layout_.record_bytes,
            "build": build_ours,
        }
    )
    for label, peer in (("usearch f32", f32), ("usearch i8", i8)):
        memory.append(
            {
                "index": label,
                "ram": peer.index.memory_usage / n,
                "file": peer.index.serialized_length / n,
                "payload": peer.bytes_per_vector,
                "build": peer.build_seconds,
            }
        )
    memory.append(
        {
            "index": "hnswlib f32",
            "ram": _hnswlib_bytes(hn.index),
            "file": _hnswlib_bytes(hn.index),
            "payload": hn.bytes_per_vector,
            "build": hn.build_seconds,
        }
    )

    def add(name, engine, ef, setup, search):
        entries.append((name, setup, search))
        rows.append({"name": name, "engine": engine, "ef": ef})

    for ef in ef_sweep:
        add(
            f"bbqlib 1-bit ef{ef}",
            "bbqlib USearchIndex 1-bit",
            ef,
            lambda ef=ef: setattr(ours, "expansion_search", ef),
            lambda Q: ours.search(Q, 10)[1],
        )
        for label, peer, key in (
            ("usearch f32", f32, "expansion_search"),
            ("usearch i8", i8, "expansion_search"),
            ("hnswlib f32", hn, "ef"),
        ):
            add(
                f"{label} ef{ef}",
                label,
                ef,
                lambda peer=peer, key=key, ef=ef: peer.set_search_params(**{key: ef}),
                lambda Q, peer=peer: peer.search(Q, 10)[1],
            )
    seconds, found = _timed_sweep(entries, ds.queries, repeats)
    nq = len(ds.queries)
    for row in rows:
        row["recall"] = _recall(found[row["name"]], ds)
        row["qps"] = nq / seconds[row["name"]]
    return rows, memory


def matching(rows, targets):
    """Per engine and target recall: the fastest setting reaching it."""
    out = []
    engines = list(dict.fromkeys(r["engine"] for r in rows))
    for target in targets:
        for engine in engines:
            ok = [r for r in rows if r["engine"] == engine and r["recall"] >= target]
            best = max(ok, key=lambda r: r["qps"]) if ok else None
            out.append(
                {
                    "target": target,
                    "engine": engine,
                    "ef": None if best is None else best["ef"],
                    "recall": None if best is None else best["recall"],
                    "qps": None if best is None else best["qps"],
                }
            )
    return out


def scorer_overhead(ds, repeats=15, m=1000):
    """CPU seconds: 1,000 ids through q.scorer vs the bulk kernel on the same docs."""
    import numba

    from bbqlib import BBQQuantizer
    from bbqlib._kernels import scoring as KS
    from bbqlib.layouts.scan import estimate_raw

    q = BBQQuantizer(bits=1, similarity="cosine").fit(ds.base)
    enc = q.encode(ds.base)
    g = np.random.default_rng(0)
    ids = np.sort(g.choice(ds.n, m, replace=False))
    score = q.scorer(ds.queries[0], enc)
    docs = q._cached_doc_codes(enc)
    qc = q.query_codes(ds.queries[:1])
    sub_data = np.ascontiguousarray(docs.data[ids])
    sub_f = np.ascontiguousarray(docs.factors[ids])
    out_sub = np.empty((1, m))
    out_all = np.empty((1, ds.n))
    common = (qc.planes, docs.planes, docs.words, docs.dim, docs.centroid_dot, docs.is_l2)

    def bulk_same():
        KS.estimate_planes(qc.data, qc.factors, sub_data, sub_f, *common, out_sub)

    def bulk_all():
        KS.estimate_planes(qc.data, qc.factors, docs.data, docs.factors, *common, out_all)

    def scorer():
        score(ids)

    assert np.array_equal(score(ids), estimate_raw(qc, docs)[0, ids].astype(np.float32))
    calls = {"scorer": (scorer, 200), "bulk_same": (bulk_same, 200), "bulk_all": (bulk_all, 3)}
    t = {name: [] for name in calls}
    old = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        for fn, _ in calls.values():
            fn()
        for _ in range(repeats):
            for name, (fn, reps) in calls.items():
                t0 = time.thread_time()
                for _ in range(reps):
                    fn()
                t[name].append((time.thread_time() - t0) / reps)
    finally:
        numba.set_num_threads(old)
    med = {name: float(np.median(v)) for name, v in t.items()}
    per_doc_all = med["bulk_all"] / ds.n * m
    return {
        "scorer_us": med["scorer"] * 1e6,
        "bulk_same_us": med["bulk_same"] * 1e6,
        "bulk_all_us_per_1000": per_doc_all * 1e6,
        "ratio_same": med["scorer"] / med["bulk_same"],
        "ratio_all": med["scorer"] / per_doc_all,
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--quick", action="store_true", help="10,000 base vectors, fewer repeats")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--build-threads", type=int, default=2)
    ap.add_argument("--out", default=str(common.repo_root() / "benchmarks/results/usearch.md"))
    args = ap.parse_args(argv)

    ds = common.load_dataset(DATASET, args.queries, similarity="cosine")
    base_path = common.data_dir() / DATASET / "base.npy"
    ef_sweep = EF_SWEEP
    if args.quick:
        from bbqlib.analysis.ground_truth import exact_knn

        ds.base = np.ascontiguousarray(ds.base[:10_000])
        _, ds.gt_ids = exact_knn(ds.base, ds.queries, 10, metric="ip", scores_first=True)
        base_path = None
        ef_sweep = (32, 128)
        args.repeats = 1
    t0 = time.perf_counter()
    rows, memory = run_engines(ds, base_path, args.build_threads, args.repeats, ef_sweep)
    over = scorer_overhead(ds)
    f32_ram = next(m["ram"] for m in memory if m["index"] == "usearch f32")
    f32_file = next(m["file"] for m in memory if m["index"] == "usearch f32")
    for m in memory:
        m["ram_vs_f32"] = m["ram"] / f32_ram
        m["file_vs_f32"] = m["file"] / f32_file
    sweep = common.markdown_table(
        rows,
        [
            ("engine", "index"),
            ("ef", "ef / expansion_search"),
            ("recall", "recall@10"),
            ("qps", "QPS (1 thread)", ".0f"),
        ],
    )
    match = common.markdown_table(
        matching(rows, TARGETS),
        [
            ("target", "recall target", ".2f"),
            ("engine", "index"),
            ("ef", "fastest ef"),
            ("recall", "recall@10"),
            ("qps", "QPS", ".0f"),
        ],
    )
    mem = common.markdown_table(
        memory,
        [
            ("index", "index"),
            ("payload", "stored per vector (B)", ".0f"),
            ("ram", "RAM / vector (B)", ".0f"),
            ("ram_vs_f32", "vs f32", ".3f"),
            ("file", "serialized / vector (B)", ".0f"),
            ("file_vs_f32", "vs f32", ".3f"),
            ("build", f"build s ({args.build_threads} threads)", ".1f"),
        ],
    )
    ovh = common.markdown_table(
        [over],
        [
            ("scorer_us", "scorer, 1,000 ids (µs)", ".1f"),
            ("bulk_same_us", "bulk kernel, same 1,000 docs (µs)", ".1f"),
            ("bulk_all_us_per_1000", "bulk kernel, full scan per 1,000 docs (µs)", ".1f"),
            ("ratio_same", "scorer / same docs", ".2f"),
            ("ratio_all", "scorer / full scan", ".2f"),
        ],
    )
    quick = " (--quick: 10,000 base vectors)" if args.quick else ""
    tables = [
        f"### Recall and single-thread QPS, {ds.name}{quick}, {len(ds.queries)} queries, k=10\n\n"
        + sweep,
        "### Fastest setting at matching recall\n\n" + match,
        "### Memory per vector\n\n" + mem,
        "### Scorer overhead (1-bit codes, 4-bit query, d=384, CPU time, 1 thread)\n\n" + ovh,
    ]
    notes = [
        "bbqlib USearchIndex: bits=1, similarity=cosine, connectivity=16, expansion_add=128, "
        "default oversample (3.0 at 1 bit): usearch returns max(ef, 30) candidates by the "
        "symmetric 1-bit doc x doc estimate, bbqlib rescores them with the 4-bit-query "
        "asymmetric estimate, keeps 30 and reranks them on the float vectors.",
        "The float vectors for the rerank are the memory-mapped base.npy (attach_vectors) and "
        "are NOT counted in bbqlib's RAM; everything else is: usearch's graph allocation "
        "(memory_usage, with its capacity slack) plus bbqlib's records (72 B: 48 B of codes, "
        "five float32 factors, 4 B padding), which usearch uses in place (copy=False).",
        "usearch f32/i8: metric cos, connectivity=16, expansion_add=128; RAM = memory_usage / n "
        "(capacity slack included, as for bbqlib). hnswlib: space ip on the unit vectors, M=16, "
        "ef_construction=128; its RAM is the saved index size / n (hnswlib allocates exactly "
        "that layout). 'serialized' is usearch's serialized_length / n (no slack).",
        "QPS: batch search of all queries with one thread (usearch threads=1, hnswlib "
        "num_threads=1, numba 1 thread), median of interleaved repeats; the machine is shared, "
        "compare within the table.",
        "Scorer overhead: thread CPU time, medians of interleaved repeats; 'same docs' runs the "
        "bulk dense kernel on the 1,000 candidate rows gathered contiguously, 'full scan' is "
        "the bulk kernel's time per doc over all docs times 1,000. The scorer's values are "
        "checked equal to the bulk kernel's.",
        f"total run time {time.perf_counter() - t0:.0f} s",
    ]
    cmd = "python benchmarks/engines/usearch.py" + (" --quick" if args.quick else "")
    path = common.write_result(
        args.out, "usearch HNSW over BBQ codes vs usearch f32 / i8 and hnswlib", cmd, tables, notes
    )
    print(Path(path).read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
