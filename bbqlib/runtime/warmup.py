"""``bbqlib.warmup(index)``: have every kernel an index's searches need ready before the
first query (the slow first query of a fresh process is JIT compilation or, with a warm
disk cache, loading machine code)."""

from __future__ import annotations

import os

import numpy as np

from .._kernels import policy

__all__ = ["warmup", "start_numba"]

#: Set to 1 to leave numba's start to the first kernel call (``import bbqlib`` is then faster
#: by what that call pays instead; ``benchmarks/serving/serving.py --sections startup`` times
#: both): for tools that import bbqlib without running a kernel.
LAZY_START_ENV = "BBQLIB_LAZY_START"


def start_numba() -> None:
    """Start numba's code-generation target now, as ``import bbqlib`` does.

    numba starts it at the first kernel call of a process, loading its implementation
    registries (nearly all of it imports: numba's array library, and SciPy's BLAS bindings,
    which numba checks for). Done at import, a server pays it before it
    serves, and the first query of an opened index only loads its kernels. No numba setting
    is changed and no thread pool is started. Skipped when ``BBQLIB_LAZY_START=1``; a
    failure here is left for the first kernel call to report.
    """
    if os.environ.get(LAZY_START_ENV, "") == "1":
        return
    try:
        from numba.core.registry import cpu_target

        cpu_target.target_context.refresh()
    except Exception:  # noqa: BLE001 - the first kernel call raises it with its context
        pass


def _probe_query(index) -> np.ndarray:
    """A valid query for any similarity: a fixed random unit vector of the index's dim."""
    dim = getattr(index, "dim_", None)
    if dim is None:
        dim = index.quantizer.dim_
    q = np.random.default_rng(0).normal(size=int(dim))
    return (q / np.linalg.norm(q)).astype(np.float32)


def _runtime() -> None:
    """numba's target and thread pool, through the smallest cached kernel."""
    from .._validation import row_sq_norms

    policy.threading_layer()
    row_sq_norms(np.ones((1, 8), dtype=np.float32))


def _saved_index_kernels() -> None:
    """The single-query kernels of saved indexes with the default quantizer (BBQ at 1-4 bits,
    float32 vectors, any similarity), where the disk cache holds them (a process of this
    user has run such queries before): each registered index class
    (:data:`bbqlib.index.base.INDEX_KINDS`) searches a small probe it saved and opened in a
    temporary folder (:meth:`~bbqlib.index.base.Index.warm_saved_kernels`). An opened
    index's arrays are read-only maps, whose kernels are compiled apart from an in-memory
    index's, so the probes go through a file. On an empty cache nothing is compiled here
    (compiling costs far more than loading, and these are kinds of index the process may
    never open)."""
    import tempfile
    from pathlib import Path

    from ..index.base import INDEX_KINDS

    with tempfile.TemporaryDirectory(prefix="bbqlib-warmup-") as tmp:
        for cls in list(INDEX_KINDS.values()):
            cls.warm_saved_kernels(Path(tmp))


def warmup(index=None, *, k: int = 10, batch: bool = True) -> float:
    """Compile or load every kernel ``index.search`` uses, before the first query.

    Runs one search of a probe query (which compiles, or loads from bbqlib's kernel cache,
    the single-threaded kernels of the index's encoding, similarity and rerank), then, with
    ``batch=True``, prepares the multi-threaded variants that large batches use, for the same
    argument types. Results and index are not changed.

    Without an index it starts numba's thread pool (``import bbqlib`` has already started
    numba's code-generation target, :func:`start_numba`; with ``BBQLIB_LAZY_START=1`` this
    does it) and then, where bbqlib's kernel cache already holds them, loads the
    single-query kernels of saved indexes with the default quantizer (BBQ, float32 vectors),
    through a small probe index of each kind saved in a temporary folder. Without it, the
    first single query of an opened index loads its kernel
    (``benchmarks/serving/serving.py --sections startup`` times it); a server that calls
    ``bbqlib.warmup()`` at start-up, then opens its indexes,
    loads none at their first query from its second start on (``warmup(index)`` covers any
    other index, and batches).

    Parameters
    ----------
    index : a bbqlib index (:class:`~bbqlib.index.base.Index`), optional
        A fitted index with at least one vector.
    k : int
        The ``k`` of the probe search (kernels do not depend on it).
    batch : bool
        Also prepare the multi-threaded kernels (a first-time compile takes longer).

    Returns
    -------
    float
        Seconds spent.

    Examples
    --------
    >>> import numpy as np, bbqlib
    >>> X = np.random.default_rng(0).normal(size=(300, 16)).astype(np.float32)
    >>> index = bbqlib.FlatIndex(bits=1, similarity="cosine")
    >>> index.add(X)
    >>> seconds = bbqlib.warmup(index)
    """
    import time

    t0 = time.perf_counter()
    _runtime()
    if index is None:
        try:
            _saved_index_kernels()
        except OSError:  # no writable temporary folder: the first queries load them instead
            pass
        return time.perf_counter() - t0
    if not hasattr(index, "search"):
        raise TypeError(f"index must be a bbqlib index, got {type(index).__name__}")
    if len(index) == 0:
        raise ValueError("index is empty: add vectors before warmup (kernels depend on them)")
    rerank = bool(getattr(index, "store_vectors", True))  # indexes without vectors search raw
    # The probe query compiles this index's single-query kernels (no tiering).
    for tier in getattr(index, "warmup_tiers", tuple)():
        tier.open()
    probe = _probe_query(index)
    with policy.recording() as kernels:
        # pad_to_k: an index smaller than k compiles the same kernels, without a warning
        index.search(probe, k=k, rerank=rerank, pad_to_k=True)  # one query: the fused kernels
        index.search(np.stack([probe, probe]), k=k, rerank=rerank, pad_to_k=True)  # the others
    if batch:
        for kern, signatures in kernels.items():
            kern.compile_both(signatures)
    return time.perf_counter() - t0
