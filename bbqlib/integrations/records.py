"""Fixed-size byte records of encoded vectors, for engines that store opaque bytes.

A record is what an engine keeps per vector when it calls bbqlib's compiled metric
(:func:`bbqlib._kernels.candidates.doc_doc_metric`) or hands rows back for rescoring:

==========================  ==================================================================
bytes                       content
==========================  ==================================================================
``0 .. code_bytes``         the packed codes: bit planes (1/2/4-bit docs, as
                            :attr:`EncodedVectors.codes`) or one byte per dimension (7/8-bit),
                            zero padded to a multiple of 8 bytes
``+0 .. +16``               float32 ``a_x, l_x, ΣX, add_x``: the factor row of the scan
                            kernels (the corrections in the correction algebra's form)
``+16 .. +20``              float32 ``sqrt(D)·a_x`` (lets one compiled metric serve every D)
``+20 .. +24``              zero
==========================  ==================================================================

Little endian, 8-byte multiple, so ``records.view(np.uint64)`` reads the planes as words.
Any bbqlib quantizer whose docs are 1, 2 or 4 bit planes or bytes fits (BBQ, RaBitQ at 1, 2,
4 bits, int8). The exchange format (:mod:`bbqlib.integrations.exchange`) keeps the raw corrections
instead; records are an engine-side cache of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .._kernels.candidates import RECORD_TAIL
from ..layouts.codes import DocCodes

__all__ = ["RecordLayout", "make_records", "RECORD_TAIL"]


@dataclass(frozen=True)
class RecordLayout:
    """Where codes and factors sit in a record.

    Attributes
    ----------
    planes : int
        Bit planes of the codes (1, 2 or 4), or 0 for one byte per dimension.
    dim : int
        True (unpadded) dimension.
    code_bytes : int
        Bytes of codes, padded to a multiple of 8.
    """

    planes: int
    dim: int
    code_bytes: int

    @property
    def record_bytes(self) -> int:
        return self.code_bytes + RECORD_TAIL

    @property
    def factor_offset(self) -> int:
        """Index of ``a_x`` in the record viewed as float32."""
        return self.code_bytes // 4

    @classmethod
    def for_quantizer(cls, quantizer) -> RecordLayout:
        """The layout of a fitted quantizer's docs."""
        quantizer._check_fitted()
        enc = quantizer.encoding_
        dim = quantizer.dim_
        planes = enc.doc_planes  # 0 for byte docs
        if planes not in (0, 1, 2, 4):
            raise ValueError(
                f"records support docs of 1, 2 or 4 bit planes or bytes; this quantizer stores "
                f"{planes} planes ({enc!r}); use bits=1, 2, 4, 7 or 8"
            )
        code_bytes = enc.doc_bytes(dim)
        return cls(planes, dim, -(-code_bytes // 8) * 8)

    def docs(self, records: np.ndarray, quantizer) -> DocCodes:
        """The kernels' view of records (no copy): codes and factor columns."""
        if records.dtype != np.uint8 or records.ndim != 2:
            records = np.asarray(records).view(np.uint8).reshape(len(records), -1)
        if records.shape[1] != self.record_bytes or not records.flags.c_contiguous:
            raise ValueError(
                f"records must be C-contiguous uint8 [n, {self.record_bytes}], got "
                f"{records.dtype} {records.shape}"
            )
        fo = self.factor_offset
        factors = records.view(np.float32)[:, fo : fo + 4]
        if self.planes:
            data = records.view(np.uint64)[:, : self.code_bytes // 8]
        else:
            data = records[:, : self.dim]
        return DocCodes(
            quantizer.encoding_,
            data,
            factors,
            self.dim,
            quantizer.centroid_dot_,
            quantizer.similarity_.is_distance,
        )


def make_records(quantizer, enc) -> np.ndarray:
    """Records ``uint8 [n, layout.record_bytes]`` of encoded vectors (see the module table).

    Parameters
    ----------
    quantizer : Quantizer
        The fitted quantizer that made ``enc``.
    enc : EncodedVectors
    """
    quantizer._check_encoded(enc)
    layout = RecordLayout.for_quantizer(quantizer)
    docs = quantizer._doc_codes(enc)
    n = len(enc)
    records = np.zeros((n, layout.record_bytes), dtype=np.uint8)
    codes = np.asarray(enc.codes)
    records[:, : codes.shape[1]] = codes
    tail = np.zeros((n, RECORD_TAIL // 4), dtype=np.float32)
    tail[:, :4] = docs.factors
    tail[:, 4] = np.sqrt(float(layout.dim)) * docs.factors[:, 0].astype(np.float64)
    records[:, layout.code_bytes :] = tail.view(np.uint8)
    return records
