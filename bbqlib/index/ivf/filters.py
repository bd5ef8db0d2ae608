"""Which ids a search may return: filters (masks or id lists) and tombstones."""

from __future__ import annotations

import numpy as np

from .postings import Postings

__all__ = ["allowed_mask", "allowed_per_list"]


def allowed_mask(filter, n: int, live: np.ndarray | None) -> np.ndarray | None:
    """uint8 mask over ids ``0..n-1``: ``filter`` (boolean mask or id array) and ``live``.

    ``None`` when everything is allowed (no filter, no deleted id).
    """
    if filter is None:
        return live
    f = np.asarray(filter)
    if f.dtype == bool:
        if f.shape != (n,):
            raise ValueError(
                f"a boolean filter must have shape ({n},) (one flag per id), got {f.shape}"
            )
        mask = f.view(np.uint8)
    else:
        if not np.issubdtype(f.dtype, np.integer):
            raise TypeError("filter must be a boolean mask or an array of integer ids")
        f = f.reshape(-1)
        if f.size and (f.min() < 0 or f.max() >= n):
            raise ValueError(f"filter ids must be in [0, {n}), got range [{f.min()}, {f.max()}]")
        mask = np.zeros(n, dtype=np.uint8)
        mask[f] = 1
    if live is not None:
        mask = mask & live
    return np.ascontiguousarray(mask, dtype=np.uint8)


def allowed_per_list(postings: Postings, allowed: np.ndarray) -> np.ndarray:
    """Allowed entries per list (float64 [K]); reads every id (checked first, once)."""
    postings.check_section("ids")
    entry_list = np.repeat(np.arange(postings.n_lists, dtype=np.int32), postings.sizes)
    weights = allowed[np.asarray(postings.ids)].astype(np.float64)
    return np.bincount(entry_list, weights=weights, minlength=postings.n_lists)
