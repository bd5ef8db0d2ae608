"""Tiered compilation of the single-query paths (docs/startup.md): one tier per fused
kernel, which lets its path run once the kernel is compiled or loaded. Until then single
queries take the batch path, while a child process compiles the kernel into the kernel cache
(:mod:`bbqlib.index.background`); where no child can, the path compiles in this process
once the batch path has answered single queries for :data:`COMPILE_SINGLE_AFTER` seconds."""

from __future__ import annotations

import threading
import time

from .._kernels import single as KO
from .._kernels.cache import has_entries
from .one import one_query

__all__ = ["COMPILE_SINGLE_AFTER", "SingleQueryTier", "FLAT_TIER", "tier_of"]

#: Tiered compilation of the single-query paths (docs/startup.md). A path's fused kernels
#: cost more to compile than the batch path's (``benchmarks/serving/serving.py --sections
#: startup`` reports both), so while neither this process nor the disk cache has them,
#: one-query searches take the batch path, until that has cost this many seconds; then the
#: next one compiles them.
#: ``bbqlib.warmup(index)`` compiles them at once; tests set 0 (``tests/conftest.py``).
COMPILE_SINGLE_AFTER = 2.0


class SingleQueryTier:
    """Whether a single-query path may run yet (see :data:`COMPILE_SINGLE_AFTER`).

    ``kernel`` is the path's main kernel: once this process has compiled or loaded it, or
    the disk cache holds any entry of it, the path runs (a new argument type may still
    compile at its first query, as on the batch path).
    """

    def __init__(self, kernel):
        self._kernel = kernel
        self._ready = False
        self.batch_seconds = 0.0  # one-query searches answered by the batch path meanwhile
        self._child = None  # the compiling child process, _NO_CHILD when none can run
        self._starting = threading.Lock()

    def ready(self) -> bool:
        if not self._ready:
            child = self._child
            if child is not None and child is not _NO_CHILD:
                if not child.done():
                    return False  # its kernels are not all in the cache yet
                if child.succeeded():
                    self._ready = True
                    return True
                self._child = _NO_CHILD  # failed: compile here, as without a child
            k = self._kernel
            self._ready = (
                self.batch_seconds >= COMPILE_SINGLE_AFTER or bool(k.signatures) or has_entries(k)
            )
        return self._ready

    def _start_child(self, index) -> None:
        from . import background

        with self._starting:
            if self._child is None:
                self._child = background.start(index) or _NO_CHILD

    def wait_for_child(self, timeout: float | None = None) -> bool:
        """Wait until the compiling child, if any, has finished; whether it succeeded."""
        child = self._child
        return child is not None and child is not _NO_CHILD and child.wait(timeout)

    def open(self) -> None:
        """Let the path run (and compile) from now on: ``bbqlib.warmup(index)``."""
        self._ready = True

    def on_batch_path(self, search, queries, dim: int, *args, index=None):
        """``search(queries, *args)``, its time charged to the tier when it is one query;
        after the first such query of ``index`` the compiling child starts (after, not
        before: the batch path's kernels, which the fused path shares, are then in the
        cache, and two processes never write the same kernel's cache entries at once)."""
        if one_query(queries, dim) is None:
            return search(queries, *args)
        t0 = time.perf_counter()
        try:
            return search(queries, *args)
        finally:
            self.batch_seconds += time.perf_counter() - t0
            if self._child is None and index is not None and COMPILE_SINGLE_AFTER > 0:
                self._start_child(index)


#: A tier's child when none can run (no writable cache, no processes, turned off).
_NO_CHILD = object()

#: The tier of each single-query kernel (:func:`tier_of`).
_TIERS: dict = {}


def tier_of(kernel) -> SingleQueryTier:
    """The tier of a single-query path's main kernel (one per kernel, made at first use)."""
    tier = _TIERS.get(kernel)
    if tier is None:
        tier = _TIERS.setdefault(kernel, SingleQueryTier(kernel))
    return tier


FLAT_TIER = tier_of(KO.flat_lut_one)
