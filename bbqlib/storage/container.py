"""bbqlib's versioned, checksummed container file (one index or quantizer per file).

Layout (all integers little-endian)::

    offset 0   magic            8 bytes  b"BBQLIB\\x00\\x01"
    8          format version   uint32
    12         header length    uint32   (bytes of the JSON header)
    16         header CRC32     uint32
    20         reserved         uint32   (0)
    24         header           JSON, UTF-8: {"kind", "meta", "sections": [...]}
    ...        sections         each 64-byte aligned, raw little-endian array bytes
    end - 24   footer           b"BBQEND\\x00\\x00" | header CRC32 u32 | 0 u32 | file size u64

Each section entry records ``name``, ``dtype`` (NumPy descr), ``shape``, ``offset``, ``nbytes``
and ``crc32``. Files are written to a temporary file in the same directory, fsynced and
renamed, so a crash leaves either the old file or the new one. Readers check the magic, the
version, the header CRC, the footer and every section's CRC; sections can be memory-mapped.

A reader opens the file once and takes everything from that one descriptor: the size
(``fstat``), the header and footer, and one read-only map of the whole file of which every
section is a view. A save that renames a new file over the path meanwhile cannot make it mix
two files (it gets the file it opened; docs/concurrency.md).
"""

from __future__ import annotations

import json
import mmap as _mmap
import os
import struct
import zlib
from collections.abc import Collection
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .atomic import atomic_path
from .errors import CorruptFileError, UnsupportedFormatError

__all__ = [
    "MAGIC",
    "FORMAT_VERSION",
    "CorruptFileError",
    "UnsupportedFormatError",
    "check_format_version",
    "write_container",
    "Container",
    "open_container",
    "peek_container",
    "read_container",
    "read_kind",
    "crc32_of",
]

MAGIC = b"BBQLIB\x00\x01"
FOOTER_MAGIC = b"BBQEND\x00\x00"
FORMAT_VERSION = 1
_PREFIX = struct.Struct("<8sIIII")
_FOOTER = struct.Struct("<8sIIQ")
_ALIGN = 64
_CRC_CHUNK = 1 << 24


def check_format_version(path, what: str, version, newest: int) -> int:
    """``version`` as an int if this build reads it (1..newest), else a clear error.

    Policy (``docs/formats.md``): every change to what a file holds bumps its version, and
    every earlier version keeps opening.
    """
    try:
        v = int(version)
    except (TypeError, ValueError):
        raise CorruptFileError(f"{path} is corrupted ({what} format version {version!r})") from None
    if v < 1:  # no version 0 was ever written: a flipped bit
        raise CorruptFileError(f"{path} is corrupted ({what} format version {v})")
    if v > newest:
        raise UnsupportedFormatError(
            f"{path} has {what} format version {v}; this bbqlib reads {what} versions 1 to "
            f"{newest}: upgrade bbqlib to open it"
        )
    return v


def crc32_of(arr: np.ndarray, crc: int = 0) -> int:
    """CRC32 of an array's bytes, streamed in chunks (works on memory maps); ``crc``: the
    CRC32 of bytes before them (``zlib.crc32``'s chaining)."""
    flat = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
    for start in range(0, flat.size, _CRC_CHUNK):
        crc = zlib.crc32(flat[start : start + _CRC_CHUNK], crc)
    return crc


