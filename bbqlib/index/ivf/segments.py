"""Rerank vector segments of an IVF directory: ``vectors.<token>.npy`` files.

Immutable ``.npy`` files (rows of the index in row order, as given, normalized for cosine),
memory-mapped for the exact rerank, of one of the kinds of :mod:`bbqlib.search.stored`
(the header's ``vector_dtype``, format 6; float32 before): float32 ``<f4 [n, d]``, float16
``<f2 [n, d]`` or int8 records ``[("scale", "<f4"), ("codes", "i1", (d,))] [n]``. The
header records each segment's CRC32 and (since format 8) a CRC32 per row over the stored
bytes of that kind (formats 5-7: per block of 256 rows), checked the first time a row is read
(:meth:`Segment.check_rows`). Segments of older directories get per-row checksums when a save
first writes a format-8 header for them (:func:`with_block_checksums`).
"""

from __future__ import annotations

import mmap
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...search.stored import stored_kind_of, to_stored, vector_dtype
from ...storage.atomic import atomic_path
from ...storage.blocks import BLOCK_ROWS, BlockChecksums, BlockCRCWriter, advise_random
from ...storage.container import crc32_of
from ...storage.errors import CorruptFileError

__all__ = ["Segment", "write_segment", "segment_header", "map_segment", "with_block_checksums"]


@dataclass
class Segment:
    """A block of stored rerank vectors (rows ``start : start + len(array)`` of the index).

    ``array`` is of one of the kinds of :mod:`bbqlib.search.stored`; ``file`` is the
    segment's path once it is on disk (then ``array`` is a read-only memory map of it) and
    ``crc32`` the CRC of its data bytes.
    """

    array: np.ndarray
    file: Path | None = None
    crc32: int | None = None
    blocks: BlockChecksums | None = None

    def __len__(self) -> int:
        return self.array.shape[0]

    @property
    def kind(self) -> str:
        """``"float32"``, ``"float16"`` or ``"int8"`` (:mod:`bbqlib.search.stored`)."""
        return stored_kind_of(self.array)

    def check_rows(self, rows: np.ndarray) -> None:
        """Check the block CRC32s of ``rows`` (local, >= 0) on their first read (files only)."""
        if self.blocks is not None:
            self.blocks.check(self.array, rows)


def write_segment(
    directory: Path, batches, dim: int, *, kind: str = "float32", expect_crc: int | None = None
) -> Segment:
    """Stream batches into a new ``vectors.<token>.npy`` of ``kind`` (atomic); return it mapped.

    ``batches`` yields float32 [m, dim] rows (converted to ``kind`` here by
    :func:`bbqlib.search.stored.to_stored`) or rows already of ``kind``. The row count is
    not needed in advance: the ``.npy`` header is rewritten at the end (its length does not
    change, NumPy pads it to a fixed 64-byte multiple, and we reserve room for a 20-digit
    count). The CRC32 of the data and of every block of :data:`~bbqlib.storage.blocks.BLOCK_ROWS`
    rows (over the stored bytes of ``kind``) are recorded.
    ``expect_crc``: the CRC32 the copied rows must have (a stored segment copied elsewhere);
    on a mismatch nothing is written and ``CorruptFileError`` is raised.
    """
    directory = Path(directory)
    name = directory / f"vectors.{secrets.token_hex(8)}.npy"
    rows = 0
    crc = 0
    blocks = BlockCRCWriter(BLOCK_ROWS)
    with atomic_path(name, lock=False) as tmp, open(tmp, "wb") as f:
        header = _npy_header(10**19, dim, kind)  # widest count: fixes the header length
        f.write(header)
        want = vector_dtype(kind, dim)
        for block in batches:
            if block.dtype != want:
                block = to_stored(np.asarray(block, dtype=np.float32), kind)
            block = np.ascontiguousarray(block)
            crc = crc32_of(block, crc)
            blocks.update(block)
            f.write(block.tobytes())
            rows += block.shape[0]
        if expect_crc is not None and crc != expect_crc:
            raise CorruptFileError(
                f"the vector segment being copied into {directory} fails its CRC32: its file "
                "is corrupted; restore it or rebuild the index"
            )
        new_header = _npy_header(rows, dim, kind, pad_to=len(header))
        f.seek(0)
        f.write(new_header)
    checks = BlockChecksums(blocks.finish(), BLOCK_ROWS, name)
    return Segment(map_segment(name, rows, dim, kind), name, crc, checks)


