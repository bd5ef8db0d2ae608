"""Shared helpers for bbqlib's benchmark scripts.

Everything a benchmark needs besides the libraries it compares:

* :func:`load_dataset` - a shared data set (base, first ``n_queries`` queries, exact ground
  truth, the similarity to use) from ``DATA_DIR``;
* :func:`synthetic_gaussian` - the documented synthetic data (seeded isotropic Gaussian);
* :func:`make_clustered` / :func:`clustered_blocks` - the documented seeded clustered vectors
  of the scale benchmarks (1,000,000 x 384; the second in bounded memory);
* :func:`single_thread` / :func:`threads` - pin numba, faiss (OpenMP) and BLAS thread pools;
* :func:`interleaved_ratio` - robust timing ratio on a shared machine;
* :func:`machine_info`, :func:`markdown_table`, :func:`write_result` - result files.

The scripts live in one folder per question (``quality/``, ``ivf/``, ``serving/``, ``engines/``,
``faults/``, ``calibration/``, ``speed/``) and run from the repository root as
``python benchmarks/<folder>/<script>.py``. Each puts ``benchmarks/`` on ``sys.path``
(``Path(__file__).resolve().parents[1]``) in place of its own folder, where a module would
shadow a package of the same name (``engines/usearch.py`` and ``usearch``,
``ivf/distributed.py`` and Dask's ``distributed``); ``faults/faults.py`` adds it in ``main``,
next to the checkout's ``tests/``. Then ``import common`` and the shared modules by folder
(``from engines import peers``, ``from serving import latency``).

Data location: the environment variable ``BBQLIB_DATA`` wins; otherwise
``<repo>/../shared/data``.
"""

from __future__ import annotations

import contextlib
import datetime
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = [
    "DATA_DIR",
    "DATASETS",
    "Dataset",
    "Timing",
    "clustered_blocks",
    "data_dir",
    "interleaved_ratio",
    "load_dataset",
    "machine_info",
    "make_clustered",
    "markdown_table",
    "repo_root",
    "single_thread",
    "synthetic_gaussian",
    "threads",
    "time_call",
    "write_result",
]


def repo_root() -> Path:
    """The bbqlib checkout this file lives in."""
    return Path(__file__).resolve().parents[1]


def data_dir() -> Path:
    """Folder of the shared data sets: ``$BBQLIB_DATA`` if set, else ``<repo>/../shared/data``."""
    env = os.environ.get("BBQLIB_DATA")
    return Path(env).expanduser() if env else repo_root().parent / "shared" / "data"


DATA_DIR = data_dir()

# name -> (default similarity, ground-truth file stem, scores file stem)
DATASETS = {
    "debian-minilm-384": ("cosine", "gt_ip", "gt_ip_scores"),
    "spacy-wordvec-300": ("euclidean", "gt_l2", "gt_l2_dists"),
}
_GT_BY_SIMILARITY = {
    "cosine": ("gt_ip", "gt_ip_scores"),
    "dot_product": ("gt_ip", "gt_ip_scores"),
    "max_inner_product": ("gt_ip", "gt_ip_scores"),
    "euclidean": ("gt_l2", "gt_l2_dists"),
}


@dataclass
class Dataset:
    """A base set, queries and their exact ground truth.

    Attributes
    ----------
    name : str
    base : ndarray, float32 [n, d]
    queries : ndarray, float32 [nq, d]
    gt_ids : ndarray, int64 [nq, g] or None
        Exact neighbours, best first (``g`` = 100 for the shared data).
    gt_scores : ndarray [nq, g] or None
        Their inner products (descending) or squared distances (ascending).
    similarity : str
        bbqlib similarity to use: ``"cosine"``, ``"euclidean"``, ...
    metric : str
        ``"ip"`` or ``"l2"``: which exact ranking ``gt_ids`` follows.
    note : str
        Provenance, one line (goes into result files).
    """

    name: str
    base: np.ndarray
    queries: np.ndarray
    gt_ids: np.ndarray | None
    gt_scores: np.ndarray | None
    similarity: str
    metric: str
    note: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def n(self) -> int:
        return self.base.shape[0]

    @property
    def d(self) -> int:
        return self.base.shape[1]

    def __repr__(self) -> str:
        return (
            f"Dataset({self.name!r}, n={self.n}, d={self.d}, nq={self.queries.shape[0]}, "
            f"similarity={self.similarity!r})"
        )


