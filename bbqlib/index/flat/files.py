"""A :class:`~bbqlib.FlatIndex` in one container file: what it holds, writing and reading it.

The container (:mod:`bbqlib.storage.container`) checks every section's CRC32 when it opens a file.
The float vectors are most of a flat file (1,536 of about 1,600 bytes per vector at d = 384),
and a search reads only its rerank candidates' rows of them. So since format 5 the file also
holds one CRC32 per block of :data:`~bbqlib.storage.blocks.BLOCK_ROWS` rows, and a memory-mapped
load checks each block on its first read instead of reading every row at ``load``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ...quantizers import EncodedVectors, quantizer_from_state
from ...search.stored import vector_dtype
from ...storage.atomic import clean_orphans
from ...storage.blocks import BLOCK_ROWS, BlockChecksums, advise_random
from ...storage.container import (
    CorruptFileError,
    check_format_version,
    crc32_of,
    open_container,
    write_container,
)
from ..ids import RowIds

__all__ = ["FORMAT_VERSION", "KIND", "write_flat", "read_flat"]

KIND = "flat_index"
#: Version of what a flat index file holds (docs/formats.md). 2: ``format_version`` in the
#: meta; int8 ``per_dim`` / ``global`` codes carry their own registry wire numbers; OSQ at
#: every width 1-8. 3: custom ids (``ids`` section, ``next_id``) and tombstones (``deleted``
#: bitmap, ``n_deleted``). 4: ``store_vectors`` names the kind of the ``vectors`` section
#: (``"float32"``, ``"float16"``, ``"int8"`` records, or false; ``true`` in older files is
#: float32) and ``oversample`` the index's default rerank depth. 5: the ``vectors`` section's
#: block CRC32s (section ``vector_block_crc32``, meta ``vector_block_rows``), checked per
#: block on first read. Versions 1-4 still open (their vectors are checked whole at load).
FORMAT_VERSION = 5


def write_flat(index, path) -> Path:
    """Write ``index`` to ``path`` atomically (the caller holds the index's read guard)."""
    if Path(path).is_dir():
        raise IsADirectoryError(
            f"cannot save a flat index to {path}: it is a directory, and a flat index is one "
            f"file; give a file path (e.g. {Path(path) / 'index.bbq'})"
        )
    q = index.quantizer
    codes, vectors = index._parts()
    params, q_arrays = q.get_state()
    arrays = {f"quantizer.{k}": v for k, v in q_arrays.items()}
    if codes is not None:
        arrays["codes"] = codes.codes
        arrays["corrections"] = codes.corrections
    meta_blocks = {}
    if vectors is not None and index.store_vectors:
        index._check_vector_rows(vectors, None)  # never re-bless a damaged row in a new file
        arrays["vectors"] = vectors
        blocks = BlockChecksums.of(vectors, BLOCK_ROWS)
        arrays["vector_block_crc32"] = blocks.crcs
        meta_blocks = {"vector_block_rows": blocks.block_rows}
    if not index._ids.is_identity:
        arrays["ids"] = np.asarray(index._ids.ids, dtype=np.int64)
    if index.n_deleted:
        arrays["deleted"] = np.packbits(index._deleted, bitorder="little")
    meta = {
        "format_version": FORMAT_VERSION,
        "quantizer": params,
        "encoding_wire": q.encoding_.wire,
        "similarity": q.similarity_.value,
        "dim": q.dim_,
        "ntotal": index.ntotal,
        "store_vectors": index.store_vectors,
        "oversample": index.oversample,
        "next_id": index._ids.next_id,
        "n_deleted": index.n_deleted,
        **meta_blocks,
    }
    return write_container(path, KIND, meta, arrays)


def read_flat(cls, path, *, mmap: bool = True, verify: bool = True):
    """Open a flat index file (see :meth:`bbqlib.FlatIndex.load`)."""
    if Path(path).is_dir():
        raise IsADirectoryError(
            f"{path} is a directory, not a flat index file (an IVF index is a directory: "
            "bbqlib.load(path) opens either kind, IVFIndex.open(path) an IVF index)"
        )
    clean_orphans(path)
    # The vectors' whole-section CRC is left to their block CRCs (files of format 5 on);
    # older files have none, so their vectors are checked whole here, as before.
    kind, meta, arrays, crcs = open_container(path, mmap=mmap, verify=verify, defer=("vectors",))
    if kind != KIND:
        raise ValueError(f"{path} holds a {kind!r}, not a flat index; use bbqlib.load")
    check_format_version(path, "flat index", meta.get("format_version", 1), FORMAT_VERSION)
    try:
        index = _from_file(cls, path, meta, arrays)
        if "vectors" in arrays:
            _attach_block_checks(index, path, meta, arrays, crcs, mmap=mmap, verify=verify)
        return index
    except CorruptFileError:
        raise
    except (KeyError, TypeError, ValueError, IndexError, AttributeError) as err:
        raise CorruptFileError(
            f"{path} holds a malformed flat index ({type(err).__name__}: {err})"
        ) from err


def _attach_block_checks(index, path, meta, arrays, crcs, *, mmap: bool, verify: bool) -> None:
    """Give a memory-mapped index its vectors' block checksums (or check them whole now)."""
    vectors = arrays["vectors"]
    if mmap:
        advise_random(vectors)  # a search reads its rerank rows, nothing around them
    if not (verify and mmap):
        return  # read into RAM: the container checked them; verify=False: the caller's call
    block_crcs = arrays.get("vector_block_crc32")
    if block_crcs is None:  # format 4 or older: no blocks, check the section whole now
        if crc32_of(vectors) != crcs["vectors"]:
            raise CorruptFileError(f"{path} is corrupted (checksum mismatch in section 'vectors')")
        return
    blocks = BlockChecksums(block_crcs, int(meta["vector_block_rows"]), path)
    if block_crcs.dtype != np.uint32 or not blocks.matches(vectors.shape[0]):
        raise CorruptFileError(
            f"{path} holds {block_crcs.size} vector block checksums of {blocks.block_rows} "
            f"rows for {vectors.shape[0]} vectors; the file is damaged"
        )
    index._vector_blocks = blocks


def _from_file(cls, path, meta: dict, arrays: dict):
    """The index a file's meta and arrays describe (ValueError-family errors if malformed)."""
    q_arrays = {
        k.split(".", 1)[1]: np.asarray(v) for k, v in arrays.items() if k.startswith("quantizer.")
    }
    q = quantizer_from_state(meta["quantizer"], q_arrays)
    index = cls(q, store_vectors=meta["store_vectors"], oversample=meta.get("oversample"))
    n = int(meta["ntotal"])
    if "codes" in arrays:
        codes, corrections = arrays["codes"], arrays["corrections"]
        if codes.shape != (n, q.encoding_.doc_bytes(q.dim_)) or corrections.shape[:1] != (n,):
            raise ValueError(f"codes {codes.shape} / corrections {corrections.shape}, ntotal {n}")
        index._codes = [
            EncodedVectors(codes, corrections, q.encoding_, q.dim_, q.centroid_dot_, q.fingerprint_)
        ]
    elif n:
        raise ValueError(f"no codes for ntotal {n}")
    if "vectors" in arrays:
        index._vectors = [_checked_vectors(path, arrays["vectors"], index, q.dim_, n)]
    _restore_ids(index, path, meta, arrays)
    return index


def _restore_ids(index, path, meta: dict, arrays: dict) -> None:
    """Ids and tombstones of a loaded file (formats 1-2: ids = rows, none deleted)."""
    n = index.ntotal
    ids = arrays.get("ids")
    if ids is not None and (ids.shape != (n,) or ids.dtype != np.int64):
        raise CorruptFileError(
            f"{path} holds ids of {ids.dtype} {ids.shape} for {n} vectors; the file is damaged"
        )
    next_id = meta.get("next_id")
    if ids is not None and ids.size:
        low, high = int(ids.min()), int(ids.max())
        if low < 0 or (next_id is not None and high >= int(next_id)):
            raise CorruptFileError(
                f"{path} holds ids in [{low}, {high}] but next_id {next_id}; the file is damaged"
            )
    index._ids = RowIds(n, ids, next_id)
    n_deleted = int(meta.get("n_deleted", 0))
    if "deleted" in arrays:
        packed = np.asarray(arrays["deleted"])
        if packed.dtype != np.uint8 or packed.shape != ((n + 7) // 8,):
            raise CorruptFileError(
                f"{path} holds a deletion bitmap of {packed.dtype} {packed.shape} for {n} "
                "vectors; the file is damaged"
            )
        deleted = np.unpackbits(packed, count=n, bitorder="little").astype(bool)
        if int(deleted.sum()) != n_deleted:
            raise CorruptFileError(
                f"{path} marks {int(deleted.sum())} vectors deleted but its header says "
                f"{n_deleted}; the file is damaged"
            )
        index._deleted = deleted
    elif n_deleted:
        raise CorruptFileError(
            f"{path} says {n_deleted} vectors are deleted but holds no deletion bitmap"
        )


def _checked_vectors(path, vectors: np.ndarray, index, dim: int, n: int) -> np.ndarray:
    """The ``vectors`` section, checked against the kind the meta records."""
    kind = index.store_vectors
    want = vector_dtype(kind, dim) if kind else None
    shape = (n,) if kind == "int8" else (n, dim)
    if want is None or vectors.dtype != want or vectors.shape != shape:
        raise CorruptFileError(
            f"{path} holds vectors of {vectors.dtype} {vectors.shape}; its meta records "
            f"store_vectors={kind!r} for {n} vectors of dimension {dim}"
        )
    return vectors
