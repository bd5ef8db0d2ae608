"""SAQ next to Extended RaBitQ (bbqlib), faiss RR + IndexRaBitQ and BBQ, in one run.

Both shared data sets (debian-minilm-384: cosine, ``gt_ip``; spacy-wordvec-300: euclidean,
``gt_l2``), the first 300 queries:

1. **recall@10** of the raw estimate at 1, 1.5, 2, 3, 4 bits per dimension, and at 3x rerank
   (the best 30 estimates rescored exactly), bytes per vector (codes + factors), mean over
   rotation seeds. bbqlib ``SAQQuantizer(bits, query_bits=None, seed=s)`` (defaults:
   ``error_model="auto"``, ``block=32``), ``RaBitQQuantizer(bits, query_bits=None, seed=s)``
   (Extended RaBitQ, float query) and with its default query bits (4 at 1 bit), faiss
   ``IndexPreTransform(RandomRotationMatrix, IndexRaBitQ(bits))`` with ``qb=4`` (seed 12345
   + s), ``BBQQuantizer(bits)`` (1, 2, 4 bits; 4-bit queries). The error-model and block
   variants of SAQ follow.
2. **estimation error** over every (query, vector) pair: sd of ``est - exact`` (inner product
   for debian, squared L2 for spacy), mean relative error of the squared distance (the paper's
   metric; ``d² = 2 - 2 ip`` on debian's unit vectors) and the mean error on each query's true
   10 nearest (the dropped tail's bias), SAQ next to Extended RaBitQ; then SAQ's error by
   query bits (which query bits keep the error small).
3. **encode throughput**, single thread, 2 / 4 / 7 bits: ``SAQQuantizer.encode`` vs
   ``RaBitQQuantizer.encode`` vs faiss ``IndexRaBitQ.add`` (rotation included), interleaved
   repeats, medians of per-round ratios.
4. **flat scan throughput**, single thread, k = 10, all 300 queries at once: SAQ's scans
   (``two-pass``, the default for float queries, and its variants whose first pass reads only
   the top 1 or 2 bits of each segment, as the authors' "1-bit stage"; ``plain``;
   ``fastscan`` with 4-bit queries)
   vs ``RaBitQQuantizer.search`` (float query, and 4-bit queries through bbqlib's AVX2
   lookup-table scan), interleaved repeats, medians, ratios; recall@10 of each.
5. **PCA**: NumPy (float64 covariance + ``eigh``, what SAQ uses) vs scikit-learn ``PCA``.
6. ``--part qps`` (``benchmarks/quality/saq_qps.py``): QPS at recall@10 0.90 / 0.95, flat and IVF,
   SAQ vs bbqlib's RaBitQ at the same bits, and IVF SAQ vs rabitqlib's ``IvfIndex``.

Usage::

    python benchmarks/quality/saq.py [--seeds 3] [--queries 300] [--repeats 5] [--quick]
    python benchmarks/quality/saq.py --part qps --datasets debian-minilm-384 [--qps-bits 2 4]
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from functools import partial
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent  # benchmarks/, on sys.path instead of HERE (see common.py)
sys.path[:] = [str(BENCH), *(p for p in sys.path if Path(p or ".").resolve() != HERE)]

import common  # noqa: E402
from engines import peers  # noqa: E402

from bbqlib import BBQQuantizer, RaBitQQuantizer, SAQQuantizer  # noqa: E402
from bbqlib._validation import prepare_for_similarity  # noqa: E402
from bbqlib.analysis import recall_at_k  # noqa: E402
from bbqlib.search.rerank import exact_mode, exact_values, rerank_keys  # noqa: E402
from bbqlib.similarity import exact_raw, resolve_similarity  # noqa: E402

OUT = BENCH / "results" / "saq.md"
DATASETS = ("debian-minilm-384", "spacy-wordvec-300")
BUDGETS = (1.0, 1.5, 2.0, 3.0, 4.0)


def _load():
    import os

    return os.getloadavg()


def _recall_of(q, enc, ds, sim):
    """Recall@10 of the raw estimate and of a 3x exact rerank."""
    vectors = prepare_for_similarity(ds.base, sim)
    queries = prepare_for_similarity(ds.queries, sim)
    _, cand = q.search(ds.queries, enc, 30)
    raw = recall_at_k(cand[:, :10], ds.gt_ids, 10)
    raw_exact = exact_values(queries, vectors, cand, exact_mode(sim))
    _, ids = rerank_keys(raw_exact, cand, 10, sim)
    return raw, recall_at_k(ids, ds.gt_ids, 10)


def recall_rows(ds, seeds, log, variants=True) -> tuple[list[dict], list[dict]]:
    sim = resolve_similarity(ds.similarity)
    rows, out_variants = [], []
    for bits in BUDGETS:
        row = {"bits": bits}
        acc = {}
        for s in seeds:
            q = SAQQuantizer(bits=bits, similarity=sim, seed=s).fit(ds.base)
            enc = q.encode(ds.base)
            acc.setdefault("saq", []).append(_recall_of(q, enc, ds, sim))
            row["saq_bpv"] = enc.bytes_per_vector
            row["plan"] = q.plan_.describe()
            if bits == int(bits):
                for key, qb in (("rq", None), ("rq_def", "auto")):
                    r = RaBitQQuantizer(int(bits), qb, sim, seed=s).fit(ds.base)
                    e = r.encode(ds.base)
                    acc.setdefault(key, []).append(_recall_of(r, e, ds, sim))
                    row["rq_bpv"] = e.bytes_per_vector
                fp = peers.faiss_rabitq(
                    ds.base, ds.similarity, bits=int(bits), qb=4, seed=12345 + s
                )
                _, ids = fp.search(ds.queries, 10)
                fr = peers.faiss_rabitq(
                    ds.base, ds.similarity, bits=int(bits), qb=4, k_factor=3, seed=12345 + s
                )
                _, ids3 = fr.search(ds.queries, 10)
                acc.setdefault("faiss", []).append(
                    (recall_at_k(ids, ds.gt_ids, 10), recall_at_k(ids3, ds.gt_ids, 10))
                )
                row["faiss_bpv"] = int(fp.bytes_per_vector)
        if bits in (1.0, 2.0, 4.0):  # BBQ is deterministic (no rotation): one run
            b = BBQQuantizer(bits=int(bits), similarity=sim).fit(ds.base)
            e = b.encode(ds.base)
            acc["bbq"] = [_recall_of(b, e, ds, sim)]
            row["bbq_bpv"] = e.bytes_per_vector
        for key, vals in acc.items():
            v = np.array(vals)
            row[f"{key}_raw"], row[f"{key}_os3"] = v.mean(axis=0)
            if key == "saq":
                row["saq_range"] = float(v[:, 0].max() - v[:, 0].min())
        if "rq_raw" in row:
            row["delta"] = row["saq_raw"] - row["rq_raw"]
        rows.append(row)
        log(f"{ds.name} recall {row}")
        for model in ("reference", "neighbour") if variants else ():
            for block in (32, 64):
                vals = []
                for s in seeds:
                    q = SAQQuantizer(
                        bits=bits, similarity=sim, seed=s, error_model=model, block=block
                    ).fit(ds.base)
                    vals.append(_recall_of(q, q.encode(ds.base), ds, sim)[0])
                out_variants.append(
                    {
                        "bits": bits,
                        "model": model,
                        "block": block,
                        "raw": float(np.mean(vals)),
                        "plan": q.plan_.describe(),
                    }
                )
                log(f"{ds.name} variant {out_variants[-1]}")
    return rows, out_variants


def error_rows(ds, log) -> tuple[list[dict], list[dict]]:
    """Estimation error of SAQ and Extended RaBitQ over every pair (seed 0)."""
    sim = resolve_similarity(ds.similarity)
    X = prepare_for_similarity(ds.base, sim)
    Q = prepare_for_similarity(ds.queries, sim)
    exact = exact_raw(sim, Q, X.astype(np.float64))
    if sim.is_distance:
        d2_exact = exact
    else:
        d2_exact = 2.0 - 2.0 * exact  # unit vectors
    top = ds.gt_ids[:, :10]

    def stats(est):
        err = est.astype(np.float64) - exact
        d2 = est if sim.is_distance else 2.0 - 2.0 * est.astype(np.float64)
        nz = d2_exact > 1e-9
        rel = float(np.mean(np.abs(d2[nz] - d2_exact[nz]) / d2_exact[nz]))
        return float(err.std()), rel, float(np.take_along_axis(err, top, 1).mean())

    rows, qrows = [], []
    for bits in BUDGETS:
        q = SAQQuantizer(bits=bits, similarity=sim, seed=0).fit(ds.base)
        enc = q.encode(ds.base)
        row = {"bits": bits}
        row["saq_sd"], row["saq_rel"], row["saq_top"] = stats(q.estimate(ds.queries, enc))
        if bits == int(bits):
            r = RaBitQQuantizer(int(bits), None, sim, seed=0).fit(ds.base)
            row["rq_sd"], row["rq_rel"], row["rq_top"] = stats(
                r.estimate(ds.queries, r.encode(ds.base))
            )
            row["sd_ratio"] = row["saq_sd"] / row["rq_sd"]
            row["rel_ratio"] = row["saq_rel"] / row["rq_rel"]
        rows.append(row)
        log(f"{ds.name} error {row}")
        if bits in (1.0, 2.0, 4.0):
            for qb in (None, 8, 6, 4):
                est = q.with_query_bits(qb).estimate(ds.queries, enc)
                sd, rel, _ = stats(est)
                qrows.append(
                    {
                        "bits": bits,
                        "qb": "float" if qb is None else qb,
                        "sd": sd,
                        "rel": rel,
                        "vs_float": sd / row["saq_sd"],
                    }
                )
    return rows, qrows


def encode_rows(ds, repeats, log) -> list[dict]:
    import faiss

    sim = resolve_similarity(ds.similarity)
    X = ds.base
    rows = []
    for bits in (2, 4, 7):
        saq = SAQQuantizer(bits=float(bits), similarity=sim).fit(X)
        rq = RaBitQQuantizer(bits, None, sim, seed=0).fit(X)
        metric = faiss.METRIC_L2 if sim.is_distance else faiss.METRIC_INNER_PRODUCT
        Xf = prepare_for_similarity(X, sim)

        def faiss_add(Xf=Xf, metric=metric, bits=bits):
            idx = faiss.IndexPreTransform(
                faiss.RandomRotationMatrix(X.shape[1], X.shape[1]),
                faiss.IndexRaBitQ(X.shape[1], metric, bits),
            )
            idx.train(Xf[:2000])
            t0 = time.perf_counter()
            idx.add(Xf)
            return time.perf_counter() - t0

        saq.encode(X[:64])
        rq.encode(X[:64])
        load0 = _load()[0]
        t_s, t_r, t_f = [], [], []
        for _ in range(repeats):
            t0 = time.perf_counter()
            saq.encode(X)
            t1 = time.perf_counter()
            rq.encode(X)
            t2 = time.perf_counter()
            t_f.append(faiss_add())
            t_s.append(t1 - t0)
            t_r.append(t2 - t1)
        row = {
            "bits": bits,
            "plan": saq.plan_.describe(),
            "saq": len(X) / np.median(t_s),
            "rq": len(X) / np.median(t_r),
            "faiss": len(X) / np.median(t_f),
            "vs_rq": float(np.median(np.array(t_r) / np.array(t_s))),
            "vs_faiss": float(np.median(np.array(t_f) / np.array(t_s))),
            "load": f"{load0:.1f}-{_load()[0]:.1f}",
        }
        rows.append(row)
        log(f"{ds.name} encode {row}")
    return rows


def _two_pass(saq, Q, enc, planes):
    """The two-pass scan with a first pass over the top ``planes`` bits of each segment."""
    from bbqlib.quantizers.saq.search import search

    Qc, q_add = saq._query_parts(saq._validated(Q, "Q"))
    keys, ids, rescored = search(
        saq, Qc, q_add, enc, 10, None, 0, mode="two-pass", pass1_planes=planes
    )
    saq.last_rescored_ = rescored
    return keys, ids


def scan_rows(ds, repeats, log) -> list[dict]:
    sim = resolve_similarity(ds.similarity)
    Q = ds.queries
    rows = []
    for bits in (1, 2, 3, 4):
        saq = SAQQuantizer(bits=float(bits), similarity=sim).fit(ds.base)
        enc = saq.encode(ds.base)
        saq4 = saq.with_query_bits(4)
        r = RaBitQQuantizer(bits, None, sim, seed=0).fit(ds.base)
        re_ = r.encode(ds.base)
        r4 = r.with_query_bits(4)
        runs = {
            "saq two-pass": partial(saq.search, Q, enc, 10, scan="two-pass"),
            "saq two-pass, top-bit pass 1": partial(_two_pass, saq, Q, enc, 1),
            "saq two-pass, top-2-bit pass 1": partial(_two_pass, saq, Q, enc, 2),
            "saq plain": partial(saq.search, Q, enc, 10, scan="plain"),
            "saq 4-bit query": partial(saq4.search, Q, enc, 10, scan="fastscan"),
            "rabitq float query": partial(r.search, Q, re_, 10),
            "rabitq 4-bit query": partial(r4.search, Q, re_, 10),
        }
        recall = {k: recall_at_k(f()[1], ds.gt_ids, 10) for k, f in runs.items()}  # + warm-up
        rescored = {}
        for k, f in runs.items():
            if k.startswith("saq two-pass"):
                f()
                rescored[k] = f"{saq.last_rescored_.mean():.0f} docs rescored / query"
        load0 = _load()[0]
        times = {k: [] for k in runs}
        for _ in range(repeats):
            for k, f in runs.items():
                t0 = time.perf_counter()
                f()
                times[k].append(time.perf_counter() - t0)
        base = np.array(times["rabitq float query"])
        for k in runs:
            t = np.array(times[k])
            rows.append(
                {
                    "bits": bits,
                    "scan": k,
                    "qps": len(Q) / np.median(t),
                    "vs_rq": float(np.median(base / t)),
                    "vs_rq4": float(np.median(np.array(times["rabitq 4-bit query"]) / t)),
                    "recall": recall[k],
                    "note": rescored.get(k, ""),
                    "load": f"{load0:.1f}-{_load()[0]:.1f}",
                }
            )
        log(f"{ds.name} scan {rows[-len(runs) :]}")
    return rows


def pca_rows(ds, repeats) -> dict:
    from sklearn.decomposition import PCA

    from bbqlib.quantizers.saq.plan import fit_pca

    X = prepare_for_similarity(ds.base, resolve_similarity(ds.similarity))
    t_np, t_sk = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        _, W, var = fit_pca(X)
        t1 = time.perf_counter()
        p = PCA(svd_solver="full").fit(X)
        t2 = time.perf_counter()
        t_np.append(t1 - t0)
        t_sk.append(t2 - t1)
    sk_var = p.explained_variance_ * (len(X) - 1) / len(X)  # sklearn divides by n - 1
    cos = np.abs((W[:, :10] * p.components_[:10].T).sum(0))
    return {
        "numpy_s": float(np.median(t_np)),
        "sklearn_s": float(np.median(t_sk)),
        "ratio": float(np.median(np.array(t_sk) / np.array(t_np))),
        "var_rel": float(np.max(np.abs(var - sk_var) / var[0])),
        "axis_cos": float(cos.min()),
    }


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="one seed, 40 queries (smoke run)")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    ap.add_argument(
        "--no-variants", action="store_true", help="skip the error-model / block variants"
    )
    ap.add_argument("--part", choices=("all", "qps"), default="all",
                    help="qps: only the QPS-at-recall tables (quality/saq_qps.py)")  # fmt: skip
    ap.add_argument("--qps-bits", type=float, nargs="+", default=[2.0, 4.0])
    ap.add_argument("--no-ivf", action="store_true", help="qps part: flat only")
    ap.add_argument("--no-rabitqlib", action="store_true", help="qps part: skip rabitqlib")
    args = ap.parse_args(argv)
    if args.part == "qps":
        from quality import saq_qps

        return saq_qps.main(args, argv, OUT.with_name("saq_qps.md"), NOTES[:1])
    if args.quick:
        args.seeds, args.queries, args.repeats = 1, 40, 2
    started = time.time()

    def log(msg):
        print(f"[{time.time() - started:6.0f}s load {_load()[0]:.1f}] {msg}", flush=True)

    seeds = range(args.seeds)
    sections = []
    with common.single_thread():
        for name in args.datasets:
            ds = common.load_dataset(name, args.queries)
            head = (
                f"{name} ({ds.similarity}, {ds.queries.shape[0]} queries, n = {ds.n}, d = {ds.d})"
            )
            rows, variants = recall_rows(ds, seeds, log, variants=not args.no_variants)
            sections.append(_recall_md(head, rows, variants, len(seeds)))
            err, qerr = error_rows(ds, log)
            sections.append(_error_md(head, err, qerr))
            sections.append(_encode_md(head, encode_rows(ds, args.repeats, log)))
            sections.append(_scan_md(head, scan_rows(ds, args.repeats, log)))
            sections.append(_pca_md(head, pca_rows(ds, args.repeats)))
    cmd = "python benchmarks/quality/saq.py " + " ".join(
        shlex.quote(a) for a in (argv or sys.argv[1:])
    )
    common.write_result(
        args.out, "SAQ next to Extended RaBitQ, faiss RaBitQ and BBQ", cmd.strip(), sections, NOTES
    )
    log(f"wrote {args.out}")


NOTES = [
    "Single thread everywhere (`common.single_thread()`: numba, faiss/OpenMP, BLAS). "
    "The machine is shared: each timing table gives the 1-min load average at its start and "
    "end; speeds are medians of interleaved repeats and ratios are medians of per-round ratios.",
    "Bytes per vector: codes + per-vector factors. SAQ: plan code bytes + 4 + 8 per coded "
    "segment; bbqlib Extended RaBitQ: bits * D_p / 8 + 14 (16 above 4 bits); faiss: its "
    "`code_size`; BBQ: bits * D_p / 8 + 14.",
    "recall@10 is plain set overlap with the first 10 ground-truth ids; 'os 3' reranks the best "
    "30 estimates on the float vectors.",
]


def _recall_md(head, rows, variants, n_seeds) -> str:
    t = common.markdown_table(
        rows,
        [
            ("bits", "bits/dim", "g"),
            ("plan", "SAQ plan (dims@bits)"),
            ("saq_bpv", "SAQ B/vec"),
            ("rq_bpv", "ExtRaBitQ B/vec"),
            ("faiss_bpv", "faiss B/vec"),
            ("bbq_bpv", "BBQ B/vec"),
            ("saq_raw", "SAQ"),
            ("rq_raw", "ExtRaBitQ (float q)"),
            ("delta", "SAQ − ExtRaBitQ", "+.3f"),
            ("rq_def_raw", "ExtRaBitQ (default q)"),
            ("faiss_raw", "faiss RR+RaBitQ qb4"),
            ("bbq_raw", "BBQ"),
            ("saq_os3", "SAQ os 3"),
            ("rq_os3", "ExtRaBitQ os 3"),
            ("faiss_os3", "faiss k_factor 3"),
            ("bbq_os3", "BBQ os 3"),
            ("saq_range", "SAQ seed range", ".3f"),
        ],
    )
    v = common.markdown_table(
        variants,
        [
            ("bits", "bits/dim", "g"),
            ("model", "error model"),
            ("block", "block"),
            ("raw", "recall@10"),
            ("plan", "plan (last seed)"),
        ],
    )
    return (
        f"### Recall@10, {head}\n\nMean over {n_seeds} rotation seeds; no rerank unless "
        f"'os 3'.\n\n{t}\n\nSAQ's error models and block widths (no rerank):\n\n{v}"
    )


def _error_md(head, rows, qrows) -> str:
    t = common.markdown_table(
        rows,
        [
            ("bits", "bits/dim", "g"),
            ("saq_sd", "SAQ error sd", ".4g"),
            ("rq_sd", "ExtRaBitQ error sd", ".4g"),
            ("sd_ratio", "sd ratio", ".2f"),
            ("saq_rel", "SAQ mean rel. error d²", ".3%"),
            ("rq_rel", "ExtRaBitQ mean rel. error d²", ".3%"),
            ("rel_ratio", "rel. ratio", ".2f"),
            ("saq_top", "SAQ mean error, true top-10", "+.4g"),
            ("rq_top", "ExtRaBitQ mean error, true top-10", "+.4g"),
        ],
    )
    q = common.markdown_table(
        qrows,
        [
            ("bits", "bits/dim", "g"),
            ("qb", "query bits"),
            ("sd", "error sd", ".4g"),
            ("rel", "mean rel. error d²", ".3%"),
            ("vs_float", "sd / float query's", ".3f"),
        ],
    )
    return (
        f"### Estimation error, {head}\n\nEvery (query, vector) pair, seed 0; float queries.\n\n"
        f"{t}\n\nSAQ by query bits (per-segment uniform grid, nearest rounding):\n\n{q}"
    )


def _encode_md(head, rows) -> str:
    t = common.markdown_table(
        rows,
        [
            ("bits", "bits/dim"),
            ("plan", "SAQ plan"),
            ("saq", "SAQ vectors/s", ",.0f"),
            ("rq", "ExtRaBitQ vectors/s", ",.0f"),
            ("faiss", "faiss IndexRaBitQ.add vectors/s", ",.0f"),
            ("vs_rq", "SAQ / ExtRaBitQ", ".2f"),
            ("vs_faiss", "SAQ / faiss", ".2f"),
            ("load", "load avg"),
        ],
    )
    return f"### Encode throughput, single thread, {head}\n\n{t}"


def _scan_md(head, rows) -> str:
    t = common.markdown_table(
        rows,
        [
            ("bits", "bits/dim"),
            ("scan", "scan"),
            ("qps", "QPS", ",.0f"),
            ("vs_rq", "speed / RaBitQ float query", ".2f"),
            ("vs_rq4", "speed / RaBitQ 4-bit query", ".2f"),
            ("recall", "recall@10 (no rerank)"),
            ("note", "note"),
            ("load", "load avg"),
        ],
    )
    return f"### Flat scan throughput, single thread, k = 10, {head}\n\n{t}"


def _pca_md(head, r) -> str:
    return (
        f"### PCA, {head}\n\nNumPy float64 covariance + `eigh` (SAQ's `fit_pca`): "
        f"{r['numpy_s']:.2f} s; scikit-learn `PCA(svd_solver='full')`: {r['sklearn_s']:.2f} s "
        f"({r['ratio']:.1f}x the NumPy time). Largest eigenvalue difference "
        f"{r['var_rel']:.1e} of the top variance; smallest |cos| between the top-10 axes "
        f"{r['axis_cos']:.6f}."
    )


if __name__ == "__main__":
    main()
