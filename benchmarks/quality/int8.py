"""int8 benchmark: bbqlib ScalarQuantizer (osq, per_dim, global) next to faiss SQ8 / SQ4.

One run, every library in the same process and on the same data:

1. **recall@10 without rerank** (first 300 queries) on ``debian-minilm-384`` (cosine,
   ``gt_ip``) and ``spacy-wordvec-300`` (euclidean, ``gt_l2``), with bytes per vector and
   build time, for bbqlib ``osq`` (with and without a dense preconditioner), ``per_dim`` (float
   and 8-bit queries), ``global`` (int8 and Lucene's int7), faiss ``SQ8`` and ``SQ4``;
2. **estimator bias / spread** (``bbqlib.analysis.estimation_error``: mean and sd of
   ``estimate - exact`` over every (query, vector) pair of the first 100 queries, and over each
   query's true top 10), with faiss SQ8 measured the same way on its decoded vectors;
3. **single-thread scan throughput**: 64 queries x all vectors, top-10, no rerank; the median
   over 5 interleaved pairs of ``t_faiss / t_bbqlib`` against faiss ``IndexScalarQuantizer``
   (``SQ8``), at d = 384 (debian-minilm-384, 60,710 vectors) and on synthetic d = 1024 data
   (``common.synthetic_gaussian(n, 1024, 64, seed=0)``: seeded standard normal rows, unit
   normalized, cosine). > 1 means bbqlib is faster.

Run from the repository root::

    python benchmarks/quality/int8.py [--synthetic-n 50000] [--repeats 5]
        [--out benchmarks/results/int8.md]
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
import common  # noqa: E402
from engines import peers  # noqa: E402

import bbqlib  # noqa: E402
from bbqlib.analysis import compare_table, estimation_error, recall_at_k  # noqa: E402
from bbqlib.similarity import exact_raw, resolve_similarity  # noqa: E402

DATASETS = ("debian-minilm-384", "spacy-wordvec-300")
#: label -> ScalarQuantizer keyword arguments.
CONFIGS = {
    "bbqlib osq (8x8)": dict(method="osq"),
    "bbqlib osq + dense precondition": dict(method="osq", precondition="dense", seed=0),
    "bbqlib per_dim (8 x float)": dict(method="per_dim"),
    "bbqlib per_dim (8x8)": dict(method="per_dim", query_bits=8),
    "bbqlib global (Lucene int8)": dict(method="global"),
    "bbqlib global bits=7 (Lucene int7)": dict(method="global", bits=7),
}
#: Configurations timed against faiss SQ8.
TIMED = (
    "bbqlib osq (8x8)",
    "bbqlib osq + dense precondition",
    "bbqlib per_dim (8 x float)",
    "bbqlib per_dim (8x8)",
    "bbqlib global (Lucene int8)",
)


def build(X, similarity: str, kw: dict):
    """FlatIndex without float vectors (no rerank in this benchmark); (index, seconds)."""
    t0 = time.perf_counter()
    index = bbqlib.FlatIndex(bbqlib.ScalarQuantizer(similarity=similarity, **kw),
                             store_vectors=False)  # fmt: skip
    index.add(X)
    return index, time.perf_counter() - t0


def recall_section(datasets: dict) -> tuple[list[str], dict]:
    tables, built = [], {}
    for name, ds in datasets.items():
        rows = []
        for label, kw in CONFIGS.items():
            index, seconds = build(ds.base, ds.similarity, kw)
            _, ids = index.search(ds.queries, 10, rerank=False)
            rows.append(dict(method=label, recall=recall_at_k(ids, ds.gt_ids, 10),
                             bpv=index.bytes_per_vector, build=seconds))  # fmt: skip
            built[(name, label)] = index
            print(f"{name} {label}: {rows[-1]['recall']:.4f}", flush=True)
        for qtype in ("SQ8", "SQ4"):
            peer = peers.faiss_sq(ds.base, ds.similarity, qtype=qtype)
            _, ids = peer.search(ds.queries, 10)
            rows.append(dict(method=f"faiss {qtype}", recall=recall_at_k(ids, ds.gt_ids, 10),
                             bpv=peer.bytes_per_vector, build=peer.build_seconds))  # fmt: skip
            built[(name, f"faiss {qtype}")] = peer
            print(f"{name} faiss {qtype}: {rows[-1]['recall']:.4f}", flush=True)
        sq8 = next(r["recall"] for r in rows if r["method"] == "faiss SQ8")
        for r in rows:
            r["vs"] = r["recall"] - sq8
        tables.append(
            f"### recall@10, no rerank: {name} ({ds.similarity}, {ds.metric} ground truth, "
            f"{len(ds.queries)} queries)\n\n"
            + common.markdown_table(
                rows,
                [
                    ("method", "method"),
                    ("recall", "recall@10", ".4f"),
                    ("vs", "vs SQ8", "+.4f"),
                    ("bpv", "bytes/vector", "g"),
                    ("build", "build s", ".2f"),
                ],
            )  # fmt: skip
        )
    return tables, built


def faiss_errors(peer, Q, X, similarity: str, gt_ids) -> dict:
    """bias / sd of faiss SQ8's estimate (decoded vectors) over all pairs and the top 10."""
    sim = resolve_similarity(similarity)
    inner = (getattr(peer, "_refs", None) or {}).get("sq", peer.index)
    decoded = inner.reconstruct_n(0, inner.ntotal).astype(np.float64)
    Qp = peers._prepare(Q, similarity).astype(np.float64)
    Xp = peers._prepare(X, similarity).astype(np.float64)
    err = exact_raw(sim, Qp, decoded) - exact_raw(sim, Qp, Xp)
    top = np.take_along_axis(err, gt_ids[:, :10], axis=1)
    return dict(method="faiss SQ8 (decoded)", bias=err.mean(), sd=err.std(), top_bias=top.mean(),
                top_sd=top.std(), bpv=peer.bytes_per_vector)  # fmt: skip


