"""RaBitQ codes: the rescaling sweep, per-row quantization, query grids (the math of
:class:`~bbqlib.RaBitQQuantizer`, spec §2.1-2.3)."""

from __future__ import annotations

import functools
import math

import numpy as np

from ..._kernels.rabitq import sweep_levels

__all__ = ["fast_rescale_factor", "quantize_rows", "grid_codes"]

# Random unit vectors averaged for the fast variant's fixed rescaling factor.
_FAST_SAMPLES = 100


@functools.lru_cache(maxsize=64)
def fast_rescale_factor(dim: int, bits: int) -> float:
    """The fast variant's fixed rescaling factor for ``(dim, bits)`` (spec §2.2 step 4).

    The mean optimal ``t`` of 100 random unit vectors (seeded by ``(dim, bits)``), in units of
    a unit vector's coordinates; ``0`` at 1 bit.
    """
    if bits == 1:
        return 0.0
    rng = np.random.default_rng([int(dim), int(bits), 0x7AB17])
    g = rng.standard_normal((_FAST_SAMPLES, int(dim)))
    a = np.abs(g) / np.linalg.norm(g, axis=1, keepdims=True)
    levels = np.empty(a.shape, dtype=np.uint8)
    t = np.empty(len(a))
    sweep_levels(np.ascontiguousarray(a), 2 ** (bits - 1) - 1, levels, t)
    return float(t.mean())


def grid_codes(y64: np.ndarray, qb: int, factors: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Uniform ``qb``-bit grid over each row's ``[min, max]``, deterministic nearest rounding.

    Writes ``(a_y, l_y, ΣY)`` into ``factors[:, :3]``; returns uint8 codes and the rounding
    error norms ``||ŷ - y||``.
    """
    lo = y64.min(axis=1)
    step = (y64.max(axis=1) - lo) / (2**qb - 1)
    safe = np.where(step > 0, step, 1.0)
    codes = np.rint((y64 - lo[:, None]) / safe[:, None])
    codes = np.clip(codes, 0, 2**qb - 1)
    codes[step == 0] = 0
    rounding = lo[:, None] + step[:, None] * codes - y64
    factors[:, 0] = lo
    factors[:, 1] = step
    factors[:, 2] = codes.sum(axis=1)
    return codes.astype(np.uint8), np.sqrt(np.einsum("ij,ij->i", rounding, rounding))


def quantize_rows(Xr: np.ndarray, c: np.ndarray, bits: int, factor: float | None):
    """Codes and corrections of rotated rows against centre ``c`` (spec §2.1-2.3).

    Returns ``(x_u uint8 [n, d], fields)`` with the correction fields plus ``r2 = r_o²``.
    """
    R = Xr.astype(np.float64) - c
    n, d = R.shape
    a = np.abs(R)
    M = 2 ** (bits - 1) - 1
    r2 = np.einsum("ij,ij->i", R, R)
    if M == 0:
        levels = np.zeros((n, d), dtype=np.uint8)
    elif factor is None:
        levels = np.empty((n, d), dtype=np.uint8)
        sweep_levels(a, M, levels, np.empty(n))
    else:
        r = np.sqrt(r2)
        unit = a / np.where(r > 0, r, 1.0)[:, None]
        levels = np.minimum(np.floor(factor * unit), M).astype(np.uint8)
    sign = R > 0
    x_u = np.where(sign, levels + (M + 1), M - levels).astype(np.uint8)
    mag = levels + 0.5
    ip = np.einsum("ij,ij->i", mag, a)  # <y*, o'> > 0: y* has the signs of o'
    y_sq = np.einsum("ij,ij->i", mag, mag)
    live = r2 > 0
    scale = np.where(live, r2 / np.where(live, ip, 1.0), 0.0)
    a_o = np.where(live, ip / np.sqrt(y_sq * np.where(live, r2, 1.0)), 1.0)
    a_o = np.minimum(a_o, 1.0)
    error = np.sqrt(r2) * np.sqrt(1.0 - a_o**2) / a_o / math.sqrt(max(d - 1, 1))
    fields = {
        "delta_over_a": scale,
        "error": error,
        "component_sum": x_u.sum(axis=1, dtype=np.int64),
        "r2": r2,
    }
    return x_u, fields
