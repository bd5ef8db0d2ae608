"""Where does preconditioning change BBQ's recall and bias, and on which data?

For each shared data set (spacy-wordvec-300, euclidean; debian-minilm-384, cosine), the first
300 queries, BBQ at 1/2/4/7 doc bits is fitted without a transform and with each random
orthogonal transform (``dense``, ``block``, ``hadamard``) over 5 seeds. Reported:

* recall@10 of the quantized scan alone (no rerank) and after an exact rerank of 3x
  candidates, for the (doc x query) bits 1x4, 2x4, 4x4, 4x8 and 7x7: the mean over seeds, the
  seed range and the change from no transform;
* the estimator's bias with a float query (``query_bits=None``) and with the default quantized
  query, on normalized errors (``(est - exact) / (‖q − c‖ ‖o − c‖)``, twice that for squared
  L2: the error of the estimated cosine of the centred pair), for all pairs and for each
  query's true top 10, from :func:`bbqlib.analysis.estimation_error` on the first
  ``--bias-queries`` queries against the whole base.

Writes ``benchmarks/results/precondition.md``. Usage (from the repository root)::

    python benchmarks/quality/precondition.py [--seeds 5] [--queries 300] [--bias-queries 100]
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent  # benchmarks/, on sys.path instead of HERE (see common.py)
sys.path[:] = [str(BENCH), *(p for p in sys.path if Path(p or ".").resolve() != HERE)]
import common  # noqa: E402

import bbqlib  # noqa: E402
from bbqlib._validation import prepare_for_similarity  # noqa: E402
from bbqlib.analysis import estimation_error, recall_at_k  # noqa: E402

DATASETS = ("spacy-wordvec-300", "debian-minilm-384")
TRANSFORMS = ("dense", "block", "hadamard")
# (doc bits, query bits) whose recall is reported; docs are encoded once per doc width.
RECALL_CONFIGS = ((1, 4), (2, 4), (4, 4), (4, 8), (7, 7))
BIAS_BITS = (1, 2, 4, 7)
OUT = BENCH / "results" / "precondition.md"


def run_dataset(name: str, seeds: int, n_queries: int, bias_queries: int, log) -> dict:
    ds = common.load_dataset(name, n_queries)
    sim = bbqlib.Similarity(ds.similarity)
    vectors = prepare_for_similarity(ds.base, sim)
    queries = prepare_for_similarity(ds.queries, sim)
    doc_bits = sorted({b for b, _ in RECALL_CONFIGS} | set(BIAS_BITS))
    recall: dict = {}  # (doc, query, transform) -> list of (raw, rerank3) per seed
    bias: dict = {}  # (doc, query_bits, transform) -> list of (all, top10) BandStats per seed
    for bits in doc_bits:
        for transform in (None, *TRANSFORMS):
            for seed in range(seeds if transform else 1):
                t0 = time.perf_counter()
                q = bbqlib.BBQQuantizer(
                    bits=bits, similarity=ds.similarity, precondition=transform, seed=seed
                ).fit(ds.base)
                enc = q.encode(ds.base)
                for doc, qbits in RECALL_CONFIGS:
                    if doc != bits:
                        continue
                    qq = q.with_query_bits(qbits)
                    _, ids = qq.search(ds.queries, enc, 30)
                    raw = recall_at_k(ids[:, :10], ds.gt_ids, 10)
                    _, rr_ids = common.exact_rerank(queries, vectors, ids, 10, sim)
                    rr = recall_at_k(rr_ids, ds.gt_ids, 10)
                    recall.setdefault((doc, qbits, transform), []).append((raw, rr))
                if bits in BIAS_BITS:
                    for qbits in (None, "auto"):
                        qq = q.with_query_bits(qbits)
                        rep = estimation_error(
                            qq,
                            ds.queries[:bias_queries],
                            ds.base,
                            encoded=enc,
                            bands=(10,),
                            normalize=True,
                            rank_sample=500,
                            pairs_per_query=0,
                        )
                        key = (bits, qq.encoding_.query_bits, transform)
                        bias.setdefault(key, []).append((rep.overall, rep["top-10"]))
                log(
                    f"{name} {bits}-bit {transform or 'none'} seed {seed}: "
                    f"{time.perf_counter() - t0:.1f}s"
                )
    return {"dataset": ds, "recall": recall, "bias": bias}


def _mean_range(values) -> tuple[float, float, float]:
    v = np.asarray(values, dtype=np.float64)
    return float(v.mean()), float(v.min()), float(v.max())


def recall_table(res: dict) -> str:
    rows = []
    order = {t: i for i, t in enumerate((None, *TRANSFORMS))}
    items = sorted(res["recall"].items(), key=lambda kv: (kv[0][0], kv[0][1], order[kv[0][2]]))
    for (doc, qbits, transform), runs in items:
        base = res["recall"][(doc, qbits, None)]
        raw_m, raw_lo, raw_hi = _mean_range([r[0] for r in runs])
        rr_m, rr_lo, rr_hi = _mean_range([r[1] for r in runs])
        rows.append(
            {
                "bits": f"{doc}x{qbits}",
                "transform": transform or "none",
                "raw": raw_m,
                "raw_range": "–" if len(runs) == 1 else f"{raw_lo:.3f}–{raw_hi:.3f}",
                "d_raw": None if transform is None else raw_m - base[0][0],
                "rr": rr_m,
                "rr_range": "–" if len(runs) == 1 else f"{rr_lo:.3f}–{rr_hi:.3f}",
                "d_rr": None if transform is None else rr_m - base[0][1],
            }
        )
    return common.markdown_table(
        rows,
        [
            ("bits", "doc x query bits"),
            ("transform", "precondition"),
            ("raw", "recall@10 (no rerank)", ".3f"),
            ("raw_range", "seed range"),
            ("d_raw", "Δ vs none", "+.3f"),
            ("rr", "recall@10 (rerank 3x)", ".3f"),
            ("rr_range", "seed range"),
            ("d_rr", "Δ vs none", "+.3f"),
        ],
    )


def bias_table(res: dict) -> str:
    rows = []
    order = {t: i for i, t in enumerate((None, *TRANSFORMS))}
    items = sorted(
        res["bias"].items(), key=lambda kv: (kv[0][0], kv[0][1] is not None, order[kv[0][2]])
    )
    for (bits, qbits, transform), runs in items:
        alls = [a for a, _ in runs]
        tops = [t for _, t in runs]
        m, lo, hi = _mean_range([a.bias for a in alls])
        tm, tlo, thi = _mean_range([t.bias for t in tops])
        ci = float(np.mean([(a.bias_ci[1] - a.bias_ci[0]) / 2 for a in alls]))
        tci = float(np.mean([(t.bias_ci[1] - t.bias_ci[0]) / 2 for t in tops]))
        rows.append(
            {
                "bits": f"{bits}x{'float' if qbits is None else qbits}",
                "transform": transform or "none",
                "bias": f"{m:+.5f} ± {ci:.5f}",
                "seeds": "–" if len(runs) == 1 else f"{lo:+.5f}…{hi:+.5f}",
                "sd": float(np.mean([a.sd for a in alls])),
                "top": f"{tm:+.5f} ± {tci:.5f}",
                "tseeds": "–" if len(runs) == 1 else f"{tlo:+.5f}…{thi:+.5f}",
                "tsd": float(np.mean([t.sd for t in tops])),
            }
        )
    return common.markdown_table(
        rows,
        [
            ("bits", "doc x query bits"),
            ("transform", "precondition"),
            ("bias", "bias, all pairs (± 95% CI)"),
            ("seeds", "seed range"),
            ("sd", "sd", ".4f"),
            ("top", "bias, top-10 (± 95% CI)"),
            ("tseeds", "seed range"),
            ("tsd", "sd top-10", ".4f"),
        ],
    )


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS))
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--bias-queries", type=int, default=100)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    command = "python benchmarks/quality/precondition.py " + shlex.join(
        sys.argv[1:] if argv is None else argv
    )

    def log(msg):
        print(msg, flush=True)

    t0 = time.perf_counter()
    tables = []
    for name in args.datasets:
        res = run_dataset(name, args.seeds, args.queries, args.bias_queries, log)
        ds = res["dataset"]
        tables.append(
            f"## {name} ({ds.similarity}, n = {ds.n:,}, d = {ds.d}, first {args.queries} "
            f"queries)\n\n### Recall@10 (mean of {args.seeds} seeds for each transform)\n\n"
            + recall_table(res)
            + f"\n\n### Bias of the estimate (normalized errors, first {args.bias_queries} "
            f"queries x {ds.n:,} vectors; mean over seeds)\n\n" + bias_table(res)
        )
    notes = [
        "recall@10 against the data set's exact ground truth (gt_l2 for spacy-wordvec-300, "
        "gt_ip for debian-minilm-384), plain intersection (no tie credit).",
        "'no rerank': the top 10 of the quantized scan; 'rerank 3x': the top 30 of the scan "
        "rescored exactly on the float vectors.",
        "Transforms are seeded 0..seeds-1 (`BBQQuantizer(precondition=..., seed=s)`); 'none' is "
        "deterministic, so one run.",
        "Bias: `estimation_error(..., normalize=True)`; ± is the mean over seeds of the 95% "
        "two-way cluster-robust half-width (queries and vectors), the seed range shows the "
        "spread from the transform's randomness. A float query (`query_bits=None`) isolates "
        "the doc-side error; 'auto' is Elasticsearch's default query bits.",
        f"Total run time {time.perf_counter() - t0:.0f} s.",
    ]
    common.write_result(
        args.out,
        "Preconditioning BBQ: recall and bias by transform, bits and data set",
        command.strip(),
        tables,
        notes,
    )
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
