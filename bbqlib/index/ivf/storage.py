"""On-disk layout of an :class:`~bbqlib.index.ivf.IVFIndex`: a directory of generations.

See ``docs/ivf-format.md`` for the full description. In short::

    <dir>/MANIFEST                 JSON: magic, format version, generation, header file name
    <dir>/header.<gen>.bbq         container "ivf_header": meta + centroids (small, read at open)
    <dir>/postings.<gen>.bbq       container "ivf_postings": codes, factors, rows, assignments,
                                   the caller's ids of the rows (format 4, when custom)
    <dir>/vectors.<token>.npy      immutable segments of rerank vectors (float32, float16 or
                                   int8 records: ``meta["vector_dtype"]``)

A save writes every file of the new generation (each atomically: temporary file, fsync,
rename), then swaps ``MANIFEST`` atomically, then deletes files no generation references.
A crash at any point leaves a ``MANIFEST`` naming a complete generation. Posting lists carry a
CRC32 each (over the list's codes, factors and ids; format 2 adds one over its lookup-table
blocks, factors and ids), checked the first time a search reads the list and by :func:`verify`.
"""

from __future__ import annotations

import json
import mmap
import os
import re
import secrets
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...io.container import (
    CorruptFileError,
    check_format_version,
    crc32_of,
    read_container,
    write_container,
)
from ...io.vectors import atomic_path
from ...packing import lut_block_starts
from ...scoring.stored import stored_kind_of, to_stored, vector_dtype

__all__ = [
    "MANIFEST",
    "MAGIC",
    "FORMAT_VERSION",
    "Segment",
    "list_crc",
    "list_crcs",
    "write_segment",
    "save_generation",
    "open_generation",
    "verify_generation",
]

MANIFEST = "MANIFEST"
MAGIC = "bbqlib-ivf"
#: 2 adds ``lut_codes`` to the postings (the codes again, in blocks of 32 per list, for the
#: lookup-table scan) with their own per-list CRC32 (``list_lut_crc`` in the header);
#: 3 records the quantizer (any family; ``meta["quantizer"]``, ``quantizer.*`` arrays) and
#: each list's encoding wire number (``list_wire``); 4 the caller's ids (``row_ids`` int64
#: [ntotal] in the postings when any was given; ``custom_ids``, ``next_id`` in the header).
#: 5 the kind of the vector segments (``vector_dtype`` in the header: float32, float16 or
#: int8 records, :mod:`bbqlib.scoring.stored`; absent: float32) and the search defaults
#: (``visit_percentage``, ``oversample``). Formats 1 to 4 still open and serve.
FORMAT_VERSION = 5
HEADER_KIND = "ivf_header"
POSTINGS_KIND = "ivf_postings"
_OWNED = re.compile(r"^(header\.\d+\.bbq|postings\.\d+\.bbq|vectors\.[0-9a-f]+\.npy)$")
_CRC_CHUNK = 1 << 24


@dataclass
class Segment:
    """A block of stored vectors (rows ``start : start + len(array)`` of the index).

    ``file`` is the segment's path once it is on disk (then ``array`` is a read-only memory
    map of it) and ``crc32`` the CRC of its data bytes.
    """

    array: np.ndarray
    file: Path | None = None
    crc32: int | None = None

    def __len__(self) -> int:
        return self.array.shape[0]


# --------------------------------------------------------------------------- checksums


def _crc(arr: np.ndarray, crc: int = 0) -> int:
    flat = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
    for start in range(0, flat.size, _CRC_CHUNK):
        crc = zlib.crc32(flat[start : start + _CRC_CHUNK], crc)
    return crc


