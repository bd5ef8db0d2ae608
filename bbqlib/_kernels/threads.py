"""A scoped numba thread count (timing per core, serving pinned to one thread)."""

from __future__ import annotations

import contextlib

import numba

__all__ = ["limited_threads"]


@contextlib.contextmanager
def limited_threads(n: int = 1):
    """Run the body with at most ``n`` numba threads (restored afterwards)."""
    old = numba.get_num_threads()
    numba.set_num_threads(max(1, min(int(n), numba.config.NUMBA_NUM_THREADS)))
    try:
        yield
    finally:
        numba.set_num_threads(old)
