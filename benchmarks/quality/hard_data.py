"""Hard data (issue 30): recall@10 of bbqlib's defaults on data that makes quantization hard.

Table 1, one row per set (first ``--queries`` shared queries, exact ground truth of the set
as transformed): bbqlib ``FlatIndex(bits=1)`` with default oversample and rerank, whether
its first ``add`` warned (``bbqlib.DataWarning``), faiss ``RR + IndexRaBitQ`` 1-bit (qb 4)
inside ``IndexRefineFlat`` with ``k_factor = 3`` when faiss is importable, and the
configuration ``bbqlib.diagnose(..., recommend=True)`` recommends (``bbqlib.calibrate`` on a
sample of the set, target recall@10 0.95) with its recall measured on the whole set and its
bytes per vector against float32's.

Table 2: one row of debian-minilm-384 scaled by 10², 10⁴, 10⁶ and 10⁸, FlatIndex and
IVFIndex with defaults, euclidean and max_inner_product, recall@10 against the ground truth
of the set with the outlier; and ``arithmetic="lucene"`` (Lucene's plain-mean centroid).

Usage::

    python benchmarks/quality/hard_data.py [--queries 300] [--no-recommend]
"""

from __future__ import annotations

import argparse
import shlex
import sys
import warnings
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent  # benchmarks/, on sys.path instead of HERE (see common.py)
sys.path[:] = [str(BENCH), *(p for p in sys.path if Path(p or ".").resolve() != HERE)]

import common  # noqa: E402

import bbqlib  # noqa: E402
from bbqlib.analysis import exact_knn, recall_at_k  # noqa: E402

OUT = BENCH / "results" / "hard_data.md"
SCALES = (1e2, 1e4, 1e6, 1e8)
OUTLIER_ROW = 123
_METRIC = {"euclidean": "l2", "cosine": "cosine"}


def load(name):
    folder = common.data_dir() / name
    return np.load(folder / "base.npy"), np.load(folder / "queries.npy")


def pca(base, queries, dims):
    mean = base.mean(axis=0, dtype=np.float64)
    _, _, vt = np.linalg.svd(base[::4] - mean, full_matrices=False)
    P = vt[:dims].T
    return ((base - mean) @ P).astype(np.float32), ((queries - mean) @ P).astype(np.float32)


