"""Block-wise access to the vectors being clustered: float32 blocks, row gathers, groups.

Memmaps, float64 and strided inputs are read in blocks of :data:`_BLOCK_ROWS` rows, converted
to float32 C-contiguous copies; in-RAM writeable float32 comes in one piece.
"""

from __future__ import annotations

import numpy as np

# Rows per block when the input must be converted or streamed (memmap, float64, strided):
# 65,536 x 384 float32 is 96 MiB.
_BLOCK_ROWS = 65_536


def _is_f32_in_ram(X: np.ndarray) -> bool:
    # Read-only arrays are copied block by block too: numba compiles a separate specialization
    # for read-only buffers, and a block copy costs far less than the kernel work on it.
    return (
        X.dtype == np.float32 and X.flags.c_contiguous and X.flags.writeable and not _is_mapped(X)
    )


def _is_mapped(X: np.ndarray) -> bool:
    base = X
    while base is not None:
        if isinstance(base, np.memmap) or type(base).__name__ == "mmap":
            return True
        base = getattr(base, "base", None)
    return False


def _row_blocks(X: np.ndarray):
    """Yield ``(start, stop, float32 C-contiguous block)``; in-RAM float32 comes in one piece."""
    n = X.shape[0]
    if _is_f32_in_ram(X):
        yield 0, n, X
        return
    for start in range(0, n, _BLOCK_ROWS):
        stop = min(n, start + _BLOCK_ROWS)
        yield start, stop, np.array(X[start:stop], dtype=np.float32, order="C", copy=True)


def _gather(X: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Rows of ``X`` (ascending ``rows``) as a new, writeable float32 C-contiguous array."""
    return np.ascontiguousarray(X[rows], dtype=np.float32)  # fancy indexing made a fresh copy


def _groups(assign: np.ndarray, k: int):
    """Rows ordered by cluster: ``(rows int64, starts int64 [G+1], groups int32 [G])``."""
    rows = np.argsort(assign, kind="stable").astype(np.int64, copy=False)
    counts = np.bincount(assign, minlength=k)
    groups = np.flatnonzero(counts).astype(np.int32)
    starts = np.zeros(groups.size + 1, dtype=np.int64)
    np.cumsum(counts[groups], out=starts[1:])
    return rows, starts, groups
