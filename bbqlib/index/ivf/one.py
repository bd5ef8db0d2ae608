"""``IVFIndex.search`` of one query in one compiled call (prepare, plan, scan, rerank).

See :mod:`bbqlib.index.flat.one`: the fast path answers one float32 query when the
quantizer's scanner has a fused kernel for its code layout
(:meth:`bbqlib.quantizers.scanner.Scanner.ivf_one`), nothing is filtered or deleted and the
stored vectors are one segment; otherwise it returns None and the batch path runs. The
results and ``last_search_stats`` are the batch path's.

One call (:mod:`bbqlib._kernels.fused`) prepares the query, plans its lists (with parent
centroids, more than 256 lists, the compiled two-level walk
:func:`bbqlib._kernels.single.ivf_plan_two`, the lists ``plan_batch`` picks), codes it
against each list's centre, scans the lists and reranks; it releases the GIL once per query.
A transform is applied before the call; float16 and int8 rows (``store_vectors``) are
decoded for the candidates only, after it, as the batch path's rerank decodes them. A query
whose lists or rows have unchecked CRC32s (an index opened from files, until each block has
been read once) stops, has them checked, and is repeated.
"""

from __future__ import annotations

import numpy as np

from ..._kernels import fused as KF
from ..._kernels import rerank as KR
from ..._kernels import single as KO
from ..._validation import MAX_SQ_NORM, UNIT_NORM_TOLERANCE
from ...search.finish import pad_value, result_columns
from ...search.stored import stored_exact_values
from ...similarity import Similarity
from ...storage.blocks import row_bytes
from ..one import finish_scores, float_rows, one_query, prepared_query
from ..tiers import tier_of
from . import files as F
from . import plan as P

__all__ = ["ivf_search_one", "search_one", "single_query_tiers", "warm_saved_ivf"]

_EMPTY_MASK = np.empty(0, np.uint8)
# The rows' block mask of float vectors without block CRC32s: one block beyond any row.
_ALL_ROWS_OK = np.ones(1, dtype=bool)
_ONE_BLOCK = np.int64(2**62)
_NO_ROW_DATA = np.zeros((1, 1), dtype=np.uint8)
_NO_ROW_CRCS = np.zeros(1, dtype=np.uint32)
_NO_TRANSFORM = np.empty(0, dtype=np.float32)
_NOT_COLD = np.zeros(1, dtype=np.bool_)  # nothing to check: never written
# No room for the lists or candidate rows to check (the fused kernels): the usual call.
_NO_LISTS = np.empty(0, dtype=np.int32)
_NO_ROWS = np.empty(0, dtype=np.int64)


def _parents(table, dim: int) -> tuple:
    """The parent-level arguments of ``ivf_plan_two`` (empty arrays of the same types when
    plans rank every list, :func:`~bbqlib.index.ivf.plan.walks_parents`: one compiled
    specialization for both)."""
    if not P.walks_parents(table):
        return (
            np.empty((0, dim), np.uint8), np.empty((0, 4), np.float32), np.empty(0),
            np.empty(0), np.empty(0, np.int32), np.zeros(1, np.int64),
        )  # fmt: skip
    return (
        np.ascontiguousarray(table.parent_codes, dtype=np.uint8),
        np.ascontiguousarray(table.parent_factors, dtype=np.float32),
        np.ascontiguousarray(table.parent_cc, dtype=np.float64),
        np.ascontiguousarray(table.parent_radius, dtype=np.float64),
        np.ascontiguousarray(table.child_order, dtype=np.int32),
        np.ascontiguousarray(table.child_offsets, dtype=np.int64),
    )


