"""``bbqlib.warmup(index)``: compile or load every kernel an index's searches need, up front."""

from __future__ import annotations

__all__ = ["warmup"]


def warmup(index, *, k: int = 10) -> None:
    """Placeholder, replaced below."""
    raise NotImplementedError
