"""Row checks and normalization of float32 batches, one pass each, no temporaries.

NumPy's ``isfinite(X).all()``, ``einsum(..., dtype=float64)`` and ``X / norms`` each allocate
a full-size temporary (the float64 ones twice the input), which for a batch of 100k x 1024
costs more than the quantization itself. A row's float64 sum of squares is finite exactly
when every component is (``inf`` and ``nan`` propagate; float32 squares cannot overflow
float64), so one lane sum (:func:`bbqlib._kernels.lanes.lane_dots`) checks and measures a row.
"""

from __future__ import annotations

import numpy as np

from .lanes import lane_dots
from .policy import parallel_kernel, prange

__all__ = ["row_sq_norms", "normalize_rows"]


#: Floats per thread: enough work to outweigh a parallel region's fork and join, so query
#: batches and small adds run on the calling thread (``bbqlib._kernels.policy.threads_for``;
#: docs/threads.md, ``benchmarks/serving/serving.py --sections contention``).
NORMS_PER_THREAD = 4_000_000
#: Floats per thread for :func:`normalize_rows` (fewer than for norms: each float is also
#: divided and written).
NORMALIZE_PER_THREAD = 1_500_000


def _size(X, *rest) -> int:
    return X.size


@parallel_kernel(work=_size, min_work=NORMS_PER_THREAD)
def row_sq_norms(X, out):
    """``out[i] = Σ_j float64(X[i, j])²`` (lane sums); ``inf`` / ``nan`` for non-finite rows."""
    for i in prange(X.shape[0]):
        row = X[i]
        out[i] = lane_dots(row, (row,))[0]


@parallel_kernel(work=_size, min_work=NORMALIZE_PER_THREAD)
def normalize_rows(X, norms, out):
    """``out[i, j] = float32(float64(X[i, j]) / norms[i])`` (what ``(X / norms[:, None])
    .astype(float32)`` gives, without its float64 temporary)."""
    d = X.shape[1]
    for i in prange(X.shape[0]):
        norm = norms[i]
        for j in range(d):
            out[i, j] = np.float32(np.float64(X[i, j]) / norm)