def list_crc(
    postings: dict, list_start: np.ndarray, j: int, block_starts=None, *, blocks: bool = False
) -> int:
    """CRC32 of posting list ``j``: its codes, factors and ids, chained in that order.

    ``blocks=True``: over its lookup-table blocks (format 2, ``lut_codes``) instead of its
    codes, the data a lookup-table search reads. ``block_starts``: ``lut_block_starts``.
    """
    start, stop = int(list_start[j]), int(list_start[j + 1])
    if blocks:
        if block_starts is None:
            block_starts = lut_block_starts(list_start)
        crc = _crc(postings["lut_codes"][int(block_starts[j]) : int(block_starts[j + 1])])
    else:
        crc = _crc(postings["codes"][start:stop])
    crc = _crc(postings["factors"][start:stop], crc)
    return _crc(postings["ids"][start:stop], crc)


def list_crcs(postings: dict, list_start: np.ndarray, *, blocks: bool = False) -> np.ndarray:
    """CRC32 of every list (uint32 [K]); ``blocks`` as in :func:`list_crc`."""
    k = list_start.shape[0] - 1
    block_starts = lut_block_starts(list_start)
    out = np.empty(k, dtype=np.uint32)
    for j in range(k):  # once per list at save time, not on a search path
        out[j] = list_crc(postings, list_start, j, block_starts, blocks=blocks)
    return out


# --------------------------------------------------------------------------- vectors


def write_segment(directory: Path, batches, dim: int, kind: str = "float32") -> Segment:
    """Stream batches into a new ``vectors.<token>.npy`` (atomic); return it mapped.

    ``batches`` yields float32 [m, dim] rows (stored as ``kind``, converted here) or rows
    already of ``kind``. The row count is not needed in
    advance: the ``.npy`` header is rewritten at the end (its length does not change, NumPy
    pads it to a fixed 64-byte multiple, and we reserve room for a 20-digit count).
    """
    directory = Path(directory)
    name = directory / f"vectors.{secrets.token_hex(8)}.npy"
    rows = 0
    crc = 0
    with atomic_path(name) as tmp, open(tmp, "wb") as f:
        header = _npy_header(10**19, dim, kind)  # widest count: fixes the header length
        f.write(header)
        for block in batches:
            if block.dtype.names is None and block.dtype != vector_dtype(kind, dim):
                block = to_stored(np.asarray(block, dtype=np.float32), kind)
            block = np.ascontiguousarray(block)
            crc = _crc(block, crc)
            f.write(block.tobytes())
            rows += block.shape[0]
        new_header = _npy_header(rows, dim, kind, pad_to=len(header))
        f.seek(0)
        f.write(new_header)
    return Segment(_map_segment(name, rows, dim, kind), name, crc)


def _advise_random(arr) -> None:
    """Tell the kernel that rerank reads of this map are random (no read-ahead).

    A rerank touches ``k'`` scattered rows per query; with the default read-ahead every
    page fault pulls in neighbouring pages nobody asked for, which under a memory cap
    evicts the pages that matter (the posting lists, read sequentially, keep read-ahead).
    """
    m = getattr(arr, "_mmap", None)
    if m is not None and hasattr(m, "madvise") and hasattr(mmap, "MADV_RANDOM"):
        m.madvise(mmap.MADV_RANDOM)


