"""The tasks of a distributed IVF build, one call per partition or per range of lists.

Each runs on a worker with its block of rows (read there), the small shared state (quantizer,
centroid graph: shipped once) and paths in the build's staging directory, which every worker
and the driver must see (a shared filesystem on a real cluster). Tasks are idempotent: a
retried task (its worker died) rewrites the same files.
"""

from __future__ import annotations

import os
import secrets
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .._validation import check_vectors, prepare_for_similarity
from ..search.stored import stored_row_bytes, to_stored
from ..storage.blocks import BLOCK_ROWS, row_crcs
from ..storage.streamed import StreamedContainer, crc32_combine, write_rows
from ._dask import set_worker_threads, shared_value

__all__ = [
    "BuildState",
    "prepared",
    "gather_rows",
    "centroid_sums",
    "assign_and_encode",
    "MergePlan",
    "merge_lists",
    "block_crc_pieces",
    "join_blocks",
    "list_ranges",
]


@dataclass
class BuildState:
    """What every encode task needs (shipped to each worker once)."""

    quantizer: object
    assigner: object
    soar: bool
    lam: float
    staging: str
    vectors: str | None  # the one vector segment (.npy, preallocated), None: no vectors
    vectors_offset: int  # bytes of its .npy header
    vector_kind: str | None = "float32"  # the stored kind (bbqlib.search.stored)


def prepared(block, quantizer, dim: int) -> np.ndarray:
    """A block validated and prepared for the similarity (normalized for cosine)."""
    block = check_vectors(np.asarray(block), "X", dim=dim)
    return prepare_for_similarity(block, quantizer.similarity_, "X")


def gather_rows(block, rows: np.ndarray) -> np.ndarray:
    """Rows ``rows`` (local, ascending) of a block, float32 (the driver's samples)."""
    return np.ascontiguousarray(np.asarray(block)[rows], dtype=np.float32)


def centroid_sums(block, shared: dict, part: int, dim: int):
    """Pass 1: nearest centroid of every row; per-list sums (float64) and counts."""
    set_worker_threads()
    shared = shared_value(shared)
    quantizer, assigner = shared["quantizer"], shared["assigner"]
    W = quantizer.transform_rows(prepared(block, quantizer, dim))
    assign = assigner.nearest(W)
    from .._kernels.kmeans import centroid_sums_kernel

    sums = np.zeros(assigner.C.shape, dtype=np.float64)
    centroid_sums_kernel(W, assign, sums)
    return assign, sums, np.bincount(assign, minlength=assigner.n_lists)


def _save_npy(path: Path, arr: np.ndarray) -> None:
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    with open(tmp, "wb") as f:
        np.save(f, arr)
    os.replace(tmp, path)


def part_files(staging: str, part: int) -> dict[str, Path]:
    base = Path(staging)
    return {n: base / f"part-{part:05d}.{n}.npy" for n in ("codes", "factors", "rows", "spill")}


def assign_and_encode(block, state: BuildState, part: int, dim: int, row0: int, start=None):
    """Pass 2: primary and SOAR lists, spill costs, codes of every entry; files in staging.

    Writes the partition's entries grouped by list (local rows ascending within a list) and
    its prepared rows at their place (first row ``row0``) in the index's one vector segment.
    Returns the small arrays the driver needs: ``primary``, ``secondary``, spill ``cost``,
    entries per list, and the CRC32 of the rows written (for ``crc32_combine``).
    """
    set_worker_threads()
    state = shared_value(state)
    q, a = state.quantizer, state.assigner
    P = prepared(block, q, dim)
    vectors_crc = blocks_crc = None
    if state.vectors is not None:
        rows = to_stored(P, state.vector_kind)  # as IVFIndex.add stores them
        data = _row_bytes(rows)
        with open(state.vectors, "r+b") as f:
            f.seek(state.vectors_offset + row0 * stored_row_bytes(state.vector_kind, dim))
            f.write(memoryview(data))
        blocks_crc = block_crc_pieces(rows, row0)
        vectors_crc = (zlib.crc32(data), data.size)
        del rows, data
    W = q.transform_rows(P)
    del P
    n = W.shape[0]
    primary = a.nearest(W, start)
    if state.soar and a.n_lists > 1:
        secondary = a.soar(W, primary, state.lam)
        cost = a.spill_costs(W, primary, secondary, state.lam)
    else:
        secondary = np.full(n, -1, dtype=np.int32)
        cost = np.full(n, np.inf)
    has = secondary >= 0
    rows = np.concatenate([np.arange(n, dtype=np.int32), np.flatnonzero(has).astype(np.int32)])
    lists = np.concatenate([primary, secondary[has]]).astype(np.int64)
    spill = np.concatenate([np.zeros(n, bool), np.ones(int(has.sum()), bool)])
    order = np.lexsort((rows, lists))
    codes, factors = q.encode_pairs(W, rows[order], a.C, lists[order])
    files = part_files(state.staging, part)
    _save_npy(files["codes"], codes)
    _save_npy(files["factors"], factors)
    _save_npy(files["rows"], rows[order])
    _save_npy(files["spill"], spill[order])
    counts = np.bincount(lists, minlength=a.n_lists)
    return {"primary": primary, "secondary": secondary, "cost": cost, "counts": counts,
            "vectors_crc": vectors_crc, "blocks_crc": blocks_crc}  # fmt: skip


def _row_bytes(rows: np.ndarray) -> np.ndarray:
    """The bytes of stored rows (float [m, d] or int8 records [m]) as one uint8 vector."""
    rows = np.ascontiguousarray(rows)
    return rows.reshape(rows.shape[0], -1).view(np.uint8).reshape(-1)


