"""What both indexes' one-query paths share: the query as one row, its preparation, and the
exit (exact rerank, scores) as the batch path computes them."""

from __future__ import annotations

import numpy as np

from .._kernels import single as KO
from .._validation import MAX_SQ_NORM, UNIT_NORM_TOLERANCE
from ..similarity import Similarity, scores_from_raw

__all__ = ["one_query", "prepared_query", "float_rows", "rerank_finish", "finish_scores"]


def one_query(queries, dim: int) -> np.ndarray | None:
    """``queries`` as a float32 row [d] when it is one C-contiguous float32 query of
    dimension ``dim``, else None. No copy, but of a read-only row (a query read from a file
    map): the kernels are compiled for writable arrays, and a read-only one would compile
    each of them again."""
    if type(queries) is not np.ndarray or queries.dtype != np.float32:
        return None
    if queries.ndim == 2 and queries.shape[0] == 1:
        queries = queries[0]
    if queries.ndim != 1 or queries.shape[0] != dim or not queries.flags.c_contiguous:
        return None
    return queries if queries.flags.writeable else queries.copy()


def prepared_query(x: np.ndarray, similarity: Similarity) -> np.ndarray | None:
    """One query row as ``prepare_for_similarity`` makes it, as [1, d] (normalized for
    cosine, a new array then); None when it breaks a rule (the general path raises)."""
    cosine = similarity is Similarity.COSINE
    out = np.empty_like(x) if cosine else x
    sq = KO.prepare_one(x, cosine, out)
    if not sq <= MAX_SQ_NORM:  # not finite, or beyond check_vectors' bound
        return None
    if cosine and sq == 0.0:
        return None
    if similarity is Similarity.DOT_PRODUCT and abs(sq - 1.0) > UNIT_NORM_TOLERANCE:
        return None
    return out.reshape(1, -1)


def float_rows(vectors) -> np.ndarray | None:
    """The float vectors as the exact kernel takes them (float32), else None."""
    if vectors is None:
        return None
    vec = vectors.view(np.ndarray) if isinstance(vectors, np.memmap) else vectors
    if type(vec) is not np.ndarray or vec.dtype != np.float32 or not vec.flags.c_contiguous:
        return None
    return vec


def rerank_finish(Qp, vectors, keys, rows, k: int, similarity: Similarity, rerank: bool, scores):
    """Exact rerank of candidate ``rows`` [m] (``-1`` padding; ``keys`` their estimated keys,
    best first) and the exit: ``(scores float32 [1, k], rows int64 [1, k])`` as
    ``rerank_keys`` + ``finish`` make them."""
    dist = similarity.is_distance
    pad = np.inf if dist and scores == "raw" else -np.inf  # scoring.pad_value, inlined
    if rerank:
        if dist:
            raw, out_rows = KO.rerank_sqdists(Qp, vectors, rows, k, pad)
        else:
            raw, out_rows = KO.rerank_dots(Qp, vectors, rows, k, pad)
    else:
        m = min(k, rows.shape[0])
        raw = np.full((1, k), pad)
        out_rows = np.full((1, k), -1, dtype=np.int64)
        valid = rows[:m] >= 0
        raw[0, :m] = np.where(valid, -keys[:m] if dist else keys[:m], pad)
        out_rows[0, :m] = np.where(valid, rows[:m], -1)
    return finish_scores(raw, out_rows, similarity, pad, scores), out_rows


def finish_scores(raw, out_rows, similarity: Similarity, pad: float, scores) -> np.ndarray:
    """float32 [1, k] results from exact values ``raw`` of ``out_rows`` (``-1``: none)."""
    if scores == "raw":
        return raw.astype(np.float32)
    valid = out_rows >= 0
    values = scores_from_raw(similarity, np.where(valid, raw, 0.0))
    return np.where(valid, values, pad).astype(np.float32)
