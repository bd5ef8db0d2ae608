"""ann-benchmarks-style recall/QPS curves: bbqlib next to faiss, hnswlib and usearch.

ann-benchmarks is not on PyPI and its data sets cannot be downloaded here, so this runner
follows its protocol on the shared data: it writes ann-benchmarks HDF5 files from
``../shared/data`` (:func:`bbqlib.formats.write_ann_benchmarks`), reads them back
(:func:`bbqlib.formats.read_ann_benchmarks`), drives every algorithm through the ``BaseANN`` shape
(``fit``, ``set_query_arguments``, ``batch_query``, ``get_batch_results``, ``str``) over
parameter sweeps, and scores recall@10 as ann-benchmarks does (a returned id counts when its
true distance is within ``1e-3`` of the 10th true distance). Queries run on one thread; each
point is the best of ``--runs`` batch runs (ann-benchmarks keeps the best run too).

Usage (from the repository root)::

    python benchmarks/engines/ann_benchmarks_runner.py               # both data sets, ~20 min
    python benchmarks/engines/ann_benchmarks_runner.py --quick       # small smoke run

Writes ``benchmarks/results/ann_benchmarks_protocol.md`` and ``.png``; the HDF5 files go
to ``--workdir`` (default: a ``bbqlib-ann-benchmarks`` folder in the temp directory).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent  # benchmarks/, on sys.path instead of HERE (see common.py)
sys.path[:] = [str(BENCH), *(p for p in sys.path if Path(p or ".").resolve() != HERE)]

import common  # noqa: E402

from bbqlib.formats.ann_benchmarks import (  # noqa: E402
    read_ann_benchmarks,
    read_ann_benchmarks_metric,
    write_ann_benchmarks,
)
from bbqlib.integrations.ann_benchmarks import BBQIVF, BBQFlat, BBQUSearch  # noqa: E402

K = 10
EPSILON = 1e-3  # ann-benchmarks' tie tolerance on distances
DATASETS = {"debian-minilm-384": "angular", "spacy-wordvec-300": "euclidean"}
EF = [16, 32, 64, 128, 256, 512]


# ----------------------------------------------------------------------------- data
def write_dataset(name: str, metric: str, n_queries: int, workdir: Path) -> Path:
    """An ann-benchmarks HDF5 file (``<name>-<metric>.hdf5``) from the shared data set."""
    sim = "cosine" if metric == "angular" else "euclidean"
    ds = common.load_dataset(name, n_queries, similarity=sim)
    if metric == "angular":  # ann-benchmarks stores 1 - cos; the base is unit length
        distances = 1.0 - ds.gt_scores.astype(np.float64)
    else:  # ann-benchmarks stores the L2 distance, not its square
        distances = np.sqrt(np.maximum(ds.gt_scores.astype(np.float64), 0.0))
    path = workdir / f"{name}-{metric}.hdf5"
    write_ann_benchmarks(path, ds.base, ds.queries, ds.gt_ids, distances, metric)
    return path


def true_distances(train, test, ids, metric):
    """Distances (ann-benchmarks' convention) of each query to its returned ids (nan: none)."""
    out = np.full(ids.shape, np.nan)
    for qi in range(len(test)):
        row = ids[qi][ids[qi] >= 0]
        x = train[row].astype(np.float64)
        q = test[qi].astype(np.float64)
        if metric == "angular":
            d = 1.0 - x @ q / (np.linalg.norm(x, axis=1) * np.linalg.norm(q))
        else:
            d = np.sqrt(((x - q) ** 2).sum(axis=1))
        out[qi, : len(row)] = d
    return out


def knn_recall(train, test, results, gt_distances, metric, k=K):
    """ann-benchmarks' k-nn recall: hits are results within epsilon of the k-th true distance."""
    ids = np.full((len(test), k), -1, dtype=np.int64)
    for qi, row in enumerate(results):
        row = np.asarray(row)[:k]
        ids[qi, : len(row)] = row
    d = true_distances(train, test, ids, metric)
    threshold = gt_distances[:, k - 1 : k] + EPSILON
    return float(np.mean(np.sum(d <= threshold, axis=1) / k))


# ----------------------------------------------------------------------------- peers
class _Peer:
    """A peer library in the BaseANN shape (what ann-benchmarks' own wrappers do)."""

    def __init__(self, metric, label):
        self.metric = metric
        self.label = label
        self.name = label
        self.res = []

    def batch_query(self, X, n):
        self.res = list(self._search(np.asarray(X, dtype=np.float32), n))

    def get_batch_results(self):
        return self.res

    def __str__(self):
        return self.name


def _unit(X):
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


class FaissHNSW(_Peer):
    def __init__(self, metric, M=32, ef_construction=128):
        super().__init__(metric, f"faiss HNSW{M} flat")
        self.M, self.efc = M, ef_construction

    def fit(self, X):
        import faiss

        self.ip = self.metric == "angular"
        X = _unit(X) if self.ip else np.ascontiguousarray(X, np.float32)
        metric = faiss.METRIC_INNER_PRODUCT if self.ip else faiss.METRIC_L2
        self.index = faiss.IndexHNSWFlat(X.shape[1], self.M, metric)
        self.index.hnsw.efConstruction = self.efc
        self.index.add(X)

    def set_query_arguments(self, ef):
        self.index.hnsw.efSearch = ef
        self.name = f"faiss HNSW{self.M} flat ef={ef}"

    def _search(self, X, n):
        return self.index.search(_unit(X) if self.ip else X, n)[1]


class FaissIVFFlat(_Peer):
    def __init__(self, metric, nlist=256):
        super().__init__(metric, f"faiss IVF{nlist},Flat")
        self.nlist = nlist

    def fit(self, X):
        import faiss

        self.ip = self.metric == "angular"
        X = _unit(X) if self.ip else np.ascontiguousarray(X, np.float32)
        metric = faiss.METRIC_INNER_PRODUCT if self.ip else faiss.METRIC_L2
        coarse = faiss.IndexFlatIP(X.shape[1]) if self.ip else faiss.IndexFlatL2(X.shape[1])
        self.index = faiss.IndexIVFFlat(coarse, X.shape[1], self.nlist, metric)
        self.index.train(X)
        self.index.add(X)
        self._coarse = coarse

    def set_query_arguments(self, nprobe):
        self.index.nprobe = nprobe
        self.name = f"faiss IVF{self.nlist},Flat nprobe={nprobe}"

    def _search(self, X, n):
        return self.index.search(_unit(X) if self.ip else X, n)[1]


class Hnswlib(_Peer):
    def __init__(self, metric, M=16, ef_construction=128):
        super().__init__(metric, f"hnswlib M{M}")
        self.M, self.efc = M, ef_construction

    def fit(self, X):
        import hnswlib

        self.ip = self.metric == "angular"
        X = _unit(X) if self.ip else np.ascontiguousarray(X, np.float32)
        self.index = hnswlib.Index(space="ip" if self.ip else "l2", dim=X.shape[1])
        self.index.init_index(max_elements=len(X), ef_construction=self.efc, M=self.M)
        self.index.add_items(X, np.arange(len(X)), num_threads=2)

    def set_query_arguments(self, ef):
        self.index.set_ef(ef)
        self.name = f"hnswlib M{self.M} ef={ef}"

    def _search(self, X, n):
        return self.index.knn_query(_unit(X) if self.ip else X, k=n, num_threads=1)[0]


class USearch(_Peer):
    def __init__(self, metric, dtype="f32", connectivity=16, expansion_add=128):
        super().__init__(metric, f"usearch {dtype}")
        self.dtype, self.M, self.efa = dtype, connectivity, expansion_add

    def fit(self, X):
        from usearch.index import Index

        self.ip = self.metric == "angular"
        X = np.ascontiguousarray(X, np.float32)
        self.index = Index(
            ndim=X.shape[1],
            metric="cos" if self.ip else "l2sq",
            dtype=self.dtype,
            connectivity=self.M,
            expansion_add=self.efa,
        )
        self.index.add(np.arange(len(X), dtype=np.uint64), X, threads=2)

    def set_query_arguments(self, ef):
        self.index.expansion_search = ef
        self.name = f"usearch {self.dtype} ef={ef}"

    def _search(self, X, n):
        m = self.index.search(X, n, threads=1)
        keys = np.asarray(m.keys, dtype=np.int64).reshape(len(X), -1)
        counts = np.asarray(m.counts).reshape(-1, 1)
        keys[np.arange(keys.shape[1])[None, :] >= counts] = -1
        return [row[row >= 0] for row in keys]


# ----------------------------------------------------------------------------- algorithms
def algorithms(metric: str, quick: bool):
    """(label, constructor, query-argument groups) in ann-benchmarks' algos.yaml spirit."""
    ef = [32, 128] if quick else EF
    algos = [
        ("bbqlib flat 1-bit", lambda: BBQFlat(metric, 1), [(o,) for o in (1, 2, 3, 5, 10, 20)]),
        ("bbqlib flat 4-bit", lambda: BBQFlat(metric, 4), [(o,) for o in (1, 1.5, 2, 3)]),
        (
            "bbqlib IVF 1-bit",
            lambda: BBQIVF(metric, 1, 384),
            [(v,) for v in (0.5, 1, 2, 4, 8, 16)],
        ),
        ("bbqlib usearch 1-bit", lambda: BBQUSearch(metric, 1), [(e,) for e in ef]),
        ("faiss HNSW32 flat", lambda: FaissHNSW(metric), [(e,) for e in ef]),
        (
            "faiss IVF256,Flat",
            lambda: FaissIVFFlat(metric, 256),
            [(p,) for p in (1, 2, 4, 8, 16, 32, 64)],
        ),
        ("hnswlib M16", lambda: Hnswlib(metric), [(e,) for e in ef]),
        ("usearch f32", lambda: USearch(metric, "f32"), [(e,) for e in ef]),
        ("usearch i8", lambda: USearch(metric, "i8"), [(e,) for e in ef]),
    ]
    if metric != "angular":  # usearch i8 normalizes vectors: meaningless for euclidean
        algos = [a for a in algos if a[0] != "usearch i8"]
    if quick:
        algos = [(label, make, groups[:2]) for label, make, groups in algos]
    return algos


def run_dataset(path: Path, runs: int, quick: bool, build_threads: int):
    train, test, neighbors, distances = read_ann_benchmarks(path)
    metric = read_ann_benchmarks_metric(path)
    train = np.ascontiguousarray(train, dtype=np.float32)
    test = np.ascontiguousarray(test, dtype=np.float32)
    points, builds = [], []
    for label, make, groups in algorithms(metric, quick):
        algo = make()
        if hasattr(algo, "batch_threads"):  # bbqlib's wrappers batch on every thread by default
            algo.batch_threads = 1
        with common.threads(build_threads):
            t0 = time.perf_counter()
            try:
                algo.fit(train)
            except ImportError as exc:
                print(f"skip {label}: {exc}", flush=True)
                continue
            build = time.perf_counter() - t0
        builds.append({"algorithm": label, "build": build})
        with common.single_thread():
            algo.set_query_arguments(*groups[0])  # warm-up: numba compilation, caches
            algo.batch_query(test[: min(len(test), 20)], K)
            for args in groups:
                algo.set_query_arguments(*args)
                best = np.inf
                for _ in range(runs):
                    t0 = time.perf_counter()
                    algo.batch_query(test, K)
                    best = min(best, time.perf_counter() - t0)
                recall = knn_recall(train, test, algo.get_batch_results(), distances, metric)
                points.append(
                    {
                        "algorithm": label,
                        "parameters": str(algo),
                        "recall": recall,
                        "qps": len(test) / best,
                    }
                )
                print(
                    f"{path.stem}: {algo}  recall {recall:.3f}  {len(test) / best:.0f} QPS",
                    flush=True,
                )
        if hasattr(algo, "done"):
            algo.done()
    return metric, len(train), len(test), points, builds


def pareto(points):
    """Points no other point of the same algorithm beats on both recall and QPS."""
    out = []
    for p in points:
        same = [o for o in points if o["algorithm"] == p["algorithm"] and o is not p]
        if not any(
            o["recall"] >= p["recall"]
            and o["qps"] >= p["qps"]
            and (o["recall"] > p["recall"] or o["qps"] > p["qps"])
            for o in same
        ):
            out.append(p)
    return out


def plot(results, path: Path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(7.5 * len(results), 5.5), squeeze=False)
    for ax, (name, (metric, n, nq, points, _)) in zip(axes[0], results.items(), strict=True):
        labels = list(dict.fromkeys(p["algorithm"] for p in points))
        for label in labels:
            front = sorted(
                (p for p in pareto(points) if p["algorithm"] == label), key=lambda p: p["recall"]
            )
            style = "-o" if label.startswith("bbqlib") else "--s"
            ax.plot(
                [p["recall"] for p in front],
                [p["qps"] for p in front],
                style,
                label=label,
                markersize=4,
                linewidth=2.0 if label.startswith("bbqlib") else 1.2,
            )
        ax.set_yscale("log")
        ax.set_xlabel(f"recall@{K}")
        ax.set_ylabel("queries per second (1 thread, log scale)")
        ax.set_title(f"{name} ({metric}, n={n}, {nq} queries)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=list(DATASETS))
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--build-threads", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="2 settings per algorithm, 100 queries")
    ap.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "bbqlib-ann-benchmarks"))
    ap.add_argument("--out", default=str(common.repo_root() / "benchmarks/results"))
    args = ap.parse_args(argv)
    if args.quick:
        args.queries, args.runs = 100, 1
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    results = {}
    for name in args.datasets:
        path = write_dataset(name, DATASETS[name], args.queries, workdir)
        results[name] = run_dataset(path, args.runs, args.quick, args.build_threads)
    png = out / "ann_benchmarks_protocol.png"
    plot(results, png)
    tables = []
    for name, (metric, n, nq, points, builds) in results.items():
        front = pareto(points)
        rows = [dict(p, front="yes" if p in front else "") for p in points]
        tables.append(
            f"### {name} ({metric}, n={n}, {nq} queries, k={K})\n\n"
            + common.markdown_table(
                rows,
                [
                    ("algorithm", "algorithm"),
                    ("parameters", "parameters"),
                    ("recall", "recall@10"),
                    ("qps", "QPS", ".0f"),
                    ("front", "Pareto"),
                ],
            )
            + "\n\nBuild times:\n\n"
            + common.markdown_table(
                builds,
                [
                    ("algorithm", "algorithm"),
                    ("build", f"build s ({args.build_threads} threads)", ".1f"),
                ],
            )
        )
    tables.insert(0, f"![recall vs QPS]({png.name})")
    notes = [
        "HDF5 files written by bbqlib.formats.write_ann_benchmarks from ../shared/data (train = "
        "base.npy, test = the first queries, neighbors = gt_ip / gt_l2 top-100, distances in "
        "ann-benchmarks' convention: 1 - cos for angular, L2 for euclidean) and read back "
        "with read_ann_benchmarks.",
        "Recall as ann-benchmarks' knn metric: a result counts when its true distance is <= "
        "the 10th true distance + 1e-3.",
        "Every algorithm is driven through the BaseANN shape (fit, set_query_arguments, "
        "batch_query, get_batch_results); bbqlib's through bbqlib.integrations.ann_benchmarks. "
        "Queries on 1 thread (numba, faiss OpenMP, hnswlib/usearch threads=1), best of "
        f"{args.runs} batch runs; builds on {args.build_threads} threads.",
        "bbqlib settings: flat = oversample sweep (rerank on float vectors); IVF = "
        "visit_percentage sweep, cluster_size 384, SOAR, default oversample; usearch = "
        "expansion_search sweep, connectivity 16, expansion_add 128, default oversample "
        "(3.0 at 1 bit, 1.0 at 4 bits). The plot draws each algorithm's Pareto front.",
        "The machine is shared (see the load average): compare curves within one run.",
        f"total run time {time.perf_counter() - t_start:.0f} s",
    ]
    cmd = "python benchmarks/engines/ann_benchmarks_runner.py" + (" --quick" if args.quick else "")
    md = common.write_result(
        out / "ann_benchmarks_protocol.md",
        "ann-benchmarks protocol: bbqlib next to faiss, hnswlib and usearch",
        cmd,
        tables,
        notes,
    )
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