def load_dataset(
    name: str,
    n_queries: int | None = 300,
    *,
    similarity: str | None = None,
    root: str | os.PathLike | None = None,
) -> Dataset:
    """Load a shared data set with its ground truth.

    Parameters
    ----------
    name : {"debian-minilm-384", "spacy-wordvec-300"}
        Folder name under the data directory.
    n_queries : int or None
        Keep the first ``n_queries`` queries (300 in the issues' recall figures); None = all.
    similarity : str, optional
        Override the default: ``cosine`` for debian-minilm-384 (unit vectors; ``gt_ip``) and
        ``euclidean`` for spacy-wordvec-300 (``gt_l2``). ``dot_product`` and
        ``max_inner_product`` use ``gt_ip``, ``euclidean`` uses ``gt_l2``.
    root : path, optional
        Data directory; default :func:`data_dir`.
    """
    if name not in DATASETS:
        raise ValueError(f"name must be one of {sorted(DATASETS)}; got {name!r}.")
    sim = similarity or DATASETS[name][0]
    if sim not in _GT_BY_SIMILARITY:
        raise ValueError(f"similarity must be one of {sorted(_GT_BY_SIMILARITY)}; got {sim!r}.")
    folder = Path(root) if root is not None else data_dir()
    folder = folder / name
    if not (folder / "base.npy").exists():
        raise FileNotFoundError(
            f"data set {name!r} not found at {folder}; set BBQLIB_DATA to the folder that "
            "holds debian-minilm-384/ and spacy-wordvec-300/."
        )
    gt_stem, scores_stem = _GT_BY_SIMILARITY[sim]
    sl = slice(None) if n_queries is None else slice(0, int(n_queries))
    base = np.ascontiguousarray(np.load(folder / "base.npy"), dtype=np.float32)
    queries = np.ascontiguousarray(np.load(folder / "queries.npy")[sl], dtype=np.float32)
    gt_ids = np.load(folder / f"{gt_stem}.npy")[sl].astype(np.int64)
    gt_scores = np.load(folder / f"{scores_stem}.npy")[sl]
    return Dataset(
        name=name,
        base=base,
        queries=queries,
        gt_ids=gt_ids,
        gt_scores=gt_scores,
        similarity=sim,
        metric="l2" if sim == "euclidean" else "ip",
        note=f"{folder} ({gt_stem}, first {queries.shape[0]} queries)",
    )


def synthetic_gaussian(
    n: int = 100_000,
    d: int = 1024,
    n_queries: int = 64,
    *,
    seed: int = 0,
    normalize: bool = True,
    k_gt: int | None = None,
) -> Dataset:
    """Seeded isotropic Gaussian data, the synthetic set of the scan benchmarks.

    Generator: ``rng = np.random.default_rng(seed)``; base = ``rng.standard_normal((n, d),
    dtype=np.float32)``, then queries = ``rng.standard_normal((n_queries, d),
    dtype=np.float32)`` from the same stream; each row divided by its norm when
    ``normalize`` (similarity ``cosine``; otherwise ``euclidean``). Gaussian data has no
    structure, so it times scans fairly but its recall says little about real embeddings.
    Ground truth (``k_gt`` neighbours, exact) only when ``k_gt`` is given.
    """
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((n, d), dtype=np.float32)
    queries = rng.standard_normal((n_queries, d), dtype=np.float32)
    if normalize:
        base /= np.linalg.norm(base, axis=1, keepdims=True)
        queries /= np.linalg.norm(queries, axis=1, keepdims=True)
    sim, metric = ("cosine", "ip") if normalize else ("euclidean", "l2")
    gt_ids = gt_scores = None
    if k_gt:
        from bbqlib.analysis.ground_truth import exact_knn

        gt_scores, gt_ids = exact_knn(base, queries, k_gt, metric, scores_first=True)
    note = (
        f"synthetic isotropic Gaussian, default_rng({seed}), n={n}, d={d}, "
        f"{n_queries} queries, {'unit-normalized' if normalize else 'raw'}"
    )
    return Dataset(f"gaussian-{d}", base, queries, gt_ids, gt_scores, sim, metric, note)


