"""Auto-calibration: the cheapest configuration that meets a recall target, measured.

:func:`calibrate` builds candidate indexes of the user's own vectors (every quantizer family
of the search space :data:`SPACE`, every kind of stored rerank vectors, rerank depths and,
for the IVF, visit budgets), measures recall@k on held-out queries against exact ground
truth, and returns a :class:`CalibrationReport` whose ``chosen`` configuration is the
cheapest (bytes per vector, then latency) whose recall's one-sided 95% bootstrap lower bound
meets the target. :func:`sizing` scales a measured configuration to ``n`` vectors.
"""

from __future__ import annotations

import time

import numpy as np

from .._params import check_int
from .._validation import check_vectors
from ..similarity import resolve_similarity
from .engine import Engine
from .kinds import INDEX_KINDS
from .record import Configuration
from .report import CalibrationReport
from .search import grid_search, smart_search
from .sizing import Sizing, sizing
from .space import (
    FULL_SPACE,
    OVERSAMPLES,
    SPACE,
    STORES,
    VISITS,
    FamilySpace,
    code_points,
)

__all__ = [
    "CalibrationReport",
    "Calibrator",
    "Configuration",
    "FamilySpace",
    "FULL_SPACE",
    "OVERSAMPLES",
    "SPACE",
    "STORES",
    "Sizing",
    "VISITS",
    "calibrate",
    "sizing",
]

_INDEXES = (*INDEX_KINDS, "auto")
_SEARCHES = ("smart", "grid", "full-grid")
#: Bases of at least this many vectors are screened on a subsample first (search.py).
SCREEN_ROWS = 400_000
#: Queries held out of ``X`` when none are given (fewer when ``X`` is small).
DEFAULT_QUERIES = 200
_METRIC = {"euclidean": "l2", "cosine": "cosine"}


def _log(progress: bool, start: float):
    def log(message: str) -> None:
        if progress:
            print(f"[calibrate {time.perf_counter() - start:7.1f} s] {message}", flush=True)

    return log


def _ground_truth(base, queries, k: int, similarity, given=None):
    """``(ids, scores)`` [nq, g >= k] of the exact neighbours (blocked, float64)."""
    if given is not None:
        ids, scores = given if isinstance(given, tuple) else (given, None)
        ids = np.asarray(ids)
        if ids.ndim != 2 or ids.shape[0] != len(queries) or ids.shape[1] < k:
            raise ValueError(
                f"ground_truth must hold at least k={k} ids per query [{len(queries)}, >= {k}], "
                f"got shape {ids.shape}"
            )
        return ids.astype(np.int64), None if scores is None else np.asarray(scores)
    from ..analysis.ground_truth import exact_knn

    g = min(base.shape[0], 2 * k)
    scores, ids = exact_knn(
        base, queries, g, metric=_METRIC.get(similarity.value, "ip"), scores_first=True
    )
    return ids, scores


