"""How many threads bbqlib's kernels use: ``set_num_threads``, ``get_num_threads``,
``thread_limit``.

bbqlib's parallel kernels run on numba's thread pool. By default they may use every thread
numba started (``NUMBA_NUM_THREADS``, by default the number of usable cores), but each kernel
takes more than one thread only when the call has enough work to pay for it (see
``docs/threads.md``): single queries and small batches run on the calling thread. These
functions lower that ceiling:

* :func:`set_num_threads` for the whole process (every Python thread);
* :func:`thread_limit` for a ``with`` block in the calling thread (nests; the innermost wins);
* ``numba.set_num_threads(n)`` in a thread also caps bbqlib's kernels called from it.

None of them changes numba's global configuration, and importing bbqlib changes nothing.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Iterator

from .._kernels import policy

__all__ = ["set_num_threads", "get_num_threads", "thread_limit", "threading_layer"]


def _check_count(n, name: str = "n") -> int:
    if isinstance(n, bool):
        raise TypeError(f"{name} must be an integer number of threads, got {n!r}")
    try:
        n = operator.index(n)
    except TypeError:
        raise TypeError(f"{name} must be an integer number of threads, got {n!r}") from None
    top = policy.max_threads()
    if not 1 <= n <= top:
        raise ValueError(
            f"{name} must be between 1 and {top} (NUMBA_NUM_THREADS, the threads numba "
            f"started; set that environment variable before starting Python to change it), "
            f"got {n}"
        )
    return n


def set_num_threads(n: int | None) -> None:
    """Use at most ``n`` threads in bbqlib's parallel kernels, in every Python thread.

    Parameters
    ----------
    n : int or None
        Between 1 and ``NUMBA_NUM_THREADS``; ``None`` restores the default (all of them).

    Notes
    -----
    Applies to calls that start after it returns. :func:`thread_limit` overrides it inside
    its ``with`` block, and ``numba.set_num_threads`` in a thread still caps that thread's
    calls. Kernels use fewer threads than allowed when a call has little work.

    Examples
    --------
    >>> import bbqlib
    >>> bbqlib.set_num_threads(1)
    >>> bbqlib.get_num_threads()
    1
    >>> bbqlib.set_num_threads(None)
    """
    policy._process_limit = None if n is None else _check_count(n)


def get_num_threads() -> int:
    """Threads bbqlib's parallel kernels may use when called from this thread now.

    The smallest of ``NUMBA_NUM_THREADS``, :func:`set_num_threads`'s value (or the innermost
    :func:`thread_limit`) and ``numba.get_num_threads()`` of this thread. A call with little
    work uses fewer.
    """
    return policy.num_threads()


@contextlib.contextmanager
def thread_limit(n: int) -> Iterator[int]:
    """Use at most ``n`` threads in bbqlib's kernels called from this thread inside the block.

    Other Python threads are not affected. Blocks nest; the innermost applies (and may allow
    more than an outer one, up to ``NUMBA_NUM_THREADS`` and ``numba.get_num_threads()``).
    Yields :func:`get_num_threads` inside the block.

    Examples
    --------
    >>> import numpy as np, bbqlib
    >>> X = np.random.default_rng(0).normal(size=(500, 32)).astype(np.float32)
    >>> index = bbqlib.FlatIndex(bits=1, similarity="cosine")
    >>> index.add(X)
    >>> with bbqlib.thread_limit(1):
    ...     scores, ids = index.search(X[:5], k=3)
    >>> ids[:, 0].tolist()
    [0, 1, 2, 3, 4]
    """
    n = _check_count(n)
    local = policy._local
    before = getattr(local, "user", None)
    local.user = n
    try:
        yield policy.num_threads()
    finally:
        local.user = before


def threading_layer() -> str:
    """numba's threading layer in this process: ``"tbb"``, ``"omp"`` or ``"workqueue"``.

    Starts numba's thread pool if no parallel kernel has run yet (as the first one would).
    bbqlib prefers TBB (installed with bbqlib where wheels exist): under contention its
    threads help when they can instead of making the caller wait. Under ``workqueue``
    bbqlib's multi-threaded kernel calls run one at a time.
    """
    return policy.threading_layer()
