"""The encoding table: one record per (doc bits, query bits) pair.

Every packer, kernel, quantizer and file reader asks this table instead of branching on bit
widths (Lucene's ``ScalarEncoding`` does the same job).

Layouts
-------
``planes``
    Docs of 1, 2 and 4 bits, stored as that many bit planes, least significant plane first.
    Each plane holds ``padded_dim(d) / 8`` bytes; dimension ``8j + t`` lives in byte ``j``,
    bit ``7 - t`` (MSB first, as Lucene's ``packAsBinary``). Queries against plane docs are
    ``query_bits`` planes of the same shape, so one kernel serves every (doc, query) pair.
``bytes``
    Docs of 7 and 8 bits, one unsigned byte per (unpadded) dimension; queries too.

Corrections are little-endian structured records ``(lower, upper, additional,
component_sum)``: 14 bytes with a ``uint16`` component sum for 1/2/4-bit docs, 16 bytes with an
``int32`` sum for 7/8-bit docs (the sum of 7-bit codes overflows 16 bits above d = 516).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "CORRECTIONS_U16",
    "CORRECTIONS_I32",
    "Encoding",
    "ENCODINGS",
    "DOC_BITS",
    "QUERY_BITS",
    "get_encoding",
    "encoding_from_wire",
    "padded_dim",
]

CORRECTIONS_U16 = np.dtype(
    [("lower", "<f4"), ("upper", "<f4"), ("additional", "<f4"), ("component_sum", "<u2")]
)
CORRECTIONS_I32 = np.dtype(
    [("lower", "<f4"), ("upper", "<f4"), ("additional", "<f4"), ("component_sum", "<i4")]
)

#: Doc bit widths with an encoding.
DOC_BITS = (1, 2, 4, 7, 8)
#: Query bit widths; ``None`` is an unquantized float query.
QUERY_BITS = (4, 7, 8, None)

_DEFAULT_QUERY_BITS = {1: 4, 2: 4, 4: 4, 7: 7, 8: 8}
_DEFAULT_OVERSAMPLE = {1: 3.0, 2: 1.5, 4: 1.0, 7: 1.0, 8: 1.0}


def padded_dim(dim: int) -> int:
    """``dim`` rounded up to a multiple of 64 (the width of one packed uint64 word)."""
    return -(-int(dim) // 64) * 64


@dataclass(frozen=True)
class Encoding:
    """One row of the encoding table.

    Attributes
    ----------
    doc_bits, query_bits
        Bits per dimension of stored codes and of queries (``None``: float query).
    wire
        Stable number written into files: ``doc_bits * 16 + (query_bits or 0)``.
    layout
        ``"planes"`` (1/2/4-bit docs) or ``"bytes"`` (7/8-bit docs).
    corrections_dtype
        Structured dtype of the per-vector corrections (14 or 16 bytes).
    default_oversample
        Elasticsearch's rerank default: 3.0 at 1 bit, 1.5 at 2 bits, 1.0 above.
    """

    doc_bits: int
    query_bits: int | None
    wire: int
    layout: str
    corrections_dtype: np.dtype
    default_oversample: float

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
    def correction_bytes(self) -> int:
        return self.corrections_dtype.itemsize

    @property
    def max_dim(self) -> int:
        """Largest dimension whose component sum fits the correction field."""
        if self.corrections_dtype["component_sum"] == np.dtype("<u2"):
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

    def bytes_per_vector(self, dim: int) -> int:
        """Stored bytes per doc: packed codes plus corrections, nothing else."""
        return self.doc_bytes(dim) + self.correction_bytes

    def __repr__(self) -> str:
        q = "float" if self.query_bits is None else f"{self.query_bits}-bit"
        return f"Encoding({self.doc_bits}-bit docs x {q} queries, wire={self.wire})"


def _build_table() -> dict[tuple[int, int | None], Encoding]:
    table = {}
    for doc_bits in DOC_BITS:
        layout = "planes" if doc_bits <= 4 else "bytes"
        dtype = CORRECTIONS_U16 if doc_bits <= 4 else CORRECTIONS_I32
        for query_bits in QUERY_BITS:
            table[(doc_bits, query_bits)] = Encoding(
                doc_bits=doc_bits,
                query_bits=query_bits,
                wire=doc_bits * 16 + (query_bits or 0),
                layout=layout,
                corrections_dtype=dtype,
                default_oversample=_DEFAULT_OVERSAMPLE[doc_bits],
            )
    return table


#: The table, keyed by ``(doc_bits, query_bits)``.
ENCODINGS: dict[tuple[int, int | None], Encoding] = _build_table()
_BY_WIRE = {e.wire: e for e in ENCODINGS.values()}


def get_encoding(doc_bits: int, query_bits: int | None | str = "auto") -> Encoding:
    """Look up an encoding; ``query_bits="auto"`` takes Elasticsearch's default for the docs.

    Defaults: 1, 2 and 4-bit docs take 4-bit queries, 7-bit docs 7-bit queries, 8-bit docs
    8-bit queries. ``query_bits=None`` scores a float query against the dequantized codes.
    """
    if isinstance(doc_bits, bool) or doc_bits not in _DEFAULT_QUERY_BITS:
        raise ValueError(f"bits must be one of {DOC_BITS}, got {doc_bits!r}")
    if isinstance(query_bits, str):
        if query_bits != "auto":
            raise ValueError(f"query_bits must be 4, 7, 8, None or 'auto', got {query_bits!r}")
        query_bits = _DEFAULT_QUERY_BITS[doc_bits]
    if isinstance(query_bits, bool) or query_bits not in QUERY_BITS:
        raise ValueError(
            f"query_bits must be one of 4, 7, 8, None (float query) or 'auto', got {query_bits!r}"
        )
    return ENCODINGS[(doc_bits, query_bits)]


def encoding_from_wire(wire: int) -> Encoding:
    """The encoding written into a file as ``wire``."""
    try:
        return _BY_WIRE[int(wire)]
    except KeyError:
        raise ValueError(
            f"unknown encoding wire number {wire!r}; file from a newer bbqlib?"
        ) from None
