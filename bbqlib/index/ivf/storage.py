"""On-disk layout of an :class:`~bbqlib.index.ivf.IVFIndex`: a directory of generations.

See ``docs/ivf-format.md`` for the full description. In short::

    <dir>/MANIFEST                 JSON: magic, format version, generation, header file name
    <dir>/header.<gen>.bbq         container "ivf_header": meta + centroids (small, read at open)
    <dir>/postings.<gen>.bbq       container "ivf_postings": codes, factors, rows, assignments,
                                   the caller's ids of the rows (format 4, when custom)
    <dir>/vectors.<token>.npy      immutable segments of rerank vectors (float32, float16 or
                                   int8 records: ``meta["vector_dtype"]``, format 6)

A save writes every file of the new generation (each atomically: temporary file, fsync,
rename), then swaps ``MANIFEST`` atomically, then deletes files no generation references.
A crash at any point leaves a ``MANIFEST`` naming a complete generation. Posting lists carry a
CRC32 each (over the list's codes, factors and ids; format 2 adds one over its lookup-table
blocks, factors and ids), checked the first time a search reads the list and by :func:`verify`.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import numpy as np

from ...search.stored import VECTOR_KINDS
from ...storage.atomic import (
    DIR_LOCK_NAME,
    LockError,
    atomic_path,
    dir_lock_path,
    is_temp_name,
    path_lock,
    remove_temp_files,
    resolve_target,
)
from ...storage.blocks import BlockChecksums, advise_random
from ...storage.container import (
    CorruptFileError,
    check_format_version,
    crc32_of,
    open_container,
    read_container,
    write_container,
)
from . import binding as BI
from .binding import postings_meta
from .listcrc import bad_lists, list_crc, list_crcs
from .segments import Segment, map_segment, with_block_checksums, write_segment
from .staging import STAGING, remove_dead_staging

__all__ = [
    "MANIFEST",
    "MAGIC",
    "FORMAT_VERSION",
    "Segment",
    "StaleIndexError",
    "directory_lock",
    "list_crc",
    "list_crcs",
    "bad_lists",
    "postings_meta",
    "write_segment",
    "save_generation",
    "open_generation",
    "verify_generation",
    "vector_kind_of",
]

MANIFEST = "MANIFEST"
MAGIC = "bbqlib-ivf"
#: 2 adds ``lut_codes`` to the postings (the codes again, in blocks of 32 per list, for the
#: lookup-table scan) with their own per-list CRC32 (``list_lut_crc`` in the header);
#: 3 records the quantizer (any family; ``meta["quantizer"]``, ``quantizer.*`` arrays) and
#: each list's encoding wire number (``list_wire``); 4 the caller's ids (``row_ids`` int64
#: [ntotal] in the postings when any was given; ``custom_ids``, ``next_id`` in the header).
#: 5 a CRC32 per block of rows of every vector segment (``block_rows``, ``block_crc32`` in
#: each ``vector_segments`` entry, required from 5 on). Formats 1 to 4 still open and serve
#: (ids = rows before 4; their segments are checked whole by ``verify()`` until a save
#: writes them a format-5 header, which computes their block checksums). 6 the kind of the
#: vector segments (``vector_dtype`` in the header: ``"float32"``, ``"float16"``, ``"int8"``
#: records of :mod:`bbqlib.search.stored`, or null; absent: float32), the block CRC32s
#: over the stored bytes of that kind, and the search defaults (``visit_percentage``,
#: ``oversample``). Formats 1 to 5 open with float32 vectors and no search defaults. 7 lets
#: the postings' ``factors`` have the quantizer's width (``pair_factor_width``: 4 for the
#: correction algebra's rows, ``1 + 2S`` for SAQ's records with the centre term folded in);
#: every format-6 directory is a valid format-7 one. 8 checks vector segments per row: one
#: CRC32 per row (``block_rows`` 1), kept in the header's section named by the entry's
#: ``block_crc32_section`` instead of a JSON list, so a search reads and checks only the rows
#: it reranks. Formats 5-7 (blocks of 256 rows in the JSON) open and serve as before; a save
#: gives their segments per-row checksums (reading each once, its whole CRC32 checked).
#: 9 binds every file of a generation to its header: a random token per generation in
#: ``MANIFEST`` and the header (``token``), the posting file's own token in its meta and in
#: the header (``postings_token``) with its section CRC32 table (``postings_section_crc32``),
#: compared at open with the posting file's container header; the header's
#: ``format_version`` must be the MANIFEST's; each vector segment's first and last row are
#: checked against the header's row CRC32s at open. Formats 1-8 open as before.
FORMAT_VERSION = 9
#: The first format whose segment entries must carry block checksums.
BLOCK_CRC_FORMAT = 5
HEADER_KIND = "ivf_header"
POSTINGS_KIND = "ivf_postings"
_OWNED = re.compile(r"^(header\.\d+\.bbq|postings\.\d+\.bbq|vectors\.[0-9a-f]+\.npy)$")
_HEADER_NAME = re.compile(r"^header\.\d{6,}\.bbq$")
#: The names a build writes before its first MANIFEST (exactly as this code makes them): what
#: a killed or failed first build leaves, removed where no MANIFEST names a generation.
_FIRST_BUILD = re.compile(
    r"^(header\.\d{6,}\.bbq|postings\.\d{6,}\.bbq|vectors\.[0-9a-f]{16}\.npy)$"
)
#: Targets whose temporary files belong to the directory (its writer holds the dir lock).
_TEMP_TARGETS = re.compile(r"^(MANIFEST|work\.f32|" + _OWNED.pattern[2:-2] + r")$")
#: Times an open retries when a concurrent save replaced the generation it was reading.
_OPEN_RETRIES = 8


class StaleIndexError(RuntimeError):
    """Another process saved a newer generation of the directory since this index read its
    own; saving would drop that process's changes. Reopen (``IVFIndex.open``) and redo."""