def _npy_header(rows: int, dim: int, kind: str = "float32", pad_to: int | None = None) -> bytes:
    dtype = vector_dtype(kind, dim)
    shape = (int(rows),) if dtype.names else (int(rows), int(dim))
    d = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": shape}
    text = repr(d)
    total = pad_to if pad_to is not None else -(-(10 + len(text) + 1 + 32) // 64) * 64
    body = text + " " * (total - 10 - len(text) - 1) + "\n"
    return b"\x93NUMPY\x01\x00" + len(body).to_bytes(2, "little") + body.encode("latin1")


def _map_segment(path: Path, rows: int, dim: int, kind: str = "float32") -> np.ndarray:
    if not path.exists():
        raise CorruptFileError(
            f"the IVF index at {path.parent} is incomplete: vector file {path.name} listed in "
            "its header is missing; restore the file or rebuild the index"
        )
    try:
        arr = np.load(path, mmap_mode="r")
    except ValueError as err:  # np.load names a truncated data part "cannot reshape"/"mmap"
        raise CorruptFileError(
            f"vector file {path} is truncated or corrupted ({err}); restore it or rebuild"
        ) from None
    _advise_random(arr)
    dtype = vector_dtype(kind, dim)
    shape = (rows,) if dtype.names else (rows, dim)
    if arr.shape != shape or arr.dtype != dtype:
        raise CorruptFileError(
            f"vector file {path} holds {arr.dtype} {arr.shape}, expected {kind} {shape}; "
            "the file does not belong to this index"
        )
    return arr.view(np.ndarray)


# --------------------------------------------------------------------------- generations


def _read_manifest(directory: Path) -> dict | None:
    path = directory / MANIFEST
    if not path.exists():
        return None
    try:
        manifest = json.loads(path.read_text())
    except ValueError as err:
        raise CorruptFileError(f"{path} is not a valid IVF manifest ({err})") from None
    if not isinstance(manifest, dict) or manifest.get("magic") != MAGIC:
        raise CorruptFileError(f"{path} is not a bbqlib IVF manifest (bad magic)")
    check_format_version(path, "IVF", manifest.get("format_version"), FORMAT_VERSION)
    return manifest


def save_generation(
    directory,
    meta: dict,
    header_arrays: dict[str, np.ndarray],
    postings_arrays: dict[str, np.ndarray] | Path,
    segments: list[Segment],
) -> tuple[int, list[Segment]]:
    """Write a new generation into ``directory`` and make it current.

    Segments already stored in ``directory`` are referenced, the others are written; the same
    for ``postings_arrays`` when it is the path of a posting file in ``directory`` (unchanged
    postings, e.g. after a delete). Returns the generation number and the segments as stored
    (memory-mapped from ``directory``).
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    manifest = _read_manifest(directory)
    generation = (int(manifest["generation"]) if manifest else 0) + 1
    stored = []
    for seg in segments:
        if seg.file is not None and seg.file.parent.resolve() == directory.resolve():
            stored.append(seg)
        else:
            kind = stored_kind_of(seg.array)
            dim = meta["dim"]
            stored.append(write_segment(directory, _blocks(seg.array), dim, kind))
    meta = dict(meta)
    meta["generation"] = generation
    meta["vector_segments"] = [
        {"file": s.file.name, "rows": len(s), "crc32": int(s.crc32)} for s in stored
    ]
    header_name = f"header.{generation:06d}.bbq"
    same_dir = isinstance(postings_arrays, Path) and (
        postings_arrays.parent.resolve() == directory.resolve()
    )
    if same_dir:
        postings_name = postings_arrays.name
    else:
        if isinstance(postings_arrays, Path):  # unchanged postings of another directory
            _, _, postings_arrays = read_container(postings_arrays, mmap=True, verify=False)
        postings_name = f"postings.{generation:06d}.bbq"
        write_container(
            directory / postings_name, POSTINGS_KIND, {"generation": generation}, postings_arrays
        )
    meta["postings_file"] = postings_name
    meta["postings_bytes"] = (directory / postings_name).stat().st_size
    write_container(directory / header_name, HEADER_KIND, meta, header_arrays)
    new_manifest = {
        "magic": MAGIC,
        "format_version": FORMAT_VERSION,
        "generation": generation,
        "header": header_name,
    }
    with atomic_path(directory / MANIFEST) as tmp:
        tmp.write_text(json.dumps(new_manifest, indent=1) + "\n")
    _collect_garbage(directory, {header_name, postings_name, *(s.file.name for s in stored)})
    return generation, stored


def _blocks(arr: np.ndarray, rows: int = 65536):
    for start in range(0, arr.shape[0], rows):
        yield np.ascontiguousarray(arr[start : start + rows])


def _collect_garbage(directory: Path, keep: set[str]) -> None:
    """Delete the files of older generations (only names this format owns)."""
    for entry in os.scandir(directory):
        if _OWNED.match(entry.name) and entry.name not in keep:
            try:
                os.unlink(entry.path)
            except OSError:  # another process may have removed it; not our business
                pass


def open_generation(directory):
    """Open the current generation: ``(meta, header_arrays, postings_arrays, segments)``.

    The header is read and checked whole; postings and vectors are memory-mapped after their
    headers, footers and sizes are checked (their contents are checked per list on first
    read, or all at once by :func:`verify_generation`).
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"no IVF index directory at {directory}")
    manifest = _read_manifest(directory)
    if manifest is None:
        raise FileNotFoundError(
            f"{directory} holds no IVF index (no {MANIFEST} file); build one with "
            "IVFIndex(...).add(X) and save(path)"
        )
    header_path = directory / manifest["header"]
    if not header_path.exists():
        raise CorruptFileError(
            f"the IVF index at {directory} is incomplete: header file {header_path.name} named "
            f"by {MANIFEST} is missing; restore the file or rebuild the index"
        )
    kind, meta, header_arrays = read_container(header_path, mmap=False, verify=True)
    if kind != HEADER_KIND:
        raise CorruptFileError(f"{header_path} holds a {kind!r}, not an IVF header")
    postings_path = directory / meta["postings_file"]
    if not postings_path.exists():
        raise CorruptFileError(
            f"the IVF index at {directory} is incomplete: posting file {postings_path.name} "
            "is missing; restore the file or rebuild the index"
        )
    size = postings_path.stat().st_size
    if size != meta["postings_bytes"]:
        raise CorruptFileError(
            f"posting file {postings_path} has {size} bytes, the header records "
            f"{meta['postings_bytes']}: the file is truncated or was replaced"
        )
    kind, _, postings = read_container(postings_path, mmap=True, verify=False)
    if kind != POSTINGS_KIND:
        raise CorruptFileError(f"{postings_path} holds a {kind!r}, not IVF postings")
    postings = {k: v.view(np.ndarray) for k, v in postings.items()}
    segments = [
        Segment(
            _map_segment(
                directory / s["file"], s["rows"], meta["dim"], meta.get("vector_dtype") or "float32"
            ),
            directory / s["file"],
            s["crc32"],
        )
        for s in meta["vector_segments"]
    ]
    return meta, header_arrays, postings, segments


