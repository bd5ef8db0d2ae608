"""Saving and opening an :class:`~bbqlib.IVFIndex` directory (``docs/ivf-format.md``).

Format 3 stores the quantizer's state (``meta["quantizer"]`` and ``quantizer.*`` arrays) and
the encoding's wire number of every list (``list_wire``); format 4 the caller's ids
(``row_ids`` in the posting file when any id was given, ``next_id`` in the header); format 6
the kind of the rerank vectors (``vector_dtype``: float32, float16 or int8 records) and the
index's search defaults (``visit_percentage``, ``oversample``).
Directories of formats 1 and 2 (BBQ only, the quantizer implied by ``encoding_wire``) and 3
(ids = rows) still open and serve.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..._version import __version__
from ...encoding import LUT_LANES, encoding_from_wire
from ...packing import lut_block_starts
from ...quantizers import BBQQuantizer, quantizer_from_state
from ...similarity import resolve_similarity
from ...storage.blocks import BlockChecksums
from ...storage.container import CorruptFileError
from ..ids import RowIds
from . import plan as P
from . import storage as ST
from .postings import Postings

__all__ = ["save", "load_into", "header_meta", "verify", "check_before_rewrite"]


#: The posting file's block CRC32s of its ``row_ids`` (format 9, custom ids only): one per
#: 512 ids, a 4 KiB page, so that mapping a search's results reads a page of ids per result.
ID_BLOCK_SECTION = "row_ids_block_crc32"
ID_BLOCK_ROWS = 512


def header_meta(index) -> dict:
    q = index.quantizer
    enc = q.encoding_
    return {
        "format": ST.MAGIC,
        "format_version": ST.FORMAT_VERSION,
        "bbqlib_version": __version__,
        "encoding_wire": enc.wire,
        "doc_bits": enc.doc_bits,
        "query_bits": enc.query_bits,
        "dim": q.dim_,
        "similarity": q.similarity_.value,
        "similarity_code": q.similarity_.code,
        "cluster_size": index.cluster_size,
        "seed": int(index.seed),
        "soar": index.soar,
        "store_vectors": bool(index.store_vectors),
        "vector_dtype": index.store_vectors or None,
        "visit_percentage": index.visit_percentage,
        "oversample": index.oversample,
        "ntotal": index._ntotal,
        "n_lists": int(index._C.shape[0]),
        "n_entries": len(index._postings),
        "n_deleted": index.n_deleted,
        "custom_ids": not index._row_ids.is_identity,
        "next_id": index._row_ids.next_id,
        "centroid_bits": P.CENTROID_BITS,
        "has_parents": index._table.has_parents,
        "transform": None,
    }


def _header_arrays(index, crc, lut_crc) -> tuple[dict, dict]:
    t = index._table
    post = index._postings
    arrays = {
        "centroids": index._C,
        "centroid_codes": t.codes,
        "centroid_factors": t.factors,
        "global_centroid": t.g,
        "list_start": post.start,
        "list_crc": crc,
        "list_wire": np.full(post.n_lists, index.quantizer.encoding_.wire, dtype=np.uint32),
        "deleted": np.packbits(index._deleted, bitorder="little"),
    }
    if lut_crc is not None:
        arrays["list_lut_crc"] = lut_crc
    if t.has_parents:
        arrays.update(
            parent_codes=t.parent_codes,
            parent_factors=t.parent_factors,
            parent_cc=t.parent_cc,
            parent_radius=t.parent_radius,
            child_order=t.child_order,
            child_offsets=t.child_offsets,
        )
    q_params, q_arrays = index.quantizer.get_state()
    arrays.update({f"quantizer.{k}": v for k, v in q_arrays.items()})
    return q_params, arrays


def save(index, path: Path) -> None:
    """Write ``index`` as a new generation of the directory ``path`` (atomic)."""
    post = index._postings
    if post.crc is not None and post.source is not None:
        crc, lut_crc = post.crc, post.lut_crc
        stored = Path(post.source)
    else:
        planes = index.quantizer.encoding_.doc_planes > 0  # lookup-table blocks too
        stored = post.to_store(planes)
        crc = ST.list_crcs(stored, post.start)
        lut_crc = None
        if "lut_codes" in stored:
            lut_crc = ST.list_crcs(stored, post.start, blocks=True)
        stored["assignments"] = np.asarray(index._assign)
        if not index._row_ids.is_identity:
            stored["row_ids"] = np.asarray(index._row_ids.ids, dtype=np.int64)
            stored[ID_BLOCK_SECTION] = BlockChecksums.of(stored["row_ids"], ID_BLOCK_ROWS).crcs
    q_params, arrays = _header_arrays(index, crc, lut_crc)
    meta = header_meta(index)
    meta["quantizer"] = q_params
    # Saving over the directory this index was read from: it must not have moved on.
    read_from = getattr(index, "_generation", None)  # (directory, generation) or None
    same = read_from is not None and read_from[0] == str(Path(path).resolve())
    expect = read_from[1] if same else None
    own = index.path is not None and Path(path).resolve() == index.path.resolve()
    if read_from is None and own and not getattr(index, "overwrite", False):
        expect = 0  # a new index at its path: never over one saved there meanwhile
    ST.save_generation(path, meta, arrays, stored, index._segments, expect_generation=expect)


def _quantizer_of(meta: dict, h: dict):
    """The fitted quantizer a directory records (formats 1-2: BBQ from the wire number)."""
    if "quantizer" in meta:
        q_arrays = {k.split(".", 1)[1]: np.asarray(v) for k, v in h.items()
                    if k.startswith("quantizer.")}  # fmt: skip
        return quantizer_from_state(meta["quantizer"], q_arrays)
    enc = encoding_from_wire(meta["encoding_wire"])
    transform = None
    if meta.get("transform"):
        from ...transforms import transform_from_state

        t_arrays = {k.split(".", 1)[1]: v for k, v in h.items() if k.startswith("transform.")}
        transform = transform_from_state(meta["transform"], t_arrays)
    q = BBQQuantizer(
        bits=enc.doc_bits, query_bits=enc.query_bits, similarity=meta["similarity"],
        precondition=transform, seed=meta["seed"],
    )  # fmt: skip
    q._set_common(enc, resolve_similarity(meta["similarity"]), meta["dim"], transform)
    q._set_centroid(np.asarray(h["global_centroid"], dtype=np.float32))
    q._seal()
    return q


def load_into(index, path: Path, opened=None) -> None:
    """Read the current generation of ``path`` into ``index`` (maps postings and vectors);
    ``opened``: what :func:`~bbqlib.index.ivf.storage.open_generation` returned, when the
    caller read it already (one read of the header, one generation)."""
    meta, h, postings, segments = ST.open_generation(path) if opened is None else opened
    section_crcs = postings.pop("_section_crcs", None)
    q = _quantizer_of(meta, h)
    if "list_wire" in h and np.any(np.asarray(h["list_wire"]) != q.encoding_.wire):
        raise CorruptFileError(
            f"the lists of the IVF index at {path} record encodings other than its "
            "quantizer's; the files do not belong together"
        )
    index.quantizer = q
    index._ntotal = int(meta["ntotal"])
    C = np.ascontiguousarray(h["centroids"], dtype=np.float32)
    parents = {}
    if meta["has_parents"]:
        names = ("parent_codes", "parent_factors", "parent_cc", "parent_radius",
                 "child_order", "child_offsets")  # fmt: skip
        parents = {name: h[name] for name in names}
    g = np.asarray(h["global_centroid"], dtype=np.float32)
    cc = np.einsum("ij,ij->i", C.astype(np.float64), C)
    index._C = C
    index._list_cc = cc
    index._table = P.CentroidTable(
        g, float(np.dot(g.astype(np.float64), g)), h["centroid_codes"], h["centroid_factors"],
        cc, **parents,
    )  # fmt: skip
    n_entries = int(meta["n_entries"])
    codes, factors, ids = postings["codes"], postings["factors"], postings["ids"]
    if codes.shape[0] != n_entries or factors.shape != (n_entries, q.pair_factor_width):
        raise CorruptFileError(
            f"posting file of {path} holds {codes.shape[0]} entries, the header records "
            f"{n_entries}; the files do not belong together"
        )
    lut = None
    if postings.get("lut_codes") is not None:
        lut_codes = postings["lut_codes"]
        if "list_lut_crc" not in h:
            raise CorruptFileError(
                f"the header of {path} has no CRC32s for the lookup-table blocks of its "
                "posting file; the files do not belong together"
            )
        block_starts = lut_block_starts(h["list_start"])
        need = (int(block_starts[-1]), codes.shape[1] * LUT_LANES)
        if lut_codes.shape != need:
            raise CorruptFileError(
                f"posting file of {path} holds lookup-table blocks of shape "
                f"{lut_codes.shape}, the lists need {need}; the files do not belong together"
            )
        lut = (lut_codes, block_starts)
    index._postings = Postings(
        codes, factors, ids, h["list_start"], crc=np.asarray(h["list_crc"]),
        lut_crc=None if lut is None else np.asarray(h["list_lut_crc"]),
        source=path / meta["postings_file"], lut=lut, section_crcs=section_crcs,
    )  # fmt: skip
    index._generation = (str(Path(path).resolve()), int(meta["generation"]))
    index._assign = postings["assignments"]
    index._set_deleted(
        np.unpackbits(h["deleted"], count=index._ntotal, bitorder="little").astype(bool)
    )
    index._segments = segments
    row_ids = postings.get("row_ids")
    if meta.get("custom_ids") and (row_ids is None or row_ids.shape != (index._ntotal,)):
        raise CorruptFileError(
            f"the header of {path} records custom ids but its posting file holds no ids for "
            f"its {index._ntotal} vectors; the files do not belong together"
        )
    index._row_ids = RowIds(index._ntotal, row_ids if meta.get("custom_ids") else None,
                            meta.get("next_id"))  # fmt: skip
    id_crcs = postings.get(ID_BLOCK_SECTION)
    if index._row_ids.ids is not None and id_crcs is not None:
        where = Path(path) / meta["postings_file"]
        checks = BlockChecksums(id_crcs, ID_BLOCK_ROWS, where, "the ids (section 'row_ids') of")
        if id_crcs.dtype != np.uint32 or not checks.matches(index._ntotal):
            raise CorruptFileError(
                f"the posting file of {path} holds {id_crcs.size} id block checksums for "
                f"{index._ntotal} ids; the file is damaged"
            )
        index._row_ids.checks = checks


def verify(index) -> dict:
    """Every checksum (disk-backed) or the structure (in memory) of ``index``; raise if bad."""
    post = index._postings
    if post.crc is not None and post.source is not None:
        # What this index serves (its maps), even if another process saved since.
        header = {"list_start": post.start, "list_crc": post.crc, "list_lut_crc": post.lut_crc}
        postings = dict(post.arrays(), assignments=index._assign)
        if index._row_ids.ids is not None:
            postings["row_ids"] = index._row_ids.ids
        postings["_section_crcs"] = post.section_crcs or {}
        meta = {"generation": index._generation[1], "postings_file": Path(post.source).name}
        out = ST.verify_arrays(Path(post.source).parent, meta, header, postings, index._segments)
        post.mark_verified()
        return out
    start = post.start
    if start[0] != 0 or np.any(np.diff(start) < 0) or start[-1] != len(post):
        raise CorruptFileError("IVF index in memory has inconsistent list offsets")
    ids = np.asarray(post.ids)
    if ids.size and (ids.min() < 0 or ids.max() >= index._ntotal):
        raise CorruptFileError("IVF index in memory holds rows out of range")
    if len(index._row_ids) != index._ntotal:
        raise CorruptFileError("IVF index in memory holds ids for another number of vectors")
    return {"generation": None, "lists": int(start.size - 1), "vector_segments": 0}


def check_row_ids(index, *, whole: bool = True) -> None:
    """The CRC32 of the caller ids mapped from the posting file (``row_ids``), checked once
    per map before anything reads them all: ``delete``, ``filter`` and ``add`` look ids up (a
    damaged id would be served silently). A search only maps its result rows through them
    (``whole=False``): where the file has block checksums of its ids (format 9), those
    blocks are checked as they are read (:meth:`bbqlib.index.ids.RowIds.of_rows`), so a cold
    search reads a page of ids per result, not every id."""
    row_ids = index._row_ids
    if row_ids.ids is None or not index._fitted:
        return
    if whole or row_ids.checks is None:
        index._postings.check_section("row_ids", row_ids.ids)


def check_before_rewrite(index) -> None:
    """Check the CRC32 of everything a rewrite reads from the files (every posting list's
    row codes, factors and ids, and the assignments), so that damage a search never reads
    cannot be laundered into a new generation with fresh checksums. Lists are checked once
    per map (the first add after an open pays for a read of the posting file)."""
    post = index._postings
    if post.crc is None:
        return
    post.check(np.arange(post.n_lists), blocks=False)
    post.check_section("assignments", index._assign)
    check_row_ids(index)
