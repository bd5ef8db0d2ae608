"""Command line: ``python -m bbqlib demo``, ``eval``, ``calibrate``, ``warmup`` and
``ann-benchmarks-plugin``.

``demo`` runs on the sample bundled in the package (4,000 Debian package descriptions embedded
with all-MiniLM-L6-v2, 200 held-out queries); ``eval`` runs the same table on your vectors;
``calibrate`` finds the cheapest configuration that meets a recall target on your vectors;
``warmup`` compiles kernels into the kernel cache ahead of time (``--index``, ``--family``);
``ann-benchmarks-plugin HARNESS_DIR`` installs bbqlib into an ann-benchmarks checkout.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from ._version import __version__
from .analysis.ground_truth import exact_knn
from .analysis.recall import recall_at_k
from .datasets import load_demo_sample
from .encoding import get_encoding
from .formats.vectors import read_vectors
from .index import FlatIndex
from .integrations import ann_benchmarks_plugin
from .runtime.precompile import FAMILIES as PRECOMPILE_FAMILIES
from .similarity import resolve_similarity

__all__ = ["main", "load_demo_sample", "evaluate", "format_table"]

DEFAULT_BITS = (1, 2, 4, 7)
#: Timed runs per measurement; the table reports their median.
DEFAULT_REPEATS = 5

#: Printed under every table: what the size columns count and how the timings were taken.
TABLE_NOTES = """\
The first row is the baseline: exact float32 search with NumPy (Q @ X.T, argpartition).
B/vec codes: packed codes + corrections, what the quantized scan reads; compression is
  float32 size / that. B/vec held: what the index holds, the codes plus the float32 vectors
  kept for the exact rerank; held / float32 compares that with the baseline's float32
  vectors (FlatIndex(store_vectors=False) holds the codes only and searches with
  rerank=False).