def directory_lock(directory, *, blocking: bool = True, timeout: float | None = None):
    """The advisory lock every writer of the IVF directory holds (:mod:`bbqlib.storage.locks`:
    raises ``LockError`` when it cannot be taken, ``LockTimeoutError`` after ``timeout``)."""
    return path_lock(dir_lock_path(directory), blocking=blocking, timeout=timeout)


# --------------------------------------------------------------------------- checksums


# --------------------------------------------------------------------------- generations


def vector_kind_of(meta: dict) -> str:
    """The kind of a header's vector segments (format 6 ``vector_dtype``; before: float32)."""
    kind = meta.get("vector_dtype") or "float32"
    if kind not in VECTOR_KINDS:
        raise ValueError(f"unknown vector_dtype {kind!r}")
    return kind


def _read_manifest(directory: Path) -> dict | None:
    path = directory / MANIFEST
    try:
        text = path.read_text()
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as err:  # unreadable, or not UTF-8
        raise CorruptFileError(f"{path} is not a readable IVF manifest ({err})") from None
    try:
        manifest = json.loads(text)
    except ValueError as err:
        raise CorruptFileError(f"{path} is not a valid IVF manifest ({err})") from None
    if not isinstance(manifest, dict) or manifest.get("magic") != MAGIC:
        raise CorruptFileError(f"{path} is not a bbqlib IVF manifest (bad magic)")
    check_format_version(path, "IVF", manifest.get("format_version"), FORMAT_VERSION)
    gen, header = manifest.get("generation"), manifest.get("header")
    if isinstance(gen, bool) or not isinstance(gen, int) or gen < 1:
        raise CorruptFileError(f"{path} is corrupted (generation {gen!r})")
    if not isinstance(header, str) or not _HEADER_NAME.match(header):
        raise CorruptFileError(f"{path} is corrupted (header file name {header!r})")
    BI.check_manifest_token(path, manifest)
    return manifest


