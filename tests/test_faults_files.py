"""Files that cannot lie (issue 12): leftovers of killed writers are removed, damage is
refused before it is served or rewritten, stale headers are caught, malformed files raise
CorruptFileError naming the file, and a process keeps serving the generation it opened."""

from __future__ import annotations

import json
import os
import shutil
import threading

import numpy as np
import pytest
from fault_harness import flip, section_span, small_ivf, unit_rows

import bbqlib
from bbqlib import CorruptFileError
from bbqlib.index.ivf import storage as ST
from bbqlib.storage import atomic
from bbqlib.storage.blocks import BLOCK_ROWS
from bbqlib.storage.container import read_container, write_container

# ------------------------------------------------------------------ temporary files, locks


def _orphans(directory, target):
    """Leftovers a killed writer of ``target`` leaves: a temp file of today's naming, one of
    earlier bbqlib's (mkstemp), and its lock file."""
    names = [f".{target}.0123456789abcdef.tmp", f".{target}.k2j4_x9q.tmp", f".{target}.lock"]
    for name in names:
        (directory / name).write_bytes(b"x" * 100)
    return names


def test_temp_names_match_the_cleanup_pattern(tmp_path):
    tmp = atomic.temp_path(tmp_path / "index.bbq")
    assert tmp.parent == tmp_path and atomic.is_temp_name(tmp.name, "index.bbq")
    assert not atomic.is_temp_name(tmp.name, "other.bbq")
    assert not atomic.is_temp_name("index.bbq") and not atomic.is_temp_name(".index.bbq.lock")


def test_flat_open_and_save_remove_orphans_of_that_path_only(tmp_path):
    index = bbqlib.FlatIndex(bits=1)
    index.add(unit_rows(50, 8, 0))
    path = index.save(tmp_path / "a.bbq")
    _orphans(tmp_path, "a.bbq")
    other = _orphans(tmp_path, "b.bbq")[:2]
    bbqlib.load(path)
    assert sorted(os.listdir(tmp_path)) == sorted(["a.bbq", *other, ".b.bbq.lock"])
    _orphans(tmp_path, "a.bbq")
    index.save(path)
    assert sorted(os.listdir(tmp_path)) == sorted(["a.bbq", *other, ".b.bbq.lock"])


def test_a_live_writer_keeps_its_temp_file(tmp_path):
    index = bbqlib.FlatIndex(bits=1)
    index.add(unit_rows(50, 8, 0))
    path = index.save(tmp_path / "a.bbq")
    (tmp_path / ".a.bbq.0123456789abcdef.tmp").write_bytes(b"in progress")
    held, release = threading.Event(), threading.Event()

    def writer():
        with atomic.path_lock(atomic.file_lock_path(path)):
            held.set()
            release.wait(10)

    t = threading.Thread(target=writer)
    t.start()
    held.wait(10)
    try:
        bbqlib.load(path)  # does not wait for the writer, and leaves its file alone
        assert (tmp_path / ".a.bbq.0123456789abcdef.tmp").exists()
        report = bbqlib.repair(path)
        assert report.busy and report.status == "busy" and not report.removed
    finally:
        release.set()
        t.join()
    report = bbqlib.repair(path)
    assert report.status == "ok" and report.kind == "flat"
    assert [n for n, _ in report.removed] == [".a.bbq.0123456789abcdef.tmp"]
    assert os.listdir(tmp_path) == ["a.bbq"]  # the lock file went with the lock


def test_ivf_open_removes_temp_and_generationless_files(tmp_path):
    where = tmp_path / "ivf"
    small_ivf(where)
    keep = set(os.listdir(where))
    litter = [".header.000009.bbq.0123456789abcdef.tmp", ".work.f32.fedcba9876543210.tmp",
              ".work.0123456789ab.f32", "postings.000009.bbq", "vectors.00ff00ff00ff00ff.npy",
              ".MANIFEST.abcd1234.tmp", ".bbqlib.lock"]  # fmt: skip
    for name in litter:
        (where / name).write_bytes(b"x" * 10)
    (where / "notes.txt").write_text("the user's own file")  # not ours: kept
    index = bbqlib.IVFIndex.open(where)
    assert set(os.listdir(where)) == keep | {"notes.txt"}
    index.verify()


