"""The one exit of every search: ranking keys to the scores a caller sees."""

from __future__ import annotations

import numpy as np

from ..similarity import Similarity, scores_from_raw

__all__ = ["SCORE_KINDS", "finish", "check_scores"]

#: What ``search(..., scores=...)`` returns: raw values (cosine, inner product, or squared L2
#: ascending, as faiss returns them) or Lucene's "higher is better" similarity mapping.
SCORE_KINDS = ("raw", "similarity")


def check_scores(scores: str) -> str:
    if scores not in SCORE_KINDS:
        raise ValueError(f"scores must be one of {list(SCORE_KINDS)}, got {scores!r}")
    return scores


def finish(keys: np.ndarray, ids: np.ndarray, k: int, similarity: Similarity, scores: str):
    """``(scores float32 [nq, k], ids int64 [nq, k])`` from ranking keys, padded to ``k``.

    ``scores="similarity"``: Lucene's mapping of the raw value (padding ``-inf``);
    ``"raw"``: squared L2 (padding ``+inf``) or the inner product / cosine (padding ``-inf``).
    """
    nq = keys.shape[0]
    pad = np.inf if scores == "raw" and similarity.is_distance else -np.inf
    out = np.full((nq, k), pad, dtype=np.float32)
    out_ids = np.full((nq, k), -1, dtype=np.int64)
    m = min(k, ids.shape[1])
    valid = ids[:, :m] >= 0
    raw = similarity.raw(np.where(valid, keys[:, :m], 0.0))
    values = scores_from_raw(similarity, raw) if scores == "similarity" else raw
    out[:, :m] = np.where(valid, values, pad)
    out_ids[:, :m] = np.where(valid, ids[:, :m], -1)
    return out, out_ids