def block_crc_pieces(rows: np.ndarray, row0: int, block_rows: int = BLOCK_ROWS) -> list:
    """CRC32 of the part of every checksum block (``block_rows`` rows of the whole segment,
    :mod:`bbqlib.storage.blocks`) that rows ``row0 : row0 + len(rows)`` cover, as
    ``(block, crc32, bytes)``; the driver joins a block's pieces with ``crc32_combine``.
    Blocks of one row (files written now): one piece ``(row0, uint32 CRCs of the rows, None)``.
    """
    if block_rows == 1:
        return [(row0, row_crcs(rows), None)]
    out = []
    n = rows.shape[0]
    start = 0
    while start < n:
        block = (row0 + start) // block_rows
        stop = min(n, (block + 1) * block_rows - row0)
        piece = _row_bytes(rows[start:stop])
        out.append((block, zlib.crc32(piece), piece.size))
        start = stop
    return out


@dataclass
class MergePlan:
    """Where every partition's entries are and where the merged lists go (shipped once)."""

    staging: str
    container: StreamedContainer
    part_offsets: np.ndarray  # int64 [parts, K + 1]: list j of part p at rows off[p, j]:off[p, j+1]
    part_rows: np.ndarray  # int64 [parts + 1]: global row of each partition's first row
    dropped: list  # per partition: bool [rows], its spill was capped away
    list_start: np.ndarray  # int64 [K + 1] of the merged postings
    planes: bool


def merge_lists(plan: MergePlan, j0: int, j1: int):
    """Lists ``j0:j1`` of the merged postings, written at their place in the posting file.

    Returns ``(list_crc, list_lut_crc or None, {section: (crc32, bytes)})``.
    """
    from ..index.ivf import storage as ST
    from ..packing import lut_block_starts, lut_list_blocks

    plan = shared_value(plan)
    pieces = {"codes": [], "factors": [], "ids": []}
    labels = []
    for p in range(plan.part_offsets.shape[0]):
        lo, hi = int(plan.part_offsets[p, j0]), int(plan.part_offsets[p, j1])
        if hi == lo:
            continue
        files = part_files(plan.staging, p)
        rows = np.load(files["rows"], mmap_mode="r")[lo:hi]
        spill = np.load(files["spill"], mmap_mode="r")[lo:hi]
        keep = ~(spill & plan.dropped[p][rows])
        sizes = np.diff(plan.part_offsets[p, j0 : j1 + 1])
        lab = np.repeat(np.arange(j0, j1, dtype=np.int64), sizes)
        pieces["codes"].append(np.load(files["codes"], mmap_mode="r")[lo:hi][keep])
        pieces["factors"].append(np.load(files["factors"], mmap_mode="r")[lo:hi][keep])
        pieces["ids"].append((rows[keep] + plan.part_rows[p]).astype(np.int32))
        labels.append(lab[keep])
    start = plan.list_start[j0 : j1 + 1] - plan.list_start[j0]
    e0 = int(plan.list_start[j0])
    sec = plan.container.sections
    out = {}
    if labels:
        order = np.argsort(np.concatenate(labels), kind="stable")  # list-major, parts in order
        arrays = {k: np.concatenate(v)[order] for k, v in pieces.items()}
    else:
        arrays = {
            "codes": np.empty((0, sec["codes"].shape[1]), np.uint8),
            "factors": np.empty((0, sec["factors"].shape[1]), np.float32),
            "ids": np.empty(0, np.int32),
        }
    if arrays["ids"].shape[0] != int(start[-1]):
        raise RuntimeError(
            f"lists {j0}:{j1} hold {arrays['ids'].shape[0]} entries, the plan expects "
            f"{int(start[-1])}: the staging files do not belong to this build"
        )
    for name in ("codes", "factors", "ids"):
        data = arrays[name]
        out[name] = (write_rows(plan.container, name, e0, data), data.nbytes)
    lut_crc = None
    if plan.planes:
        blocks, _ = lut_list_blocks(arrays["codes"], start)
        arrays["lut_codes"] = blocks
        b0 = int(lut_block_starts(plan.list_start)[j0])
        out["lut_codes"] = (write_rows(plan.container, "lut_codes", b0, blocks), blocks.nbytes)
        lut_crc = ST.list_crcs(arrays, start, blocks=True)
    crc = ST.list_crcs(arrays, start)
    return crc, lut_crc, out


def join_blocks(results, n: int, block_rows: int = BLOCK_ROWS) -> np.ndarray:
    """The vector segment's block CRC32s (:mod:`bbqlib.storage.blocks`) from the partitions'
    pieces (a block that spans two partitions has a piece in each), without reading it."""
    crcs = np.zeros(-(-n // block_rows), dtype=np.uint32)
    seen = np.zeros(crcs.size, dtype=bool)
    for r in results:  # partition order = row order
        for block, crc, nbytes in r["blocks_crc"]:
            if nbytes is None:  # blocks of one row: ``crc`` holds the CRCs of rows block...
                crcs[block : block + crc.size] = crc
                seen[block : block + crc.size] = True
                continue
            crcs[block] = crc32_combine(int(crcs[block]), crc, nbytes) if seen[block] else crc
            seen[block] = True
    if not seen.all():
        raise RuntimeError("the partitions' block checksums do not cover the vector segment")
    return crcs


def list_ranges(sizes: np.ndarray, per_task: int) -> list[tuple[int, int]]:
    """Consecutive list ranges of about ``per_task`` entries each (at least one list)."""
    K = sizes.size
    ends = np.searchsorted(np.cumsum(sizes), np.arange(per_task, int(sizes.sum()), per_task))
    cuts = np.unique(np.concatenate([[0], ends + 1, [K]]).clip(0, K))
    return [(int(a), int(b)) for a, b in zip(cuts[:-1], cuts[1:], strict=True) if b > a]