def segment_header(rows: int, dim: int, kind: str = "float32") -> bytes:
    """The ``.npy`` header :func:`write_segment` writes for ``rows`` rows of ``kind`` (its
    length fixed by the widest row count), for writers that fill a segment in place."""
    return _npy_header(rows, dim, kind, pad_to=len(_npy_header(10**19, dim, kind)))


def with_block_checksums(seg: Segment) -> Segment:
    """``seg`` with per-row CRC32s (as it is when it has them): reads the stored segment once,
    checking its whole-file CRC32 on the way, so that damage never gets fresh checksums.
    Segments of formats 4 (none) and 5-7 (blocks of 256 rows) get them at their first save."""
    if seg.blocks is not None and seg.blocks.block_rows == BLOCK_ROWS:
        return seg
    crc = 0
    blocks = BlockCRCWriter(BLOCK_ROWS)
    for start in range(0, len(seg), 65536):
        block = np.ascontiguousarray(seg.array[start : start + 65536])
        crc = crc32_of(block, crc)
        blocks.update(block)
    if seg.crc32 is not None and crc != int(seg.crc32):
        raise CorruptFileError(
            f"vector file {seg.file} fails its CRC32: the file is corrupted; restore it or "
            "rebuild the index"
        )
    checks = BlockChecksums(blocks.finish(), BLOCK_ROWS, seg.file)
    return Segment(seg.array, seg.file, crc, checks)


def _shape(kind: str, rows: int, dim: int) -> tuple:
    """The ``.npy`` shape of ``rows`` stored rows: int8 records are one row each."""
    return (int(rows),) if kind == "int8" else (int(rows), int(dim))


def _npy_header(rows: int, dim: int, kind: str = "float32", pad_to: int | None = None) -> bytes:
    descr = np.lib.format.dtype_to_descr(vector_dtype(kind, dim))
    d = {"descr": descr, "fortran_order": False, "shape": _shape(kind, rows, dim)}
    text = repr(d)
    total = pad_to if pad_to is not None else -(-(10 + len(text) + 1 + 32) // 64) * 64
    body = text + " " * (total - 10 - len(text) - 1) + "\n"
    return b"\x93NUMPY\x01\x00" + len(body).to_bytes(2, "little") + body.encode("latin1")


def map_segment(path: Path, rows: int, dim: int, kind: str = "float32") -> np.ndarray:
    """Memory-map a stored segment of ``rows`` rows of ``kind`` (checked: shape and dtype).

    The file is opened once: its ``.npy`` header is read from that descriptor and the rows
    are a read-only view of one map of it, so a file renamed over ``path`` meanwhile cannot
    give a header of one file and the rows of another.
    """
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise CorruptFileError(
            f"the IVF index at {path.parent} is incomplete: vector file {path.name} listed in "
            "its header is missing; restore the file or rebuild the index"
        ) from None
    with f:
        size = os.fstat(f.fileno()).st_size
        try:
            version = np.lib.format.read_magic(f)
            read = {(1, 0): np.lib.format.read_array_header_1_0,
                    (2, 0): np.lib.format.read_array_header_2_0}.get(version)  # fmt: skip
            if read is None:
                raise ValueError(f"unknown .npy version {version}")
            shape, fortran, dtype = read(f)
        except Exception as err:  # noqa: BLE001 - a damaged header fails in many ways
            raise CorruptFileError(
                f"vector file {path} is truncated or corrupted ({err}); restore it or rebuild"
            ) from None
        want = _shape(kind, rows, dim)
        if shape != want or dtype != vector_dtype(kind, dim) or fortran:
            raise CorruptFileError(
                f"vector file {path} holds {dtype} {shape}, expected {kind} {want}; the file "
                "does not belong to this index"
            )
        offset = f.tell()
        if size != offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize:
            raise CorruptFileError(
                f"vector file {path} has {size} bytes, {shape} rows of {dtype} need "
                f"{offset + int(np.prod(shape)) * dtype.itemsize}: the file is truncated or "
                "damaged; restore it or rebuild"
            )
        if rows == 0:
            return np.empty(shape, dtype=dtype)
        whole = mmap.mmap(f.fileno(), size, access=mmap.ACCESS_READ)
    arr = np.ndarray(shape, dtype=dtype, buffer=whole, offset=offset)
    advise_random(arr)
    return arr