def error_section(datasets: dict, built: dict, n_queries: int) -> list[str]:
    tables = []
    for name, ds in datasets.items():
        Q = ds.queries[:n_queries]
        reports = {}
        for label in CONFIGS:
            index = built[(name, label)]
            reports[label] = estimation_error(index.quantizer, Q, ds.base, encoded=index.codes,
                                              bands=(10,), label=label)  # fmt: skip
            print(f"{name} {label}: bias {reports[label].overall.bias:+.3g}", flush=True)
        f = faiss_errors(built[(name, "faiss SQ8")], Q, ds.base, ds.similarity,
                         ds.gt_ids[:n_queries])  # fmt: skip
        scale = "squared L2" if ds.similarity == "euclidean" else "inner product"
        faiss_row = common.markdown_table(
            [f], [("method", "method"), ("bpv", "B/vec", "g"), ("bias", "bias (all)", "+.4g"),
                  ("sd", "sd (all)", ".4g"), ("top_bias", "bias (top-10)", "+.4g"),
                  ("top_sd", "sd (top-10)", ".4g")])  # fmt: skip
        tables.append(
            f"### estimator error ({scale}, estimate - exact): {name}, first {len(Q)} queries x "
            f"{ds.n} vectors\n\nAll pairs:\n\n{compare_table(reports, 'all')}\n\n"
            f"True top-10 of each query:\n\n{compare_table(reports, 'top-10')}\n\n"
            f"faiss SQ8, same pairs (its search scores the decoded vectors):\n\n{faiss_row}"
        )
    return tables


