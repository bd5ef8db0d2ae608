"""bbqlib against Lucene 10.5 itself: what is bit-identical in each arithmetic, what it costs.

One run, Lucene's jar driven through ``tests/java/LuceneOracle.java`` (``tests/lucene_harness.py``):

1. **bit-identical with Lucene**, per (data set, similarity, bits), on the first ``--n-docs``
   docs and ``--n-queries`` queries of each shared data set (spacy's dot_product on its
   normalized vectors): % of doc vectors with Lucene's levels and each correction
   (``lowerInterval``, ``upperInterval``, ``additionalCorrection`` as float32 bits,
   ``quantizedComponentSum``), % of queries with Lucene's levels and corrections, % of scores
   with Lucene's float32 bits, % of queries whose top 10 (ids in order) is Lucene's:

   * ``arithmetic="lucene"`` against Lucene's index (writer centroid, FMA off): must be 100%;
   * the default ``arithmetic="float64"`` against the same index (end to end: each side its
     own centroid and cosine normalization);
   * the default against Lucene's quantizer and scorer fed bbqlib's own centroid and
     normalized vectors (the arithmetic alone);
   * Lucene with ``-Dlucene.useScalarFMA=true`` against ``arithmetic="lucene"`` (what fused
     multiply-adds change);
2. **recall@10** of both arithmetics on the full data sets (first ``--n-queries`` queries,
   exact float64 ground truth of each similarity), quantized scores only and with the default
   oversample and exact rerank (``FlatIndex``);
3. **speed**: encode and flat scan (top 10, no rerank) of ``arithmetic="lucene"`` relative to
   the default, interleaved repeats, medians, ``--threads`` numba threads.

Run from the repository root::

    python benchmarks/quality/lucene.py [--n-docs 5000] [--n-queries 300] [--repeats 5]
        [--out benchmarks/results/lucene.md]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numba
import numpy as np

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent  # benchmarks/, on sys.path instead of HERE (see common.py)
sys.path[:] = [str(BENCH), *(p for p in sys.path if Path(p or ".").resolve() != HERE)]
sys.path.insert(0, str(BENCH.parent / "tests"))
import common  # noqa: E402
import lucene_harness as lucene_harness  # noqa: E402

import bbqlib  # noqa: E402
from bbqlib.similarity import exact_raw, resolve_similarity  # noqa: E402

DATASETS = ("debian-minilm-384", "spacy-wordvec-300")
SIMS = ("euclidean", "dot_product", "cosine", "max_inner_product")
BITS = (1, 2, 4, 7)
COLUMNS = [
    ("doc_levels", "levels"),
    ("lower", "lower"),
    ("upper", "upper"),
    ("additional", "additional"),
    ("component_sum", "Σk"),
    ("query_levels", "query levels"),
    ("query_corrections", "query corr."),
    ("scores", "scores"),
    ("top10", "top-10 order"),
]


def _unit(X: np.ndarray) -> np.ndarray:
    return (X / np.linalg.norm(X.astype(np.float64), axis=1, keepdims=True)).astype(np.float32)


def _data_dir() -> Path:
    """``$BBQLIB_DATA``, else the ``shared/data`` the Lucene harness finds (worktrees too)."""
    import os

    return (
        Path(os.environ["BBQLIB_DATA"])
        if "BBQLIB_DATA" in os.environ
        else lucene_harness.shared_dir() / "data"
    )


def _load(name: str, n: int | None, nq: int):
    folder = _data_dir() / name
    X = np.load(folder / "base.npy", mmap_mode="r")
    X = np.ascontiguousarray(X if n is None else X[:n], dtype=np.float32)
    Q = np.ascontiguousarray(np.load(folder / "queries.npy")[:nq], dtype=np.float32)
    return X, Q


def _inputs(name: str, sim: str, X: np.ndarray, Q: np.ndarray):
    """dot_product needs unit vectors: spacy's are normalized for it (both sides)."""
    if sim == "dot_product" and name.startswith("spacy"):
        return _unit(X), _unit(Q)
    return X, Q


def _pct(row: dict) -> dict:
    return {k: (100.0 * v if k in lucene_harness.FRACTIONS else v) for k, v in row.items()}


