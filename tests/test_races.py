"""Races between processes and files from elsewhere (issue 27; helpers in race_harness.py,
counted at scale by ``benchmarks/faults/faults.py --only races,swaps,firstbuild``).

- an open racing another process's save of the same path gives the old or the new index,
  never an error or a mix (each file is opened once and mapped from that descriptor);
- ``IVFIndex(path=<an index>)`` refuses to replace it unless ``overwrite=True``;
- a posting file, header or vector file of another index, copy or generation is a
  ``CorruptFileError`` at open (IVF format 9 binds them to the header);
- a killed or failed first build leaves nothing after ``repair`` or the next open.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest
from fault_harness import small_ivf, unit_rows
from race_harness import SWAPS, killed_first_build, loads_during_saves, swap_outcomes

import bbqlib
from bbqlib.index.ivf import build as B
from bbqlib.storage.container import open_container

posix = pytest.mark.skipif(
    sys.platform == "win32" or not hasattr(os, "fork"), reason="POSIX signals and locks"
)


@posix
@pytest.mark.parametrize("kind", ["flat", "ivf"])
def test_opens_during_another_process_saves_give_one_version(kind, tmp_path):
    counts = loads_during_saves(kind, tmp_path, seconds=2.0)
    assert counts["error"] == 0 and counts["wrong"] == 0, counts
    assert counts["a"] + counts["b"] > 20, counts


def test_flat_sections_are_views_of_one_read_only_map(tmp_path):
    index = bbqlib.FlatIndex(bits=1, similarity="cosine")
    index.add(unit_rows(300, 16, 0))
    path = index.save(tmp_path / "f.bbq")
    c = open_container(path)
    bases = {id(bbqlib.storage.blocks.file_map(a)) for a in c.arrays.values() if a.size}
    assert len(bases) == 1
    assert not any(a.flags.writeable for a in c.arrays.values() if a.size)
    loaded = bbqlib.FlatIndex.load(path)
    np.testing.assert_array_equal(loaded.search(unit_rows(2, 16, 1), 3)[1],
                                  index.search(unit_rows(2, 16, 1), 3)[1])  # fmt: skip


def test_new_index_on_an_existing_index_path_refuses(tmp_path):
    where = tmp_path / "ivf"
    small_ivf(where, n=600)
    with pytest.raises(FileExistsError, match=r"IVFIndex\.open.*bbqlib\.load.*overwrite=True"):
        bbqlib.IVFIndex(path=where)
    assert len(bbqlib.IVFIndex.open(where)) == 600
    replaced = bbqlib.IVFIndex(path=where, overwrite=True, cluster_size=64)
    replaced.add(unit_rows(100, 24, 3))
    assert len(bbqlib.IVFIndex.open(where)) == 100


def test_index_saved_at_the_path_after_the_constructor_is_not_replaced(tmp_path):
    where = tmp_path / "ivf"
    late = bbqlib.IVFIndex(path=where, cluster_size=64)  # empty path: accepted
    small_ivf(where, n=600)  # another writer creates an index there meanwhile
    with pytest.raises(FileExistsError, match=r"IVFIndex\.open"):
        late.add(unit_rows(10, 24, 3))
    assert len(bbqlib.IVFIndex.open(where)) == 600


def test_new_index_on_a_file_path_refuses(tmp_path):
    (tmp_path / "f").write_bytes(b"x")
    with pytest.raises(FileExistsError, match="is a file"):
        bbqlib.IVFIndex(path=tmp_path / "f")


@pytest.mark.parametrize("name", list(SWAPS))
def test_files_of_another_index_copy_or_generation_are_refused(name, tmp_path):
    import race_harness as R

    where = SWAPS[name](tmp_path)
    with pytest.raises(bbqlib.CorruptFileError):
        bbqlib.IVFIndex.open(where)
    report = bbqlib.repair(where)
    assert report.status == "corrupt", str(report)
    assert R.swap_outcomes is swap_outcomes  # the bench runs the same cases


def test_binding_records_and_messages(tmp_path):
    where = tmp_path / "ivf"
    small_ivf(where, n=600, ids=np.arange(600) + 7)
    manifest = json.loads((where / "MANIFEST").read_text())
    _, meta, _ = bbqlib.formats.read_container(where / manifest["header"], mmap=False)
    assert manifest["token"] == meta["token"] and len(meta["token"]) == 16
    posting = open_container(where / meta["postings_file"], verify=False)
    assert posting.meta["token"] == meta["postings_token"]
    assert posting.crcs == meta["postings_section_crc32"]
    assert meta["postings_bytes"] == (where / meta["postings_file"]).stat().st_size
    bbqlib.IVFIndex.open(where).delete([7])  # the new generation reuses the posting file
    manifest2 = json.loads((where / "MANIFEST").read_text())
    _, meta2, _ = bbqlib.formats.read_container(where / manifest2["header"], mmap=False)
    assert meta2["postings_file"] == meta["postings_file"]
    assert meta2["postings_token"] == meta["postings_token"]
    assert manifest2["token"] == meta2["token"] != meta["token"]
    # a MANIFEST of another generation's token: the header is refused
    (where / "MANIFEST").write_text(json.dumps({**manifest2, "token": manifest["token"]}))
    with pytest.raises(bbqlib.CorruptFileError, match="another copy or generation"):
        bbqlib.IVFIndex.open(where)


def test_segment_ends_checked_at_open_a_middle_row_at_its_read(tmp_path):
    from fault_harness import flip

    where = tmp_path / "ivf"
    index = small_ivf(where, n=600)
    seg = next(where.glob("vectors.*.npy"))
    flip(seg, seg.stat().st_size // 2)  # a middle row: found by verify(), not at open
    opened = bbqlib.IVFIndex.open(where)
    with pytest.raises(bbqlib.CorruptFileError, match="CRC32"):
        opened.verify()
    flip(seg, seg.stat().st_size // 2)
    flip(seg, seg.stat().st_size - 3)  # the last row: refused at open
    with pytest.raises(bbqlib.CorruptFileError, match="checked at open"):
        bbqlib.IVFIndex.open(where)
    del index


@posix
@pytest.mark.parametrize("then", ["repair", "open"])
def test_killed_first_build_leaves_nothing_after_repair_or_open(then, tmp_path):
    results = [killed_first_build(tmp_path, delay, n=40_000, then=then) for delay in (0.1, 0.5)]
    killed = [r for r in results if r["killed"]]
    assert any(r["left"] > 0 for r in killed), results  # the kills did leave files
    assert all(r["after"] == 0 and r["files_after"] == [] for r in killed), results


def test_failed_first_build_removes_its_files_and_keeps_others(tmp_path, monkeypatch):
    where = tmp_path / "ivf"
    where.mkdir()
    (where / "notes.txt").write_text("mine")
    (where / "vectors.2024.npy").write_bytes(b"not bbqlib's: not its name pattern")

    def boom(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(B, "cluster_and_encode", boom)
    index = bbqlib.IVFIndex(path=where, cluster_size=64, precondition=True)
    with pytest.raises(OSError, match="No space"):
        index.add(unit_rows(500, 24, 0))
    assert sorted(os.listdir(where)) == ["notes.txt", "vectors.2024.npy"]


def test_partial_work_file_is_removed_on_a_write_error(tmp_path):
    def blocks():
        yield unit_rows(10, 8, 0)
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        B.work_file(tmp_path, blocks(), lambda x: x, 8)
    assert os.listdir(tmp_path) == []


def test_open_and_repair_of_a_killed_first_build_keep_other_files(tmp_path):
    where = tmp_path / "ivf"
    where.mkdir()
    names = [
        "vectors.0123456789abcdef.npy",
        "postings.000001.bbq",
        ".work.f32.0123456789abcdef.tmp",
    ]
    for name in names:
        (where / name).write_bytes(b"x" * 100)
    (where / "readme.md").write_text("mine")
    with pytest.raises(FileNotFoundError, match="no MANIFEST"):
        bbqlib.IVFIndex.open(where)
    assert sorted(os.listdir(where)) == ["readme.md"]
    for name in names:
        (where / name).write_bytes(b"x" * 100)
    report = bbqlib.repair(where)
    assert report.bytes_freed == 300 and sorted(os.listdir(where)) == ["readme.md"]


@posix
@pytest.mark.parametrize("manifest", [True, False], ids=["over-an-index", "first-build"])
def test_staging_of_a_dead_distributed_build_is_removed_a_live_one_kept(tmp_path, manifest):
    """A distributed build's staging folder (``.bbqlib-build-<hex>``) is removed by the
    next open or ``repair`` once its driver is dead (its lock free), never while the driver
    lives (it holds the folder's lock for the whole build)."""
    import subprocess
    import textwrap

    from bbqlib.index.ivf import storage as ST
    from bbqlib.index.ivf.staging import staging_folder

    where = tmp_path / "ivf"
    if manifest:
        small_ivf(where, n=300)
    else:
        where.mkdir()
    dead = where / ".bbqlib-build-0123abcd"
    dead.mkdir()
    (dead / "part-0.codes.npy").write_bytes(b"x" * 5000)
    child = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(f"""
            import sys, time
            from bbqlib.index.ivf import storage as ST
            from bbqlib.index.ivf.staging import staging_folder
            with staging_folder({str(where)!r}, "feedbeef", ST.directory_lock) as f:
                (f / "part-1.codes.npy").write_bytes(b"y" * 100)
                print("ready", flush=True)
                sys.stdin.readline()
        """)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert child.stdout.readline().strip() == "ready"
        report = bbqlib.repair(where, verify=False)
        assert (".bbqlib-build-0123abcd/", 5000) in report.removed
        assert not dead.exists() and (where / ".bbqlib-build-feedbeef").is_dir()
    finally:
        child.stdin.write("\n")
        child.stdin.flush()
        child.wait(30)
    assert not (where / ".bbqlib-build-feedbeef").exists()  # the live build removed its own
    with staging_folder(where, "00ff", ST.directory_lock) as folder:
        assert folder.is_dir()
    assert not folder.exists()
