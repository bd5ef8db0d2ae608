"""TurboQuant's registry rows: their code layout, correction records and wire numbers.

Two families, one per variant, so that files tell them apart by wire number alone:
``turboquant`` (the MSE codes, 1-8 bits, wires ``0x500 + 16 b``) and ``turboquant_prod``
(``b - 1`` MSE bits plus a 1-bit QJL sketch of the residual, 2-8 bits, wires ``0x600 + 16 b``).
Float queries only. The rows are registered when this module is imported (it is, with
:mod:`bbqlib.quantizers`); nothing outside this folder names them.

Layout ``turboquant``: per vector, the MSE codes as one little-endian bit stream (coordinate
``j`` in bits ``[j m, j m + m)`` of the row, ``m`` the MSE width), padded to whole groups of
8 coordinates (``m`` bytes each), then for ``prod`` the QJL sign bits (``ceil(d / 8)`` bytes,
bit ``j`` set when the ``j``-th projection is positive). ``doc_bits · ceil(d / 8)`` bytes in
all, plus the record: ``norm`` (float32, ``‖x‖``) and for ``prod`` ``gamma`` (``‖r‖`` of the
unit vector's residual).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from ...encoding import ENCODINGS, Encoding, Family

__all__ = [
    "TURBOQUANT_MSE",
    "TURBOQUANT_PROD",
    "TURBOQUANT_VARIANTS",
    "TurboQuantEncoding",
    "TurboQuantFamily",
    "family_of",
    "groups_of",
    "register",
]

#: The record of the MSE variant: the vector's norm.
MSE_CORRECTIONS = np.dtype([("norm", "<f4")])
#: The record of the prod variant: the norm and the residual norm of the unit vector.
PROD_CORRECTIONS = np.dtype([("norm", "<f4"), ("gamma", "<f4")])
#: Variants and their family names.
TURBOQUANT_VARIANTS = {"mse": "turboquant", "prod": "turboquant_prod"}
# Rerank depth when a search does not say: as Elasticsearch's rule for the other families.
_OVERSAMPLE = {1: 3.0, 2: 1.5, 3: 1.5}


def groups_of(dim: int) -> int:
    """Groups of 8 coordinates in a row of ``dim`` (the code stream is padded to them)."""
    return -(-int(dim) // 8)


@dataclass(frozen=True)
class TurboQuantEncoding(Encoding):
    """A TurboQuant row: ``variant`` ``"mse"`` or ``"prod"``."""

    variant: str = "mse"

    @property
    def mse_bits(self) -> int:
        """Bits per coordinate of the MSE codes (``doc_bits - 1`` for ``prod``)."""
        return self.doc_bits - (self.variant == "prod")

    @property
    def scan_kernels(self) -> tuple[str, ...]:
        return ("turboquant",)

    @property
    def max_dim(self) -> int:
        return 1 << 31

    def doc_bytes(self, dim: int) -> int:
        return self.doc_bits * groups_of(dim)

    def query_bytes(self, dim: int) -> int:
        return 4 * int(dim)

    def __repr__(self) -> str:
        return f"TurboQuantEncoding({self.variant}: {self.doc_bits}-bit docs x float queries)"


@dataclass(frozen=True)
class TurboQuantFamily(Family):
    """A family whose rows are :class:`TurboQuantEncoding` (float queries only)."""

    variant: str = "mse"

    def rows(self) -> Iterator[Encoding]:
        record = PROD_CORRECTIONS if self.variant == "prod" else MSE_CORRECTIONS
        for bits in self.doc_bits:
            yield TurboQuantEncoding(
                family=self.name, doc_bits=bits, query_bits=None,
                wire=self.wire_base + 16 * bits, layout="turboquant",
                corrections_dtype=record, default_oversample=_OVERSAMPLE.get(bits, 1.0),
                indexes=self.indexes, variant=self.variant,
            )  # fmt: skip


def _family(name: str, wire: int, widths: tuple[int, ...], variant: str) -> TurboQuantFamily:
    record = PROD_CORRECTIONS if variant == "prod" else MSE_CORRECTIONS
    return TurboQuantFamily(
        name, wire, widths, (None,), {b: None for b in widths}, planes_up_to=0,
        corrections_small=record, corrections_large=record, layout="turboquant",
        variant=variant,
    )  # fmt: skip


TURBOQUANT_MSE = _family("turboquant", 0x500, (1, 2, 3, 4, 5, 6, 7, 8), "mse")
TURBOQUANT_PROD = _family("turboquant_prod", 0x600, (2, 3, 4, 5, 6, 7, 8), "prod")


def family_of(variant: str) -> str:
    """The family name of a variant (raises naming the accepted ones)."""
    if not isinstance(variant, str) or variant not in TURBOQUANT_VARIANTS:
        raise ValueError(f"variant must be 'mse' or 'prod', got {variant!r}")
    return TURBOQUANT_VARIANTS[variant]


def register() -> None:
    """Register both families in :data:`bbqlib.ENCODINGS` (once)."""
    for fam in (TURBOQUANT_MSE, TURBOQUANT_PROD):
        try:
            ENCODINGS.family(fam.name)
        except ValueError:
            ENCODINGS.register(fam)


register()
