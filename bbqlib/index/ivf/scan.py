"""Scoring the visited posting lists of a query batch, and the exact rerank over segments.

The quantizer codes each query against each visited list's centroid
(:meth:`bbqlib.Quantizer.query_pairs`); the encoding's registry row picks the kernel from
:data:`bbqlib.scoring.KERNELS` (or the lookup-table scan for plane docs against queries of at
most 4 bits on AVX2 CPUs). Every kernel keeps a heap of ranking keys per query over all its
lists, in one call per batch of about :data:`PAIR_BATCH` pairs.
"""

from __future__ import annotations

import numpy as np

from ...encoding import Encoding, padded_dim
from ...layouts.kernels import KERNELS, use_lut
from ...search.rerank import exact_mode, rerank_keys
from ...search.stored import stored_exact_values
from ...search.topk import EMPTY_ID
from ...similarity import Similarity
from .postings import Postings

__all__ = ["PAIR_BATCH", "scan_lists", "uses_lut", "rerank_segments"]

#: (query, list) pairs per kernel call: bounds the re-quantized query buffers.
PAIR_BATCH = 16_384


def uses_lut(encoding: Encoding) -> bool:
    """Whether the lookup-table scan serves this row here (plane docs, <= 4-bit queries)."""
    return use_lut(encoding.query_planes, encoding.layout)


def scan_lists(
    quantizer, postings: Postings, centroids, list_cc, Qt, plan, heap, allowed, *, reranked=False
):
    """Heaps ``(keys, ids)`` [nq, heap] of the best entries of each query's visited lists.

    ``plan``: ``(pair_list, pair_query, pair_start)`` from
    :func:`bbqlib.index.ivf.plan.plan_visits`; ``allowed``: uint8 mask over ids or None;
    ``reranked``: the search re-scores more than ``k`` of the heaps' entries exactly
    afterwards (SAQ's list scan then ranks by its 4-bit pass alone,
    :meth:`bbqlib.SAQQuantizer.scan_pairs`).
    """
    pair_list, pair_query, pair_start = plan
    row = quantizer.encoding_
    is_l2 = quantizer.similarity_.is_distance
    nq = Qt.shape[0]
    keys = np.full((nq, heap), -np.inf)
    ids = np.full((nq, heap), EMPTY_ID, dtype=np.int64)
    mask = np.empty(0, np.uint8) if allowed is None else allowed
    lut = uses_lut(row)
    postings.check(pair_list, blocks=lut)
    dim = Qt.shape[1]
    # Query chunks of about PAIR_BATCH pairs bound the re-quantized query buffers.
    cuts = np.searchsorted(pair_start, np.arange(PAIR_BATCH, pair_start[-1], PAIR_BATCH))
    bounds = np.unique(np.concatenate([[0], cuts, [nq]]))
    for q0, q1 in zip(bounds[:-1], bounds[1:], strict=True):
        p0, p1 = pair_start[q0], pair_start[q1]
        if p1 == p0:
            continue
        if row.layout == "segments":  # SAQ: one table set per query for all its lists
            quantizer.scan_pairs(
                Qt[q0:q1], centroids, list_cc, (pair_query[p0:p1] - q0, pair_list[p0:p1],
                pair_start[q0 : q1 + 1] - p0), postings, mask, keys[q0:q1], ids[q0:q1],
                reranked=reranked,
            )  # fmt: skip
            continue
        qdata, qf = quantizer.query_pairs(
            Qt, centroids, pair_query[p0:p1], pair_list[p0:p1], lut=lut
        )
        lists = pair_list[p0:p1]
        local = pair_start[q0 : q1 + 1] - p0
        head = (qdata, qf, lists, local, postings.start)
        tail = (mask, keys[q0:q1], ids[q0:q1])
        if lut:
            from ..._kernels.lut import ivf_scan_lut

            blocks, block_starts = postings.lut_layout()
            ivf_scan_lut(
                *head, block_starts, blocks, postings.factors, postings.ids, list_cc,
                row.doc_planes, padded_dim(dim) // 8, dim, is_l2, *tail,
            )  # fmt: skip
        elif row.query_kind == "planes":
            KERNELS["planes"].lists(
                *head, postings.codes.view(np.uint64), postings.factors, postings.ids, list_cc,
                row.query_planes, row.doc_planes, row.words_per_plane(dim), dim, is_l2, *tail,
            )  # fmt: skip
        elif row.query_kind == "bytes":
            KERNELS["bytes"].lists(
                *head, postings.codes, postings.factors, postings.ids, list_cc, dim, is_l2,
                *tail,
            )  # fmt: skip
        else:
            KERNELS["float"].lists(
                np.ascontiguousarray(qdata, np.float32), *head[1:], postings.codes,
                postings.factors, postings.ids, list_cc, row.doc_planes,
                padded_dim(dim) // 8, dim, is_l2, *tail,
            )  # fmt: skip
    return keys, ids


def rerank_segments(Qp, segments, cand: np.ndarray, k: int, similarity: Similarity):
    """Exact values of the candidates over the stored vector segments (float16 and int8
    rows decoded as float32, :func:`bbqlib.scoring.stored.stored_exact_values`); best ``k``
    as keys."""
    mode = exact_mode(similarity)
    raw = np.full(cand.shape, np.nan)
    start = 0
    for seg in segments:
        stop = start + len(seg)
        inside = (cand >= start) & (cand < stop)
        if inside.any():
            local = np.where(inside, cand - start, -1)
            seg.check_rows(local[inside])  # block CRC32s, on the first read of each block
            raw = np.where(inside, stored_exact_values(Qp, seg.array, local, mode), raw)
        start = stop
    return rerank_keys(raw, cand, k, similarity)