# ----------------------------------------------------------------------------- 1. bits
def bit_tables(args, tools) -> tuple[list[str], dict]:
    index_tasks, direct_tasks, inputs = [], [], {}
    for name in DATASETS:
        X0, Q0 = _load(name, args.n_docs, args.n_queries)
        for sim in SIMS:
            X, Q = _inputs(name, sim, X0, Q0)
            inputs[(name, sim)] = (X, Q)
            key = f"{name}.{sim}"
            index_tasks.append(lucene_harness.LuceneTask(key, X, Q, tuple((sim, b) for b in BITS)))
            # the default arithmetic's own centroid and prepared vectors, for Lucene direct
            q = bbqlib.BBQQuantizer(bits=1, similarity=sim).fit(X)
            Xp, Qp = q._validated(X, "X"), q._validated(Q, "Q")
            direct_tasks.append(
                lucene_harness.LuceneTask(
                    key + ".direct",
                    Xp,
                    Qp,
                    tuple((sim, b) for b in BITS),
                    mode="direct",
                    centroid=q.centroid_,
                )
            )
    t0 = time.perf_counter()
    ref = lucene_harness.run_oracle(index_tasks + direct_tasks, **tools, fma=False)
    fma = lucene_harness.run_oracle(index_tasks, **tools, fma=True)
    java_s = time.perf_counter() - t0
    meta_ref = next(iter(next(iter(ref.values())).values())).meta
    meta_fma = next(iter(next(iter(fma.values())).values())).meta

    tables = {"lucene": [], "e2e": [], "same": [], "fma": []}
    for name in DATASETS:
        for sim in SIMS:
            X, Q = inputs[(name, sim)]
            key = f"{name}.{sim}"
            for bits in BITS:
                ql = bbqlib.BBQQuantizer(bits=bits, similarity=sim, arithmetic="lucene").fit(X)
                qd = bbqlib.BBQQuantizer(bits=bits, similarity=sim).fit(X)
                label = {
                    "data": name,
                    "similarity": sim,
                    "bits": f"{bits}x{lucene_harness.query_bits(bits)}",
                }
                rows = {
                    "lucene": lucene_harness.compare(ql, X, Q, ref[key][(sim, bits)]),
                    "e2e": lucene_harness.compare(qd, X, Q, ref[key][(sim, bits)]),
                    "same": lucene_harness.compare(qd, X, Q, ref[key + ".direct"][(sim, bits)]),
                    "fma": lucene_harness.compare(ql, X, Q, fma[key][(sim, bits)]),
                }
                for table, row in rows.items():
                    tables[table].append({**label, **_pct(row)})
    cols = [("data", "data"), ("similarity", "similarity"), ("bits", "bits")]
    cols += [(k, h, ".1f") for k, h in COLUMNS]
    extra = [("max_rel_interval", "max rel. interval diff", ".1e")]
    extra += [("max_abs_score", "max abs. score diff", ".1e")]
    n = f"first {args.n_docs} docs, {args.n_queries} queries"
    md = [
        f'### 1a. `arithmetic="lucene"` vs Lucene 10.5 (index, FMA off), % bit-identical ({n})\n\n'
        + common.markdown_table(tables["lucene"], cols),
        f'### 1b. default `arithmetic="float64"` vs Lucene 10.5, end to end (each its own '
        f"centroid and normalization), % bit-identical ({n})\n\n"
        + common.markdown_table(tables["e2e"], cols + extra),
        f"### 1c. default `arithmetic=\"float64\"` vs Lucene's quantizer and scorer on bbqlib's "
        f"centroid and normalized vectors (arithmetic only), % bit-identical ({n})\n\n"
        + common.markdown_table(tables["same"], cols + extra),
        f"### 1d. Lucene with `-Dlucene.useScalarFMA=true` (has_fast_scalar_fma = "
        f'{meta_fma["has_fast_scalar_fma"]}) vs `arithmetic="lucene"`, % bit-identical ({n})'
        "\n\n" + common.markdown_table(tables["fma"], cols + extra),
    ]
    info = {
        "java_seconds": java_s,
        "meta_ref": meta_ref,
        "meta_fma": meta_fma,
        "all_lucene_100": all(
            r[k] == 100.0 for r in tables["lucene"] for k in lucene_harness.FRACTIONS
        ),
    }
    return md, info


# ----------------------------------------------------------------------------- 2. recall
def _recall(found: np.ndarray, truth: np.ndarray) -> float:
    hits = [len(set(f[f >= 0]) & set(t)) / len(t) for f, t in zip(found, truth, strict=True)]
    return float(np.mean(hits))


def recall_table(args) -> str:
    rows = []
    for name in DATASETS:
        X0, Q0 = _load(name, None, args.n_queries)
        for sim in SIMS:
            X, Q = _inputs(name, sim, X0, Q0)
            s = resolve_similarity(sim)
            Xe, Qe = (_unit(X), _unit(Q)) if sim == "cosine" else (X, Q)
            raw = exact_raw(s, Qe, Xe)
            truth = np.argsort(raw if s.is_distance else -raw, axis=1, kind="stable")[:, :10]
            for bits in BITS:
                row = {
                    "data": name,
                    "similarity": sim,
                    "bits": f"{bits}x{lucene_harness.query_bits(bits)}",
                }
                for mode in ("float64", "lucene"):
                    q = bbqlib.BBQQuantizer(bits=bits, similarity=sim, arithmetic=mode)
                    index = bbqlib.FlatIndex(q)
                    index.add(X)
                    row[f"{mode}_raw"] = _recall(index.search(Q, 10, rerank=False)[1], truth)
                    row[f"{mode}_rerank"] = _recall(index.search(Q, 10)[1], truth)
                rows.append(row)
    cols = [("data", "data"), ("similarity", "similarity"), ("bits", "bits")]
    cols += [
        ("float64_raw", "float64 raw", ".4f"),
        ("lucene_raw", "lucene raw", ".4f"),
        ("float64_rerank", "float64 rerank", ".4f"),
        ("lucene_rerank", "lucene rerank", ".4f"),
    ]
    return (
        f"### 2. recall@10, full data sets, first {args.n_queries} queries, exact float64 "
        "ground truth per similarity; raw = quantized scores only, rerank = default oversample "
        "(3 / 1.5 / 1 / 1) + exact rerank\n\n" + common.markdown_table(rows, cols)
    )