def save_generation(
    directory,
    meta: dict,
    header_arrays: dict[str, np.ndarray],
    postings_arrays: dict[str, np.ndarray] | Path,
    segments: list[Segment],
    *,
    expect_generation: int | None = None,
) -> tuple[int, list[Segment]]:
    """Write a new generation into ``directory`` and make it current.

    Segments already stored in ``directory`` are referenced, the others are written (a stored
    segment of another directory is copied and its CRC32 checked on the way); the same for
    ``postings_arrays`` when it is the path of a posting file in ``directory`` (unchanged
    postings, e.g. after a delete). Holds the directory's lock throughout. Returns the
    generation number and the segments as stored (memory-mapped from ``directory``).

    ``expect_generation``: the generation the caller's data was read from; if the directory
    moved on since (another process saved), :class:`StaleIndexError` is raised and nothing
    is written.
    """
    directory = resolve_target(directory)  # a symlinked directory: write into its target
    directory.mkdir(parents=True, exist_ok=True)
    with directory_lock(directory):
        manifest = _read_manifest(directory)
        current = int(manifest["generation"]) if manifest else 0
        if expect_generation == 0 and current:
            raise FileExistsError(
                f"{directory} already holds an IVF index (generation {current}); open it with "
                "IVFIndex.open(path) or bbqlib.load(path), or pass overwrite=True to replace it"
            )
        if expect_generation is not None and current != expect_generation:
            raise StaleIndexError(
                f"the IVF index at {directory} is at generation {current}, but this index "
                f"was read from generation {expect_generation}: another process saved it "
                "since. Reopen it with IVFIndex.open and apply the change again"
            )
        remove_temp_files_of(directory)
        generation = current + 1
        stored = []
        for seg in segments:
            if seg.file is not None and seg.file.parent.resolve() == directory.resolve():
                stored.append(with_block_checksums(seg))  # kept from format <= 4: add them
            else:
                kind, dim = seg.kind, int(meta["dim"])
                blocks = _blocks(seg.array)
                stored.append(
                    write_segment(directory, blocks, dim, kind=kind, expect_crc=seg.crc32)
                )
        token = BI.new_token()  # binds this generation's MANIFEST, header and files
        meta = dict(meta)
        meta["generation"] = generation
        meta["token"] = token
        meta["vector_segments"] = [_segment_entry(s, i) for i, s in enumerate(stored)]
        header_arrays = {**header_arrays, **_segment_sections(stored)}
        header_name = f"header.{generation:06d}.bbq"
        same_dir = isinstance(postings_arrays, Path) and (
            postings_arrays.parent.resolve() == directory.resolve()
        )
        if same_dir:
            postings_name = postings_arrays.name
        else:
            if isinstance(postings_arrays, Path):  # unchanged postings of another directory
                # verify: a copy must not launder damage into fresh checksums
                _, _, postings_arrays = read_container(postings_arrays, mmap=True, verify=True)
            postings_name = f"postings.{generation:06d}.bbq"
            write_container(directory / postings_name, POSTINGS_KIND,
                            BI.postings_meta(generation, token), postings_arrays,
                            lock=False)  # fmt: skip
        meta.update(BI.postings_binding(directory / postings_name))
        write_container(directory / header_name, HEADER_KIND, meta, header_arrays, lock=False)
        new_manifest = {
            "magic": MAGIC,
            "format_version": FORMAT_VERSION,
            "generation": generation,
            "header": header_name,
            "token": token,
        }
        with atomic_path(directory / MANIFEST, lock=False) as tmp:
            tmp.write_text(json.dumps(new_manifest, indent=1) + "\n")
        _collect_garbage(directory, {header_name, postings_name, *(s.file.name for s in stored)})
    return generation, stored