def timing_section(sets: dict, repeats: int) -> list[str]:
    rows = []
    with common.single_thread():
        for name, (X, Q, similarity) in sets.items():
            faiss_peer = peers.faiss_sq(X, similarity, qtype="SQ8")
            for label in TIMED:
                index, _ = build(X, similarity, CONFIGS[label])
                t = common.interleaved_ratio(
                    lambda index=index, Q=Q: index.search(Q, 10, rerank=False),
                    lambda peer=faiss_peer, Q=Q: peer.search(Q, 10),
                    repeats=repeats,
                )
                rows.append(dict(data=name, method=label, speed=t.speedup_a_over_b,
                                 ms_b=1e3 * t.median_a, ms_f=1e3 * t.median_b))  # fmt: skip
                print(f"{name} {label}: {t.speedup_a_over_b:.2f}x", flush=True)
                del index
    cols = [
        ("data", "data"),
        ("method", "bbqlib method"),
        ("speed", "throughput vs faiss SQ8 (median of t_faiss/t_bbqlib)", ".2f"),
        ("ms_b", "bbqlib ms (median)", ".0f"),
        ("ms_f", "faiss SQ8 ms (median)", ".0f"),
    ]
    return [
        f"### single-thread scan, 64 queries x all vectors, top-10, {repeats} interleaved "
        "runs\n\n" + common.markdown_table(rows, cols)
    ]


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--synthetic-n", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--error-queries", type=int, default=100)
    parser.add_argument("--out", default=str(common.repo_root() / "benchmarks/results/int8.md"))
    args = parser.parse_args(argv)

    datasets = {name: common.load_dataset(name, 300) for name in DATASETS}
    recall_tables, built = recall_section(datasets)
    error_tables = error_section(datasets, built, args.error_queries)
    built.clear()

    deb = datasets["debian-minilm-384"]
    syn = common.synthetic_gaussian(args.synthetic_n, 1024, 64, seed=0)
    timing_sets = {
        f"debian-minilm-384 (n={deb.n}, d=384)": (deb.base, deb.queries[:64], "cosine"),
        f"synthetic Gaussian (n={syn.n}, d=1024)": (syn.base, syn.queries, "cosine"),
    }
    timing_tables = timing_section(timing_sets, args.repeats)

    bytes_table = common.markdown_table(
        [
            dict(m="osq", b="d + 16", w="uint8 codes + (lower, upper, additional, int32 ΣX)"),
            dict(m="per_dim", b="d", w="uint8 codes; ||x̂||² and ΣX are recomputed from codes"),
            dict(m="global, inner products", b="d + 4", w="uint8 codes + Lucene's float offset"),
            dict(m="global, euclidean", b="d", w="uint8 codes (Lucene stores a 0 offset)"),
            dict(m="faiss SQ8 / SQ4", b="d / d/2", w="codes only"),
        ],
        [("m", "method"), ("b", "bytes per vector"), ("w", "what")],
    )
    command = "python benchmarks/quality/int8.py" + (f" {' '.join(argv)}" if argv else "")
    notes = [
        "Recall uses bbqlib.analysis.recall_at_k (ids only) against the data sets' exact top-100.",
        "faiss SQ8 / SQ4 are `IndexScalarQuantizer` built by `benchmarks/engines/peers.py` "
        "(`faiss_sq`; cosine: normalized vectors, inner product). Codes only; no rerank.",
        "Throughput: bbqlib `FlatIndex.search(Q, 10, rerank=False)` (query quantization "
        "included) against `peer.search(Q, 10)`; numba and faiss limited to one thread "
        "(`common.single_thread`); `common.interleaved_ratio` alternates the two calls after "
        "one warm-up each.",
        "per_dim with float queries runs the core float x uint8 kernel, which accumulates in "
        "float64 in order (no reassociation), so it cannot use SIMD: use `query_bits=8` (or "
        "osq) when scan speed matters.",
        f"Synthetic set: {syn.note}.",
    ]
    common.write_result(args.out, "int8 scalar quantization: bbqlib vs faiss SQ8 / SQ4", command,
                         recall_tables + ["### bytes per vector\n\n" + bytes_table]
                         + error_tables + timing_tables, notes)  # fmt: skip
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main(sys.argv[1:])
