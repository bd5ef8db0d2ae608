"""Dense estimates and top-k scans of quantized queries against all docs."""

from __future__ import annotations

import numpy as np

from .._kernels import scoring as KS
from .._kernels.ivf import dedup_topk_rows
from .._kernels.policy import limit_threads, threads_for
from ..packing import unpack_planes
from ..search.topk import EMPTY_ID, merge_topk
from .codes import DocCodes, QueryCodes
from .kernels import kernels_for, use_lut

__all__ = ["estimate_raw", "topk_keys", "query_tables", "QUERY_BATCH"]

#: Queries per kernel call in a scan (bounds heap memory at threads * QUERY_BATCH * k).
QUERY_BATCH = 256
#: (query, doc) pairs per thread in a scan or estimate: enough work to outweigh a parallel
#: region's fork and join, so single queries and small batches run on the calling thread
#: (``policy.threads_for``; docs/threads.md, ``benchmarks/serving/serving.py --sections
#: contention``).
PAIRS_PER_THREAD = 250_000


def estimate_raw(q: QueryCodes, d: DocCodes) -> np.ndarray:
    """Raw estimates [nq, n] (float64): squared L2 for euclidean, inner product otherwise."""
    kernels = kernels_for(q, d)
    out = np.empty((len(q), len(d)), dtype=np.float64)
    if len(q) == 0 or len(d) == 0:
        return out
    with limit_threads(threads_for(len(q) * len(d), PAIRS_PER_THREAD)):
        _estimate(q, d, kernels, out)
    return out


def _estimate(q: QueryCodes, d: DocCodes, kernels, out: np.ndarray) -> None:
    common = (d.dim, d.centroid_dot, d.is_l2)
    if q.kind == "planes":
        kernels.estimate(
            q.data, q.factors, d.data, d.factors, q.planes, d.planes, d.words, *common, out
        )
    elif q.kind == "bytes" or d.kind == "bytes":
        kernels.estimate(q.data, q.factors, d.data, d.factors, *common, out)
    else:  # float queries against plane docs: dots straight from the planes
        KS.estimate_float_planes(
            _float32(q.data), q.factors, d.data.view(np.uint8), d.factors, d.planes,
            d.words * 8, *common, out,
        )  # fmt: skip


def topk_keys(
    q: QueryCodes, d: DocCodes, k: int, *, allowed: np.ndarray | None = None, id_base: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Best ``k`` docs per query by estimate: ``(keys, ids)`` float64 / int64 [nq, k].

    Keys are ranking keys (higher is better: ``-d²`` or the inner product), best first, ties
    by the lower id; missing entries are ``-inf`` / ``-1``. ``allowed`` is an optional boolean
    mask over docs.
    """
    kernels_for(q, d)
    nq = len(q)
    mask = np.empty(0, np.uint8) if allowed is None else np.ascontiguousarray(allowed, np.uint8)
    threads = threads_for(nq * len(d), PAIRS_PER_THREAD)
    chunks = max(1, min(threads, -(-len(d) // KS.BLOCK)))
    all_keys = np.full((nq, k), -np.inf)
    all_ids = np.full((nq, k), -1, dtype=np.int64)
    for q0 in range(0, nq, QUERY_BATCH):
        qb = q.rows(q0, min(nq, q0 + QUERY_BATCH))
        with limit_threads(threads):
            keys, ids = _scan(qb, d, k, mask, id_base, chunks)
        if chunks == 1:  # one heap per query: sorted in place of a merge (same order)
            _sort_heaps(keys[0], ids[0], all_keys[q0 : q0 + len(qb)], all_ids[q0 : q0 + len(qb)])
            continue
        keys = keys.transpose(1, 0, 2).reshape(len(qb), -1)
        ids = ids.transpose(1, 0, 2).reshape(len(qb), -1)
        keys, ids = merge_topk(keys, ids, k)
        ids[ids == EMPTY_ID] = -1
        all_keys[q0 : q0 + len(qb)] = keys
        all_ids[q0 : q0 + len(qb)] = ids
    return all_keys, all_ids


def _scan(q: QueryCodes, d: DocCodes, k, mask, id_base, chunks):
    keys = np.full((chunks, len(q), k), -np.inf)
    ids = np.full((chunks, len(q), k), EMPTY_ID, dtype=np.int64)
    if len(d) == 0:
        return keys, ids
    kernels = kernels_for(q, d)
    common = (d.dim, d.centroid_dot, d.is_l2)
    if q.kind == "planes" and use_lut(q.planes, d.kind):
        _scan_lut(q, d, mask, id_base, keys, ids)
    elif q.kind == "planes":
        kernels.scan(
            q.data, q.factors, d.data, d.factors, q.planes, d.planes, d.words, *common,
            mask, id_base, keys, ids,
        )  # fmt: skip
    elif q.kind == "bytes":
        kernels.scan(q.data, q.factors, d.data, d.factors, *common, mask, id_base, keys, ids)
    elif d.kind == "planes":  # float queries: dots straight from the planes
        KS.scan_float_planes(
            _float32(q.data), q.factors, d.data.view(np.uint8), d.factors, d.planes,
            d.words * 8, *common, mask, id_base, keys, ids,
        )  # fmt: skip
    else:
        kernels.scan(q.data, q.factors, d.data, d.factors, *common, mask, id_base, keys, ids)
    return keys, ids


def _float32(data: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(data, dtype=np.float32)


def query_tables(q: QueryCodes) -> np.ndarray:
    """Lookup tables uint8 [nq, 2 · P · 32] of plane-packed queries (``bbqlib._kernels.lut``)."""
    from .._kernels.lut import LANES, build_tables

    dim64 = q.data.shape[1] // q.planes * 64
    pairs = dim64 // 8
    codes = unpack_planes(q.data.view(np.uint8), q.planes, dim64)
    tables = np.empty((len(q), 2 * pairs * LANES), dtype=np.uint8)
    build_tables(codes, pairs, tables)
    return tables


def _scan_lut(q: QueryCodes, d: DocCodes, mask, id_base, keys, ids) -> None:
    from .._kernels.lut import scan_lut

    blocks, cols = d.lut_layout()
    scan_lut(
        query_tables(q), q.factors, blocks, cols, d.planes, d.words * 8, len(d), d.dim,
        d.centroid_dot, d.is_l2, mask, id_base, keys, ids,
    )  # fmt: skip


def _sort_heaps(keys, ids, out_keys, out_ids) -> None:
    """Heaps of distinct ids [nq, k] best first (key desc, id asc; ``-inf`` / ``-1`` where
    empty), as :func:`~bbqlib.search.topk.merge_topk` orders them (the de-duplication's sort,
    which finds nothing to remove)."""
    dedup_topk_rows.serial(keys, ids, out_keys, out_ids)