# ----------------------------------------------------------------------------- clustered
# Seeded synthetic clustered vectors, shaped like sentence embeddings (for scale benchmarks):
# make_clustered is the documented generator behind the "1,000,000 x 384 clustered" figures
# (clustering benchmark, IVF at scale). Same arguments, same bytes, on any machine with
# NumPy's PCG64 (NumPy >= 1.17).
_CHUNK = 65_536  # rows drawn per step; fixed so the stream (and the data) never depends on n


def make_clustered(
    n: int,
    d: int,
    n_clusters: int,
    seed: int,
    *,
    sub_clusters: int = 8,
    return_labels: bool = False,
) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
    """Unit-norm float32 vectors from a two-level mixture of uneven Gaussian blobs.

    Parameters
    ----------
    n, d : int
        Number of vectors and dimension.
    n_clusters : int
        Number of top-level components ("topics").
    seed : int
        Seed of ``np.random.default_rng``; everything below comes from that one stream.
    sub_clusters : int, default 8
        Sub-components per topic ("families" of near-duplicates, as package descriptions or
        product titles form in real embedding sets).
    return_labels : bool, default False
        Also return the topic of each vector (int32).

    Returns
    -------
    X : ndarray of float32, shape (n, d), rows of unit norm
    labels : ndarray of int32, shape (n,), only with ``return_labels``

    Notes
    -----
    Generator, in draw order (``g = np.random.default_rng(seed)``, ``N = standard normal``,
    every "normalize" to unit length):

    1. a shared direction ``m = normalize(g N(d))``: real embeddings are not centred (the
       debian-minilm-384 mean has length 0.41);
    2. topic centres ``mu_j = normalize(0.5 m + g N(n_clusters, d) / sqrt(d))``;
    3. family centres ``nu_jk = normalize(mu_j + 0.6 g N(n_clusters, sub_clusters, d) / sqrt(d))``;
    4. topic weights ``g.dirichlet(ones(n_clusters))`` (uneven sizes, the largest about
       ``ln(n_clusters)`` times the mean), family weights ``g.dirichlet(ones(sub_clusters))``
       per topic, per-topic noise ``s_j = g.uniform(0.3, 0.6)``;
    5. in chunks of 65,536 rows: topic ``j = g.choice(n_clusters, p=topic weights)``, then per
       row a family ``k`` by inverse-CDF of ``g.random()``, then
       ``x = normalize(nu_jk + s_j g N(d) / sqrt(d))``.

    Resulting shape for n = 1,000,000, d = 384, 1,000 topics, seed 0: mean vector length 0.35,
    median cosine of a vector to its nearest other vector 0.87 (debian-minilm-384: 0.41 and
    0.81, measured the same way on the first 500 rows).
    """
    X = np.empty((n, d), dtype=np.float32)
    labels = np.empty(n, dtype=np.int32)
    for start, block, topic in clustered_blocks(n, d, n_clusters, seed, sub_clusters=sub_clusters):
        X[start : start + block.shape[0]] = block
        labels[start : start + block.shape[0]] = topic
    return (X, labels) if return_labels else X


def clustered_blocks(n: int, d: int, n_clusters: int, seed: int, *, sub_clusters: int = 8):
    """The rows of :func:`make_clustered` as ``(start, block, topics)``, 65,536 rows at a time.

    Same arguments, same bytes as :func:`make_clustered`, in bounded memory (for data sets
    written to disk in shards).
    """
    if n < 1 or d < 1 or n_clusters < 1 or sub_clusters < 1:
        raise ValueError(
            f"n, d, n_clusters and sub_clusters must be >= 1, got {n}, {d}, {n_clusters}, "
            f"{sub_clusters}"
        )
    g = np.random.default_rng(seed)
    root = np.sqrt(d)
    m = g.standard_normal(d)
    m /= np.linalg.norm(m)
    topics = 0.5 * m + g.standard_normal((n_clusters, d)) / root
    topics /= np.linalg.norm(topics, axis=1, keepdims=True)
    families = topics[:, None, :] + 0.6 * g.standard_normal((n_clusters, sub_clusters, d)) / root
    families /= np.linalg.norm(families, axis=2, keepdims=True)
    families = families.astype(np.float32)
    topic_w = g.dirichlet(np.ones(n_clusters))
    family_cdf = np.cumsum(g.dirichlet(np.ones(sub_clusters), size=n_clusters), axis=1)
    noise_scale = g.uniform(0.3, 0.6, n_clusters).astype(np.float32)
    for start in range(0, n, _CHUNK):
        stop = min(n, start + _CHUNK)
        size = stop - start
        topic = g.choice(n_clusters, size=size, p=topic_w)
        u = g.random(size)
        family = (u[:, None] > family_cdf[topic]).sum(axis=1).clip(max=sub_clusters - 1)
        noise = g.standard_normal((size, d), dtype=np.float32)
        block = families[topic, family] + noise_scale[topic, None] * noise / np.float32(root)
        block /= np.linalg.norm(block, axis=1, keepdims=True)
        yield start, block, topic.astype(np.int32)


