"""TurboQuant's flat scans: dense estimates, the top-k scan and the candidate scorer."""

from __future__ import annotations

import numpy as np

from ..._kernels.policy import limit_threads, threads_for
from ..._kernels.scoring import BLOCK, EMPTY_ID
from ...search.topk import merge_topk
from ..encoded import EncodedVectors
from .quantizer import QUERY_BATCH

__all__ = ["estimate_raw", "topk_keys", "TurboQuantScorer"]

#: (query, doc) pairs worth a thread.
PAIRS_PER_THREAD = 1 << 16


def _query_side(q, Qp: np.ndarray):
    Y = q._rotated(np.asarray(Qp, dtype=np.float32))
    tm, tq = q.tables(Y)
    return tm, tq, q._query_adds(Qp)


def estimate_raw(q, Qp: np.ndarray, enc: EncodedVectors) -> np.ndarray:
    """Raw estimates float64 [nq, n] of prepared queries ``Qp`` against ``enc``."""
    from . import kernels as K

    codes, df = q._doc_rows(enc)
    out = np.empty((len(Qp), len(enc)))
    for q0 in range(0, len(Qp), QUERY_BATCH):
        q1 = min(len(Qp), q0 + QUERY_BATCH)
        tm, tq, add = _query_side(q, Qp[q0:q1])
        if len(enc):
            K.estimate_rows(tm, tq, add, codes, df, *q._scan_args(), out[q0:q1])
    return out


def topk_keys(q, Qp: np.ndarray, enc: EncodedVectors, k: int, allowed, id_base: int):
    """Best ``k`` per prepared query: ``(keys, ids)`` float64 / int64 [nq, k], best first,
    ties by the lower id, ``-inf`` / ``-1`` padding."""
    from . import kernels as K

    codes, df = q._doc_rows(enc)
    nq, n = len(Qp), len(enc)
    mask = np.empty(0, np.uint8) if allowed is None else np.ascontiguousarray(allowed, np.uint8)
    threads = threads_for(nq * n, PAIRS_PER_THREAD)
    chunks = max(1, min(threads, -(-n // BLOCK)))
    all_keys = np.full((nq, k), -np.inf)
    all_ids = np.full((nq, k), -1, dtype=np.int64)
    for q0 in range(0, nq, QUERY_BATCH):
        q1 = min(nq, q0 + QUERY_BATCH)
        keys = np.full((chunks, q1 - q0, k), -np.inf)
        ids = np.full((chunks, q1 - q0, k), EMPTY_ID, dtype=np.int64)
        if n:
            tm, tq, add = _query_side(q, Qp[q0:q1])
            with limit_threads(threads):
                K.scan_flat(tm, tq, add, codes, df, *q._scan_args(), mask, np.int64(id_base),
                            keys, ids)  # fmt: skip
        keys = keys.transpose(1, 0, 2).reshape(q1 - q0, -1)
        ids = ids.transpose(1, 0, 2).reshape(q1 - q0, -1)
        keys, ids = merge_topk(keys, ids, k)
        empty = ids == EMPTY_ID
        all_keys[q0:q1] = np.where(empty, -np.inf, keys)
        all_ids[q0:q1] = np.where(empty, -1, ids)
    return all_keys, all_ids


class TurboQuantScorer:
    """``score_ids(ids) -> float32``: one query's raw estimates of chosen docs."""

    def __init__(self, q, Qp: np.ndarray, enc: EncodedVectors):
        self._q = q
        self._codes, self._df = q._doc_rows(enc)
        self._tm, self._tq, self._add = _query_side(q, Qp)
        self.n = len(enc)

    def __call__(self, ids) -> np.ndarray:
        from . import kernels as K

        ids = np.asarray(ids)
        if ids.dtype.kind not in "iu":
            raise TypeError(f"ids must be integers, got {ids.dtype}")
        flat = ids.reshape(-1).astype(np.int64)
        if flat.size and (flat.min() < 0 or flat.max() >= self.n):
            raise IndexError(f"ids must be in [0, {self.n}), got a value outside")
        out = np.empty((1, flat.size))
        if flat.size:
            K.estimate_rows(self._tm, self._tq, self._add, self._codes[flat], self._df[flat],
                            *self._q._scan_args(), out)  # fmt: skip
        return out[0].astype(np.float32).reshape(ids.shape)

    score_ids = __call__

    def __repr__(self) -> str:
        return f"TurboQuantScorer(n={self.n})"
