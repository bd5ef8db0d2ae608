"""TurboQuant's code math in NumPy: the scalar codebook, packing and the query tables.

A coordinate of a uniformly random unit vector in ``R^d`` has the density
``f(x) ∝ (1 - x²)^((d - 3) / 2)`` on ``[-1, 1]`` (a Beta law, close to ``N(0, 1/d)`` for large
``d``). The codebook is the Lloyd-Max quantizer of that density: ``2^b`` centroids that
minimise the expected squared error, found by Lloyd's iteration on a fine grid (as faiss's
``build_TurboQuantMSECodebook``: a uniform grid of at least 2^15 points, initial cells of
equal mass, up to 300 rounds or a largest move below 1e-8), except that the initial cells
have equal mass under the cube root of the density and the levels are kept symmetric.
"""

from __future__ import annotations

import functools

import numpy as np

__all__ = [
    "lloyd_max_codebook",
    "boundaries_of",
    "pack_codes",
    "unpack_codes",
    "lut_width",
    "lut_tables",
    "QJL_VALUES",
]

#: The QJL sketch as a 1-bit "codebook": bit 0 is the sign -1, bit 1 is +1.
QJL_VALUES = np.array([-1.0, 1.0])
_GRID_MIN = 1 << 15
_GRID_PER_CENTROID = 512
_MAX_ITER = 300
_TOL = 1e-8


@functools.lru_cache(maxsize=64)
def _codebook(dim: int, bits: int) -> tuple:
    k = 1 << bits
    if dim == 1:  # a unit vector in R^1 is ±1: two atoms
        return tuple(-1.0 if i < k // 2 else 1.0 for i in range(k))
    n = max(_GRID_MIN, k * _GRID_PER_CENTROID)
    x = -1.0 + (np.arange(n) + 0.5) * (2.0 / n)
    alpha = 0.5 * (dim - 3.0)
    w = np.ones(n) if alpha == 0 else np.maximum(1.0 - x * x, 0.0) ** alpha
    cw = np.concatenate([[0.0], np.cumsum(w)])
    cwx = np.concatenate([[0.0], np.cumsum(w * x)])

    def means(cuts, fallback):
        mass = cw[cuts[1:]] - cw[cuts[:-1]]
        first = cwx[cuts[1:]] - cwx[cuts[:-1]]
        safe = np.where(mass > 0, mass, 1.0)
        return np.where(mass > 0, first / safe, fallback)

    # Initial cells of equal mass under w^(1/3), the asymptotically optimal level density
    # (Panter-Dite): equal mass under w crowds the centre, and at 8 bits Lloyd's rounds
    # would not spread the levels in time.
    cr = np.concatenate([[0.0], np.cumsum(np.cbrt(w))])
    cuts = np.searchsorted(cr, cr[-1] * np.arange(k + 1) / k, side="left")
    cuts[0], cuts[-1] = 0, n
    cuts = np.minimum(cuts, n)
    edges = -1.0 + 2.0 * np.arange(k + 1) / k
    c = means(cuts, 0.5 * (edges[:-1] + edges[1:]))
    for _ in range(_MAX_ITER):
        bounds = 0.5 * (c[:-1] + c[1:])
        cuts = np.concatenate([[0], np.searchsorted(x, bounds, side="right"), [n]])
        left = np.concatenate([[-1.0], bounds])
        right = np.concatenate([bounds, [1.0]])
        new = np.clip(means(cuts, 0.5 * (left + right)), left, right)
        # the density is even: keep the levels so (a grid cell would otherwise tip a
        # boundary, and the discrete iteration can stop one grid step from symmetric)
        new = 0.5 * (new - new[::-1])
        moved = np.max(np.abs(new - c))
        c = new
        if moved < _TOL:
            break
    return tuple(np.sort(c).tolist())


def lloyd_max_codebook(dim: int, bits: int) -> np.ndarray:
    """The ``2^bits`` centroids (float64, ascending) of one coordinate of a random unit
    vector in ``R^dim``."""
    if not 1 <= bits <= 8:
        raise ValueError(f"bits must be in 1..8, got {bits}")
    return np.array(_codebook(int(dim), int(bits)))


def boundaries_of(values: np.ndarray) -> np.ndarray:
    """Decision thresholds between neighbouring centroids (midpoints)."""
    return 0.5 * (values[:-1] + values[1:])


def pack_codes(codes: np.ndarray, bits: int, groups: int) -> np.ndarray:
    """uint8 codes [n, d] (each below ``2^bits``) as little-endian bit streams padded to
    ``groups`` groups of 8 coordinates: uint8 [n, bits · groups]."""
    n, d = codes.shape
    padded = np.zeros((n, 8 * groups), dtype=np.uint8)
    padded[:, :d] = codes
    planes = (padded[:, :, None] >> np.arange(bits, dtype=np.uint8)) & 1
    return np.packbits(planes.reshape(n, -1), axis=1, bitorder="little")


def unpack_codes(packed: np.ndarray, bits: int, dim: int) -> np.ndarray:
    """The inverse of :func:`pack_codes`: uint8 codes [n, dim]."""
    n = packed.shape[0]
    stream = np.unpackbits(packed, axis=1, bitorder="little").reshape(n, -1, bits)
    weights = (1 << np.arange(bits)).astype(np.uint16)
    return (stream.astype(np.uint16) @ weights).astype(np.uint8)[:, :dim]


def lut_width(bits: int) -> int:
    """Bits read per table lookup: a whole byte (8 / bits coordinates) at 1 and 2 bits, one
    coordinate otherwise."""
    return 8 if bits in (1, 2) else int(bits)


def lut_tables(Y: np.ndarray, values: np.ndarray, bits: int, groups: int) -> np.ndarray:
    """Lookup tables of rows ``Y`` [nq, d] against codes of ``values`` (``2^bits`` reals):
    float32 [nq, chunks, 2^w] with ``T[q, c, v] = Σ_t Y[q, c·s + t] · values[v_t]``, where
    ``w = lut_width(bits)``, ``s = w / bits`` coordinates per lookup, ``v_t`` the ``t``-th
    ``bits``-bit digit of ``v`` (least significant first). Coordinates past ``d`` are 0.

    Elementwise products and sums only (no BLAS), so a row's tables do not depend on the
    other rows of ``Y``.
    """
    Y = np.asarray(Y, dtype=np.float64)
    nq, d = Y.shape
    w = lut_width(bits)
    per = w // bits
    chunks = 8 * groups * bits // w
    padded = np.zeros((nq, 8 * groups))
    padded[:, :d] = Y
    blocks = padded.reshape(nq, chunks, per)
    digits = (np.arange(1 << w)[:, None] >> (bits * np.arange(per))) & ((1 << bits) - 1)
    entry = np.asarray(values, dtype=np.float64)[digits]  # [2^w, per]
    out = np.zeros((nq, chunks, 1 << w))
    for t in range(per):
        out += blocks[:, :, t, None] * entry[None, None, :, t]
    return out.astype(np.float32)