# ----------------------------------------------------------------------------- 3. speed
def _time_pair(ql, qd, X: np.ndarray, Q: np.ndarray, repeats: int):
    """Interleaved timings (lucene = a, float64 = b) of encode and of a top-10 scan."""
    enc = common.interleaved_ratio(lambda: ql.encode(X), lambda: qd.encode(X), repeats=repeats)
    el, ed = ql.encode(X), qd.encode(X)
    scan = common.interleaved_ratio(
        lambda: ql.search(Q, el, 10), lambda: qd.search(Q, ed, 10), repeats=repeats
    )
    return enc, scan


def speed_table(args) -> str:
    rows = []
    for name in DATASETS:
        X, Q = _load(name, args.timing_docs, 64)
        sim = common.DATASETS[name][0]
        for bits in (1, 4, 7):
            ql = bbqlib.BBQQuantizer(bits=bits, similarity=sim, arithmetic="lucene").fit(X)
            qd = bbqlib.BBQQuantizer(bits=bits, similarity=sim).fit(X)
            enc_t, scan_t = _time_pair(ql, qd, X, Q, args.repeats)
            rows.append(
                {
                    "data": f"{name} ({len(X)} x {X.shape[1]})",
                    "similarity": sim,
                    "bits": f"{bits}x{lucene_harness.query_bits(bits)}",
                    "enc_f64": 1e6 * enc_t.median_b / len(X),
                    "enc_luc": 1e6 * enc_t.median_a / len(X),
                    "enc_ratio": enc_t.ratio,
                    "scan_f64": 1e3 * scan_t.median_b / len(Q),
                    "scan_luc": 1e3 * scan_t.median_a / len(Q),
                    "scan_ratio": scan_t.ratio,
                }
            )
    cols = [("data", "data"), ("similarity", "similarity"), ("bits", "bits")]
    cols += [
        ("enc_f64", "encode float64 µs/vec", ".2f"),
        ("enc_luc", "encode lucene µs/vec", ".2f"),
        ("enc_ratio", "lucene / float64", ".2f"),
        ("scan_f64", "scan float64 ms/query", ".3f"),
        ("scan_luc", "scan lucene ms/query", ".3f"),
        ("scan_ratio", "lucene / float64", ".2f"),
    ]
    return (
        f"### 3. speed, {numba.get_num_threads()} numba threads: encode (all docs) and "
        f"flat scan (64 queries, top 10, no rerank), median of {args.repeats} interleaved "
        "pairs; ratio > 1 means the lucene arithmetic is slower\n\n"
        + common.markdown_table(rows, cols)
    )


def _shell(cmd: str) -> str:
    try:
        return subprocess.run(cmd, shell=True, capture_output=True, text=True).stdout.strip()
    except OSError:
        return "unavailable"


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n-docs", type=int, default=5000)
    p.add_argument("--n-queries", type=int, default=300)
    p.add_argument("--timing-docs", type=int, default=20000)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--skip-recall", action="store_true")
    p.add_argument("--out", default=str(BENCH / "results" / "lucene.md"))
    args = p.parse_args(argv)

    jar = lucene_harness.find_jar()
    found = lucene_harness.find_java(21)
    if jar is None or found is None:
        sys.exit("needs the Lucene 10.5 jar (shared/oracle) and a Java >= 21")
    tools = {"java": found[0], "javac": found[1], "jar": jar}
    before = _shell("uptime")
    t0 = time.perf_counter()
    md, info = bit_tables(args, tools)
    print(f"bit tables done in {time.perf_counter() - t0:.0f} s", flush=True)
    if not args.skip_recall:
        md.append(recall_table(args))
        print("recall done", flush=True)
    md.append(speed_table(args))
    command = "python benchmarks/quality/lucene.py " + " ".join(argv or sys.argv[1:])
    notes = [
        f"Lucene {info['meta_ref']['lucene']} on Java {info['meta_ref']['java']} "
        f"({tools['java']}); reference run: has_fast_scalar_fma = "
        f"{info['meta_ref']['has_fast_scalar_fma']}, vector incubator module = "
        f"{info['meta_ref']['vector_incubator_module']}; both JVM launches took "
        f"{info['java_seconds']:.0f} s.",
        "Every fraction of table 1a is 100%: " + str(info["all_lucene_100"]) + ".",
        f"`uptime` before the run: `{before}`; after: `{_shell('uptime')}`.",
        "`lscpu | head -n 16`:\n\n```\n" + _shell("lscpu | head -n 16") + "\n```",
    ]
    path = common.write_result(
        args.out, "bbqlib vs Lucene 10.5: bit-exactness and cost", command.strip(), md, notes
    )
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