class Calibrator:
    """Calibration over one base, reusable across query sets (the work shared is kept).

    :func:`calibrate` is one ``Calibrator(X, ...).run(queries, ...)``. Keep a Calibrator to
    calibrate the same vectors against several query sets (splits, targets, depths): the
    encodes, the IVF lists and the screening subsample are made once.

    Parameters
    ----------
    X : float array [n, d]
        The vectors to index (may be memory-mapped). Queries passed to :meth:`run` must not
        be among them.
    similarity : str
        ``"cosine"``, ``"dot_product"``, ``"euclidean"`` or ``"max_inner_product"``.
    index : {"flat", "ivf", "auto"}
        ``"auto"`` measures both and picks across them.
    seed : int
        Seeds the quantizers, the IVF clustering and the query sample.
    cluster_size : int
        IVF target list size.
    space : sequence of FamilySpace, optional
        The families to try (default :data:`SPACE`; :data:`FULL_SPACE` has every registry row).
    stores : tuple
        Kinds of stored rerank vectors to try (default :data:`STORES`).
    cache_bytes : int
        Bound of the encodes kept between measurements (default 4 GiB).
    screen : bool or int, optional
        Probe every point on a seeded subsample first (a tenth, at least 100,000 vectors;
        an int: that many) and drop those that miss clearly (:mod:`bbqlib.calibration.search`);
        default: for bases of at least :data:`SCREEN_ROWS` vectors.
    progress : bool
        Print a line per step.

    Attributes
    ----------
    engines : dict
        One measuring engine per index kind (``"flat"``, ``"ivf"``), holding the shared work.

    Examples
    --------
    >>> import numpy as np
    >>> from bbqlib.calibration import Calibrator
    >>> X = np.random.default_rng(0).normal(size=(3000, 32)).astype(np.float32)
    >>> Q = np.random.default_rng(1).normal(size=(100, 32)).astype(np.float32)
    >>> cal = Calibrator(X, similarity="euclidean")
    >>> strict = cal.run(Q, k=5, target_recall=0.95)
    >>> loose = cal.run(Q, k=5, target_recall=0.8)   # no encode is repeated
    >>> loose.chosen.bytes_per_vector <= strict.chosen.bytes_per_vector
    True
    """

    def __init__(self, X, *, similarity, index: str = "flat", seed: int = 0,
                 cluster_size: int = 384, space=None, stores=STORES,
                 cache_bytes: int = 4 << 30, screen=None, progress: bool = False):  # fmt: skip
        if index not in _INDEXES:
            raise ValueError(f"index must be one of {_INDEXES}, got {index!r}")
        X = X.view(np.ndarray) if isinstance(X, np.memmap) else X
        if not isinstance(X, np.ndarray):
            X = np.asarray(X)
        check_vectors(X[:1], "X")
        if X.ndim != 2 or X.shape[0] < 2:
            raise ValueError(f"X must be 2-D with at least 2 rows, got shape {X.shape}")
        self.X = X
        self.similarity = resolve_similarity(similarity)
        self.index = index
        self.seed = check_int(seed, "seed", 0)
        self.space = tuple(SPACE if space is None else space)
        self.stores = tuple(stores)
        self.progress = progress
        self._start = time.perf_counter()
        log = _log(progress, self._start)
        kinds = tuple(INDEX_KINDS) if index == "auto" else (index,)

        def engine(base, kind, quiet=False):
            return Engine(
                base,
                self.similarity,
                kind,
                seed=self.seed,
                cluster_size=cluster_size,
                cache_bytes=cache_bytes,
                log=(lambda m: None) if quiet else log,
            )

        self.engines = {kind: engine(X, kind) for kind in kinds}
        self.screens = {}
        n = X.shape[0]
        use_screen = n >= SCREEN_ROWS if screen is None else bool(screen)
        if use_screen:
            size = min(n, max(100_000, n // 10))
            if not isinstance(screen, bool) and isinstance(screen, (int, np.integer)):
                size = check_int(screen, "screen", 2, n)
            rows = np.sort(np.random.default_rng(self.seed).choice(n, size, replace=False))
            sub = np.asarray(X[rows])
            self.screens = {kind: engine(sub, kind, quiet=True) for kind in kinds}

    def run(self, queries, *, k: int = 10, target_recall: float = 0.95, ground_truth=None,
            max_bytes_per_vector=None, max_latency_ms=None, n=None,
            search: str = "smart") -> CalibrationReport:  # fmt: skip
        """Calibrate on ``queries`` (held out from the base).

        Parameters
        ----------
        queries : float array [nq, d]
            Held-out queries (not rows of ``X``).
        k, target_recall, max_bytes_per_vector, max_latency_ms, n, search
            As in :func:`calibrate`.
        ground_truth : int array [nq, >= k] or (ids, scores), optional
            Exact neighbours of ``queries`` in ``X`` (computed in blocks when not given).

        Returns
        -------
        CalibrationReport
        """
        t0 = time.perf_counter()
        log = _log(self.progress, self._start)
        k = check_int(k, "k", 1, self.X.shape[0])
        if not 0.0 < float(target_recall) <= 1.0:
            raise ValueError(f"target_recall must be in (0, 1], got {target_recall!r}")
        if search not in _SEARCHES:
            raise ValueError(f"search must be one of {_SEARCHES}, got {search!r}")
        n = self.X.shape[0] if n is None else check_int(n, "n", 1)
        Q = check_vectors(queries, "queries", dim=self.X.shape[1], allow_1d=True)
        tg = time.perf_counter()
        gt_ids, gt_scores = _ground_truth(self.X, Q, k, self.similarity, ground_truth)
        timings = {"ground_truth": time.perf_counter() - tg}
        log(f"ground truth of {len(Q)} queries: {timings['ground_truth']:.1f} s")
        trials, winners = [], []
        for kind, engine in self.engines.items():
            engine.set_queries(Q, gt_ids, gt_scores, k)
            before = dict(engine.timings)
            sieve = self.screens.get(kind)
            before_screen = dict(sieve.timings) if sieve is not None else {}
            stores = engine.index_kind.stores(self.stores)
            points = code_points(self.space, kind, stores)
            kw = dict(max_bytes=max_bytes_per_vector, max_latency=max_latency_ms, log=log)
            if search != "smart":
                t, best = grid_search(engine, points, float(target_recall),
                                      complete=search == "full-grid", **kw)  # fmt: skip
            else:
                screen = self._screen(kind, Q, k)
                t, best = smart_search(engine, points, float(target_recall), screen=screen, **kw)
            trials += t
            if best is not None:
                winners.append((engine, best))
            for name, v in engine.timings.items():
                timings[f"{kind} {name}"] = v - before.get(name, 0.0)
            if sieve is not None and search == "smart":
                spent = sum(v - before_screen.get(x, 0.0) for x, v in sieve.timings.items())
                timings[f"{kind} screen"] = spent + self._screen_gt_seconds
        configs, chosen = [], None
        pick = min(winners, key=lambda w: (round(w[1].bytes_per_vector, 1), w[1].m.latency_ms),
                   default=None)  # fmt: skip
        at = {}  # list shapes at other sizes (IVF): the list density rule of sizing
        for kind, engine in self.engines.items():
            if engine.index_kind.lists:
                at[id(engine)] = engine.entries_at(n)
                if kind in self.screens:  # screened rows: the whole base's shape, then n's
                    whole = ((engine.n, engine.list_shape()[0]),)
                    at[id(self.screens[kind])] = whole + at[id(engine)]
        for engine, t in trials:
            c = engine.configuration(t.point, t.oversample, t.visit, t.m,
                                     entries_at=at.get(id(engine), ()))  # fmt: skip
            configs.append(c)
            if pick is not None and t is pick[1]:
                chosen = c
        sizes = tuple(c.sizing(n) for c in configs)
        seconds = time.perf_counter() - t0
        log(f"done: {len(configs)} configurations in {seconds:.1f} s")
        return CalibrationReport(tuple(configs), chosen, float(target_recall), k, n, sizes,
                                 seconds, timings, search)  # fmt: skip

    def _screen(self, kind, Q, k):
        """The screening engine of ``kind`` with these queries (None without screening)."""
        if kind not in self.screens:
            return None
        eng = self.screens[kind]
        t0 = time.perf_counter()
        gt_ids, gt_scores = _ground_truth(eng.base, Q, k, self.similarity)
        self._screen_gt_seconds = time.perf_counter() - t0
        eng.set_queries(Q, gt_ids, gt_scores, k)
        return eng


def calibrate(
    X,
    queries=None,
    *,
    similarity,
    k: int = 10,
    target_recall: float = 0.95,
    index: str = "flat",
    max_bytes_per_vector: float | None = None,
    max_latency_ms: float | None = None,
    n: int | None = None,
    seed: int = 0,
    n_queries: int | None = None,
    search: str = "smart",
    space=None,
    cluster_size: int = 384,
    ground_truth=None,
    progress: bool = False,
) -> CalibrationReport:
    """The cheapest configuration of a bbqlib index that meets a recall target, measured.

    Parameters
    ----------
    X : float array [n, d]
        Your vectors (may be memory-mapped).
    queries : float array [nq, d], optional
        Held-out queries. Default: ``n_queries`` rows sampled from ``X`` (seeded) and
        removed from the vectors that are indexed, so no query finds itself.
    similarity : str
        ``"cosine"``, ``"dot_product"``, ``"euclidean"`` or ``"max_inner_product"``.
    k : int
        Neighbours per query (recall@k).
    target_recall : float
        Target of the one-sided 95% bootstrap lower bound of the mean recall@k.
    index : {"flat", "ivf", "auto"}
        The index to calibrate; ``"auto"`` measures both.
    max_bytes_per_vector, max_latency_ms : float, optional
        Constraints (bytes each vector adds to the index; single-thread ms per query).
    n : int, optional
        Vector count that RAM and disk are sized for (default: ``len(X)``). For the IVF
        above ``len(X)``, the SOAR spill rate is also measured with ``X`` clustered at the
        list density of ``n`` vectors (the sizing's list density rule,
        :mod:`bbqlib.calibration.sizing`).
    seed : int
        Seeds quantizers, clustering and the query sample.
    n_queries : int, optional
        Queries sampled from ``X`` when ``queries`` is None; default
        :data:`DEFAULT_QUERIES`, fewer when ``X`` has fewer than that plus ``2 k`` rows.
    search : {"smart", "grid", "full-grid"}
        The pruned walk, or every point at every setting (:mod:`bbqlib.calibration.search`):
        ``"grid"`` in groups of equal bytes up to the first that meets the target (the same
        answer), ``"full-grid"`` every group.
    space : sequence of FamilySpace, optional
        Families to try (default :data:`SPACE`).
    cluster_size : int
        IVF target list size.
    ground_truth : int array [nq, >= k] or (ids, scores), optional
        Exact neighbours of ``queries`` in ``X`` (computed in blocks when not given).
    progress : bool
        Print a line per step.

    Returns
    -------
    CalibrationReport
        ``repr`` is the table; ``.chosen`` the configuration (``.chosen.build()`` or
        ``report.build()`` makes its index; ``.chosen.code()`` the code to paste);
        ``.plot()`` the recall / bytes / QPS front.

    Notes
    -----
    Recall is measured, not predicted: each candidate index is built over ``X`` and
    searched. Encodes are shared across query widths and stored-vector kinds, the IVF
    lists across quantizers (:mod:`bbqlib.calibration.parts`), and the walk over the space
    stops at the first bytes-per-vector group that meets the target
    (:mod:`bbqlib.calibration.search`). Latency is single-thread time per query of a
    batched search.

    Examples
    --------
    >>> import numpy as np, bbqlib
    >>> X = np.random.default_rng(0).normal(size=(4000, 48)).astype(np.float32)
    >>> report = bbqlib.calibrate(X, similarity="euclidean", target_recall=0.9, k=5)
    >>> index = report.build()
    >>> index.add(X)
    >>> report.chosen.recall_low >= 0.9
    True
    """
    start = time.perf_counter()
    cal_X = X
    if queries is None:
        X = X.view(np.ndarray) if isinstance(X, np.memmap) else np.asarray(X)
        if X.ndim != 2:
            raise ValueError(f"X must be 2-D (n, d), got shape {X.shape}")
        room = X.shape[0] - 2 * int(k)  # vectors beyond those the base needs for k neighbours
        if room < 1:
            raise ValueError(
                f"X has {X.shape[0]} rows: too few to hold queries out and still find "
                f"k={k} neighbours among the rest; pass queries=..., a smaller k, or more rows"
            )
        if n_queries is None:
            m = min(DEFAULT_QUERIES, room)
        else:
            m = check_int(n_queries, f"n_queries (X has {X.shape[0]} rows, k={k})", 1, room)
        pick = np.sort(np.random.default_rng(seed).choice(X.shape[0], m, replace=False))
        keep = np.ones(X.shape[0], dtype=bool)
        keep[pick] = False
        queries = np.asarray(X[pick], dtype=np.float32)
        cal_X = X[keep]
        if ground_truth is not None:
            raise ValueError("ground_truth needs the queries it belongs to; pass queries too")
    cal = Calibrator(cal_X, similarity=similarity, index=index, seed=seed,
                     cluster_size=cluster_size, space=space, progress=progress)  # fmt: skip
    report = cal.run(queries, k=k, target_recall=target_recall, ground_truth=ground_truth,
                     max_bytes_per_vector=max_bytes_per_vector, max_latency_ms=max_latency_ms,
                     n=X.shape[0] if n is None else n, search=search)  # fmt: skip
    seconds = time.perf_counter() - start
    return CalibrationReport(report.candidates, report.chosen, report.target_recall, report.k,
                             report.n, report.sizes, seconds, report.timings, search)  # fmt: skip