#: Prefix of the header sections that hold the vector segments' per-row CRC32s.
SEGMENT_CRC_SECTION = "vector_block_crc32."


def _segment_entry(s: Segment, i: int) -> dict:
    entry = {"file": s.file.name, "rows": len(s), "crc32": int(s.crc32)}
    # every stored segment has them, one per row (with_block_checksums)
    entry.update(s.blocks.to_meta(section=f"{SEGMENT_CRC_SECTION}{i}"))
    return entry


def _segment_sections(stored: list[Segment]) -> dict[str, np.ndarray]:
    return {f"{SEGMENT_CRC_SECTION}{i}": s.blocks.crcs for i, s in enumerate(stored)}


def _blocks(arr: np.ndarray, rows: int = 65536):
    for start in range(0, arr.shape[0], rows):  # rows of the stored kind, copied as they are
        yield np.ascontiguousarray(arr[start : start + rows])


def remove_temp_files_of(directory: Path) -> list[tuple[str, int]]:
    """Remove the temporary files of the directory's own files (caller holds its lock)."""
    removed = []
    for name in {m for m in os.listdir(directory) if is_temp_name(m)}:
        target = name[1:].rsplit(".", 2)[0] if name.endswith(".tmp") else "work.f32"
        if _TEMP_TARGETS.match(target):
            removed += remove_temp_files(directory, target)
    return removed


def _collect_garbage(directory: Path, keep: set[str]) -> list[tuple[str, int]]:
    """Delete the files of other generations (only names this format owns), and temporary
    files of this directory's writers. The caller holds the directory's lock."""
    removed = remove_temp_files_of(directory) + remove_dead_staging(directory)
    for entry in os.scandir(directory):
        if _OWNED.match(entry.name) and entry.name not in keep:
            try:
                size = entry.stat().st_size
                os.unlink(entry.path)
            except OSError:  # another process may have removed it; not our business
                continue
            removed.append((entry.name, size))
    return removed


def _keep_of(manifest: dict, meta: dict) -> set[str]:
    return {
        manifest["header"],
        meta["postings_file"],
        *(s["file"] for s in meta["vector_segments"]),
    }


def clean_directory(
    directory, *, blocking: bool = False, timeout: float | None = None, keep=None
) -> list | None:
    """Remove what killed writers left in ``directory``: temporary files and files of no
    generation (a save killed before or after its ``MANIFEST`` swap).

    Only when no live writer holds the directory's lock (``blocking=False``: else return
    None at once; ``blocking=True``: wait at most ``timeout`` seconds, then raise
    ``LockTimeoutError``; None: the lock timeout). A lock that cannot be taken (read-only
    file system, no permission) raises ``LockError``; an open catches it and skips. Files
    of the current generation are never touched; files of older generations that another
    process still maps stay readable to it (POSIX keeps an unlinked file's data while it is
    mapped).
    ``keep``: ``(generation, names)`` the caller just read (skips re-reading the header).
    Returns ``(name, bytes)`` of what was removed.
    """
    directory = Path(directory)
    lock = dir_lock_path(directory)
    with path_lock(lock, blocking=blocking, timeout=timeout, reentrant=False) as got:
        if not got:
            return None
        manifest = _read_manifest(directory)
        if manifest is None:
            return remove_first_build_files(directory)
        if keep is not None and keep[0] == manifest["generation"]:
            names = keep[1]
        else:
            try:
                meta = read_container(directory / manifest["header"], mmap=False)[1]
                names = _keep_of(manifest, meta)
            except (OSError, ValueError, KeyError, TypeError):
                return remove_temp_files_of(directory)  # damaged: keep every generation
        return _collect_garbage(directory, names)


