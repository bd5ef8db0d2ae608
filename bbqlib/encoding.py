"""The encoding registry: one row per encoding of every quantizer family.

Every packer, kernel, quantizer, index and file reader asks this table instead of branching on
bit widths or families (Lucene's ``ScalarEncoding`` does the same job). A row says how a doc is
stored (``layout``, packed length, the correction record), what a query looks like, which wire
number files carry, which indexes serve it and which kernels score it.

Families
--------
``osq``
    Optimized scalar quantization (BBQ, :class:`~bbqlib.BBQQuantizer`) at every doc width 1-8.
    Wire numbers ``doc_bits * 16 + (query_bits or 0)``, unchanged since the first release.
``rabitq``
    RaBitQ and Extended RaBitQ (:class:`~bbqlib.RaBitQQuantizer`), 1-8 bits, bit planes at
    every width. Wires ``0x100 + doc_bits * 16 + (query_bits or 0)``.
``int8_per_dim`` / ``int8_global``
    faiss ``SQ8``-style per-dimension grids and Lucene 9.9's global interval
    (:class:`~bbqlib.ScalarQuantizer`), 7 or 8 bits, one byte per dimension. Wires
    ``0x200`` / ``0x300 + doc_bits * 16 + (query_bits or 0)``.
``saq``
    SAQ (:class:`~bbqlib.SAQQuantizer`): PCA segments with their own widths. One row per query
    width, ``doc_bits = 0`` ("the plan decides"): the fitted plan (segments, widths, code
    length, factor record) lives in the file header with the quantizer state, and the fitted
    quantizer's ``encoding_`` is this row specialised to its plan. Layout ``segments``
    (Flat and IVF indexes). Wires ``0x400 + (query_bits or 0)``.

Layouts
-------
``planes``
    ``doc_bits`` bit planes, least significant plane first. Each plane holds
    ``padded_dim(d) / 8`` bytes; dimension ``8j + t`` lives in byte ``j``, bit ``7 - t`` (MSB
    first, as Lucene's ``packAsBinary``). Queries against plane docs are ``query_bits`` planes
    of the same shape (or float vectors).
``bytes``
    One unsigned byte per (unpadded) dimension; quantized queries too.
``segments``
    SAQ: every coded segment's top bit plane first (plan order), then each segment's lower
    planes (:mod:`bbqlib.quantizers.saq.plan`), so a row's prefix holds the leading segments'
    top planes; scanned by SAQ's own kernels.

Corrections are little-endian structured records. OSQ's are ``(lower, upper, additional,
component_sum)``: 14 bytes with a ``uint16`` component sum for docs of up to 4 bits, 16 bytes
with an ``int32`` sum above (the sum of 7-bit codes overflows 16 bits above d = 516).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import numpy as np

__all__ = [
    "CORRECTIONS_U16",
    "CORRECTIONS_I32",
    "RABITQ_CORRECTIONS_U16",
    "RABITQ_CORRECTIONS_I32",
    "NO_CORRECTIONS",
    "OFFSET_CORRECTIONS",
    "Encoding",
    "EncodingRegistry",
    "Family",
    "ENCODINGS",
    "FAMILIES",
    "LUT_LANES",
    "DOC_BITS",
    "QUERY_BITS",
    "get_encoding",
    "register_family",
    "encoding_from_wire",
    "padded_dim",
]

CORRECTIONS_U16 = np.dtype(
    [("lower", "<f4"), ("upper", "<f4"), ("additional", "<f4"), ("component_sum", "<u2")]
)
CORRECTIONS_I32 = np.dtype(
    [("lower", "<f4"), ("upper", "<f4"), ("additional", "<f4"), ("component_sum", "<i4")]
)
#: RaBitQ's record, 14 bytes (1-4 bits): ``delta_over_a`` = Δ/a_o (the code scale),
#: ``additional`` = ||o_r - c||² (euclidean) or <o_r, c>, ``error`` = r_o sqrt(1 - a_o²) / a_o /
#: sqrt(D - 1), ``component_sum`` = Σ x_u.
RABITQ_CORRECTIONS_U16 = np.dtype(
    [("delta_over_a", "<f4"), ("additional", "<f4"), ("error", "<f4"), ("component_sum", "<u2")]
)
#: The same fields, 16 bytes, for 5-8-bit RaBitQ codes.
RABITQ_CORRECTIONS_I32 = np.dtype(
    [("delta_over_a", "<f4"), ("additional", "<f4"), ("error", "<f4"), ("component_sum", "<i4")]
)
#: int8 per_dim stores nothing per vector (``||x̂||²`` and ``ΣX`` follow from the codes).
NO_CORRECTIONS = np.dtype([])
#: int8 global stores Lucene's float32 score offset (inner-product similarities only).
OFFSET_CORRECTIONS = np.dtype([("additional", "<f4")])

#: Docs per block of the lookup-table layout of plane codes: one per byte of an AVX2 register.
LUT_LANES = 32

#: Every query width a row may have; ``None`` is an unquantized float query.
QUERY_BITS = (4, 7, 8, None)
#: SAQ's query widths: a float query, or a uniform grid of 2 to 16 bits per segment.
SAQ_QUERY_BITS = (None, *range(2, 17))


def padded_dim(dim: int) -> int:
    """``dim`` rounded up to a multiple of 64 (the width of one packed uint64 word)."""
    return -(-int(dim) // 64) * 64


@dataclass(frozen=True)
class Encoding:
    """One row of the registry.

    Attributes
    ----------
    family : str
        ``"osq"``, ``"rabitq"``, ``"int8_per_dim"``, ``"int8_global"`` or ``"saq"``.
    doc_bits, query_bits
        Bits per dimension of stored codes and of queries (``None``: float query).
    wire : int
        Stable number written into files, unique across families.
    layout : str
        ``"planes"``, ``"bytes"`` or ``"segments"`` (module docstring).
    corrections_dtype : numpy.dtype
        Structured dtype of the per-vector corrections.
    default_oversample : float
        Rerank depth factor when a search does not say (Elasticsearch: 3 at 1 bit, 1.5 at 2).
    indexes : tuple of str
        Indexes that serve the row (``"flat"``, ``"ivf"``).
    l2_corrections_dtype : numpy.dtype, optional
        The record under euclidean when it differs (int8 global stores no offset there).
    """

    family: str
    doc_bits: int
    query_bits: int | None
    wire: int
    layout: str
    corrections_dtype: np.dtype
    default_oversample: float
    indexes: tuple[str, ...] = ("flat", "ivf")
    l2_corrections_dtype: np.dtype | None = None

    @property
    def doc_planes(self) -> int:
        """Bit planes per doc (plane layout), else 0."""
        return self.doc_bits if self.layout == "planes" else 0

    @property
    def query_planes(self) -> int:
        """Bit planes per query (plane layout, quantized query), else 0."""
        if self.layout != "planes" or self.query_bits is None:
            return 0
        return self.query_bits

    @property
    def query_kind(self) -> str:
        """How queries reach the kernels: ``"planes"``, ``"bytes"`` or ``"float"``."""
        return "float" if self.query_bits is None else self.layout

    @property
    def scan_kernels(self) -> tuple[str, ...]:
        """Kernels that scan this row, preferred first (see :mod:`bbqlib.search`)."""
        if self.layout == "segments":
            return ("saq",)
        if self.query_kind == "float":
            return ("float",)
        if self.layout == "planes":
            return ("lut", "popcount") if self.query_bits <= 4 else ("popcount",)
        return ("bytes",)

    def corrections(self, is_l2: bool = False) -> np.dtype:
        """The correction record under the similarity (euclidean or not)."""
        if is_l2 and self.l2_corrections_dtype is not None:
            return self.l2_corrections_dtype
        return self.corrections_dtype

    @property
    def correction_bytes(self) -> int:
        return self.corrections_dtype.itemsize

    @property
    def max_dim(self) -> int:
        """Largest dimension whose component sum fits the correction field."""
        names = self.corrections_dtype.names or ()
        if self.doc_bits == 0:  # the plan decides (SAQ): no component sum to overflow
            return 2**31
        if "component_sum" in names and self.corrections_dtype["component_sum"] == np.uint16:
            return 65535 // (2**self.doc_bits - 1)
        return 2**31 // (2**self.doc_bits - 1)

    def words_per_plane(self, dim: int) -> int:
        return padded_dim(dim) // 64

    def doc_bytes(self, dim: int) -> int:
        """Packed code length of one doc, in bytes."""
        if self.layout == "planes":
            return self.doc_bits * padded_dim(dim) // 8
        return int(dim)

    def query_bytes(self, dim: int) -> int:
        """Packed code length of one quantized query, in bytes (float queries: 4 per dim)."""
        if self.query_bits is None:
            return 4 * int(dim)
        if self.layout == "planes":
            return self.query_bits * padded_dim(dim) // 8
        return int(dim)

    def bytes_per_vector(self, dim: int, is_l2: bool = False) -> int:
        """Stored bytes per doc: packed codes plus corrections, nothing else."""
        return self.doc_bytes(dim) + self.corrections(is_l2).itemsize

    # -- what the scans keep besides the stored record (sizing asks these) -----------------
    def scan_factor_bytes(self, is_l2: bool = False) -> int:
        """Bytes of a doc's factor row as the scans read it: four float32 (a family whose
        scan reads its own record overrides this)."""
        return 16

    @property
    def lut_blocks(self) -> bool:
        """Whether an IVF's postings hold the codes a second time in lookup-table blocks of
        :data:`LUT_LANES` docs (docs in bit planes)."""
        return self.doc_planes > 0

    def flat_scan_bytes(self, dim: int, is_l2: bool = False, lut: bool = False) -> int:
        """Bytes per doc a flat index's scan keeps beside the stored record: its factor row
        and, when the lookup-table scan serves the row (``lut``), its blocked copy of the
        code and the factors."""
        return self.scan_factor_bytes(is_l2) + (self.doc_bytes(dim) + 16 if lut else 0)

    def posting_block_bytes(self, entries: float, lists: float, dim: int) -> float:
        """Bytes of an IVF's lookup-table blocks for ``entries`` posting entries in ``lists``
        lists (the codes again, half a block of padding per list); 0.0 without blocks."""
        if not self.lut_blocks:
            return 0.0
        return (entries + LUT_LANES // 2 * lists) * self.doc_bytes(dim)

    def __repr__(self) -> str:
        q = "float" if self.query_bits is None else f"{self.query_bits}-bit"
        return f"Encoding({self.family}: {self.doc_bits}-bit docs x {q} queries, wire={self.wire})"


@dataclass(frozen=True)
class Family:
    """How one quantizer family fills its rows (used once, to build the registry)."""

    name: str
    wire_base: int
    doc_bits: tuple[int, ...]
    query_bits: tuple[int | None, ...]
    default_query_bits: Mapping[int, int | None]
    planes_up_to: int  # docs of at most this many bits use bit planes, wider ones bytes
    corrections_small: np.dtype  # docs of at most 4 bits
    corrections_large: np.dtype
    l2_corrections: np.dtype | None = None
    query_bits_equal_doc_bits: bool = False  # queries on the docs' own grid (int8 global)
    layout: str | None = None  # a layout of its own (SAQ's "segments"), else by planes_up_to
    indexes: tuple[str, ...] = ("flat", "ivf")

    def query_bits_for(self, doc_bits: int) -> tuple[int | None, ...]:
        """Query widths with a row for docs of ``doc_bits``."""
        if self.query_bits_equal_doc_bits:
            return (doc_bits,)
        return self.query_bits

    def rows(self) -> Iterator[Encoding]:
        for doc_bits in self.doc_bits:
            for query_bits in self.query_bits_for(doc_bits):
                yield Encoding(
                    family=self.name,
                    doc_bits=doc_bits,
                    query_bits=query_bits,
                    wire=self.wire_base + doc_bits * 16 + (query_bits or 0),
                    layout=self.layout or ("planes" if doc_bits <= self.planes_up_to else "bytes"),
                    corrections_dtype=(
                        self.corrections_small if doc_bits <= 4 else self.corrections_large
                    ),
                    default_oversample=_OVERSAMPLE.get(doc_bits, 1.0),
                    l2_corrections_dtype=self.l2_corrections,
                    indexes=self.indexes,
                )


# Elasticsearch's rerank defaults (3x at 1 bit, 1.5x at 2 bits, none above); 3 bits as 2.
_OVERSAMPLE = {1: 3.0, 2: 1.5, 3: 1.5}
_ALL_WIDTHS = (1, 2, 3, 4, 5, 6, 7, 8)

#: The families, by name.
FAMILIES: dict[str, Family] = {
    f.name: f
    for f in (
        # OSQ: 4-bit queries up to 4-bit docs, 7 for 5-7, 8 for 8 (Lucene: 1/2/4 x 4, 7 x 7).
        Family(
            "osq", 0x000, _ALL_WIDTHS, QUERY_BITS,
            {1: 4, 2: 4, 3: 4, 4: 4, 5: 7, 6: 7, 7: 7, 8: 8},
            planes_up_to=6, corrections_small=CORRECTIONS_U16, corrections_large=CORRECTIONS_I32,
        ),
        # RaBitQ: 4-bit queries at 1 bit (RaBitQ), float queries above (as faiss's ex-bits).
        Family(
            "rabitq", 0x100, _ALL_WIDTHS, QUERY_BITS,
            {b: (4 if b == 1 else None) for b in _ALL_WIDTHS},
            planes_up_to=8,
            corrections_small=RABITQ_CORRECTIONS_U16,
            corrections_large=RABITQ_CORRECTIONS_I32,
        ),
        Family(
            "int8_per_dim", 0x200, (7, 8), QUERY_BITS, {7: None, 8: None},
            planes_up_to=0, corrections_small=NO_CORRECTIONS, corrections_large=NO_CORRECTIONS,
        ),
        # Lucene's global grid quantizes queries on the docs' own grid: query bits = doc bits.
        Family(
            "int8_global", 0x300, (7, 8), (7, 8), {7: 7, 8: 8},
            planes_up_to=0,
            corrections_small=OFFSET_CORRECTIONS,
            corrections_large=OFFSET_CORRECTIONS,
            l2_corrections=NO_CORRECTIONS,
            query_bits_equal_doc_bits=True,
        ),
        # SAQ: one row per query width; the fitted plan sets the code length and record.
        Family(
            "saq", 0x400, (0,), SAQ_QUERY_BITS, {0: None},
            planes_up_to=0, corrections_small=NO_CORRECTIONS, corrections_large=NO_CORRECTIONS,
            layout="segments",
        ),
    )
}  # fmt: skip


class EncodingRegistry(Mapping):
    """Every :class:`Encoding`, keyed by ``(family, doc_bits, query_bits)``.

    ``registry[(doc_bits, query_bits)]`` is the OSQ row (the keys of bbqlib 0.1), and
    ``registry[wire]`` the row of a wire number.
    """

    def __init__(self, families: Mapping[str, Family]):
        self._families = {}
        self._rows = {}
        self._by_wire = {}
        for family in families.values():
            self.register(family)

    def register(self, family: Family) -> None:
        """Add a family's rows: the one registration a new family makes besides its
        quantizer class (``register_quantizer``) and its scanner. Names and wire numbers
        must be new (files carry the wire numbers)."""
        if family.name in self._families:
            raise ValueError(f"encoding family {family.name!r} is registered already")
        rows = {(e.family, e.doc_bits, e.query_bits): e for e in family.rows()}
        wires = [e.wire for e in rows.values()]
        taken = sorted(set(wires) & set(self._by_wire))
        if taken or len(set(wires)) != len(wires):
            raise ValueError(f"family {family.name!r}: wire numbers {taken or wires} are taken")
        self._families[family.name] = family
        self._rows.update(rows)
        self._by_wire.update({e.wire: e for e in rows.values()})

    def unregister(self, name: str) -> None:
        """Remove a family added by :meth:`register` (tests, plugins that unload)."""
        self.family(name)
        del self._families[name]
        for key in [k for k in self._rows if k[0] == name]:
            del self._by_wire[self._rows.pop(key).wire]

    def __getitem__(self, key) -> Encoding:
        if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
            return self._by_wire[int(key)]
        if isinstance(key, tuple) and len(key) == 2:
            key = ("osq", *key)
        return self._rows[key]

    def __iter__(self):
        return iter(self._rows)

    def __len__(self) -> int:
        return len(self._rows)

    def rows(self, family: str | None = None, *, index: str | None = None) -> list[Encoding]:
        """Rows of one family (or all), optionally only those an index serves."""
        return [
            e
            for e in self._rows.values()
            if (family is None or e.family == family) and (index is None or index in e.indexes)
        ]

    def family(self, name: str) -> Family:
        if name not in self._families:
            raise ValueError(f"unknown encoding family {name!r}; known: {sorted(self._families)}")
        return self._families[name]

    def lookup(self, family: str, doc_bits, query_bits="auto") -> Encoding:
        """The row of ``(doc_bits, query_bits)`` in ``family``; ``"auto"`` takes its default.

        Raises ``ValueError`` naming the accepted values when the pair has no row.
        """
        f = self.family(family)
        if isinstance(doc_bits, bool) or doc_bits not in f.doc_bits:
            raise ValueError(
                f"bits must be one of {list(f.doc_bits)} for {family}, got {doc_bits!r}"
            )
        accepted = f.query_bits_for(doc_bits)
        choices = ", ".join("None (float query)" if q is None else str(q) for q in accepted)
        if isinstance(query_bits, str):
            if query_bits != "auto":
                raise ValueError(
                    f"query_bits must be one of {choices} or 'auto', got {query_bits!r}"
                )
            query_bits = f.default_query_bits[doc_bits]
        if isinstance(query_bits, bool) or query_bits not in accepted:
            raise ValueError(
                f"query_bits must be one of {choices} or 'auto' for {family} {doc_bits}-bit "
                f"docs, got {query_bits!r}"
            )
        return self._rows[(family, int(doc_bits), query_bits)]

    def from_wire(self, wire) -> Encoding:
        try:
            return self._by_wire[int(wire)]
        except (KeyError, TypeError, ValueError):
            raise ValueError(
                f"unknown encoding wire number {wire!r}; file from a newer bbqlib?"
            ) from None


#: The registry.
ENCODINGS = EncodingRegistry(FAMILIES)


def register_family(family: Family) -> None:
    """Register a new quantizer family's rows in :data:`ENCODINGS` (see
    :meth:`EncodingRegistry.register`; ``docs/architecture.md`` shows a whole family)."""
    ENCODINGS.register(family)


#: OSQ (BBQ) doc widths.
DOC_BITS = FAMILIES["osq"].doc_bits


def get_encoding(doc_bits: int, query_bits: int | None | str = "auto", family: str = "osq"):
    """Look up a row; ``query_bits="auto"`` takes the family's default for the docs.

    OSQ defaults: 4-bit queries for docs of up to 4 bits, 7 for 5-7-bit docs, 8 for 8-bit docs.
    ``query_bits=None`` scores a float query against the dequantized codes.
    """
    return ENCODINGS.lookup(family, doc_bits, query_bits)


def encoding_from_wire(wire: int) -> Encoding:
    """The encoding written into a file as ``wire``."""
    return ENCODINGS.from_wire(wire)