def _aligned(n: int) -> int:
    return -(-n // _ALIGN) * _ALIGN


def write_container(
    path, kind: str, meta: dict, arrays: dict[str, np.ndarray], *, lock: bool = True
) -> Path:
    """Write ``arrays`` and ``meta`` atomically to ``path`` (temp file, fsync, rename).

    ``lock``: hold the path's advisory lock (see :func:`bbqlib.storage.atomic.atomic_path`); pass
    False when the caller holds a lock that covers ``path``.
    """
    path = Path(path)
    arrays = {name: np.asarray(a) for name, a in arrays.items()}
    for name, a in arrays.items():
        if a.dtype.byteorder == ">":
            arrays[name] = a.astype(a.dtype.newbyteorder("<"))
    crcs = {name: crc32_of(a) for name, a in arrays.items()}
    # Offsets depend on the header length, which depends on the offsets: reserve room for the
    # JSON, lay the sections out after it, and grow the reservation until the JSON fits.
    body_start = _aligned(_PREFIX.size + 4096 + 256 * len(arrays))
    while True:
        sections, offset = [], body_start
        for name, a in arrays.items():
            sections.append(
                {
                    "name": name,
                    "dtype": np.lib.format.dtype_to_descr(a.dtype),
                    "shape": list(a.shape),
                    "offset": offset,
                    "nbytes": int(a.nbytes),
                    "crc32": crcs[name],
                }
            )
            offset = _aligned(offset + a.nbytes)
        header = json.dumps({"kind": kind, "meta": meta, "sections": sections}).encode()
        if _PREFIX.size + len(header) <= body_start:
            break
        body_start = _aligned(_PREFIX.size + 2 * len(header))
    header = header + b" " * (body_start - _PREFIX.size - len(header))
    header_crc = zlib.crc32(header)
    total = offset + _FOOTER.size

    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path, lock=lock) as tmp, open(tmp, "wb") as f:
        f.write(_PREFIX.pack(MAGIC, FORMAT_VERSION, len(header), header_crc, 0))
        f.write(header)
        for sec, a in zip(sections, arrays.values(), strict=True):
            f.seek(sec["offset"])
            flat = np.ascontiguousarray(a).reshape(-1).view(np.uint8)
            for start in range(0, flat.size, _CRC_CHUNK):
                f.write(flat[start : start + _CRC_CHUNK].tobytes())
        f.seek(offset)
        f.write(_FOOTER.pack(FOOTER_MAGIC, header_crc, 0, total))
    return path


def _read_header(f, path: Path, size: int) -> dict:
    prefix = f.read(_PREFIX.size)
    if len(prefix) < _PREFIX.size or prefix[:8] != MAGIC:
        raise CorruptFileError(f"{path} is not a bbqlib file (bad magic)")
    _, version, header_len, header_crc, _ = _PREFIX.unpack(prefix)
    check_format_version(path, "container", version, FORMAT_VERSION)
    header = f.read(header_len)
    if len(header) < header_len:
        raise CorruptFileError(f"{path} is truncated (header cut short)")
    if zlib.crc32(header) != header_crc:
        raise CorruptFileError(f"{path} is corrupted (header checksum mismatch)")
    if size < _FOOTER.size:
        raise CorruptFileError(f"{path} is truncated (no footer)")
    f.seek(size - _FOOTER.size)
    magic, footer_crc, _, total = _FOOTER.unpack(f.read(_FOOTER.size))
    if magic != FOOTER_MAGIC or footer_crc != header_crc or total != size:
        raise CorruptFileError(
            f"{path} is truncated or corrupted (footer missing or mismatched: "
            f"file has {size} bytes)"
        )
    try:
        parsed = json.loads(header)
    except ValueError as err:
        raise CorruptFileError(f"{path} has an unreadable header: {err}") from None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("kind"), str):
        raise CorruptFileError(f"{path} has a malformed header (no 'kind')")
    if not isinstance(parsed.get("meta", {}), dict) or not isinstance(parsed.get("sections"), list):
        raise CorruptFileError(f"{path} has a malformed header ('meta' or 'sections')")
    return parsed


def read_kind(path) -> str:
    """The ``kind`` of a container (e.g. ``"flat_index"``) without reading its sections."""
    path = Path(path)
    with open(path, "rb") as f:
        return _read_header(f, path, os.fstat(f.fileno()).st_size)["kind"]


class Container(NamedTuple):
    """What :func:`open_container` returns: the header's kind and meta, the arrays, and each
    section's recorded CRC32 (to check a section later, e.g. before rewriting it)."""

    kind: str
    meta: dict
    arrays: dict
    crcs: dict


