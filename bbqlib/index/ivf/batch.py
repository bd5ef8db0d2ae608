"""``IVFIndex.search`` of a batch of queries: validate, plan, scan, de-duplicate, rerank.

The path of :meth:`bbqlib.IVFIndex.search` when the single-query path (:mod:`.single`)
does not serve: validation of the search options, the visit budget (spec §6.7), the
thread cap for small searches, the allowed-row mask (filter and tombstones), one
:func:`.plan.plan_batch`, one :func:`.scan.scan_lists`, the SOAR de-duplication, the
exact rerank on the stored vectors and :func:`bbqlib.search.finish`.
"""

from __future__ import annotations

import numpy as np

from ..._kernels.policy import cap_threads, threads_for
from ...search import finish
from ...search.topk import dedup_topk
from ...similarity import Similarity
from ..ids import filter_rows
from . import files as F
from . import plan as P
from .filters import allowed_mask, allowed_per_list
from .scan import rerank_segments, scan_lists

__all__ = ["ENTRIES_PER_THREAD", "search_batch", "allowed_rows", "finish_rows"]

#: Entries to visit per thread in a search (with the ranking and rerank around them: enough
#: work to outweigh a parallel region's fork and join; docs/threads.md,
#: ``benchmarks/serving/serving.py --sections contention``); fewer run every kernel of the
#: search on one thread.
ENTRIES_PER_THREAD = 40_000


def search_batch(
    index, queries, k, visit_percentage, oversample, rerank, filter, scores, pad_to_k=None
):
    """``IVFIndex.search`` of any number of queries (under the caller's read lock)."""
    index._check_fitted()
    F.check_row_ids(index, whole=filter is not None)  # a filter looks every id up
    opts = index._search_options(k, oversample, rerank, scores, pad_to_k)
    scores, rerank = opts.scores, opts.rerank
    vp = P.check_visit_percentage(visit_percentage)
    vp = index.visit_percentage if vp is None else vp
    q = index.quantizer
    sim = q.similarity_
    Qp = q._validated(queries, "queries", allow_1d=True)
    nq = Qp.shape[0]
    columns = opts.columns(index._ntotal, nq)
    k = min(opts.k, index._ntotal)  # the scan and rerank find at most ntotal
    Qt = q.transform_rows(Qp)
    depth = opts.depth(index._ntotal, len(index))
    if depth == 0:
        empty = np.empty((nq, 0))
        return finish_rows(index, empty, np.empty((nq, 0), np.int64), columns, scores)
    ratio = vp / 100.0 if vp is not None else P.dynamic_visit_ratio(index._ntotal, depth)
    heap = 2 * depth
    need = max(2.0 * ratio * index._ntotal, heap)
    cap_threads(threads_for(nq * need, ENTRIES_PER_THREAD))  # small searches: one thread
    allowed = allowed_rows(index, filter)
    postings = index._postings
    sizes = postings.sizes
    allowed_sizes = None
    if allowed is not None:
        if filter is None:  # tombstones only: per-list live counts change on delete/add
            if index._live_per_list is None:
                index._live_per_list = allowed_per_list(postings, allowed)
            allowed_sizes = index._live_per_list
        else:
            allowed_sizes = allowed_per_list(postings, allowed)
    by_distance = sim is not Similarity.MAX_INNER_PRODUCT
    plan = P.plan_batch(Qt, index._table, sizes, sim.is_distance, by_distance, ratio, need,
                        heap, allowed_sizes)  # fmt: skip
    # reranked: the exact rerank picks k of more than k candidates (SAQ's lists then take
    # one 4-bit pass, no float re-score)
    keys, ids = scan_lists(q, postings, index._C, index._list_cc, Qt, plan, heap, allowed,
                           reranked=rerank and depth > k)  # fmt: skip
    keys, ids = dedup_topk(keys, ids, depth)
    entries = int(sizes[plan[0]].sum())
    index.last_search_stats = {
        "lists_visited": plan[0].size / nq,
        "entries_scored": entries / nq,
        "visited_fraction": entries / nq / max(1, 2 * index._ntotal),
        "depth": depth,
    }
    if rerank:
        keys, ids = rerank_segments(Qp, index._segments, ids, k, sim)
    return finish_rows(index, keys, ids, columns, scores)


def finish_rows(index, keys, rows, k, scores):
    """:func:`bbqlib.search.finish`, then rows mapped to the caller's ids."""
    out, rows = finish(keys, rows, k, index.similarity_, scores)
    return out, index._row_ids.of_rows(rows)


def allowed_rows(index, filter) -> np.ndarray | None:
    """uint8 mask over rows (filter and not deleted), or None when everything is allowed."""
    live = None
    if index._n_deleted:
        if index._live_cache is None:
            index._live_cache = (~index._deleted).view(np.uint8)
        live = index._live_cache
    return allowed_mask(filter_rows(filter, index._row_ids), index._ntotal, live)