def test_ivf_save_removes_litter_and_repair_reports(tmp_path):
    where = tmp_path / "ivf"
    index = small_ivf(where)
    (where / ".postings.000005.bbq.0123456789abcdef.tmp").write_bytes(b"x" * 1000)
    index.delete([0])
    assert not [n for n in os.listdir(where) if n.endswith(".tmp")]
    (where / "header.000077.bbq").write_bytes(b"x" * 10)
    report = bbqlib.repair(where)
    assert report.kind == "ivf" and report.status == "ok"
    assert report.removed == [("header.000077.bbq", 10)] and report.bytes_freed == 10
    assert "removed header.000077.bbq" in str(report)
    assert bbqlib.repair(tmp_path / "nothing").status == "missing"


def test_repair_reports_corruption_without_touching_data(tmp_path):
    where = tmp_path / "ivf"
    small_ivf(where)
    seg = next(where.glob("vectors.*.npy"))
    flip(seg, seg.stat().st_size - 8)
    before = sorted(os.listdir(where))
    report = bbqlib.repair(where)
    assert report.status == "corrupt" and seg.name in report.problem
    assert sorted(os.listdir(where)) == before


# ------------------------------------------------------------------ generations


def test_stale_header_is_refused(tmp_path):
    where = tmp_path / "ivf"
    index = small_ivf(where)
    old_header = (where / "header.000001.bbq").read_bytes()
    index.delete([5, 6])  # generation 2 (same postings)
    (where / "header.000002.bbq").write_bytes(old_header)
    with pytest.raises(CorruptFileError, match="generation 1 but MANIFEST names generation 2"):
        bbqlib.IVFIndex.open(where)


@pytest.mark.parametrize(
    "manifest",
    [
        {"magic": "bbqlib-ivf", "format_version": 3, "generation": 1},
        {"magic": "bbqlib-ivf", "format_version": 3, "generation": 1, "header": "../x.bbq"},
        {"magic": "bbqlib-ivf", "format_version": 3, "generation": "1", "header": "h"},
        [1, 2],
    ],
)
def test_malformed_manifest_is_corrupt_not_keyerror(tmp_path, manifest):
    where = tmp_path / "ivf"
    small_ivf(where)
    (where / "MANIFEST").write_text(json.dumps(manifest))
    with pytest.raises(CorruptFileError, match="MANIFEST"):
        bbqlib.IVFIndex.open(where)


def test_malformed_flat_meta_names_the_file(tmp_path):
    index = bbqlib.FlatIndex(bits=1)
    index.add(unit_rows(40, 8, 0))
    path = index.save(tmp_path / "a.bbq")
    kind, meta, arrays = read_container(path, mmap=False)
    for broken in ({k: v for k, v in meta.items() if k != "quantizer"}, dict(meta, ntotal=41)):
        write_container(tmp_path / "bad.bbq", kind, broken, arrays)
        with pytest.raises(CorruptFileError, match="bad.bbq"):
            bbqlib.load(tmp_path / "bad.bbq")