def _section(sec, path: Path, size: int):
    """``(name, dtype, shape, offset, nbytes, crc)`` of a section entry, or CorruptFileError."""
    try:
        name = str(sec["name"])
        descr = sec["dtype"]
        dtype = np.lib.format.descr_to_dtype(
            [tuple(x) for x in descr] if isinstance(descr, list) else descr
        )
        shape = tuple(int(v) for v in sec["shape"])
        offset, nbytes, crc = int(sec["offset"]), int(sec["nbytes"]), int(sec["crc32"])
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise CorruptFileError(f"{path} has a malformed section entry ({err!r})") from None
    if dtype.hasobject or min(shape, default=0) < 0 or offset < 0:
        raise CorruptFileError(f"{path} has a malformed section entry for {name!r}")
    if nbytes != int(np.prod(shape, dtype=np.int64)) * dtype.itemsize:
        raise CorruptFileError(
            f"{path} is corrupted (section {name!r}: {nbytes} bytes for shape {shape})"
        )
    if offset + nbytes > size:
        raise CorruptFileError(f"{path} is truncated (section {name!r} cut short)")
    return name, dtype, shape, offset, nbytes, crc


def open_container(
    path,
    *,
    mmap: bool = True,
    verify: bool = True,
    defer: Collection[str] = (),
    expect_bytes: int | None = None,
) -> Container:
    """Read a container: its kind, meta, arrays and the sections' recorded CRC32s.

    Parameters
    ----------
    mmap : memory-map the sections (read-only) instead of reading them into RAM. The file
        is mapped once, from the descriptor its header was read from; every section is a
        read-only view of that map.
    verify : check every section's CRC32 now (reads every byte once). Without it, callers
        check what they read with :func:`crc32_of` against ``crcs``.
    defer : names of memory-mapped sections not to check now, because the caller checks
        them piece by piece as it reads them (e.g. a flat index's vectors by block of rows:
        opening a large file then reads only what its first search needs).
    expect_bytes : the size the caller's records give the file (e.g. an IVF header's
        record of its posting file); another size raises ``CorruptFileError``.
    """
    path = Path(path)
    try:
        f = open(path, "rb")
    except FileNotFoundError:
        raise FileNotFoundError(f"no bbqlib file at {path}") from None
    with f:
        size = os.fstat(f.fileno()).st_size
        if expect_bytes is not None and size != expect_bytes:
            raise CorruptFileError(
                f"{path} has {size} bytes, its index records {expect_bytes}: the file is "
                "truncated or was replaced by another"
            )
        header = _read_header(f, path, size)
        entries = [_section(sec, path, size) for sec in header["sections"]]
        # One map of the whole file, from this descriptor (the map keeps its own reference
        # to the file, so closing f leaves it valid).
        whole = _mmap.mmap(f.fileno(), size, access=_mmap.ACCESS_READ) if mmap else None
        arrays, crcs = {}, {}
        for name, dtype, shape, offset, nbytes, crc in entries:
            if nbytes == 0:
                arr = np.empty(shape, dtype=dtype)
            elif mmap:
                arr = np.ndarray(shape, dtype=dtype, buffer=whole, offset=offset)
            else:
                f.seek(offset)
                arr = np.frombuffer(f.read(nbytes), dtype=dtype).reshape(shape).copy()
            if verify and not (mmap and name in defer) and crc32_of(arr) != crc:
                raise CorruptFileError(
                    f"{path} is corrupted (checksum mismatch in section {name!r})"
                )
            arrays[name] = arr
            crcs[name] = crc
    return Container(header["kind"], header.get("meta", {}), arrays, crcs)


def peek_container(path) -> tuple[Container, int]:
    """A container's kind, meta and section CRC32s (``arrays`` empty) and its size in bytes,
    from its header alone (one descriptor; no section is read)."""
    path = Path(path)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        header = _read_header(f, path, size)
    crcs = {}
    for sec in header["sections"]:
        name, *_, crc = _section(sec, path, size)
        crcs[name] = crc
    return Container(header["kind"], header.get("meta", {}), {}, crcs), size


def read_container(path, *, mmap: bool = True, verify: bool = True, defer: Collection[str] = ()):
    """Read a container: ``(kind, meta, arrays)`` (see :func:`open_container`)."""
    c = open_container(path, mmap=mmap, verify=verify, defer=defer)
    return c.kind, c.meta, c.arrays
