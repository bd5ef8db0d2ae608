"""Merging heaps of ranking keys (higher is better) into the best ``k``."""

from __future__ import annotations

import numpy as np

from .._kernels import ivf as KI
from .._kernels.scoring import EMPTY_ID

__all__ = ["EMPTY_ID", "merge_topk", "dedup_topk"]


def merge_topk(keys: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Merge candidate lists [nq, m] into the best ``k`` by (key desc, id asc)."""
    order = np.lexsort((ids, -keys), axis=-1)[:, :k]
    keys = np.take_along_axis(keys, order, axis=1)
    ids = np.take_along_axis(ids, order, axis=1)
    return keys, ids


def dedup_topk(keys: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Best ``k`` distinct ids per row from heaps that may hold an id twice (SOAR).

    ``keys`` float64 / ``ids`` int64 [nq, H], empty slots ``-inf`` / ``EMPTY_ID``. Returns
    ``(keys, ids)`` [nq, min(k, H)] by (key desc, id asc), ``-1`` for missing ids.
    """
    k = min(k, ids.shape[1])
    out_keys = np.empty((ids.shape[0], k), dtype=np.float64)
    out_ids = np.empty((ids.shape[0], k), dtype=np.int64)
    KI.dedup_topk_rows(keys, ids, out_keys, out_ids)
    return out_keys, out_ids
