"""SAQ's encoding record, per-vector factor layout and parameter checks."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...encoding import SAQ_QUERY_BITS, Encoding

__all__ = [
    "SAQEncoding",
    "saq_corrections_dtype",
    "SAQ_MIN_BITS",
    "SAQ_MAX_BITS",
    "SAQ_QUERY_BITS",
    "DEFAULT_EPS0",
]

#: Smallest and largest average bits per dimension.
SAQ_MIN_BITS, SAQ_MAX_BITS = 0.5, 8.0
#: Confidence multiplier of the error bound (a z-score, as RaBitQ's).
DEFAULT_EPS0 = 1.9


def saq_corrections_dtype(n_segments: int) -> np.dtype:
    """Per-vector record: ``additional`` then ``scale{s}`` and ``norm{s}`` per coded segment,
    all little-endian float32 (``4 + 8 S`` bytes)."""
    fields = [("additional", "<f4")]
    fields += [(f"scale{s}", "<f4") for s in range(n_segments)]
    fields += [(f"norm{s}", "<f4") for s in range(n_segments)]
    return np.dtype(fields)


@dataclass(frozen=True)
class SAQEncoding(Encoding):
    """The registry's ``saq`` row specialised to one fitted plan (same wire number).

    ``doc_bits`` is the requested average (a float); ``code_bytes`` the packed code length;
    ``plan`` the plan's description (``"64@5, 192@2, 128@0"``).
    """

    code_bytes: int = 0
    plan: str = ""

    @property
    def max_dim(self) -> int:
        return 1 << 31

    def doc_bytes(self, dim: int) -> int:
        return self.code_bytes

    def query_bytes(self, dim: int) -> int:
        return 4 * int(dim)

    def scan_factor_bytes(self, is_l2: bool = False) -> int:
        """SAQ's scans read the whole record."""
        return self.corrections(is_l2).itemsize

    def flat_scan_bytes(self, dim: int, is_l2: bool = False, lut: bool = False) -> int:
        """SAQ's flat scan keeps its own copies: codes in blocks of 32, the record as
        columns and, per coded segment, two float32 columns (code norms, level sums)."""
        record = self.corrections(is_l2).itemsize
        return self.doc_bytes(dim) + record + 8 * ((record - 4) // 8)

    def __repr__(self) -> str:
        q = "float" if self.query_bits is None else f"{self.query_bits}-bit"
        return f"SAQEncoding({self.doc_bits:g} bits/dim [{self.plan}] x {q} queries)"


def _check_bits(bits) -> float:
    if isinstance(bits, bool) or not isinstance(bits, (int, float, np.integer, np.floating)):
        raise ValueError(
            f"bits must be a number in [0.5, 8] (average bits per dimension), got {bits!r}"
        )
    bits = float(bits)
    if not (SAQ_MIN_BITS <= bits <= SAQ_MAX_BITS):
        raise ValueError(f"bits must be in [{SAQ_MIN_BITS}, {SAQ_MAX_BITS}], got {bits!r}")
    return bits


def _check_int(name, value, lo, hi=None, allow_none=False):
    if value is None and allow_none:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, np.integer))
        or value < lo
        or (hi is not None and value > hi)
    ):
        rng = f">= {lo}" if hi is None else f"in {lo}..{hi}"
        raise ValueError(f"{name} must be an integer {rng}, got {value!r}")
    return int(value)


def _eps0(eps0) -> float:
    if eps0 is None:
        return DEFAULT_EPS0
    if (
        isinstance(eps0, bool)
        or not isinstance(eps0, (int, float, np.number))
        or not (math.isfinite(eps0) and eps0 > 0)
    ):
        raise ValueError(f"eps0 must be a finite number > 0 (a z-score, default 1.9), got {eps0!r}")
    return float(eps0)