# ----------------------------------------------------------------------------- threads
@contextlib.contextmanager
def threads(n: int) -> Iterator[None]:
    """Limit numba, faiss (OpenMP) and BLAS/OpenMP pools (threadpoolctl) to ``n`` threads.

    The previous settings come back on exit. The peers in ``engines/peers.py`` read the numba
    setting (``numba.get_num_threads()``) for libraries that take ``num_threads`` per call
    (hnswlib, usearch, rabitqlib), so one ``with`` block governs every library.
    """
    import numba

    stack = contextlib.ExitStack()
    old_numba = numba.get_num_threads()
    numba.set_num_threads(min(n, numba.config.NUMBA_NUM_THREADS))
    stack.callback(numba.set_num_threads, old_numba)
    try:
        import faiss
    except ImportError:
        faiss = None
    if faiss is not None:
        old_faiss = faiss.omp_get_max_threads()
        faiss.omp_set_num_threads(n)
        stack.callback(faiss.omp_set_num_threads, old_faiss)
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        threadpool_limits = None
    if threadpool_limits is not None:
        stack.enter_context(threadpool_limits(limits=n))
    with stack:
        yield


def single_thread() -> contextlib.AbstractContextManager[None]:
    """``threads(1)``: the setting every timing comparison in the issues uses."""
    return threads(1)


# ----------------------------------------------------------------------------- timing
@dataclass
class Timing:
    """Result of :func:`interleaved_ratio` (times in seconds).

    ``ratio`` is the median over repeats of ``time_a / time_b`` (each pair measured back to
    back), so > 1 means ``fn_a`` is slower; the speed of a relative to b is ``1 / ratio``.
    """

    ratio: float
    median_a: float
    median_b: float
    times_a: list[float]
    times_b: list[float]

    @property
    def speedup_a_over_b(self) -> float:
        return 1.0 / self.ratio


def exact_rerank(queries, vectors, ids, k: int, sim):
    """Exact rerank of candidate ``ids`` (prepared queries and vectors): ``(keys, ids)`` of
    the best ``k``, through bbqlib's one exact kernel."""
    from bbqlib.search.rerank import exact_mode, exact_values, rerank_keys

    return rerank_keys(exact_values(queries, vectors, ids, exact_mode(sim)), ids, k, sim)


def time_call(fn: Callable[[], object], repeats: int = 5, warmup: int = 1) -> list[float]:
    """Wall times of ``repeats`` calls of ``fn`` after ``warmup`` untimed calls."""
    for _ in range(warmup):
        fn()
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return out


def interleaved_ratio(
    fn_a: Callable[[], object],
    fn_b: Callable[[], object],
    repeats: int = 5,
    warmup: int = 1,
) -> Timing:
    """Time ``fn_a`` and ``fn_b`` alternately (a, b, a, b, ...) and compare.

    Interleaving exposes both functions to the same background load on a shared machine;
    the median of per-pair ratios discards the pairs a burst of load disturbed.
    ``warmup`` untimed calls of each come first (numba compilation, caches).
    """
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1; got {repeats}.")
    for _ in range(warmup):
        fn_a()
        fn_b()
    ta, tb = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn_a()
        t1 = time.perf_counter()
        fn_b()
        t2 = time.perf_counter()
        ta.append(t1 - t0)
        tb.append(t2 - t1)
    ratios = [a / b for a, b in zip(ta, tb, strict=True)]
    return Timing(statistics.median(ratios), statistics.median(ta), statistics.median(tb), ta, tb)