def _state(index):
    """What the fast path needs of the index as it is now (kept until the next change): the
    fixed arguments of the fused kernel, or False where the batch path serves."""
    postings = index._postings
    segments = index._segments
    first = segments[0] if segments else None
    cached = getattr(index, "_single_state", None)
    if cached is not None:  # what a write replaces: compared by identity, every query
        old = cached[0]
        if (
            old[0] is postings and old[1] is segments and old[2] == len(segments)
            and old[3] is index._table and old[4] is index._C and old[5] is first
        ):  # fmt: skip
            return cached[1]
    key = (postings, segments, len(segments), index._table, index._C, first)
    state = False
    q = index.quantizer
    C = np.ascontiguousarray(index._C, dtype=np.float32)
    one = q.scanner().ivf_one(postings, C, index._list_cc) if len(segments) == 1 else None
    if one is not None:
        table = index._table
        sim = q.similarity_
        is_l2 = sim.is_distance
        by_distance = sim is not Similarity.MAX_INNER_PRODUCT
        sizes = postings.sizes
        lists_ok, list_crcs, block_start, check_bytes, check_width = one.checks
        state = {
            "kernel": one.kernel,
            "middle": one.middle,
            "prepare": one.prepare,
            "is_l2": is_l2,
            "sizes": sizes,
            "plan": (
                table.g,
                table.gg,
                table.codes,
                table.factors,
                table.cc,
                sizes,
                P.CENTROID_BITS,
                P.CENTROID_ITERS,
                P.CENTROID_LAMBDA,
                is_l2,
                by_distance or is_l2,
            ),  # fmt: skip
            "parents": _parents(table, q.dim_),
            "n_parents": table.parent_codes.shape[0] if P.walks_parents(table) else 0,
            "mean_size": float(sizes.mean()),
            "calls": {},
            "C": C,
            "checks": (
                lists_ok,
                list_crcs,
                postings.start,
                block_start,
                check_bytes,
                check_width,
                postings.factors.view(np.uint8).reshape(-1),
                postings.ids.view(np.uint8).reshape(-1),
            ),  # fmt: skip
            "lut_checks": lists_ok is postings._verified_blocks,
            "segment": first,
            "row_data": row_bytes(first.array),  # what the fused call's row CRC32s cover
            "vectors": float_rows(first.array),
        }
    index._single_state = (key, state)
    return state


#: The IVF single-query path's tier of the lookup-table kernel (BBQ's default), one per fused
#: kernel (:func:`bbqlib.index.tiers.tier_of`; ``COMPILE_SINGLE_AFTER``).
IVF_TIER = tier_of(KF.ivf_lut_fused)


def single_query_tiers(index) -> tuple:
    """The tier of the fused kernel ``index`` runs (none where the batch path serves)."""
    state = _state(index) if index._fitted else False
    return () if state is False else (tier_of(state["kernel"]),)


def search_one(index, *args):
    """``IVFIndex.search`` under its read lock: the single-query path, else ``_search``."""
    if index._fitted:
        state = _state(index)
        if state is not False:
            tier = tier_of(state["kernel"])
            if not tier.ready():  # its kernel not compiled yet
                return tier.on_batch_path(index._search, args[0], index.quantizer.dim_, *args[1:],
                                          index=index)  # fmt: skip
            F.check_row_ids(index, whole=False)  # results are mapped through them
            one = ivf_search_one(index, state, *args)
            if one is not None:
                return one
    return index._search(*args)


def ivf_search_one(
    index, state, queries, k, visit_percentage, oversample, rerank, filter, scores, pad_to_k=None
):
    """``IVFIndex.search`` of one query, or None where the batch path must run."""
    if filter is not None or not index._fitted or index._n_deleted:
        return None
    q = index.quantizer
    x = one_query(queries, q.dim_)
    if x is None:
        return None
    # The settings of a call, resolved and checked once per distinct set of arguments (an
    # application repeats the same few): the GIL-held Python of a query is its fixed cost.
    key = (k, type(k), visit_percentage, type(visit_percentage), oversample, type(oversample),
           rerank, type(rerank), scores, pad_to_k, type(pad_to_k), index.visit_percentage,
           index.store_vectors, index.oversample)  # fmt: skip
    calls = state["calls"]
    try:
        call = calls.get(key)
    except TypeError:  # an unhashable argument: the batch path checks it
        return None
    if call is None:
        call = _settings(index, state, k, visit_percentage, oversample, rerank, scores, pad_to_k)
        if call is None:
            return None
        if len(calls) < 64:
            calls[key] = call
    return _fused(index, state, x, call)


