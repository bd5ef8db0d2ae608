"""Search defaults measured on the index's own vectors: :meth:`bbqlib.IVFIndex.tune`.

The dynamic visit budget (Elasticsearch's ``round(log10(N)² · k') / N``) and the encoding's
rerank depth reach recall@10 of 0.76-0.85 on embedding sets and far less on random data, and
which of the two limits recall depends on the data (few lists visited on small sets, the
rerank depth on clustered ones). :func:`tune` measures it instead: a seeded sample of the
index's stored vectors serves as queries, each left out of its own answer (searched with
``k + 1`` neighbours, itself dropped), against the exact neighbours among the stored
vectors; over a grid of visit budgets and three rerank depths it keeps the cheapest setting
whose recall reaches the target plus a margin (queries from the collection are a little
easier than new ones), as the index's defaults. Saved indexes keep them (IVF format 6 on).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

__all__ = ["VISITS", "Tuning", "tune"]

#: Visit budgets tried (``visit_percentage``), cheapest first.
VISITS = (0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 7.0, 10.0, 12.5, 15.0, 20.0, 25.0, 30.0, 40.0, 50.0,
          70.0, 100.0)  # fmt: skip
#: Rows of stored vectors decoded at a time for the exact neighbours.
_CHUNK = 65_536


@dataclass
class Tuning:
    """What :func:`tune` measured and chose.

    ``visit_percentage`` / ``oversample``: the chosen defaults (``oversample`` None: the
    encoding's); ``recall``: their leave-one-out recall@k; ``reached``: whether it meets
    ``target_recall + margin``; ``grid``: ``(visit_percentage, oversample, recall)`` of
    every setting measured; ``seconds``: the time :func:`tune` took.
    """

    target_recall: float
    margin: float
    k: int
    n_queries: int
    visit_percentage: float
    oversample: float | None
    recall: float
    reached: bool
    seconds: float
    grid: list = field(default_factory=list)


def _exact_ids(index, rows: np.ndarray, queries: np.ndarray, k: int) -> np.ndarray:
    """Ids of the ``k`` best live stored vectors for each query, excluding stored row
    ``rows[i]`` from query ``i``'s (``rows`` None: queries from outside the index)."""
    sim = index.similarity_
    n = index.ntotal
    live = ~index.deleted if index.n_deleted else None
    Q = np.asarray(queries, dtype=np.float32)
    if sim.value == "cosine":
        Q = Q / np.maximum(np.linalg.norm(Q, axis=1, keepdims=True), 1e-30)
    best_s = np.full((len(Q), k), -np.inf)
    best_r = np.full((len(Q), k), -1, dtype=np.int64)
    for start in range(0, n, _CHUNK):
        block = np.arange(start, min(n, start + _CHUNK))
        V = index._vectors_rows(block)
        if sim.value == "cosine":
            V = V / np.maximum(np.linalg.norm(V, axis=1, keepdims=True), 1e-30)
        S = (Q @ V.T).astype(np.float64)
        if sim.is_distance:
            S -= 0.5 * np.einsum("ij,ij->i", V, V, dtype=np.float64)[None, :]
        if rows is not None:
            S[np.equal.outer(rows, block)] = -np.inf  # the query itself
        if live is not None:
            S[:, ~live[block]] = -np.inf
        S = np.concatenate([best_s, S], axis=1)
        R = np.concatenate([best_r, np.broadcast_to(block, (len(Q), len(block)))], axis=1)
        top = np.argpartition(-S, k - 1, axis=1)[:, :k]
        best_s = np.take_along_axis(S, top, axis=1)
        best_r = np.take_along_axis(R, top, axis=1)
    return index.ids[best_r]


def _recall(index, queries, own_ids, truth, k, visit, oversample) -> float:
    """recall@k of a setting; ``own_ids``: each query's own id, dropped from its answer
    (None: queries from outside the index)."""
    extra = 0 if own_ids is None else 1
    _, found = index.search(queries, k + extra, visit_percentage=visit, oversample=oversample)
    if own_ids is not None:
        found = [row[row != own][:k] for row, own in zip(found, own_ids, strict=True)]
    pairs = zip(found, truth, strict=True)
    hits = sum(len(set(row.tolist()) & set(exact.tolist())) for row, exact in pairs)
    return hits / truth.size


def _seconds(index, queries, k, visit, oversample) -> float:
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        index.search(queries, k, visit_percentage=visit, oversample=oversample)
        times.append(time.perf_counter() - t0)
    return float(np.median(times))


def tune(index, queries=None, *, k: int = 10, target_recall: float = 0.9,
         n_queries: int = 200, margin: float = 0.01, seed: int = 0) -> Tuning:  # fmt: skip
    """Measure and set ``index``'s search defaults (see the module notes).

    ``queries``: queries like the ones the index will serve, float32 [m, d]; by default a
    sample of ``n_queries`` stored vectors, each left out of its own answer (queries that
    lie far from the indexed vectors are harder than that sample: pass some of them).
    Needs the stored vectors (``store_vectors``) and at least ``k + 2`` live vectors.
    Sets ``index.visit_percentage`` and ``index.oversample``; returns the :class:`Tuning`.
    """
    t0 = time.perf_counter()
    if not index.store_vectors:
        raise ValueError("tune() measures on the stored vectors: this index keeps none")
    if not 0.0 < target_recall <= 1.0:
        raise ValueError(f"target_recall must be in (0, 1], got {target_recall!r}")
    live_rows = np.flatnonzero(~index.deleted) if index.n_deleted else np.arange(index.ntotal)
    if len(live_rows) < k + 2:
        raise ValueError(f"tune() needs at least k + 2 = {k + 2} live vectors")
    if queries is None:
        rng = np.random.default_rng(seed)
        rows = np.sort(rng.choice(live_rows, min(n_queries, len(live_rows)), replace=False))
        queries = index._vectors_rows(rows)
        own_ids = index.ids[rows]
    else:
        queries = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
        rows = own_ids = None
    truth = _exact_ids(index, rows, queries, k)
    default = float(index.encoding_.default_oversample)
    # The encoding's rerank depth, then deeper ones: on clustered data the depth, not the
    # visits, is what limits recall. A deeper rerank is only worth fewer visits.
    depths = (None, 2.0 * default, 4.0 * default)
    goal = min(1.0, target_recall + margin)
    grid, chosen = [], []
    visits = VISITS
    for depth in depths:
        for visit in visits:
            recall = _recall(index, queries, own_ids, truth, k, visit, depth)
            grid.append((visit, depth, recall))
            if recall >= goal:
                chosen.append((visit, depth, recall))
                visits = tuple(v for v in VISITS if v < visit)
                break
    if chosen:
        timed = [(_seconds(index, queries, k, v, d), v, d, r) for v, d, r in chosen]
        _, visit, depth, recall = min(timed)
    else:  # the best measured, e.g. quantization limits recall below the target
        visit, depth, recall = max(grid, key=lambda g: (g[2], -g[0]))
    index.visit_percentage = float(visit)
    index.oversample = depth
    return Tuning(target_recall, margin, k, len(queries), float(visit), depth, recall,
                  recall >= goal, time.perf_counter() - t0, grid)  # fmt: skip