def verify_generation(directory) -> dict:
    """Check every checksum of the current generation; raise ``CorruptFileError`` if one fails."""
    directory = Path(directory)
    meta, header, postings, segments = open_generation(directory)
    for crcs, blocks in ((header["list_crc"], False), (header.get("list_lut_crc"), True)):
        if crcs is None:
            continue
        bad = bad_lists(postings, header["list_start"], crcs, blocks=blocks)
        if bad.size:
            raise CorruptFileError(
                f"posting file {directory / meta['postings_file']} is corrupted: {bad.size} "
                f"list(s) fail their CRC32 (first: list {bad[0]}); rebuild the index"
            )
    read_container(directory / meta["postings_file"], mmap=True, verify=True)  # assignments
    for seg in segments:
        if crc32_of(seg.array) != seg.crc32:
            raise CorruptFileError(f"vector file {seg.file} is corrupted (CRC32 mismatch)")
    return {
        "generation": meta["generation"],
        "lists": int(header["list_crc"].size),
        "vector_segments": len(segments),
    }


def bad_lists(
    postings: dict, list_start: np.ndarray, crcs: np.ndarray, which=None, *, blocks=False
) -> np.ndarray:
    """Ids of the lists (all, or ``which``) whose CRC32 does not match."""
    which = np.arange(crcs.size) if which is None else np.asarray(which)
    block_starts = lut_block_starts(list_start)
    bad = [
        j
        for j in which  # first read of each list only (callers remember verified lists)
        if list_crc(postings, list_start, j, block_starts, blocks=blocks) != int(crcs[j])
    ]
    return np.asarray(bad, dtype=np.int64)
