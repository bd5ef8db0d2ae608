"""A container file written in pieces, by several processes, before its header is known.

:func:`bbqlib.storage.container.write_container` needs every array in one process. A distributed
build makes the sections of one file on many workers: :class:`StreamedContainer` lays the
file out from the sections' shapes alone, preallocates it under a temporary name, lets any
process write rows of a section at their offset (:func:`write_rows`), and :meth:`finish`
writes the header (with every section's CRC32, combined from the CRCs of the pieces by
:func:`crc32_combine`) and the footer, then renames the file into place. The result is
byte-for-byte what :func:`~bbqlib.storage.container.write_container` writes for the same arrays.
"""

from __future__ import annotations

import json
import os
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .container import _FOOTER, _PREFIX, FOOTER_MAGIC, FORMAT_VERSION, MAGIC, _aligned

__all__ = ["StreamedContainer", "crc32_combine", "write_rows"]

#: Width of the widest CRC32 in decimal: the header is laid out for it, then padded.
_CRC_PLACEHOLDER = 4_294_967_295


def _gf2_times(mat: list[int], vec: int) -> int:
    out = 0
    i = 0
    while vec:
        if vec & 1:
            out ^= mat[i]
        vec >>= 1
        i += 1
    return out


def _gf2_square(mat: list[int]) -> list[int]:
    return [_gf2_times(mat, m) for m in mat]


def crc32_combine(crc1: int, crc2: int, len2: int) -> int:
    """CRC32 of ``A + B`` from ``crc32(A)``, ``crc32(B)`` and ``len(B)`` (zlib's algorithm).

    Examples
    --------
    >>> import zlib
    >>> a, b = b"hello ", b"world"
    >>> crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)
    True
    """
    if len2 <= 0:
        return crc1
    odd = [0xEDB88320] + [1 << i for i in range(31)]  # operator for one zero bit
    even = _gf2_square(odd)  # two zero bits
    odd = _gf2_square(even)  # four zero bits
    while True:  # apply len2 zero bytes to crc1
        even = _gf2_square(odd)
        if len2 & 1:
            crc1 = _gf2_times(even, crc1)
        len2 >>= 1
        if not len2:
            break
        odd = _gf2_square(even)
        if len2 & 1:
            crc1 = _gf2_times(odd, crc1)
        len2 >>= 1
        if not len2:
            break
    return (crc1 ^ crc2) & 0xFFFFFFFF


@dataclass(frozen=True)
class _Section:
    name: str
    dtype: np.dtype
    shape: tuple[int, ...]
    offset: int

    @property
    def nbytes(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) * self.dtype.itemsize

    @property
    def row_bytes(self) -> int:
        return int(np.prod(self.shape[1:], dtype=np.int64)) * self.dtype.itemsize


class StreamedContainer:
    """The layout of a container whose sections are written piecewise (picklable).

    Parameters
    ----------
    path : str or Path
        Final location; the data goes to ``partial`` until :meth:`finish`.
    kind : str
        The container kind (e.g. ``"ivf_postings"``).
    meta : dict
        JSON-able metadata.
    sections : list of (name, dtype, shape)
        In file order; every section is written whole by some set of :func:`write_rows` calls.
    partial : str or Path, optional
        Where the file is assembled (default ``<path>.partial``; same filesystem as ``path``).
    """

    def __init__(self, path, kind: str, meta: dict, sections, *, partial=None):
        self.path = Path(path)
        self.partial = (
            Path(partial)
            if partial is not None
            else self.path.with_name(self.path.name + ".partial")
        )
        self.kind = kind
        self.meta = dict(meta)
        specs = [(str(n), np.dtype(dt).newbyteorder("<"), tuple(int(s) for s in shape))
                 for n, dt, shape in sections]  # fmt: skip
        self.body_start = _aligned(_PREFIX.size + 4096 + 256 * len(specs))
        while True:
            self.sections, offset = {}, self.body_start
            for name, dt, shape in specs:
                self.sections[name] = _Section(name, dt, shape, offset)
                offset = _aligned(offset + self.sections[name].nbytes)
            self.data_end = offset
            header = self._header({name: _CRC_PLACEHOLDER for name, _, _ in specs})
            if _PREFIX.size + len(header) <= self.body_start:
                break
            self.body_start = _aligned(_PREFIX.size + 2 * len(header))

    def _header(self, crcs: dict[str, int]) -> bytes:
        sections = [
            {
                "name": s.name,
                "dtype": np.lib.format.dtype_to_descr(s.dtype),
                "shape": list(s.shape),
                "offset": s.offset,
                "nbytes": s.nbytes,
                "crc32": int(crcs[s.name]),
            }
            for s in self.sections.values()
        ]
        return json.dumps({"kind": self.kind, "meta": self.meta, "sections": sections}).encode()

    @property
    def size(self) -> int:
        return self.data_end + _FOOTER.size

    def allocate(self) -> None:
        """Create the partial file at its final size (sparse: zeros until written)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.partial, "wb") as f:
            f.truncate(self.size)

    def finish(self, crcs: dict[str, int]) -> Path:
        """Write header and footer with the sections' CRC32s, fsync, rename into place."""
        header = self._header(crcs)
        header = header + b" " * (self.body_start - _PREFIX.size - len(header))
        header_crc = zlib.crc32(header)
        with open(self.partial, "r+b") as f:
            f.write(_PREFIX.pack(MAGIC, FORMAT_VERSION, len(header), header_crc, 0))
            f.write(header)
            f.seek(self.data_end)
            f.write(_FOOTER.pack(FOOTER_MAGIC, header_crc, 0, self.size))
            f.flush()
            os.fsync(f.fileno())
        os.chmod(self.partial, 0o644)
        os.replace(self.partial, self.path)
        _fsync_directory(self.path.parent)
        return self.path

    def discard(self) -> None:
        self.partial.unlink(missing_ok=True)


def write_rows(container: StreamedContainer, name: str, row: int, data: np.ndarray) -> int:
    """Write ``data`` as rows ``row : row + len(data)`` of section ``name``; its CRC32.

    Any process may call this on the partial file (disjoint rows per call); the returned CRC
    covers exactly the bytes written, for :func:`crc32_combine`.
    """
    sec = container.sections[name]
    data = np.ascontiguousarray(data, dtype=sec.dtype)
    if data.shape[1:] != sec.shape[1:] or row < 0 or row + data.shape[0] > sec.shape[0]:
        raise ValueError(
            f"rows {row}:{row + data.shape[0]} of shape {data.shape[1:]} do not fit section "
            f"{name!r} of shape {sec.shape}"
        )
    raw = data.reshape(-1).view(np.uint8)
    with open(container.partial, "r+b") as f:
        f.seek(sec.offset + row * sec.row_bytes)
        f.write(raw.tobytes())
    return zlib.crc32(raw)


def _fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (POSIX; not possible nor needed on Windows)."""
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
