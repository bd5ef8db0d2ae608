"""IVF search steps, vectorized over a batch of queries (no Python loop per query or list).

1. :func:`centroid_table` / :func:`rank_lists`: 7-bit OSQ codes of the list centroids (and of
   parent centroids when there are more than 256 lists) against the global centroid ``g``;
   queries quantized at 7 bits against ``g`` rank the lists (spec §6.5, §6.7 steps 2-3).
2. :func:`plan_visits`: lists in rank order until the visit budget (expected posting entries,
   and with a filter also allowed entries) is spent (§6.7 steps 4 and 6).

Queries and docs are then coded against each visited list's centroid by the quantizer
(:meth:`bbqlib.Quantizer.query_pairs`, :meth:`~bbqlib.Quantizer.encode_pairs`), and the scan
is one numba kernel call per batch (:mod:`bbqlib.index.ivf.scan`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..._kernels import ivf as KI
from ..._kernels import scoring as KS
from ..._kernels import vnni as KV
from ..._validation import row_sq_norms
from ...quantizers.centre import robust_centre
from ...quantizers.osq.math import DEFAULT_ITERS, DEFAULT_LAMBDA, quantize_rows

__all__ = [
    "CENTROID_BITS",
    "PARENT_THRESHOLD",
    "CentroidTable",
    "centroid_table",
    "rank_lists",
    "plan_visits",
    "walks_parents",
    "lists_wanted",
    "dynamic_visit_ratio",
    "check_visit_percentage",
]

#: Bits of the centroid codes and of the query that scores them (ES PR #132261).
CENTROID_BITS = 7
#: The OSQ optimizer steps and interval penalty of the query's centroid codes.
CENTROID_ITERS = DEFAULT_ITERS
CENTROID_LAMBDA = DEFAULT_LAMBDA
#: Parents exist above this many lists (16 centroids per parent, squared; spec §6.4).
PARENT_THRESHOLD = 256
CENTROIDS_PER_PARENT = 16
#: Parents are walked only with at least this many lists per parent on average. The walk
#: scores every parent and then the children of the parents it expands: it pays only when
#: it skips more lists than there are parents. At 1M x 384 (3,881 lists under 785 parents,
#: 4.9 each) it expanded 78% of the parents and scored 92% of the lists, so it cost more
#: than ranking every list.
WALK_MIN_CHILDREN = 8


@dataclass(frozen=True)
class CentroidTable:
    """Centroid codes for ranking lists (and parents, when present).

    ``codes`` uint8 [K, d] and ``factors`` float32 [K, 4] (``a, l, Σk, add``) are 7-bit OSQ
    against ``g``; ``gg = <g, g>``; ``cc`` float64 [K] the exact ``||c||²``. With parents:
    ``parent_codes`` / ``parent_factors`` likewise, ``parent_cc`` their ``||p||²``,
    ``parent_radius`` the largest ``||c - p||`` over each parent's children, and list ids
    grouped by parent in ``child_order`` with ``child_offsets``.
    """

    g: np.ndarray
    gg: float
    codes: np.ndarray
    factors: np.ndarray
    cc: np.ndarray
    parent_codes: np.ndarray | None = None
    parent_factors: np.ndarray | None = None
    parent_cc: np.ndarray | None = None
    parent_radius: np.ndarray | None = None
    child_order: np.ndarray | None = None
    child_offsets: np.ndarray | None = None

    @property
    def has_parents(self) -> bool:
        return self.parent_codes is not None


def walks_parents(table: CentroidTable) -> bool:
    """Whether plans rank lists by the walk over parents (else every list is ranked)."""
    if not table.has_parents:
        return False
    return table.codes.shape[0] >= WALK_MIN_CHILDREN * table.parent_codes.shape[0]


def _osq_factors(res, bits: int, dtype) -> np.ndarray:
    f = np.empty((res.lower.shape[0], 4), dtype=dtype)
    f[:, 0] = res.lower
    f[:, 1] = (res.upper.astype(np.float64) - res.lower) / float(2**bits - 1)
    f[:, 2] = res.component_sum
    f[:, 3] = res.additional
    return f


def _code_against(X: np.ndarray, g: np.ndarray, is_l2: bool, iters: int = DEFAULT_ITERS):
    res = quantize_rows(X, g, CENTROID_BITS, euclidean=is_l2, iters=iters)
    return res.codes, _osq_factors(res, CENTROID_BITS, np.float32)


def _sqnorms(X: np.ndarray) -> np.ndarray:
    X64 = X.astype(np.float64)
    return np.einsum("ij,ij->i", X64, X64)


def centroid_table(centroids: np.ndarray, is_l2: bool, *, parents=None) -> CentroidTable:
    """7-bit codes of the centroids against their robust mean ``g`` (and of ``parents``, a
    :class:`~bbqlib.index.clustering.ParentLevel` or None); a list of far outliers must not
    move ``g`` (:func:`~bbqlib.quantizers.centre.robust_centre`)."""
    g = robust_centre(centroids).astype(np.float32)
    codes, factors = _code_against(centroids, g, is_l2)
    gg = float(np.dot(g.astype(np.float64), g))
    cc = _sqnorms(centroids)
    if parents is None:
        return CentroidTable(g, gg, codes, factors, cc)
    P = np.ascontiguousarray(parents.centroids, dtype=np.float32)
    pcodes, pfactors = _code_against(P, g, is_l2)
    order = np.ascontiguousarray(parents.child_order, dtype=np.int32)
    offsets = np.ascontiguousarray(parents.offsets, dtype=np.int64)
    owner = np.repeat(np.arange(P.shape[0]), np.diff(offsets))
    dist = np.sqrt(_sqnorms(centroids[order] - P[owner]))
    radius = np.zeros(P.shape[0])
    np.maximum.at(radius, owner, dist)
    return CentroidTable(
        g, gg, codes, factors, cc, pcodes, pfactors, _sqnorms(P), radius, order, offsets
    )


def _query_codes_g(Qt: np.ndarray, table: CentroidTable, is_l2: bool):
    res = quantize_rows(Qt, table.g, CENTROID_BITS, euclidean=is_l2, iters=DEFAULT_ITERS)
    return res.codes, _osq_factors(res, CENTROID_BITS, np.float64)


def _dense_keys(qb, qf, codes, factors, gg, is_l2) -> np.ndarray:
    out = np.empty((qb.shape[0], codes.shape[0]), dtype=np.float64)
    KV.estimate_bytes7(qb, qf, codes, factors, qb.shape[1], gg, is_l2, out)  # 7-bit codes
    return -out if is_l2 else out


def rank_lists(
    Qt: np.ndarray,
    table: CentroidTable,
    is_l2: bool,
    want: int,
    *,
    dense: bool = False,
    by_distance: bool = True,
) -> np.ndarray:
    """Candidate lists per query, best first: int32 [nq, M] (``-1`` pads short rows).

    Lists are ranked by the estimated squared distance of the query to their centroid
    (``by_distance``; the lists are Voronoi cells of squared-L2 k-means, so the cell holding
    the query comes first), or by the estimated inner product (``max_inner_product``). With
    an inner-product similarity the distance is ``||q||² + ||c||² - 2<q, c>`` from the 7-bit
    inner-product estimate and the exact ``||c||²``.

    Without parents (or with ``dense``, or fewer than ``WALK_MIN_CHILDREN`` lists per
    parent: :func:`walks_parents`) every list is ranked. With parents (spec §6.7 step 3)
    the best ``want`` lists come from a best-first walk over parents ranked by a bound on
    their children's distance, ``max(0, ||q - p|| - r_p)`` (``<q, p> + ||q|| r_p`` for inner
    products; ``r_p`` the parent's radius), stopping when no further parent can place a
    child among the ``want`` best: the same lists as the dense ranking, for a fraction of
    the centroid scoring.
    """
    by_distance = by_distance or is_l2  # euclidean keys are distances already
    qb, qf = _query_codes_g(Qt, table, is_l2)
    K = table.codes.shape[0]
    qq = row_sq_norms(Qt)[:, None]  # the single-query plan's arithmetic (lane sums)
    if dense or not walks_parents(table) or want >= K:
        keys = _dense_keys(qb, qf, table.codes, table.factors, table.gg, is_l2)
        if by_distance and not is_l2:
            keys = 2.0 * keys - table.cc[None, :]  # -||q - c||² + ||q||²
        return _best_first(keys, K if dense else want)
    nq = Qt.shape[0]
    pkeys = _dense_keys(qb, qf, table.parent_codes, table.parent_factors, table.gg, is_l2)
    radius = table.parent_radius[None, :]
    if by_distance:
        # ||q - c|| >= ||q - p|| - r_p: a bound on the child key ||q||² - ||q - c||².
        d2 = -pkeys if is_l2 else qq + table.parent_cc[None, :] - 2.0 * pkeys
        gap = np.maximum(np.sqrt(np.maximum(d2, 0.0)) - radius, 0.0)
        bound = -(gap * gap) if is_l2 else qq - gap * gap
    else:
        bound = pkeys + np.sqrt(qq) * radius  # <q, c> <= <q, p> + ||q|| r_p
    porder = np.argsort(-bound, axis=1, kind="stable")
    pbound = np.take_along_axis(bound, porder, axis=1)
    keys = np.full((nq, want), -np.inf)
    ids = np.full((nq, want), KS.EMPTY_ID, dtype=np.int64)
    KI.rank_children(
        qb,
        qf,
        table.codes,
        table.factors,
        table.cc,
        porder,
        pbound,
        table.child_order,
        table.child_offsets,
        qb.shape[1],
        table.gg,
        is_l2,
        bool(by_distance and not is_l2),
        keys,
        ids,
    )
    order = np.lexsort((ids, -keys), axis=-1)  # best first, lower list id among ties
    ids = np.take_along_axis(ids, order, axis=1)
    ids[ids == KS.EMPTY_ID] = -1
    return ids.astype(np.int32)


def _best_first(keys: np.ndarray, want: int) -> np.ndarray:
    """The ``want`` best columns of every row, best first (lower column among ties)."""
    K = keys.shape[1]
    if 2 * want >= K:
        order = np.argsort(-keys, axis=1, kind="stable")[:, :want]
        return order.astype(np.int32)
    out = np.empty((keys.shape[0], want), dtype=np.int64)
    KI.topk_columns(np.ascontiguousarray(keys), out)
    return out.astype(np.int32)


def dynamic_visit_ratio(n: int, depth: int) -> float:
    """Elasticsearch's reader-level default: ``round(log10(N)² · k') / N``."""
    if n <= 1:
        return 1.0
    return min(1.0, round(math.log10(n) ** 2 * depth) / n)


def plan_visits(
    ranked: np.ndarray,
    sizes: np.ndarray,
    need_entries: float,
    allowed_sizes: np.ndarray | None = None,
    need_allowed: float = 0.0,
):
    """Lists each query visits: rank order until the budget is spent.

    A query visits its best lists until their entries reach ``need_entries`` and, when
    ``allowed_sizes`` (allowed entries per list) is given, their allowed entries reach
    ``need_allowed``; at least one list, at most all candidates.

    Returns
    -------
    pair_list : int32 [P]
        Visited lists, query by query, in visit order.
    pair_query : int64 [P]
    pair_start : int64 [nq + 1]
    satisfied : bool [nq]
        False where the candidates ran out before the budget was met.
    """
    valid = ranked >= 0
    n_valid = valid.sum(axis=1)
    safe = np.where(valid, ranked, 0)
    cum = np.cumsum(np.where(valid, sizes[safe], 0), axis=1)
    count = (cum < need_entries).sum(axis=1) + 1
    satisfied = cum[:, -1] >= need_entries
    if allowed_sizes is not None:
        cum_a = np.cumsum(np.where(valid, allowed_sizes[safe], 0), axis=1)
        count = np.maximum(count, (cum_a < need_allowed).sum(axis=1) + 1)
        satisfied &= cum_a[:, -1] >= need_allowed
    count = np.minimum(count, n_valid)
    take = np.arange(ranked.shape[1])[None, :] < count[:, None]
    pair_list = np.ascontiguousarray(ranked[take], dtype=np.int32)
    pair_query = np.repeat(np.arange(ranked.shape[0], dtype=np.int64), count)
    pair_start = np.zeros(ranked.shape[0] + 1, dtype=np.int64)
    np.cumsum(count, out=pair_start[1:])
    return pair_list, pair_query, pair_start, satisfied


def lists_wanted(need: float, mean_size: float, ratio: float, K: int, n_parents: int) -> int:
    """Lists an unfiltered plan ranks before the budget (``mean_size``: mean list size).

    ``2 · lists_needed + 8`` (at least 32); with ``n_parents`` parent centroids at least
    Elasticsearch's candidate buffer, visit ratio x (K / 2P) x K children ("centroid
    oversampling" of about centroids-per-parent / 2).
    """
    lists_needed = math.ceil(need / max(1.0, mean_size))
    want = max(2 * lists_needed + 8, 32)
    if n_parents:
        want = max(want, math.ceil(ratio * K / (2 * n_parents) * K))
    return want


def plan_batch(
    Qt: np.ndarray,
    table: CentroidTable,
    sizes: np.ndarray,
    is_l2: bool,
    by_distance: bool,
    ratio: float,
    need: float,
    heap: int,
    allowed_sizes: np.ndarray | None = None,
):
    """Lists each query of a batch visits: ``(pair_list, pair_query, pair_start)``.

    Without a filter the best ``2 · lists_needed + 8`` lists are ranked (more with parents:
    Elasticsearch's candidate buffer), and queries whose candidates ran out are ranked again
    over every list; with ``allowed_sizes`` (allowed entries per list) every list is ranked
    and the plan also waits for enough allowed entries.
    """
    K = sizes.shape[0]

    def rank(Q, want, dense=False):
        return rank_lists(Q, table, is_l2, want, dense=dense, by_distance=by_distance)

    if allowed_sizes is not None:
        need_allowed = max(heap, need * allowed_sizes.sum() / max(1, sizes.sum()))
        plan = plan_visits(rank(Qt, 0, dense=True), sizes, need, allowed_sizes, need_allowed)
        return plan[:3]
    n_parents = table.parent_codes.shape[0] if walks_parents(table) else 0
    want = lists_wanted(need, float(sizes.mean()), ratio, K, n_parents)
    ranked = rank(Qt, want)
    plan = plan_visits(ranked, sizes, need)
    if not plan[3].all() and ranked.shape[1] < K:
        padded = np.full((ranked.shape[0], K), -1, dtype=ranked.dtype)
        padded[:, : ranked.shape[1]] = ranked
        redo = ~plan[3]
        padded[redo] = rank(Qt[redo], K, dense=True)
        plan = plan_visits(padded, sizes, need)
    return plan[:3]


def check_visit_percentage(value) -> float | None:
    """``visit_percentage`` checked: None or a number in (0, 100]."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float, np.number)):
        raise TypeError(f"visit_percentage must be a number in (0, 100] or None, got {value!r}")
    value = float(value)
    if not (0.0 < value <= 100.0):
        raise ValueError(
            f"visit_percentage must be in (0, 100], got {value}; None picks the dynamic default"
        )
    return value