def _settings(index, state, k, visit_percentage, oversample, rerank, scores, pad_to_k):
    """A call's settings resolved (the index's defaults) and checked, or None where the
    batch path must run: ``(columns, depth, decoded, sim, scores, front, middle, back)``, with
    ``columns`` the results' columns (:func:`~bbqlib.search.finish.result_columns`)."""
    try:  # the batch path's checks (it raises their errors)
        opts = index._search_options(k, oversample, rerank, scores, pad_to_k)
        visit_percentage = P.check_visit_percentage(visit_percentage)
    except (TypeError, ValueError):
        return None
    rerank, scores = opts.rerank, opts.scores
    if visit_percentage is None:
        visit_percentage = index.visit_percentage
    q = index.quantizer
    ntotal = index._ntotal
    columns = k = opts.k
    if k > ntotal:  # the columns follow pad_to_k, as on the batch path
        if opts.pad_to_k is None:
            return None  # the batch path warns
        columns, k = result_columns(k, ntotal, 1, opts.pad_to_k), ntotal
    depth = opts.depth(ntotal)
    if depth == 0:
        return None
    if visit_percentage is None:
        ratio = P.dynamic_visit_ratio(ntotal, depth)
    else:
        ratio = visit_percentage / 100.0
    heap = 2 * depth
    need = max(2.0 * ratio * ntotal, heap)
    sim = q.similarity_
    pad = pad_value(sim, scores)
    n_lists = state["sizes"].shape[0]
    want = P.lists_wanted(need, state["mean_size"], ratio, n_lists, state["n_parents"])
    plan = (*state["plan"], float(need), *state["parents"], want)
    # float16 / int8 rows: the call returns the estimates of ``depth`` candidates, which
    # are reranked here (the exact kernel reads those rows itself)
    decoded = rerank and state["vectors"] is None
    vectors = state["vectors"] if state["vectors"] is not None else state["C"]  # one type
    front = (sim is Similarity.COSINE, sim is Similarity.DOT_PRODUCT, MAX_SQ_NORM,
             UNIT_NORM_TOLERANCE, *plan, *state["checks"])  # fmt: skip
    middle = (*state["middle"], _EMPTY_MASK, heap, depth)
    out_k = depth if decoded else columns
    back = (vectors, bool(rerank) and not decoded, out_k, pad, state["is_l2"])
    reranked = bool(rerank) and depth > k  # the exact rerank picks k of more candidates
    return columns, depth, decoded, reranked, sim, scores, front, middle, back