def hard_sets(nq):
    """(name, base, queries, similarity) of table 1."""
    debian, dq = load("debian-minilm-384")
    spacy, sq = load("spacy-wordvec-300")
    dq, sq = dq[:nq], sq[:nq]
    rng = np.random.default_rng(0)
    out = []
    out.append(("spacy-wordvec-300, PCA to 25 dims", *pca(spacy, sq, 25), "euclidean"))
    out.append(("debian-minilm-384, PCA to 32 dims", *pca(debian, dq, 32), "cosine"))
    one = debian.copy()
    one[OUTLIER_ROW] *= np.float32(1e6)
    out.append(("debian-minilm-384, one row x1e6", one, dq, "euclidean"))
    out.append(("spacy-wordvec-300, raw norms", spacy, sq, "max_inner_product"))
    out.append(("debian-minilm-384 (plain)", debian, dq, "cosine"))
    out.append(("spacy-wordvec-300 (plain)", spacy, sq, "euclidean"))
    scale = np.ones(debian.shape[1], dtype=np.float32)
    scale[rng.choice(debian.shape[1], debian.shape[1] // 10, replace=False)] = 10.0
    out.append(("debian-minilm-384, 10% of dims x10", debian * scale, dq * scale, "euclidean"))
    dup = debian[rng.choice(len(debian), len(debian) // 5, replace=False)]
    near = dup + np.float32(1e-3) * rng.normal(size=dup.shape).astype(np.float32)
    out.append(("debian-minilm-384 + 20% near-duplicates", np.vstack([debian, near]), dq,
                "euclidean"))  # fmt: skip
    offset = np.float32(10.0 / np.sqrt(debian.shape[1]))
    out.append(("debian-minilm-384 + common offset (norm 10)", debian + offset, dq + offset,
                "euclidean"))  # fmt: skip
    return out


def truth(base, queries, similarity, k=10):
    metric = _METRIC.get(similarity, "ip")
    return exact_knn(base, queries, k, metric=metric, scores_first=True)[1]


def bbqlib_recall(index, base, queries, gt):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", bbqlib.DataWarning)
        index.add(base)
    warned = any(issubclass(w.category, bbqlib.DataWarning) for w in caught)
    _, ids = index.search(queries, 10)
    return recall_at_k(ids, gt, 10), warned


def faiss_recall(base, queries, similarity, gt):
    try:
        from engines import peers

        peer = peers.faiss_rabitq(base, similarity, bits=1, qb=4, k_factor=3.0, seed=0)
    except Exception:  # faiss missing or failing: the column says so
        return None
    _, ids = peer.search(queries, 10)
    return recall_at_k(ids, gt, 10)


def table1(nq, recommend):
    rows = []
    for name, base, queries, sim in hard_sets(nq):
        gt = truth(base, queries, sim)
        r, warned = bbqlib_recall(bbqlib.FlatIndex(bits=1, similarity=sim), base, queries, gt)
        row = {"set": name, "similarity": sim, "bbqlib": r, "DataWarning": "yes" if warned
               else "no", "faiss": faiss_recall(base, queries, sim, gt)}  # fmt: skip
        if recommend:
            report = bbqlib.diagnose(base, sim, recommend=True, measure=False)
            chosen = report.recommended
            row["findings"] = ", ".join(f.name for f in report.findings) or "-"
            if chosen is not None:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", bbqlib.DataWarning)
                    index = chosen.build()
                    rr, _ = bbqlib_recall(index, base, queries, gt)
                row["recommended"] = chosen.label()
                row["its recall"] = rr
                row["bytes"] = f"{chosen.bytes_per_vector:.0f} / {4 * base.shape[1]}"
        print(row, flush=True)
        rows.append(row)
    cols = ["set", "similarity", "bbqlib", "DataWarning", "faiss"]
    if recommend:
        cols += ["findings", "recommended", "its recall", "bytes"]
    return common.markdown_table(rows, cols)  # floats print with 3 decimals


def table2(nq):
    debian, dq = load("debian-minilm-384")
    dq = dq[:nq]
    rows = []
    for sim in ("euclidean", "max_inner_product"):
        for kind in ("Flat", "IVF", "Flat, arithmetic='lucene'"):
            row = {"index": kind, "similarity": sim}
            for scale in (None, *SCALES):
                X = debian
                if scale is not None:
                    X = debian.copy()
                    X[OUTLIER_ROW] *= np.float32(scale)
                gt = truth(X, dq, sim)
                if kind == "IVF":
                    index = bbqlib.IVFIndex(bits=1, similarity=sim)
                elif kind == "Flat":
                    index = bbqlib.FlatIndex(bits=1, similarity=sim)
                else:
                    q = bbqlib.BBQQuantizer(bits=1, query_bits=4, similarity=sim,
                                            arithmetic="lucene")  # fmt: skip
                    index = bbqlib.FlatIndex(q)
                row["none" if scale is None else f"x{scale:.0e}"] = bbqlib_recall(
                    index, X, dq, gt)[0]  # fmt: skip
            print(row, flush=True)
            rows.append(row)
    cols = ["index", "similarity", ("none", "no outlier")] + [f"x{s:.0e}" for s in SCALES]
    return common.markdown_table(rows, cols)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--no-recommend", action="store_true")
    args = ap.parse_args(argv)
    t1 = table1(args.queries, not args.no_recommend)
    t2 = table2(args.queries)
    command = ("python benchmarks/quality/hard_data.py " + shlex.join(sys.argv[1:])).strip()
    notes = [
        "bbqlib: FlatIndex(bits=1) with default oversample (3 at 1 bit) and exact rerank; "
        "faiss: RR + IndexRaBitQ 1-bit, qb 4, IndexRefineFlat k_factor 3 (empty: faiss "
        "not importable).",
        "recommended: bbqlib.diagnose(X, similarity, recommend=True) (bbqlib.calibrate on "
        "20,000 evenly spaced rows, target recall@10 0.95, 200 held-out rows as queries); "
        "its recall is measured on the whole set with the shared queries; bytes: its bytes "
        "per vector / float32's.",
        "Table 2: one row of debian-minilm-384 scaled; ground truth of the set with it "
        "(under max_inner_product the scaled row is most queries' best match). IVF: "
        "IVFIndex(bits=1) defaults. arithmetic='lucene' keeps Lucene's plain-mean centroid.",
        "Recall figures only (shared machine: no timings).",
    ]
    tables = ["### Hard sets\n\n" + t1, "### One outlier row\n\n" + t2]
    title = "Hard data: recall@10 of the defaults (issue 30)"
    common.write_result(OUT, title, command, tables, notes)
    print(OUT)


if __name__ == "__main__":
    main()
