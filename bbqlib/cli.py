"""Command line: ``python -m bbqlib demo``, ``eval`` and ``calibrate``.

``demo`` runs on the sample bundled in the package (4,000 Debian package descriptions embedded
with all-MiniLM-L6-v2, 200 held-out queries); ``eval`` runs the same table on your vectors.
"""

from __future__ import annotations

import argparse
import sys
import time
from importlib import resources

import numpy as np

from .analysis.ground_truth import exact_knn
from .analysis.recall import recall_at_k
from .index import FlatIndex
from .io.vectors import read_vectors
from .similarity import resolve_similarity

__all__ = ["main", "load_demo_sample", "evaluate"]

DEFAULT_BITS = (1, 2, 4, 7)


def load_demo_sample() -> dict:
    """The bundled sample: float32 ``base`` [4000, 384], ``queries`` [200, 384] and texts."""
    with resources.files("bbqlib").joinpath("data/demo_sample.npz").open("rb") as f:
        z = np.load(f)
        return {
            "base": z["base"].astype(np.float32),
            "queries": z["queries"].astype(np.float32),
            "base_texts": z["base_texts"],
            "query_texts": z["query_texts"],
            "source": str(z["source"]),
        }


def evaluate(
    base: np.ndarray,
    queries: np.ndarray,
    *,
    similarity: str = "cosine",
    bits=DEFAULT_BITS,
    k: int = 10,
    gt_ids: np.ndarray | None = None,
    progress: bool = True,
) -> tuple[list[dict], dict]:
    """Recall, speed and size of each BBQ encoding on ``base`` / ``queries``.

    Returns the table rows and the built indexes by bits.
    """
    from tqdm.auto import tqdm

    sim = resolve_similarity(similarity)
    if gt_ids is None:
        metric = "l2" if sim.is_distance else ("cosine" if sim.value == "cosine" else "ip")
        gt_ids, _ = exact_knn(base, queries, k, metric=metric)
    rows, indexes = [], {}
    for b in tqdm(bits, desc="encodings", disable=not progress, leave=False):
        index = FlatIndex(bits=b, similarity=sim.value)
        t0 = time.perf_counter()
        index.add(base)
        build = time.perf_counter() - t0
        index.search(queries[:2], k)  # warm-up: loads cached kernels
        t0 = time.perf_counter()
        _, raw_ids = index.search(queries, k, rerank=False)
        raw_time = time.perf_counter() - t0
        t0 = time.perf_counter()
        _, ids = index.search(queries, k)
        rerank_time = time.perf_counter() - t0
        enc = index.quantizer.encoding_
        bpv = index.bytes_per_vector
        rows.append(
            {
                "encoding": f"{b}-bit docs x {enc.query_bits}-bit queries",
                "bytes/vector": bpv,
                "compression": f"{4 * base.shape[1] / bpv:.1f}x",
                f"recall@{k} raw": f"{recall_at_k(raw_ids, gt_ids, k):.3f}",
                f"recall@{k} rerank": f"{recall_at_k(ids, gt_ids, k):.3f}",
                "oversample": enc.default_oversample,
                "QPS raw": f"{len(queries) / raw_time:,.0f}",
                "QPS rerank": f"{len(queries) / rerank_time:,.0f}",
                "encode s": f"{build:.2f}",
            }
        )
        indexes[b] = index
    return rows, indexes


def format_table(rows: list[dict]) -> str:
    """A GitHub-flavoured markdown table."""
    cols = list(rows[0])
    widths = [max(len(c), *(len(str(r[c])) for r in rows)) for c in cols]
    line = "| " + " | ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    body = [
        "| " + " | ".join(str(r[c]).ljust(w) for c, w in zip(cols, widths, strict=True)) + " |"
        for r in rows
    ]
    return "\n".join([line, sep, *body])