# ----------------------------------------------------------------------------- reporting
def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def _loadavg() -> str:
    try:
        return " / ".join(f"{x:.2f}" for x in os.getloadavg())
    except (AttributeError, OSError):
        return "unknown"


def machine_info() -> dict[str, str]:
    """Machine and library versions for a results file (imports nothing that is missing)."""
    from importlib import metadata

    flags = _cpu_flags()
    simd = [f for f in ("avx2", "fma", "avx512f", "avx512_vpopcntdq", "neon") if f in flags]
    try:
        affinity = len(os.sched_getaffinity(0))
    except AttributeError:
        affinity = os.cpu_count()
    info = {
        "cpu": _cpu_model(),
        "nproc": f"{affinity} usable of {os.cpu_count()}",
        "simd": " ".join(simd) or "unknown",
        "load average (1/5/15 min, when written)": _loadavg(),
        "os": platform.platform(),
        "python": sys.version.split()[0],
    }
    for pkg in ("numpy", "numba", "faiss-cpu", "hnswlib", "usearch", "rabitqlib", "bbqlib"):
        try:
            info[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            info[pkg] = "not installed"
    if "faiss" in sys.modules:
        info["faiss build"] = sys.modules["faiss"].get_compile_options().strip()
    core = os.environ.get("OPENBLAS_CORETYPE")
    info["OPENBLAS_CORETYPE"] = (
        core
        if core
        else "unset (OpenBLAS picks the kernel for the detected CPU; on some virtual CPUs "
        "set it, e.g. Haswell, to avoid a slow generic path)"
    )
    return info


def _fmt(value, fmt: str | None) -> str:
    if value is None:
        return "–"
    if fmt is not None:
        return format(value, fmt)
    if isinstance(value, (float, np.floating)):
        return f"{value:.3f}"
    return str(value)


def markdown_table(rows: Sequence, columns: Sequence) -> str:
    """A GitHub markdown table.

    Parameters
    ----------
    rows : sequence of dict or sequence
        One row each; dicts are read by column key, sequences by position.
    columns : sequence of str or tuple
        ``"key"``, ``("key", "header")`` or ``("key", "header", "format spec")``; floats
        default to 3 decimals, None prints as a dash.
    """
    specs = []
    for c in columns:
        c = (c,) if isinstance(c, str) else tuple(c)
        key = c[0]
        header = c[1] if len(c) > 1 else key
        fmt = c[2] if len(c) > 2 else None
        specs.append((key, header, fmt))
    lines = [
        "| " + " | ".join(str(h) for _, h, _ in specs) + " |",
        "|" + "|".join("---" for _ in specs) + "|",
    ]
    for row in rows:
        if isinstance(row, dict):
            cells = [_fmt(row.get(k), f) for k, _, f in specs]
        else:
            cells = [_fmt(v, f) for v, (_, _, f) in zip(row, specs, strict=True)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_result(
    path: str | os.PathLike,
    title: str,
    command: str,
    table_md: str | Sequence[str],
    notes: str | Sequence[str] = (),
) -> Path:
    """Write a markdown results file: title, command, date, machine, table(s), notes.

    ``table_md`` may be one markdown string or several (each may start with its own
    ``###`` heading). ``notes`` is free text or a list of bullet lines.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tables = [table_md] if isinstance(table_md, str) else list(table_md)
    if isinstance(notes, str):
        notes_md = notes
    else:
        notes_md = "\n".join(f"- {n}" for n in notes)
    machine = "\n".join(f"- {k}: {v}" for k, v in machine_info().items())
    stamp = datetime.datetime.now().astimezone().isoformat(timespec="seconds")
    text = (
        f"# {title}\n\n"
        f"Command (from the repository root):\n\n```\n{command}\n```\n\n"
        f"Date: {stamp}\n\n"
        f"Machine:\n{machine}\n\n" + "\n\n".join(tables) + "\n"
    )
    if notes_md:
        text += f"\n## Notes\n\n{notes_md}\n"
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
    return path
