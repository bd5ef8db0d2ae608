"""Cheap checks of the data an index is first fitted on: a DataWarning naming the fix.

An index's first ``add`` calls :func:`warn_about_data` after fitting its quantizer. The
checks read a few thousand evenly spaced rows and the fitted quantizer, and flag only what
the defaults do not handle (a far outlier does not warn: the robust centre of
:mod:`bbqlib.quantizers.centre` takes care of it):

* **too few bits per vector**: ``dim · bits <= LOW_BITS`` (64). The code of a vector then
  cannot separate its neighbours (1-bit codes of 25-dimensional word vectors: recall@10
  0.42 at the default rerank depth), whatever the centre;
* **variance on few coordinates** (codes without a rotation: BBQ/OSQ without
  ``precondition``, int8 ``global``): the coordinate participation ratio
  ``(Σσ²)² / (d Σσ⁴)`` of the per-coordinate variances below :data:`COORDINATE_SPREAD`
  (0.5). Scalar codes give every coordinate the same bits, so the few wide coordinates are
  coded as coarsely as the many narrow ones (10% of debian's coordinates scaled by 10:
  ratio 0.11, recall@10 0.46 against 0.87 with ``precondition=True``; ordinary embeddings:
  0.74-0.97).

Norms far apart under max_inner_product do not warn: measured, they make 1-bit recall@10
higher, not lower (debian rows scaled by a log-normal factor, p99 / median norm 1 to 33:
0.96 to 0.996), as the longest rows win result lists by wide margins.

:func:`bbqlib.diagnose` reports these and more (effective dimension, anisotropy, offset,
norm spread, outliers, duplicates) with the measured recall of the defaults.
"""

from __future__ import annotations

import warnings
from typing import NamedTuple

import numpy as np

from .._validation import DataWarning

__all__ = ["CHECK_ROWS", "COORDINATE_SPREAD", "LOW_BITS", "Finding",
           "coordinate_participation", "data_findings", "sample_rows",
           "warn_about_data"]  # fmt: skip

#: Rows the checks read (evenly spaced: deterministic, no seed).
CHECK_ROWS = 2000
#: Bits per vector (dimensions x bits per dimension) at or below which recall collapses.
LOW_BITS = 64
#: Bits per vector the low-bits fix aims for.
WIDE_BITS = 160
#: Coordinate participation ratio below which unrotated scalar codes lose recall.
COORDINATE_SPREAD = 0.5
#: Families whose codes give every coordinate the same bits unless a transform is set.
UNROTATED_FAMILIES = ("osq", "int8_global")


class Finding(NamedTuple):
    """One problem found in the data: a short name, what was measured, and the fix."""

    name: str
    message: str
    fix: str

    def __str__(self) -> str:
        return f"{self.message}; {self.fix}"


def sample_rows(X, rows: int = CHECK_ROWS) -> np.ndarray:
    """float64 copy of at most ``rows`` evenly spaced rows of ``X`` (any array-like)."""
    n = X.shape[0]
    pick = np.unique(np.linspace(0, n - 1, min(n, rows)).astype(np.int64))
    return np.asarray(X[pick], dtype=np.float64)


def low_bits_finding(dim: int, bits: int, index: str) -> Finding | None:
    """Too few bits per vector for the codes to tell neighbours apart (None if enough)."""
    if dim * bits > LOW_BITS:
        return None
    # the width giving about 160 bits per vector: 25-dim word vectors reach recall@10 0.97
    # at 7 bits (175), 0.77 at 4 (100); 4 bits with oversample=20 reach 0.999
    wider = next((b for b in (2, 4, 7) if dim * b >= WIDE_BITS and b > bits), 8)
    # (an IVF of 1-bit codes: 0.82 on those vectors)
    other = "an IVFIndex (it codes residuals to list centres), or " if index == "flat" else ""
    return Finding(
        "low_bits",
        f"{dim} dimensions x {bits} bit(s) = {dim * bits} bits per vector: too few for the "
        "codes to separate neighbours (recall@10 can fall below 0.5 at the default rerank "
        "depth)",
        f"use bits={wider}, or bits=4 searched with oversample=20, or {other}a larger "
        "oversample at these bits; bbqlib.diagnose(X, similarity, recommend=True) measures "
        "the cheapest configuration that reaches recall@10 0.95",
    )


def coordinate_participation(rows: np.ndarray) -> float:
    """``(Σσ²)² / (d Σσ⁴)`` of the per-coordinate variances: 1 when every coordinate varies
    alike, ``m / d`` when ``m`` coordinates carry all the variance."""
    var = rows.var(axis=0)
    total = float((var**2).sum())
    return float(var.sum()) ** 2 / (rows.shape[1] * total) if total > 0 else 1.0


def coordinate_spread_finding(ratio: float) -> Finding | None:
    """Variance on few coordinates for codes without a rotation (None if spread enough)."""
    if ratio >= COORDINATE_SPREAD:
        return None
    return Finding(
        "coordinate_spread",
        f"the variance sits on few coordinates (participation ratio {ratio:.2f}): codes "
        "without a rotation spend as many bits on the narrow coordinates as on the wide ones",
        "use precondition=True (a random orthogonal transform spreads the variance over every "
        "coordinate) or bbqlib.RaBitQQuantizer (it rotates)",
    )


def data_findings(quantizer, X, *, index: str = "flat") -> list[Finding]:
    """The checks of the module docstring for a fitted ``quantizer`` and its data ``X``.

    ``index`` is ``"flat"`` or ``"ivf"`` (the fixes differ).
    """
    found = []
    bits = int(getattr(quantizer.encoding_, "doc_bits", 8) or 8)
    finding = low_bits_finding(int(quantizer.dim_), bits, index)
    if finding is not None:
        found.append(finding)
    unrotated = (quantizer.family in UNROTATED_FAMILIES
                 and getattr(quantizer, "transform_", None) is None)  # fmt: skip
    if not unrotated:
        return found
    rows = sample_rows(X)
    if quantizer.similarity_.value == "cosine":
        norms = np.sqrt(np.einsum("ij,ij->i", rows, rows))
        rows = rows / np.where(norms > 0, norms, 1.0)[:, None]
    finding = coordinate_spread_finding(coordinate_participation(rows))
    if finding is not None:
        found.append(finding)
    return found


def warn_about_data(quantizer, X, *, index: str = "flat", stacklevel: int = 3) -> list[Finding]:
    """Emit one :class:`~bbqlib.DataWarning` listing :func:`data_findings` (if any); returns
    them. Never raises: a check that fails on odd input stays silent."""
    try:
        found = data_findings(quantizer, X, index=index)
    except Exception:  # a warning must never break an add
        return []
    if found:
        text = "; ".join(str(f) for f in found)
        warnings.warn(f"{text} (see docs/hard-data.md)", DataWarning,
                      stacklevel=stacklevel)  # fmt: skip
    return found
