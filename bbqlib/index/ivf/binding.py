"""Binding the files of an IVF generation to its header (IVF format 9).

``MANIFEST`` and the header carry one random token per generation (``token``); every posting
file carries its own token in its meta, and the header records the token, size and section
CRC32 table of the posting file it uses (posting files are reused across generations, e.g.
after a delete). At open these are compared with what the posting file's container header
says (no section is read), and each vector segment's first and last row with the header's
row CRC32s: a file of another index, copy or generation (ids and tombstones included) is a
``CorruptFileError`` at open. ``verify()`` still reads every byte.
"""

from __future__ import annotations

import re
import secrets
from pathlib import Path

import numpy as np

from ...storage.container import CorruptFileError, peek_container

__all__ = [
    "BIND_FORMAT", "new_token", "check_manifest_token", "check_header", "postings_meta",
    "postings_binding", "check_postings", "check_segment_ends",
]  # fmt: skip

#: The first IVF format whose files are bound to their header by tokens and CRC tables.
BIND_FORMAT = 9
_TOKEN = re.compile(r"^[0-9a-f]{16}$")


def new_token() -> str:
    """A fresh random token (16 hex digits)."""
    return secrets.token_hex(8)


def check_manifest_token(path: Path, manifest: dict) -> None:
    """A MANIFEST of format 9 on names its generation's token."""
    token = manifest.get("token")
    if int(manifest["format_version"]) >= BIND_FORMAT and not (
        isinstance(token, str) and _TOKEN.match(token)
    ):
        raise CorruptFileError(f"{path} is corrupted (generation token {token!r})")


def check_header(header_path: Path, manifest: dict, meta: dict) -> None:
    """The header's format version, generation and token against ``MANIFEST``'s."""
    version = int(manifest["format_version"])
    if meta.get("format_version") != version:
        raise CorruptFileError(
            f"{header_path} has IVF format version {meta.get('format_version')!r} but "
            f"MANIFEST names format {version}: the header belongs to another index or "
            "bbqlib; restore the files or rebuild the index"
        )
    if meta.get("generation") != manifest["generation"]:
        raise CorruptFileError(
            f"{header_path} holds generation {meta.get('generation')!r} but MANIFEST names "
            f"generation {manifest['generation']}: a stale or foreign header; restore the "
            "files or rebuild"
        )
    if version >= BIND_FORMAT and meta.get("token") != manifest["token"]:
        raise CorruptFileError(
            f"{header_path} holds generation token {meta.get('token')!r} but MANIFEST names "
            f"{manifest['token']!r}: the header belongs to another copy or generation of the "
            "index; restore the files or rebuild the index"
        )


def postings_meta(generation: int, token: str | None = None) -> dict:
    """The meta of a new posting file: its generation and its token (format 9), which the
    headers that use it record (``postings_token``); a fresh token unless given."""
    return {"generation": int(generation), "token": token or new_token()}


def postings_binding(path: Path) -> dict:
    """What a header records of its posting file: name, size, token and section CRC32 table,
    all from the file's container header (no section read). A posting file of format 8 or
    older has no token (``None``); its size and CRC table still bind it."""
    posting_file, size = peek_container(path)
    return {
        "postings_file": path.name,
        "postings_bytes": size,
        "postings_token": posting_file.meta.get("token"),
        "postings_section_crc32": {k: int(v) for k, v in posting_file.crcs.items()},
    }


def check_postings(path: Path, posting_file, meta: dict) -> None:
    """The posting file's token and section CRC32 table, from its container header, against
    the header's records (format 9): a posting file of another index or generation, e.g. one
    with the same vectors and other ids, differs in one or the other."""
    recorded = meta.get("postings_section_crc32")
    if not isinstance(recorded, dict):
        raise CorruptFileError(
            f"the IVF header of {path.parent} is malformed (no postings_section_crc32)"
        )
    token = posting_file.meta.get("token")
    if token != meta.get("postings_token"):
        raise CorruptFileError(
            f"posting file {path} has token {token!r}, the header records "
            f"{meta.get('postings_token')!r}: the file belongs to another index or generation; "
            "restore the files or rebuild the index"
        )
    crcs = {k: int(v) for k, v in posting_file.crcs.items()}
    differ = sorted(k for k in set(crcs) | set(recorded) if crcs.get(k) != recorded.get(k))
    if differ:
        raise CorruptFileError(
            f"posting file {path} does not match its header (the CRC32s of sections "
            f"{', '.join(differ)} differ): the file belongs to another index or generation; "
            "restore the files or rebuild the index"
        )


def check_segment_ends(blocks, arr: np.ndarray) -> None:
    """A vector segment's first and last row against the header's row CRC32s: a segment of
    another index with the same shape fails at open, not at some later rerank (two rows
    read, the first on the page of the ``.npy`` header that the open reads anyway)."""
    rows = arr.shape[0]
    if blocks is None or rows == 0:
        return
    try:
        blocks.check(arr, np.array([0, rows - 1], dtype=np.int64))
    except CorruptFileError as err:
        raise CorruptFileError(
            f"{err} (checked at open: the vector file may belong to another index)"
        ) from None