def _fused(index, state, x, call):
    """The steps in one compiled call, writing the results into two new arrays. The call
    checks the CRC32s of the lists and rows it reads for the first time (an index opened from
    files). Where one fails, or a list cannot be checked in the call (formats without CRCs of
    what the scan reads), it stops; it is called again with room for those lists or rows,
    they are checked here (raising on damage), and it is called once more: the same query,
    the same result, and no other kernel to load at start-up."""
    columns, depth, decoded, reranked, sim, scores, front, middle, head = call
    q = index.quantizer
    qp = np.empty_like(x) if sim is Similarity.COSINE else x
    qt = _NO_TRANSFORM
    prepare = state["prepare"]
    wants_query = prepare is not None and getattr(prepare, "needs_query", False)
    Qt = None
    if q.transform_ is not None or wants_query:
        Qp = prepared_query(x, sim)
        if Qp is None:
            return None  # the general path raises
        Qt = Qp if q.transform_ is None else q.transform_rows(Qp)
        if q.transform_ is not None:
            qt = Qt[0]
    if prepare is not None:  # the family's arguments of this call
        extra = prepare(reranked, Qt if wants_query else None)
        if extra is None:
            return None
        middle = (*extra, *middle)
    blocks = state["segment"].blocks if head[1] else None
    rows_ok, block_rows, row_data, row_crcs = _ALL_ROWS_OK, _ONE_BLOCK, _NO_ROW_DATA, _NO_ROW_CRCS
    cold = _NOT_COLD
    if blocks is not None:
        rows_ok, block_rows, row_crcs = blocks._checked, blocks.block_rows, blocks.crcs
        cold = blocks.cold
        row_data = state["row_data"]
    back = (*head, rows_ok, block_rows, row_data, row_crcs, cold)
    out_k = head[2]
    raw = np.empty((1, out_k))
    rows = np.empty((1, out_k), dtype=np.int64)
    lists, cands = _NO_LISTS, _NO_ROWS
    kernel = state["kernel"]
    for _ in range(5):  # lists, then rows: each stop once without room, once with it
        status, n_lists, entries = kernel(x, qp, qt, front, middle, back, (raw, rows, lists, cands))
        if status == 0:
            break
        if status == 1:
            return None  # the general path raises the error
        if lists.size == 0:  # what to check did not fit: again, with room for it
            lists = np.empty(state["sizes"].shape[0], dtype=np.int32)
            cands = np.empty(depth, dtype=np.int64)
        elif status == 2:
            index._postings.check(lists[:n_lists], blocks=state["lut_checks"])
        else:
            state["segment"].check_rows(cands[cands >= 0])  # marks their blocks in ``rows_ok``
    else:  # a check that did not mark what it checked: never expected, kept safe
        return None
    _set_stats(index, n_lists, entries, depth)
    if decoded:
        Qp = qp.reshape(1, -1)
        if state["segment"].blocks is not None:  # block CRC32s at their first read
            state["segment"].check_rows(rows[rows >= 0])
        out, rows = _rerank_decoded(Qp, state["segment"].array, rows[0], columns, sim, scores)
        return out, index._row_ids.of_rows(rows)
    pad = head[3]
    return finish_scores(raw, rows, sim, pad, scores), index._row_ids.of_rows(rows)


def _set_stats(index, n_lists, entries, depth) -> None:
    ntotal = index._ntotal
    index.last_search_stats = {
        "lists_visited": float(n_lists),
        "entries_scored": float(entries),
        "visited_fraction": entries / max(1, 2 * ntotal),
        "depth": depth,
    }


def _rerank_decoded(Qp, stored, rows, k, sim, scores):
    """:func:`rerank_finish` over float16 or int8 stored rows, read by the exact kernel itself
    on the calling thread (:func:`bbqlib.search.stored.stored_exact_values`: the values the
    batch path's rerank scores, no NumPy gather or decode), then the best ``k`` by (key desc,
    row asc) as :func:`rerank_finish` orders them."""
    dist = sim.is_distance
    pad = pad_value(sim, scores)
    mode = KR.SQUARED_L2 if dist else KR.INNER_PRODUCT
    raw = stored_exact_values(Qp, stored, rows.reshape(1, -1), mode, parallel=False)
    out_raw, out_rows = KO.best_k(raw[0], rows, dist, k, pad)
    return finish_scores(out_raw, out_rows, sim, pad, scores), out_rows


def warm_saved_ivf(cls, folder) -> None:
    """``IVFIndex.warm_saved_kernels``: where the kernel cache holds the fused lookup-table
    kernel, one query of a saved 64-vector probe (see
    :func:`bbqlib.index.flat.one.warm_saved_flat`)."""
    from ..._kernels.cache import has_entries

    if not has_entries(KF.ivf_lut_fused):
        return
    X = np.random.default_rng(0).normal(size=(64, 16)).astype(np.float32)
    probe = cls(bits=1, similarity="cosine")
    probe.add(X)
    probe.save(folder / "ivf")
    cls.open(folder / "ivf").search(X[0], k=10)
