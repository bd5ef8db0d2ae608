"""numba policy, decided in one place.

Every kernel in :mod:`bbqlib._kernels` is compiled through these decorators so that
caching, threading and fastmath flags stay uniform.

* ``cache=True`` so that a second process loads machine code from ``__pycache__``
  instead of recompiling (first-call compile time is the main start-up cost).
* ``nogil=True`` so that callers may run kernels from Python threads.
* No fastmath for float code whose bias we publish (estimators, rerank): reassociation
  would change the numbers the statistical tests pin down. Integer bit kernels need none.
"""

from __future__ import annotations

import numba

__all__ = ["kernel", "parallel_kernel", "prange", "num_threads"]

prange = numba.prange


def kernel(func=None, **overrides):
    """Compile a serial kernel: ``@njit(cache=True, nogil=True)``."""
    options = {"cache": True, "nogil": True, **overrides}
    if func is None:
        return lambda f: numba.njit(**options)(f)
    return numba.njit(**options)(func)


def parallel_kernel(func=None, **overrides):
    """Compile a multi-threaded kernel: ``@njit(cache=True, nogil=True, parallel=True)``."""
    options = {"cache": True, "nogil": True, "parallel": True, **overrides}
    if func is None:
        return lambda f: numba.njit(**options)(f)
    return numba.njit(**options)(func)


def num_threads() -> int:
    """Threads numba will use for ``parallel_kernel`` calls (``numba.set_num_threads`` sets it)."""
    return numba.get_num_threads()
