"""The search space of calibration: one table entry per quantizer family.

Every code configuration comes from the encoding registry (``ENCODINGS.rows(family,
index=...)``); a :class:`FamilySpace` says which of a family's rows to try, with which
preconditioning, and how to make its quantizer. Adding a family is one entry in
:data:`SPACE`; a family whose quantizer takes an average bit budget instead of registry
widths (SAQ: one registry row per query width, the fitted plan sets the code length) lists
its budgets in ``FamilySpace.budgets`` and its bytes are those of the fitted plan. The
other dimensions are the kinds of stored rerank vectors (:data:`STORES`), the rerank depths
(:data:`OVERSAMPLES`) and, for the IVF, the visit budgets (:data:`VISITS`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..encoding import ENCODINGS, Encoding
from ..quantizers import (
    BBQQuantizer,
    Quantizer,
    RaBitQQuantizer,
    SAQQuantizer,
    ScalarQuantizer,
    TurboQuantQuantizer,
)
from ..search.stored import stored_row_bytes

__all__ = [
    "FamilySpace",
    "SPACE",
    "FULL_SPACE",
    "SAQ_BUDGETS",
    "STORES",
    "IVF_STORES",
    "OVERSAMPLES",
    "VISITS",
    "CodePoint",
    "code_points",
]


def _bbq(bits, query_bits, similarity, precondition, seed) -> Quantizer:
    return BBQQuantizer(bits, query_bits, similarity, precondition=precondition, seed=seed)


def _rabitq(bits, query_bits, similarity, precondition, seed) -> Quantizer:
    return RaBitQQuantizer(bits, query_bits, similarity, rotation=precondition, seed=seed)


def _saq(bits, query_bits, similarity, precondition, seed) -> Quantizer:
    return SAQQuantizer(bits, None if query_bits == "auto" else query_bits, similarity, seed)


def _turboquant(variant: str):
    def make(bits, query_bits, similarity, precondition, seed) -> Quantizer:
        return TurboQuantQuantizer(bits, variant=variant, similarity=similarity,
                                   rotation=precondition or "dense", seed=seed)  # fmt: skip

    return make


def _int8(method: str):
    def make(bits, query_bits, similarity, precondition, seed) -> Quantizer:
        return ScalarQuantizer(
            bits, method, similarity, query_bits, precondition=precondition, seed=seed
        )

    return make


@dataclass(frozen=True)
class FamilySpace:
    """One family of the search space.

    Attributes
    ----------
    family : str
        Registry family (``bbqlib.ENCODINGS.rows(family)``).
    make : callable
        ``make(bits, query_bits, similarity, precondition, seed) -> Quantizer`` (unfitted).
    preconditions : tuple
        Values of the family's transform parameter to try (``None``: none).
    doc_bits : tuple of int, optional
        Doc widths to try (default: every width the registry has for the family).
    query_bits : "default", "default+float", "all" or tuple
        Query widths per doc width: the registry's default, the default and a float query,
        every width the registry has, or these widths (``None``: float).
    code : str
        How the snippet a report prints makes the quantizer (``{bits}``, ``{query_bits}``,
        ``{similarity}``, ``{precondition}``, ``{seed}`` are filled in).
    budgets : tuple of float, optional
        Average bits per dimension to try, for a family whose quantizer takes a budget
        (SAQ): each registry row is tried at every budget, ``make`` gets the budget as
        ``bits``, and the bytes are the fitted plan's.
    encoding_for_record : callable, optional
        ``encoding_for_record(bits, query_bits, *, code_bytes, segments) -> Encoding``: the
        family's encoding of a recorded fitted plan (a budget family's hook, e.g.
        :meth:`bbqlib.SAQQuantizer.encoding_for_record`); None: the registry row.
    """

    family: str
    make: Callable[..., Quantizer]
    preconditions: tuple = (None,)
    doc_bits: tuple[int, ...] | None = None
    query_bits: str | tuple = "default+float"
    code: str = ""
    budgets: tuple[float, ...] | None = None
    encoding_for_record: Callable[..., Encoding] | None = None

    def rows(self, index: str) -> list[Encoding]:
        """The registry rows of this entry an ``index`` ("flat" or "ivf") serves."""
        fam = ENCODINGS.family(self.family)
        out = []
        for row in ENCODINGS.rows(self.family, index=index):
            if self.doc_bits is not None and row.doc_bits not in self.doc_bits:
                continue
            if isinstance(self.query_bits, tuple):
                if row.query_bits in self.query_bits:
                    out.append(row)
                continue
            default = fam.default_query_bits[row.doc_bits]
            keep = {
                "default": row.query_bits == default,
                "default+float": row.query_bits in (default, None),
                "all": True,
            }[self.query_bits]
            if keep:
                out.append(row)
        return out


_BBQ_CODE = (
    "bbqlib.BBQQuantizer(bits={bits}, query_bits={query_bits}, similarity={similarity}, "
    "precondition={precondition}, seed={seed})"
)
_RABITQ_CODE = (
    "bbqlib.RaBitQQuantizer(bits={bits}, query_bits={query_bits}, similarity={similarity}, "
    "rotation={precondition}, seed={seed})"
)
_SAQ_CODE = (
    "bbqlib.SAQQuantizer(bits={bits}, query_bits={query_bits}, similarity={similarity}, "
    "seed={seed})"
)
_TURBOQUANT_CODE = (
    "bbqlib.TurboQuantQuantizer(bits={bits}, variant={variant}, similarity={similarity}, "
    "rotation={precondition}, seed={seed})"
)
_INT8_CODE = (
    "bbqlib.ScalarQuantizer(bits={bits}, method={method}, similarity={similarity}, "
    "query_bits={query_bits}, precondition={precondition}, seed={seed})"
)

#: SAQ's average bit budgets in the default space: the registry widths 1, 2 and 4 and steps
#: between them (SAQ spends any budget; the byte counts of the other families jump).
SAQ_BUDGETS: tuple[float, ...] = (1.0, 1.5, 2.0, 3.0, 4.0, 5.0, 6.0)

#: The default search space: Lucene's BBQ widths with and without a Hadamard preconditioner,
#: RaBitQ at 1, 2 and 4 bits, the two int8 grids (each with its default query and a float
#: query) and SAQ at :data:`SAQ_BUDGETS` (float queries);
#: TurboQuant at 1, 2 and 4 bits (MSE) and 2 and 4 bits (unbiased inner products).
SPACE: tuple[FamilySpace, ...] = (
    FamilySpace("osq", _bbq, (None, "hadamard"), (1, 2, 4, 7), code=_BBQ_CODE),
    FamilySpace("rabitq", _rabitq, ("hadamard",), (1, 2, 4), code=_RABITQ_CODE),
    FamilySpace("int8_per_dim", _int8("per_dim"), (None,), (8,),
                code=_INT8_CODE.replace("{method}", "'per_dim'")),
    FamilySpace("int8_global", _int8("global"), (None,), (7,),
                code=_INT8_CODE.replace("{method}", "'global'")),
    FamilySpace("turboquant", _turboquant("mse"), ("dense",), (1, 2, 4),
                code=_TURBOQUANT_CODE.replace("{variant}", "'mse'")),
    FamilySpace("turboquant_prod", _turboquant("prod"), ("dense",), (2, 4),
                code=_TURBOQUANT_CODE.replace("{variant}", "'prod'")),
    FamilySpace("saq", _saq, (None,), None, "default", _SAQ_CODE, SAQ_BUDGETS,
                SAQQuantizer.encoding_for_record),
)  # fmt: skip

#: Every registry row of every family (every doc and query width; SAQ, whose registry has
#: fifteen query grids, with float, 4-bit and 8-bit queries).
FULL_SPACE: tuple[FamilySpace, ...] = tuple(
    FamilySpace(f.family, f.make, f.preconditions, None,
                (None, 4, 8) if f.budgets else "all", f.code, f.budgets, f.encoding_for_record)
    for f in SPACE
)  # fmt: skip

#: Stored rerank vectors, cheapest first (False: no rerank).
STORES: tuple = (False, "int8", "float16", "float32")
#: The kinds an IVFIndex keeps (all of them since IVF format 6).
IVF_STORES: tuple = STORES
#: Rerank depths ``k' = ceil(k · oversample)`` tried (capped at 10,000 and n).
OVERSAMPLES: tuple[float, ...] = (1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 16.0, 24.0, 32.0)
#: IVF visit budgets (percent of the vectors) tried.
VISITS: tuple[float, ...] = (
    0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 7.5, 10.0, 15.0,
    20.0, 30.0, 50.0, 75.0, 100.0,
)  # fmt: skip


@dataclass(frozen=True)
class CodePoint:
    """A point of the space whose bytes are fixed: codes, preconditioning, stored vectors.

    ``query_bits`` changes no stored byte, but it is part of the point (a chain of points
    varies only ``encoding.doc_bits``, or the budget ``bits``). ``bits``: the average budget
    of a budget family (SAQ), else None; ``encoding`` is then the registry row, whose code
    length the fitted plan sets (the engine's ``encoding_of``).
    """

    space: FamilySpace
    encoding: Encoding
    precondition: object
    store: object
    bits: float | None = None

    @property
    def make_bits(self):
        """The ``bits`` its quantizer is made with (the budget, or the registry width)."""
        return self.encoding.doc_bits if self.bits is None else self.bits

    @property
    def chain(self) -> tuple:
        """Points of one chain differ only in doc bits (recall and bytes grow with them)."""
        e = self.encoding
        return (self.space.family, str(self.precondition), str(self.store), e.query_bits)

    @property
    def code_key(self) -> tuple:
        """Points with the same key share one encode (query width and stores differ)."""
        return (self.space.family, str(self.precondition), self.make_bits)

    def code_bytes(self, dim: int, is_l2: bool) -> int:
        """Code and correction bytes (registry rows; a budget family's need its fit)."""
        if self.bits is not None:
            raise ValueError(f"{self.label()}: the bytes come from the fitted plan")
        return self.encoding.bytes_per_vector(dim, is_l2)

    def row_bytes(self, dim: int) -> int:
        return stored_row_bytes(self.store, dim)

    def label(self) -> str:
        e = self.encoding
        q = "float" if e.query_bits is None else f"{e.query_bits}"
        pre = "" if self.precondition is None else f" {self.precondition}"
        store = "no rerank" if not self.store else f"{self.store} rerank"
        return f"{e.family} {self.make_bits:g}x{q}{pre}, {store}"


def code_points(space, index: str, stores=STORES) -> list[CodePoint]:
    """Every point of ``space`` for ``index``, in table order."""
    out = []
    for entry in space:
        for row in entry.rows(index):
            for bits in entry.budgets or (None,):
                for pre in entry.preconditions:
                    for store in stores:
                        out.append(CodePoint(entry, row, pre, store, bits))
    return out