def remove_first_build_files(directory: Path) -> list[tuple[str, int]]:
    """In a directory without ``MANIFEST``: remove what a failed or killed first build left
    (temporary files, the working copy, vector segments and files of a generation never
    committed), only under the exact names this code gives them. The caller holds the
    directory's lock, so no live writer owns them."""
    removed = remove_temp_files_of(directory) + remove_dead_staging(directory)
    for entry in os.scandir(directory):
        if _FIRST_BUILD.match(entry.name) and entry.is_file(follow_symlinks=False):
            try:
                size = entry.stat().st_size
                os.unlink(entry.path)
            except OSError:
                continue
            removed.append((entry.name, size))
    return removed


def first_build_leftovers(directory: Path) -> bool:
    """Whether a directory without ``MANIFEST`` holds what a first build leaves (cheap)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return False
    return any(is_temp_name(n) or n == DIR_LOCK_NAME or _FIRST_BUILD.match(n) or STAGING.match(n)
               for n in names)  # fmt: skip


def _litter(directory: Path, names: set[str]) -> bool:
    """Whether ``directory`` holds temporary files or files of no generation (cheap)."""
    return any(is_temp_name(n) or n == DIR_LOCK_NAME or STAGING.match(n)
               or (_OWNED.match(n) and n not in names) for n in os.listdir(directory))  # fmt: skip


def _owned_name(directory: Path, name, what: str) -> str:
    if not isinstance(name, str) or not _OWNED.match(name):
        raise CorruptFileError(
            f"the IVF header of {directory} is corrupted ({what} file name {name!r})"
        )
    return name


def _open_once(directory: Path, manifest: dict):
    header_path = directory / manifest["header"]
    try:
        kind, meta, header_arrays = read_container(header_path, mmap=False, verify=True)
    except FileNotFoundError:
        raise CorruptFileError(
            f"the IVF index at {directory} is incomplete: header file {header_path.name} named "
            f"by {MANIFEST} is missing; restore the file or rebuild the index"
        ) from None
    if kind != HEADER_KIND:
        raise CorruptFileError(f"{header_path} holds a {kind!r}, not an IVF header")
    version = int(manifest["format_version"])
    try:
        postings_name = _owned_name(directory, meta["postings_file"], "posting")
        postings_bytes = int(meta["postings_bytes"])
        entries = [
            (_owned_name(directory, s["file"], "vector"), int(s["rows"]), int(s["crc32"]), s)
            for s in meta["vector_segments"]
        ]
        dim = int(meta["dim"])
        kind = vector_kind_of(meta)
    except (KeyError, TypeError, ValueError) as err:
        raise CorruptFileError(f"{header_path} is malformed (meta: {err!r})") from None
    BI.check_header(header_path, manifest, meta)
    postings_path = directory / postings_name
    try:  # one descriptor: its size, container header and map
        posting_file = open_container(
            postings_path, mmap=True, verify=False, expect_bytes=postings_bytes
        )
    except FileNotFoundError:
        raise CorruptFileError(
            f"the IVF index at {directory} is incomplete: posting file {postings_path.name} "
            "is missing; restore the file or rebuild the index"
        ) from None
    if posting_file.kind != POSTINGS_KIND:
        raise CorruptFileError(f"{postings_path} holds a {posting_file.kind!r}, not IVF postings")
    if version >= BI.BIND_FORMAT:
        BI.check_postings(postings_path, posting_file, meta)
    for arr in posting_file.arrays.values():
        advise_random(arr)  # a search reads a few lists: no read-around of megabytes
    postings = dict(posting_file.arrays)
    postings["_section_crcs"] = posting_file.crcs
    if version >= BLOCK_CRC_FORMAT and any(
        "block_crc32" not in e and "block_crc32_section" not in e for *_, e in entries
    ):
        raise CorruptFileError(
            f"{header_path} (format {manifest['format_version']}) lists a vector file without "
            "its block checksums; restore the files or rebuild the index"
        )
    segments = []
    for name, rows, crc, entry in entries:
        path = directory / name
        arr = map_segment(path, rows, dim, kind)
        blocks = BlockChecksums.from_meta(entry, rows, path, header_arrays)
        if version >= BI.BIND_FORMAT:
            BI.check_segment_ends(blocks, arr)
        segments.append(Segment(arr, path, crc, blocks))
    for name in [n for n in header_arrays if n.startswith(SEGMENT_CRC_SECTION)]:
        del header_arrays[name]  # held by the segments' checksums
    return meta, header_arrays, postings, segments


def open_generation(directory):
    """Open the current generation: ``(meta, header_arrays, postings_arrays, segments)``.

    The header is read and checked whole, and its generation checked against ``MANIFEST``;
    postings and vectors are memory-mapped after their headers, footers and sizes are
    checked (their contents are checked per list and per block of rows on first read, or
    all at once by :func:`verify_generation`). A save by another process that replaces the
    generation while it is being opened makes the open start again on the new one. When no
    writer holds the directory's lock, what killed writers left is removed first
    (:func:`clean_directory`). ``postings_arrays["_section_crcs"]`` holds the posting
    file's section CRC32s.
    """
    directory = Path(directory)
    if directory.is_file():
        msg = "a flat index is one file: bbqlib.load(path) opens either kind"
        raise NotADirectoryError(f"{directory} is a file, not an IVF index directory ({msg})")
    if not directory.is_dir():
        raise FileNotFoundError(f"no IVF index directory at {directory}")
    for attempt in range(_OPEN_RETRIES):
        manifest = _read_manifest(directory)
        if manifest is None:
            if first_build_leftovers(directory):  # a failed or killed first build
                clean_directory(directory)
            raise FileNotFoundError(
                f"{directory} holds no IVF index (no {MANIFEST} file); build one with "
                "IVFIndex(...).add(X) and save(path)"
            )
        try:
            opened = _open_once(directory, manifest)
        except (CorruptFileError, FileNotFoundError):
            again = _read_manifest(directory)
            if attempt + 1 == _OPEN_RETRIES or again is None or again == manifest:
                raise  # the damage is real, not a save that replaced the files under us
            continue
        names = _keep_of(manifest, opened[0])
        if _litter(directory, names):
            try:
                clean_directory(directory, keep=(manifest["generation"], names))
            except LockError:  # read-only, or not ours to write: an open still serves
                pass
        return opened
    raise AssertionError("unreachable")  # pragma: no cover


def verify_generation(directory) -> dict:
    """Check every checksum of the current generation; raise ``CorruptFileError`` if one fails."""
    directory = Path(directory)
    meta, header, postings, segments = open_generation(directory)
    return verify_arrays(directory, meta, header, postings, segments)


def verify_arrays(directory, meta, header, postings, segments) -> dict:
    """Check every checksum of an opened generation (its maps, whatever is on disk now)."""
    for crcs, blocks in ((header["list_crc"], False), (header.get("list_lut_crc"), True)):
        if crcs is None:
            continue
        bad = bad_lists(postings, header["list_start"], crcs, blocks=blocks)
        if bad.size:
            raise CorruptFileError(
                f"posting file {directory / meta['postings_file']} is corrupted: {bad.size} "
                f"list(s) fail their CRC32 (first: list {bad[0]}); rebuild the index"
            )
    section_crcs = postings.get("_section_crcs", {})
    for name, crc in section_crcs.items():
        if name in postings and crc32_of(postings[name]) != crc:
            raise CorruptFileError(
                f"posting file {directory / meta['postings_file']} is corrupted (checksum "
                f"mismatch in section {name!r})"
            )
    for seg in segments:
        if crc32_of(seg.array) != seg.crc32:
            raise CorruptFileError(f"vector file {seg.file} is corrupted (CRC32 mismatch)")
        if seg.blocks is not None:
            seg.blocks.check_all(seg.array)
    return {
        "generation": meta["generation"],
        "lists": int(header["list_crc"].size),
        "vector_segments": len(segments),
    }
