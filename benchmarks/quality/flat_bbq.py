"""bbqlib's flat BBQ index next to faiss, in one run (issue 2's measurements).

1. recall@10 (first 300 queries) of every BBQ encoding, raw and reranked at oversample 1, 1.5,
   3, 5, next to faiss RR + IndexRaBitQ (same bits, qb=4, IndexRefineFlat with the same
   k_factor) and faiss SQ8 / SQ4, on debian-minilm-384 (cosine, gt_ip) and spacy-wordvec-300
   (euclidean, gt_l2);
2. single-thread scan throughput, 1-bit docs x 4-bit queries, 64 queries x all vectors with
   top-10 selection, as the median ratio of interleaved runs to faiss IndexRaBitQ and
   IndexRaBitQFastScan, on debian-minilm-384 and on synthetic Gaussian d = 1024 data, plus
   bbqlib's 2-thread speed-up;
3. encode throughput as a ratio to faiss IndexRaBitQ.add (rotation included for faiss);
4. bytes per vector.

    python benchmarks/quality/flat_bbq.py            # writes benchmarks/results/flat.md
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

import common as C  # noqa: E402
from engines import peers  # noqa: E402

import bbqlib  # noqa: E402
from bbqlib.analysis import recall_at_k  # noqa: E402

OVERSAMPLES = (1.0, 1.5, 3.0, 5.0)
BITS = (1, 2, 4, 7)
#: bbqlib OSQ widths in the recall table (3, 5, 6 and 8 are registry rows since issue 10).
BBQ_BITS = (1, 2, 3, 4, 5, 6, 7, 8)


def recall_table(ds: C.Dataset, k: int = 10) -> list[dict]:
    rows = []
    gt = ds.gt_ids
    for bits in BBQ_BITS:
        index = bbqlib.FlatIndex(bits=bits, similarity=ds.similarity)
        index.add(ds.base)
        row = {
            "method": f"bbqlib BBQ {bits}x{index.quantizer.encoding_.query_bits}",
            "bytes": index.bytes_per_vector,
        }
        _, ids = index.search(ds.queries, k, rerank=False)
        row["raw"] = recall_at_k(ids, gt, k)
        for os_ in OVERSAMPLES:
            _, ids = index.search(ds.queries, k, oversample=os_)
            row[f"x{os_:g}"] = recall_at_k(ids, gt, k)
        rows.append(row)
    for bits in BITS:
        peer = peers.faiss_rabitq(ds.base, ds.similarity, bits=bits, qb=4, k_factor=1.0)
        row = {"method": f"faiss RR+RaBitQ{bits} qb4", "bytes": peer.bytes_per_vector}
        raw = peers.faiss_rabitq(ds.base, ds.similarity, bits=bits, qb=4)
        row["raw"] = recall_at_k(raw.search(ds.queries, k)[1], gt, k)
        for os_ in OVERSAMPLES:
            peer.set_search_params(k_factor=os_)
            row[f"x{os_:g}"] = recall_at_k(peer.search(ds.queries, k)[1], gt, k)
        rows.append(row)
    for kind in ("SQ8", "SQ4"):
        peer = peers.faiss_sq(ds.base, ds.similarity, qtype=kind)
        rows.append(
            {
                "method": f"faiss {kind}",
                "bytes": peer.bytes_per_vector,
                "raw": recall_at_k(peer.search(ds.queries, k)[1], gt, k),
            }
        )
    return rows


def throughput_rows(ds: C.Dataset, repeats: int) -> list[dict]:
    Q = ds.queries[:64]
    q = bbqlib.BBQQuantizer(bits=1, query_bits=4, similarity=ds.similarity).fit(ds.base)
    enc = q.encode(ds.base)
    rows = []
    with C.single_thread():
        rbq = peers.faiss_rabitq(ds.base, ds.similarity, bits=1, qb=4)
        fs = peers.faiss_rabitq_fastscan(ds.base, ds.similarity, bits=1, qb=4)

        def ours():
            q.search(Q, enc, 10)

        for name, peer in (("IndexRaBitQ", rbq), ("IndexRaBitQFastScan", fs)):
            t = C.interleaved_ratio(ours, lambda p=peer: p.search(Q, 10), repeats=repeats)
            rows.append(
                {
                    "data": ds.name,
                    "peer": f"faiss {name} (RR, 1-bit, qb=4)",
                    "bbqlib ms": 1e3 * t.median_a,
                    "peer ms": 1e3 * t.median_b,
                    "speed vs peer": t.speedup_a_over_b,
                }
            )
        one = C.time_call(ours, repeats=repeats)
    with C.threads(2):
        two = C.time_call(ours, repeats=repeats)
    rows.append(
        {
            "data": ds.name,
            "peer": "bbqlib 2 threads vs 1",
            "bbqlib ms": 1e3 * np.median(two),
            "peer ms": 1e3 * np.median(one),
            "speed vs peer": np.median(one) / np.median(two),
        }
    )
    return rows


def encode_rows(ds: C.Dataset, repeats: int) -> list[dict]:
    import faiss

    X = ds.base
    q = bbqlib.BBQQuantizer(bits=1, similarity=ds.similarity).fit(X)
    rbq = peers.faiss_rabitq(X, ds.similarity, bits=1, qb=4)
    Xp = peers._prepare(X, ds.similarity)
    top = rbq.index

    def faiss_add():
        top.reset()
        top.add(Xp)

    with C.single_thread():
        faiss.omp_set_num_threads(1)
        t = C.interleaved_ratio(lambda: q.encode(X), faiss_add, repeats=repeats)
    return [
        {
            "data": ds.name,
            "bbqlib encode s": t.median_a,
            "faiss add s": t.median_b,
            "speed vs faiss": t.speedup_a_over_b,
            "bbqlib vectors/s": len(X) / t.median_a,
        }
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--synthetic-n", type=int, default=100_000)
    ap.add_argument("--out", default=str(BENCH / "results" / "flat.md"))
    ap.add_argument("--skip-recall", action="store_true")
    args = ap.parse_args()

    tables = []
    datasets = [C.load_dataset("debian-minilm-384"), C.load_dataset("spacy-wordvec-300")]
    if not args.skip_recall:
        cols = [("method", "method"), ("bytes", "bytes/vector", ".0f"), ("raw", "raw")] + [
            (f"x{o:g}", f"rerank x{o:g}") for o in OVERSAMPLES
        ]
        for ds in datasets:
            t0 = time.perf_counter()
            rows = recall_table(ds)
            tables.append(
                f"### recall@10, {ds.note}, {ds.similarity}\n\n" + C.markdown_table(rows, cols)
            )
            print(tables[-1], f"\n({time.perf_counter() - t0:.0f} s)\n", flush=True)
    synth = C.synthetic_gaussian(n=args.synthetic_n, d=1024, n_queries=64)
    rows = []
    for ds in (datasets[0], synth):
        rows += throughput_rows(ds, args.repeats)
    tables.append(
        "### single-thread scan, 1-bit x 4-bit, 64 queries x all vectors, top-10\n\n"
        + C.markdown_table(
            rows,
            [
                "data",
                "peer",
                ("bbqlib ms", "bbqlib ms", ".1f"),
                ("peer ms", "peer ms", ".1f"),
                ("speed vs peer", "bbqlib speed-up", ".2f"),
            ],
        )
    )
    print(tables[-1], flush=True)
    rows = []
    for ds in (datasets[0], synth):
        rows += encode_rows(ds, args.repeats)
    tables.append(
        "### single-thread encode, 1-bit, vs faiss IndexRaBitQ.add (RR included)\n\n"
        + C.markdown_table(
            rows,
            [
                "data",
                ("bbqlib encode s", "bbqlib s", ".3f"),
                ("faiss add s", "faiss s", ".3f"),
                ("speed vs faiss", "bbqlib speed-up", ".2f"),
                ("bbqlib vectors/s", "bbqlib vectors/s", ",.0f"),
            ],
        )
    )
    print(tables[-1], flush=True)
    C.write_result(
        args.out,
        "Flat BBQ index vs faiss",
        "python benchmarks/quality/flat_bbq.py " + " ".join(sys.argv[1:]),
        tables,
        notes=[
            "Recall: first 300 queries; bbqlib oversample = faiss IndexRefineFlat k_factor.",
            "bytes/vector: packed codes + corrections (bbqlib: 14 B, 16 B at 7 bits); faiss: "
            "code_size as faiss reports it.",
            f"Synthetic: {synth.note}.",
            "Speed-up > 1 means bbqlib is faster (median of per-pair ratios of interleaved runs).",
        ],
    )


if __name__ == "__main__":
    main()