def _demo(args) -> int:
    sample = load_demo_sample()
    base, queries = sample["base"], sample["queries"]
    print(f"bbqlib demo: {sample['source']}")
    print(f"{len(base)} vectors x {base.shape[1]} dims, {len(queries)} held-out queries, cosine\n")
    rows, indexes = evaluate(base, queries, similarity="cosine", k=10, progress=not args.quiet)
    print(format_table(rows))
    index = indexes[1]
    print("\nExample neighbours (1-bit BBQ, default 3x oversample + rerank):")
    for qi in (0, 2, 7):
        scores, ids = index.search(queries[qi], k=3)
        print(f"\n  query: {sample['query_texts'][qi]}")
        for s, i in zip(scores[0], ids[0], strict=True):
            print(f"    {s:.3f}  {sample['base_texts'][i]}")
    return 0


def _eval(args) -> int:
    base = np.asarray(read_vectors(args.data), dtype=np.float32)
    queries = np.asarray(read_vectors(args.queries), dtype=np.float32)
    if args.max_queries:
        queries = queries[: args.max_queries]
    gt = None
    if args.gt:
        gt = np.asarray(read_vectors(args.gt))[: len(queries)]
    bits = tuple(int(b) for b in args.bits.split(","))
    print(f"{len(base)} vectors x {base.shape[1]} dims, {len(queries)} queries, {args.similarity}")
    rows, _ = evaluate(base, queries, similarity=args.similarity, bits=bits, k=args.k, gt_ids=gt)
    print(format_table(rows))
    return 0


def _calibrate(args) -> int:
    from .calibrate import calibrate

    base = read_vectors(args.data, mmap=True)
    queries = None if args.queries is None else read_vectors(args.queries)
    report = calibrate(
        base, queries, similarity=args.similarity, k=args.k, target_recall=args.target_recall,
        index=args.index, max_bytes_per_vector=args.max_bytes_per_vector,
        max_latency_ms=args.max_latency_ms, n=args.n, seed=args.seed, progress=not args.quiet,
    )  # fmt: skip
    print(report)
    return 0 if report.chosen is not None else 1


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="bbqlib", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="recall / speed / size table on the bundled sample")
    demo.add_argument("--quiet", action="store_true", help="no progress bar")
    ev = sub.add_parser("eval", help="the same table on your own vectors")
    ev.add_argument("--data", required=True, help="base vectors (.npy, .fvecs, .fbin)")
    ev.add_argument("--queries", required=True, help="query vectors (.npy, .fvecs, .fbin)")
    ev.add_argument("--gt", help="ground-truth ids (.npy/.ivecs); exact search if omitted")
    ev.add_argument("--similarity", default="cosine", help="cosine, dot_product, euclidean, mip")
    ev.add_argument("--bits", default="1,2,4,7", help="comma-separated doc bit widths")
    ev.add_argument("--k", type=int, default=10)
    ev.add_argument("--max-queries", type=int, default=0, help="use only the first N queries")
    cal = sub.add_parser("calibrate", help="the cheapest configuration meeting a recall target")
    cal.add_argument("--data", required=True, help="base vectors (.npy, .fvecs, .fbin)")
    cal.add_argument("--queries", help="held-out queries (default: 200 sampled from --data)")
    cal.add_argument("--similarity", default="cosine", help="cosine, dot_product, euclidean, mip")
    cal.add_argument("--target-recall", type=float, default=0.95)
    cal.add_argument("--k", type=int, default=10)
    cal.add_argument("--index", default="flat", choices=("flat", "ivf", "auto"))
    cal.add_argument("--max-bytes-per-vector", type=float)
    cal.add_argument("--max-latency-ms", type=float)
    cal.add_argument("--n", type=int, help="size RAM and disk for this many vectors")
    cal.add_argument("--seed", type=int, default=0)
    cal.add_argument("--quiet", action="store_true", help="no progress lines")
    args = parser.parse_args(argv)
    commands = {"demo": _demo, "eval": _eval, "calibrate": _calibrate}
    try:
        return commands[args.command](args)
    except (ValueError, TypeError, FileNotFoundError) as err:
        print(f"bbqlib: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
