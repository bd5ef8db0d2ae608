"""Scoring the visited posting lists of a query batch, and the exact rerank over segments.

:func:`scan_lists` hands each chunk of about :data:`PAIR_BATCH` (query, list) pairs to the
quantizer's scanner (:meth:`bbqlib.quantizers.scanner.Scanner.scan_pairs`), which codes the
queries against each visited list's centre and keeps a heap of ranking keys per query.
"""

from __future__ import annotations

import numpy as np

from ...encoding import Encoding
from ...layouts.lists import reads_lut_blocks
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
    return reads_lut_blocks(encoding)


def scan_lists(
    quantizer, postings: Postings, centroids, list_cc, Qt, plan, heap, allowed, *, reranked=False
):
    """Heaps ``(keys, ids)`` [nq, heap] of the best entries of each query's visited lists.

    ``plan``: ``(pair_list, pair_query, pair_start)`` from
    :func:`bbqlib.index.ivf.plan.plan_visits`; ``allowed``: uint8 mask over ids or None;
    ``reranked``: the search re-scores more than ``k`` of the heaps' entries exactly
    afterwards (a scanner may then rank by a cheaper pass, as SAQ's 4-bit one).
    """
    pair_list, pair_query, pair_start = plan
    scanner = quantizer.scanner()
    nq = Qt.shape[0]
    keys = np.full((nq, heap), -np.inf)
    ids = np.full((nq, heap), EMPTY_ID, dtype=np.int64)
    mask = np.empty(0, np.uint8) if allowed is None else allowed
    postings.check(pair_list, blocks=scanner.reads_lut_blocks())
    # Query chunks of about PAIR_BATCH pairs bound the re-quantized query buffers.
    cuts = np.searchsorted(pair_start, np.arange(PAIR_BATCH, pair_start[-1], PAIR_BATCH))
    bounds = np.unique(np.concatenate([[0], cuts, [nq]]))
    for q0, q1 in zip(bounds[:-1], bounds[1:], strict=True):
        p0, p1 = pair_start[q0], pair_start[q1]
        if p1 == p0:
            continue
        pairs = (pair_query[p0:p1] - q0, pair_list[p0:p1], pair_start[q0 : q1 + 1] - p0)
        scanner.scan_pairs(Qt[q0:q1], centroids, list_cc, pairs, postings, mask, keys[q0:q1],
                           ids[q0:q1], reranked=reranked)  # fmt: skip
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