QPS: all queries in one batch, median of {repeats} timed runs after a warm-up (raw and rerank
  interleaved). one query µs: the median latency of single-query searches (rerank as the
  default). encode s: fit + encode of all vectors, median of {encode_repeats} runs after a
  warm-up on a slice (numba compilation and cache loading excluded)."""

#: Single-query searches timed per row for the one-query latency.
ONE_QUERY_SAMPLE = 50


def _median_seconds(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def evaluate(
    base: np.ndarray,
    queries: np.ndarray,
    *,
    similarity: str = "cosine",
    bits=DEFAULT_BITS,
    k: int = 10,
    gt_ids: np.ndarray | None = None,
    progress: bool = True,
    repeats: int = DEFAULT_REPEATS,
    encode_repeats: int | None = None,
) -> tuple[list[dict], dict]:
    """Recall, speed and size of each BBQ encoding on ``base`` / ``queries``.

    Parameters
    ----------
    base, queries : ndarray, float32 [n, d] and [nq, d]
        Vectors to index and queries.
    similarity : str
        Any name :class:`~bbqlib.Similarity` accepts.
    bits : sequence of int
        Doc bit widths, one row each (query bits: Elasticsearch's defaults).
    k : int
        Neighbours per query.
    gt_ids : ndarray, int [nq, >= k], optional
        True neighbours; computed exactly (:func:`~bbqlib.analysis.exact_knn`) when omitted.
    progress : bool
        Show a progress bar.
    repeats : int
        Timed search runs per row; QPS is the median. Runs after a warm-up search, raw and
        reranked searches interleaved.
    encode_repeats : int, optional
        Timed builds per row (median); default 3 up to 100,000 vectors, else 1. A warm-up
        build on a slice runs first, so compilation is not timed.

    Returns
    -------
    rows : list of dict
        One table row per bit width.
    indexes : dict
        The built :class:`~bbqlib.FlatIndex` by bit width.
    """
    from tqdm.auto import tqdm

    sim = resolve_similarity(similarity)
    for name, value in (("repeats", repeats), ("encode_repeats", encode_repeats)):
        if value is not None and (not isinstance(value, int) or value < 1):
            raise ValueError(f"{name} must be a positive int; got {value!r}")
    if encode_repeats is None:
        encode_repeats = 3 if len(base) <= 100_000 else 1
    if gt_ids is None:
        metric = "l2" if sim.is_distance else ("cosine" if sim.value == "cosine" else "ip")
        _, gt_ids = exact_knn(base, queries, k, metric=metric, scores_first=True)
    d = base.shape[1]
    rows, indexes = [_exact_row(base, queries, sim, k, gt_ids, repeats)], {}
    show = progress and sys.stderr.isatty()  # a bar in a shared log file garbles the table
    for b in tqdm(bits, desc="encodings", disable=not show, leave=False):
        # Warm-up build: compiles (or loads from numba's cache) the fit and encode kernels.
        FlatIndex(bits=b, similarity=sim.value).add(base[: min(len(base), 256)])
        built = []

        def build(b=b, built=built):
            built.append(FlatIndex(bits=b, similarity=sim.value))
            built[-1].add(base)

        encode_s = _median_seconds(build, encode_repeats)
        index = built[-1]
        # Warm-up searches: kernels, the scan's block layout, the rerank path, one query.
        index.search(queries[:2], k, rerank=False)
        index.search(queries[:2], k)
        index.search(queries[0], k)
        raw_times, rerank_times = [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            _, raw_ids = index.search(queries, k, rerank=False)
            raw_times.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            _, ids = index.search(queries, k)
            rerank_times.append(time.perf_counter() - t0)
        one_s = _one_query_seconds(functools.partial(index.search, k=k), queries)
        enc = index.quantizer.encoding_
        codes = index.bytes_per_vector
        held = codes + (4 * d if index.store_vectors else 0)
        rows.append(
            {
                "encoding": f"{b}-bit docs x {enc.query_bits}-bit queries",
                "B/vec codes": codes,
                "compression": f"{4 * d / codes:.1f}x",
                "B/vec held": held,
                "held / float32": f"{held / (4 * d):.0%}",
                f"recall@{k} raw": f"{recall_at_k(raw_ids, gt_ids, k):.3f}",
                f"recall@{k} rerank": f"{recall_at_k(ids, gt_ids, k):.3f}",
                "oversample": enc.default_oversample,
                "QPS raw": f"{len(queries) / statistics.median(raw_times):,.0f}",
                "QPS rerank": f"{len(queries) / statistics.median(rerank_times):,.0f}",
                "one query µs": f"{one_s * 1e6:,.0f}",
                "encode s": f"{encode_s:.3f}",
            }
        )
        indexes[b] = index
    return rows, indexes


def _one_query_seconds(search, queries) -> float:
    """Median latency of ``search(q)`` over up to :data:`ONE_QUERY_SAMPLE` single queries."""
    times = []
    for q in queries[:ONE_QUERY_SAMPLE]:
        t0 = time.perf_counter()
        search(q)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _exact_row(base, queries, sim, k: int, gt_ids, repeats: int) -> dict:
    """The baseline row: exact float32 search with NumPy (a matrix product, argpartition)."""
    X = np.ascontiguousarray(base, dtype=np.float32)
    if sim.value == "cosine":  # unit rows, as the index normalizes them (not timed)
        X = X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-30)
    half_sq = 0.5 * np.einsum("ij,ij->i", X, X) if sim.is_distance else None

    def search(Q):
        S = np.atleast_2d(Q) @ X.T  # the query's norm does not change its ranking
        if half_sq is not None:
            S -= half_sq  # -|x - q|^2 / 2 up to a per-query constant
        top = np.argpartition(-S, k - 1, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(S, top, axis=1), axis=1)
        return np.take_along_axis(top, order, axis=1)

    search(queries[:2])
    ids = search(queries)
    batch_s = _median_seconds(lambda: search(queries), repeats)
    d = X.shape[1]
    return {
        "encoding": "float32, exact (NumPy)",
        "B/vec codes": 4 * d,
        "compression": "1.0x",
        "B/vec held": 4 * d,
        "held / float32": "100%",
        f"recall@{k} raw": f"{recall_at_k(ids, gt_ids, k):.3f}",
        f"recall@{k} rerank": "-",
        "oversample": "-",
        "QPS raw": f"{len(queries) / batch_s:,.0f}",
        "QPS rerank": "-",
        "one query µs": f"{_one_query_seconds(search, queries) * 1e6:,.0f}",
        "encode s": "-",
    }


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


def _cosines(vectors: np.ndarray, query: np.ndarray, ids: np.ndarray) -> np.ndarray:
    """Exact cosine of ``query`` with ``vectors[ids]`` (float64), whatever scores search returns."""
    x = np.asarray(vectors[ids], dtype=np.float64)
    q = np.asarray(query, dtype=np.float64).ravel()
    return (x @ q) / (np.linalg.norm(x, axis=1) * np.linalg.norm(q))


def _demo(args) -> int:
    sample = load_demo_sample()
    base, queries = sample["base"], sample["queries"]
    print(f"bbqlib {__version__} demo: {sample['source']}")
    print(f"{len(base)} vectors x {base.shape[1]} dims, {len(queries)} held-out queries, cosine\n")
    rows, indexes = evaluate(
        base, queries, similarity="cosine", k=10, progress=not args.quiet, repeats=args.repeats
    )
    print(format_table(rows))
    print(TABLE_NOTES.format(repeats=args.repeats, encode_repeats=3))
    index = indexes[1]
    print("\nExample neighbours (1-bit BBQ, default 3x oversample + rerank), with their cosine:")
    for qi in (0, 2, 7):
        _, ids = index.search(queries[qi], k=3)
        print(f"\n  query: {sample['query_texts'][qi]}")
        for c, i in zip(_cosines(base, queries[qi], ids[0]), ids[0], strict=True):
            print(f"    cos {c:.3f}  {sample['base_texts'][i]}")
    return 0


def _bits_arg(text: str) -> tuple[int, ...]:
    """``--bits``: comma-separated doc bit widths the encoding table has."""
    try:
        bits = tuple(int(b) for b in text.split(","))
        for b in bits:
            get_encoding(b)
    except ValueError as err:
        raise argparse.ArgumentTypeError(f"{text!r}: {err}") from None
    return bits


def _similarity_arg(text: str) -> str:
    try:
        return resolve_similarity(text).value
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _int_at_least(low: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text!r}")
        return value

    return parse


_positive_int = _int_at_least(1)


def _existing_file(text: str) -> Path:
    path = Path(text)
    if not path.is_file():
        raise argparse.ArgumentTypeError(f"no such file: {text}")
    return path


def _eval(args) -> int:
    # Every argument was checked by the parser (types above) before any data is read.
    base = np.asarray(read_vectors(args.data), dtype=np.float32)
    queries = np.asarray(read_vectors(args.queries), dtype=np.float32)
    if args.max_queries:
        queries = queries[: args.max_queries]
    gt = None
    if args.gt:
        gt = np.asarray(read_vectors(args.gt))[: len(queries)]
    print(f"{len(base)} vectors x {base.shape[1]} dims, {len(queries)} queries, {args.similarity}")
    encode_repeats = 3 if len(base) <= 100_000 else 1
    rows, _ = evaluate(
        base,
        queries,
        similarity=args.similarity,
        bits=args.bits,
        k=args.k,
        gt_ids=gt,
        repeats=args.repeats,
        encode_repeats=encode_repeats,
    )
    print(format_table(rows))
    print(TABLE_NOTES.format(repeats=args.repeats, encode_repeats=encode_repeats))
    return 0


def _calibrate(args) -> int:
    from .calibration import calibrate

    base = read_vectors(args.data, mmap=True)
    queries = None if args.queries is None else read_vectors(args.queries)
    report = calibrate(
        base, queries, similarity=args.similarity, k=args.k, target_recall=args.target_recall,
        index=args.index, max_bytes_per_vector=args.max_bytes_per_vector,
        max_latency_ms=args.max_latency_ms, n=args.n, seed=args.seed, progress=not args.quiet,
    )  # fmt: skip
    print(report)
    return 0 if report.chosen is not None else 1


def _warmup(args) -> int:
    from .runtime.precompile import precompile

    families = None if args.family is None else tuple(args.family)
    if families is not None and "all" in families:
        families = "all"
    report = precompile(
        args.index, families, args.similarity or "all", mapped=not args.no_mapped,
        progress=None if args.quiet else (lambda line: print(line, flush=True)),
    )  # fmt: skip
    print(report)
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="bbqlib",
        description="BBQ, RaBitQ and int8 vector quantization: recall, speed and size tables.",
    )
    parser.add_argument("--version", action="version", version=f"bbqlib {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser(
        "demo",
        help="recall / speed / size table on the bundled sample",
        description="Recall, speed and size of each BBQ encoding on the bundled sample "
        "(4,000 Debian package descriptions, MiniLM-384), then example neighbours.",
    )
    demo.add_argument("--quiet", action="store_true", help="no progress bar")
    demo.add_argument(
        "--repeats", type=_positive_int, default=DEFAULT_REPEATS, help="timed runs (median)"
    )
    ev = sub.add_parser(
        "eval",
        help="the same table on your own vectors",
        description="Recall, speed and size of each BBQ encoding on your vectors "
        "(.npy, .fvecs, .fbin; ground truth computed exactly unless --gt is given).",
    )
    ev.add_argument("--data", required=True, type=_existing_file, help="base vectors")
    ev.add_argument("--queries", required=True, type=_existing_file, help="query vectors")
    ev.add_argument(
        "--gt", type=_existing_file, help="ground-truth ids (.npy, .ivecs); exact if omitted"
    )
    ev.add_argument(
        "--similarity",
        default="cosine",
        type=_similarity_arg,
        help="cosine, dot_product, euclidean or max_inner_product (aliases: ip, l2, mip)",
    )
    ev.add_argument(
        "--bits", default=DEFAULT_BITS, type=_bits_arg, help="comma-separated doc bit widths"
    )
    ev.add_argument("--k", type=_positive_int, default=10, help="neighbours per query")
    ev.add_argument(
        "--max-queries", type=_int_at_least(0), default=0, help="use only the first N queries"
    )
    ev.add_argument(
        "--repeats", type=_positive_int, default=DEFAULT_REPEATS, help="timed runs (median)"
    )
    cal = sub.add_parser(
        "calibrate",
        help="the cheapest configuration meeting a recall target",
        description="Measure candidate configurations on your vectors and print the cheapest "
        "(bytes per vector, then latency) whose recall@k lower bound meets the target, as code.",
    )
    cal.add_argument("--data", required=True, type=_existing_file, help="base vectors")
    cal.add_argument(
        "--queries", type=_existing_file, help="held-out queries (default: 200 sampled from --data)"
    )
    cal.add_argument(
        "--similarity",
        default="cosine",
        type=_similarity_arg,
        help="cosine, dot_product, euclidean or max_inner_product (aliases: ip, l2, mip)",
    )
    cal.add_argument("--target-recall", type=float, default=0.95, help="recall@k target")
    cal.add_argument("--k", type=_positive_int, default=10, help="neighbours per query")
    cal.add_argument("--index", default="flat", choices=("flat", "ivf", "auto"))
    cal.add_argument("--max-bytes-per-vector", type=float, help="bytes each vector may add")
    cal.add_argument("--max-latency-ms", type=float, help="single-thread ms per query")
    cal.add_argument("--n", type=_positive_int, help="size RAM and disk for this many vectors")
    cal.add_argument("--seed", type=_int_at_least(0), default=0)
    cal.add_argument("--quiet", action="store_true", help="no progress lines")
    warm = sub.add_parser(
        "warmup",
        help="compile the kernels of chosen indexes into the kernel cache, ahead of time",
        description="Compile ahead of time, into bbqlib's kernel cache (BBQLIB_CACHE_DIR or the "
        "per-user default), every kernel the searches of the chosen index kinds and families "
        "need, in memory and opened from files: for a Dockerfile or CI step, so a fresh "
        "process loads machine code at its first queries instead of compiling it.",
    )
    warm.add_argument("--index", default="all", choices=("flat", "ivf", "all"))
    warm.add_argument(
        "--family", default=None, action="append",
        help="a family configuration (repeatable): " + ", ".join(PRECOMPILE_FAMILIES)
        + " or all (default: bbq1, the default index's)",
    )  # fmt: skip
    warm.add_argument(
        "--similarity", default=None, action="append", type=_similarity_arg,
        help="a similarity to cover (repeatable; default: all four)",
    )  # fmt: skip
    warm.add_argument("--no-mapped", action="store_true", help="skip indexes opened from files")
    warm.add_argument("--quiet", action="store_true", help="no progress lines")
    ann_benchmarks_plugin.add_subcommand(sub)
    args = parser.parse_args(argv)
    commands = {"demo": _demo, "eval": _eval, "calibrate": _calibrate, "warmup": _warmup}
    try:
        if hasattr(args, "func"):
            return args.func(args)
        return commands[args.command](args)
    except (ValueError, TypeError, FileNotFoundError) as err:
        print(f"bbqlib: error: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
