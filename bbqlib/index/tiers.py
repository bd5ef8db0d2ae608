"""Tiered compilation of the single-query paths (docs/startup.md): one tier per fused
kernel, which lets its path run once the kernel is compiled or loaded (or the batch path has
answered single queries for :data:`COMPILE_SINGLE_AFTER` seconds meanwhile)."""

from __future__ import annotations

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

    def ready(self) -> bool:
        if not self._ready:
            k = self._kernel
            self._ready = (
                self.batch_seconds >= COMPILE_SINGLE_AFTER or bool(k.signatures) or has_entries(k)
            )
        return self._ready

    def open(self) -> None:
        """Let the path run (and compile) from now on: ``bbqlib.warmup(index)``."""
        self._ready = True

    def on_batch_path(self, search, queries, dim: int, *args):
        """``search(queries, *args)``, its time charged to the tier when it is one query."""
        if one_query(queries, dim) is None:
            return search(queries, *args)
        t0 = time.perf_counter()
        try:
            return search(queries, *args)
        finally:
            self.batch_seconds += time.perf_counter() - t0


#: The tier of each single-query kernel (:func:`tier_of`).
_TIERS: dict = {}


def tier_of(kernel) -> SingleQueryTier:
    """The tier of a single-query path's main kernel (one per kernel, made at first use)."""
    tier = _TIERS.get(kernel)
    if tier is None:
        tier = _TIERS.setdefault(kernel, SingleQueryTier(kernel))
    return tier


FLAT_TIER = tier_of(KO.flat_lut_one)
