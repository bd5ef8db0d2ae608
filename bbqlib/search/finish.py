"""The one exit of every search: ranking keys to the scores a caller sees, ``k`` columns."""

from __future__ import annotations

import os
import sys
import warnings

import numpy as np

from .._params import check_int
from ..similarity import Similarity, scores_from_raw

__all__ = [
    "SCORE_KINDS",
    "RESULT_CELL_BYTES",
    "finish",
    "check_scores",
    "pad_value",
    "result_columns",
    "result_bytes_limit",
]

#: What ``search(..., scores=...)`` returns: raw values (cosine, inner product, or squared L2
#: ascending, as faiss returns them) or Lucene's "higher is better" similarity mapping.
SCORE_KINDS = ("raw", "similarity")
#: Bytes of one result: a float32 score and an int64 id.
RESULT_CELL_BYTES = 4 + 8
#: Where the machine's memory cannot be read (``os.sysconf``, e.g. on Windows), results may
#: take this many bytes.
RESULT_BYTES_FALLBACK = 8 << 30
# The release in which ``search`` returns exactly k columns by default (CHANGELOG.md).
_PAD_RELEASE = "0.4"
_PACKAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "")
_limit: tuple[int, str] | None = None  # (bytes, where they come from), read once


def check_scores(scores: str) -> str:
    if scores not in SCORE_KINDS:
        raise ValueError(f"scores must be one of {list(SCORE_KINDS)}, got {scores!r}")
    return scores


def pad_value(similarity: Similarity, scores: str) -> float:
    """The score of a missing result: the worst of its kind, below (above, for squared L2)
    any real one. ``+inf`` for raw squared L2 distances (ascending), ``-inf`` for raw inner
    products and cosines and for every ``scores="similarity"`` mapping (higher is better).
    faiss pads with ``±FLT_MAX``, which ranks the same."""
    return np.inf if scores == "raw" and similarity.is_distance else -np.inf


def finish(keys: np.ndarray, ids: np.ndarray, k: int, similarity: Similarity, scores: str):
    """``(scores float32 [nq, k], ids int64 [nq, k])`` from ranking keys, padded to ``k``
    with id ``-1`` and :func:`pad_value` (``k`` from :func:`result_columns`).

    ``scores="similarity"``: Lucene's mapping of the raw value (padding ``-inf``);
    ``"raw"``: squared L2 (padding ``+inf``) or the inner product / cosine (padding ``-inf``).
    """
    nq = keys.shape[0]
    pad = pad_value(similarity, scores)
    out = np.full((nq, k), pad, dtype=np.float32)
    out_ids = np.full((nq, k), -1, dtype=np.int64)
    m = min(k, ids.shape[1])
    valid = ids[:, :m] >= 0
    raw = similarity.raw(np.where(valid, keys[:, :m], 0.0))
    values = scores_from_raw(similarity, raw) if scores == "similarity" else raw
    out[:, :m] = np.where(valid, values, pad)
    out_ids[:, :m] = np.where(valid, ids[:, :m], -1)
    return out, out_ids


def result_bytes_limit() -> int:
    """Bytes a search's results may take: half the machine's physical memory (the search
    holds temporaries of the same shape while it finishes), else
    :data:`RESULT_BYTES_FALLBACK`."""
    return _memory_limit()[0]


def _memory_limit() -> tuple[int, str]:
    global _limit
    if _limit is None:
        try:
            half = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") // 2
        except (AttributeError, ValueError, OSError):  # no sysconf, or no such name here
            half = 0
        if half > 0:
            _limit = (half, "half this machine's memory")
        else:
            _limit = (RESULT_BYTES_FALLBACK, "the limit where the memory size is unknown")
    return _limit


def result_columns(k, n: int, nq: int, pad_to_k) -> int:
    """The number of columns of a search's results, checked before anything is allocated.

    ``k`` when ``k <= n`` (the index's size) or ``pad_to_k`` is true; ``n`` when
    ``pad_to_k`` is false; ``pad_to_k=None`` (the default until bbqlib 0.4) gives ``n`` with
    a :class:`FutureWarning` when ``k > n``. Raises ``ValueError`` when ``nq · k`` results
    would exceed :func:`result_bytes_limit`.
    """
    k = check_int(k, "k", 1)
    if not (pad_to_k is None or isinstance(pad_to_k, (bool, np.bool_))):
        raise TypeError(
            f"pad_to_k must be True, False or None, got {type(pad_to_k).__name__} "
            f"{pad_to_k!r}; pass True for exactly k columns, False for min(k, ntotal)"
        )
    if k > n:
        if pad_to_k is None:
            need = nq * k * RESULT_CELL_BYTES
            then = ""
            if need > result_bytes_limit():
                then = f" (this k will then be a ValueError: {_size(need)} of results)"
            warnings.warn(
                f"search(k={k}) on an index of {n} vectors returns {n} columns; from bbqlib "
                f"{_PAD_RELEASE} it returns exactly k columns{then}, padded with id -1 and the "
                "worst score, as faiss does. Pass pad_to_k=True to get k columns now, or "
                "pad_to_k=False to keep min(k, ntotal) columns and silence this warning.",
                FutureWarning,
                stacklevel=_caller_level(),
            )
        if not pad_to_k:
            return n
    _check_result_bytes(nq, k, n)
    return k


def _check_result_bytes(nq: int, k: int, n: int) -> None:
    need = nq * k * RESULT_CELL_BYTES
    limit, what = _memory_limit()
    if need > limit:
        fix = f"a smaller k (k={n} returns every vector of this index)"
        if k > n:
            fix += ", pad_to_k=False (at most that many columns)"
        fix += " or fewer queries per call"
        raise ValueError(
            f"k={k} asks for {nq} x {k} results, {_size(need)} (a float32 score and an int64 id "
            f"each), more than a search may allocate ({_size(limit)}, {what}); pass {fix}"
        )


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**30:,.1f} GiB"


def _caller_level() -> int:
    """``stacklevel`` of the first frame outside bbqlib (the caller of ``search``)."""
    frame, level = sys._getframe(1), 1  # level 1: result_columns, which warns
    while frame is not None and frame.f_code.co_filename.startswith(_PACKAGE):
        frame, level = frame.f_back, level + 1
    return level