def test_corrupt_hdf5_is_corrupt_file_error(tmp_path):
    pytest.importorskip("h5py")
    from bbqlib.formats.ann_benchmarks import read_ann_benchmarks, write_ann_benchmarks

    X = unit_rows(30, 4, 0)
    path = write_ann_benchmarks(tmp_path / "a.hdf5", X, X[:3], np.zeros((3, 2), int),
                                np.zeros((3, 2)), "angular")  # fmt: skip
    data = bytearray(path.read_bytes())
    for name, blob in (("zeroed", bytes(len(data))), ("cut", bytes(data[: len(data) // 3]))):
        (tmp_path / f"{name}.hdf5").write_bytes(blob)
        with pytest.raises(CorruptFileError, match=f"{name}.hdf5"):
            read_ann_benchmarks(tmp_path / f"{name}.hdf5")


def test_a_process_keeps_serving_its_generation_while_another_saves(tmp_path):
    where = tmp_path / "ivf"
    small_ivf(where)
    Q = unit_rows(8, 24, 5)
    reader = bbqlib.IVFIndex.open(where)
    before = reader.search(Q, 5, visit_percentage=50.0)
    writer = bbqlib.IVFIndex.open(where)
    writer.add(unit_rows(300, 24, 9))
    writer.delete(np.arange(20))
    assert "header.000001.bbq" not in os.listdir(where)  # the reader's files are gone...
    after = reader.search(Q, 5, visit_percentage=50.0)  # ...but it serves them still
    np.testing.assert_array_equal(after[1], before[1])
    reader.verify()
    with pytest.raises(ST.StaleIndexError, match="another process saved it"):
        reader.delete([100])  # would drop the writer's generation 3
    with pytest.raises(ST.StaleIndexError):
        reader.add(unit_rows(3, 24, 1))
    assert bbqlib.IVFIndex.open(where).ntotal == 1500 and len(bbqlib.IVFIndex.open(where)) == 1480


# ------------------------------------------------------------------ corruption never spreads


def test_zeroed_vector_row_is_caught_on_first_read(tmp_path):
    where = tmp_path / "ivf"
    X = unit_rows(1200, 24, 0)
    small_ivf(where)
    seg = next(where.glob("vectors.*.npy"))
    data_start = seg.stat().st_size - X.nbytes
    with open(seg, "r+b") as f:  # zero row 700
        f.seek(data_start + 700 * X.shape[1] * 4)
        f.write(bytes(X.shape[1] * 4))
    assert BLOCK_ROWS == 1
    for one in (True, False):  # the fused one-query call and the batch path
        index = bbqlib.IVFIndex.open(where)
        q = X[700] if one else X[699:701]
        with pytest.raises(CorruptFileError, match=rf"{seg.name} is corrupted: row 700 fails"):
            index.search(q, 3, visit_percentage=100.0)


@pytest.mark.parametrize("section", ["codes", "assignments"])
def test_add_refuses_to_launder_damage_search_never_reads(tmp_path, section):
    where = tmp_path / "ivf"
    index = small_ivf(where)
    Q = unit_rows(4, 24, 3)
    clean = index.search(Q, 5, visit_percentage=100.0)
    postings = where / index._postings.source.name
    offset, _ = section_span(postings, section)
    flip(postings, offset + 3)  # row codes of list 0 (the lookup-table scan reads blocks),
    # or the primary list of id 0 (read by add and re-clustering only)
    damaged = bbqlib.IVFIndex.open(where)
    from bbqlib.index.ivf.scan import uses_lut

    if section == "codes" and not uses_lut(damaged.encoding_):
        pytest.skip("without the lookup-table scan, search reads the row codes itself")
    np.testing.assert_array_equal(damaged.search(Q, 5, visit_percentage=100.0)[1], clean[1])
    files = sorted(os.listdir(where))
    with pytest.raises(CorruptFileError, match=postings.name):
        damaged.add(unit_rows(10, 24, 8))
    assert sorted(os.listdir(where)) == files  # nothing written


@pytest.mark.parametrize("op", ["search", "delete", "add", "verify"])
def test_damaged_custom_ids_are_never_served(tmp_path, op):
    """The caller ids (``row_ids``, memory-mapped) are checked before anything reads them."""
    where = tmp_path / "ivf"
    X = unit_rows(1200, 24, 0)
    ids = np.arange(1200) * 3 + 5
    small_ivf(where, ids=ids)
    postings = next(where.glob("postings.*.bbq"))
    offset, _ = section_span(postings, "row_ids")
    flip(postings, offset + 8 * 700)  # the id of row 700: a search would return 2106
    index = bbqlib.IVFIndex.open(where)
    run = {
        "search": lambda: index.search(X[700], 3, visit_percentage=100.0),
        "delete": lambda: index.delete(ids[[5]]),
        "add": lambda: index.add(unit_rows(5, 24, 9)),
        "verify": index.verify,
    }[op]
    with pytest.raises(CorruptFileError, match="row_ids"):
        run()


def test_flat_ids_and_tombstones_are_checked(tmp_path):
    index = bbqlib.FlatIndex(bits=1, similarity="cosine")
    ids = np.arange(300) * 11 + 2
    index.add(unit_rows(300, 20, 0), ids=ids)
    index.delete(ids[[3, 4]])
    path = index.save(tmp_path / "f.bbq")
    for section in ("ids", "deleted"):
        damaged = tmp_path / f"{section}.bbq"
        shutil.copy(path, damaged)
        flip(damaged, section_span(damaged, section)[0])
        with pytest.raises(CorruptFileError, match="checksum|damaged"):
            bbqlib.load(damaged)
    kind, meta, arrays = read_container(path)
    write_container(tmp_path / "n.bbq", kind, {**meta, "n_deleted": 3}, arrays)
    with pytest.raises(CorruptFileError, match="marks 2 vectors deleted"):
        bbqlib.load(tmp_path / "n.bbq")
    write_container(tmp_path / "m.bbq", kind, {**meta, "next_id": 100}, arrays)
    with pytest.raises(CorruptFileError, match="next_id"):
        bbqlib.load(tmp_path / "m.bbq")


def test_copying_a_damaged_index_elsewhere_fails(tmp_path):
    where = tmp_path / "ivf"
    small_ivf(where)
    seg = next(where.glob("vectors.*.npy"))
    flip(seg, seg.stat().st_size // 2)  # a middle row: the open checks the first and last
    index = bbqlib.IVFIndex.open(where)
    with pytest.raises(CorruptFileError, match="fails its CRC32"):
        index.save(tmp_path / "copy")
    assert not [n for n in os.listdir(tmp_path / "copy") if n.startswith("vectors")]


def test_old_segments_without_block_checksums_still_open(tmp_path):
    """A format-4 directory (no block CRCs) opens and serves; the whole-file CRC guards it in
    verify(), and the next save checks it and records its block CRCs (format 5)."""
    where = tmp_path / "ivf"
    index = small_ivf(where)
    Q = unit_rows(3, 24, 4)
    clean = index.search(Q, 5)
    manifest = json.loads((where / "MANIFEST").read_text())
    header = where / manifest["header"]
    kind, meta, arrays = read_container(header, mmap=False)
    for entry in meta["vector_segments"]:
        arrays.pop(entry.pop("block_crc32_section")), entry.pop("block_rows")
    meta["format_version"] = 4  # the header's own version must be MANIFEST's
    write_container(header, kind, meta, arrays)
    (where / "MANIFEST").write_text(json.dumps({**manifest, "format_version": 4}))
    old = bbqlib.IVFIndex.open(where)
    assert all(s.blocks is None for s in old._segments)
    np.testing.assert_array_equal(old.search(Q, 5)[1], clean[1])
    old.verify()
    old.add(unit_rows(50, 24, 6))  # the kept segment gets block checksums too
    reopened = bbqlib.IVFIndex.open(where)
    assert [s.blocks.block_rows for s in reopened._segments] == [1, 1]
    shutil.rmtree(where)


def test_damaged_custom_id_is_caught_when_a_search_maps_its_block(tmp_path):
    """Custom ids mapped from the posting file are checked per block of 512 ids as search
    results are mapped through them (a cold search reads a page of ids per result, not all
    of them); a damaged id is never returned, and writes and filters check them all."""
    where = tmp_path / "ivf"
    n = 1200
    ids = np.arange(n, dtype=np.int64) * 7 + 10**9
    small_ivf(where, n=n, ids=ids)
    X = unit_rows(n, 24, 0)
    post = next(where.glob("postings.*.bbq"))
    offset, nbytes = section_span(post, "row_ids")
    assert nbytes == 8 * n
    flip(post, offset + 8 * 1100 + 2)  # id of row 1100, in block 2 (rows 1024-1199)
    index = bbqlib.IVFIndex.open(where)
    _, got = index.search(X[3], 1, visit_percentage=100.0)  # block 0: served
    assert got[0, 0] == ids[3]
    assert index._row_ids.checks is not None and not index._row_ids.checks.all_checked
    for q in (X[1100], X[1099:1101]):  # the one-query and the batch paths
        with pytest.raises(CorruptFileError, match="row_ids.*rows 1024 to 1199 fail their CRC32"):
            bbqlib.IVFIndex.open(where).search(q, 1, visit_percentage=100.0)
    with pytest.raises(CorruptFileError, match="row_ids"):
        bbqlib.IVFIndex.open(where).search(X[3], 1, filter=ids[:10])  # looks every id up
    with pytest.raises(CorruptFileError, match="row_ids"):
        bbqlib.IVFIndex.open(where).delete(ids[:1])
