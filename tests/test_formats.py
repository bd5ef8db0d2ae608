"""The format policy (docs/formats.md): every earlier version keeps opening and serving the
same results; a newer version fails with an error naming its version and the newest read.

The fixture files under tests/fixtures/formats were written by scripts/make_format_fixtures.py
with the bbqlib of their day (flat formats 1 and 2; IVF formats 1 to 3), next to the results
that bbqlib returned for them: Lucene-mapped scores (``scores="similarity"``, the default
until 0.2) unless their ``info.json`` names another kind.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from paths import FIXTURES

import bbqlib
from bbqlib.storage.container import (
    FORMAT_VERSION,
    UnsupportedFormatError,
    read_container,
    write_container,
)

FORMATS = FIXTURES / "formats"


def _info(tag: str) -> dict:
    return json.loads((FORMATS / tag / "info.json").read_text())


def _cases():
    for tag_dir in sorted(FORMATS.iterdir()):
        for name in _info(tag_dir.name)["cases"]:
            yield pytest.param(tag_dir.name, name, id=f"{tag_dir.name}-{name}")


@pytest.mark.parametrize(("tag", "name"), list(_cases()))
def test_old_files_open_and_serve_the_recorded_results(tag, name, tmp_path):
    ivf = tag.startswith("ivf")
    src = FORMATS / tag / (name if ivf else f"{name}.bbq")
    path = tmp_path / src.name
    (shutil.copytree if ivf else shutil.copy)(src, path)  # opening may clean a directory
    expected = np.load(FORMATS / tag / f"{name}.expected.npz")
    index = bbqlib.load(path)
    kwargs = {"visit_percentage": 50.0} if ivf else {}
    kwargs["scores"] = _info(tag).get("scores", "similarity")
    for rerank in (True, False):
        scores, ids = index.search(expected["queries"], k=5, rerank=rerank, **kwargs)
        np.testing.assert_array_equal(ids, expected[f"ids_rerank{int(rerank)}"])
        np.testing.assert_allclose(
            scores, expected[f"scores_rerank{int(rerank)}"], rtol=1e-6, atol=1e-7
        )


def test_old_flat_files_save_in_the_current_format(tmp_path):
    src = FORMATS / "flat_v1" / "int8_per_dim_euclidean.bbq"
    index = bbqlib.load(src)
    index.save(tmp_path / "new.bbq")
    _, meta, _ = read_container(tmp_path / "new.bbq")
    assert meta["format_version"] == bbqlib.index.flat.FORMAT_VERSION
    assert meta["encoding_wire"] == index.quantizer.encoding_.wire
    assert bbqlib.encoding_from_wire(meta["encoding_wire"]).family == "int8_per_dim"


def _newer_flat(tmp_path) -> Path:
    src = FORMATS / "flat_v1" / "bbq1_cosine.bbq"
    kind, meta, arrays = read_container(src, mmap=False)
    meta["format_version"] = bbqlib.index.flat.FORMAT_VERSION + 1
    return write_container(tmp_path / "newer.bbq", kind, meta, arrays)


def test_newer_flat_file_names_its_version(tmp_path):
    path = _newer_flat(tmp_path)
    newest = bbqlib.index.flat.FORMAT_VERSION
    with pytest.raises(UnsupportedFormatError, match=f"flat index format version {newest + 1}"):
        bbqlib.load(path)
    with pytest.raises(bbqlib.CorruptFileError, match=f"versions 1 to {newest}: upgrade"):
        bbqlib.load(path)


def test_newer_container_names_its_version(tmp_path):
    path = tmp_path / "c.bbq"
    shutil.copy(FORMATS / "flat_v1" / "bbq1_cosine.bbq", path)
    raw = bytearray(path.read_bytes())
    raw[8:12] = (FORMAT_VERSION + 1).to_bytes(4, "little")
    path.write_bytes(bytes(raw))
    with pytest.raises(
        UnsupportedFormatError, match=f"container format version {FORMAT_VERSION + 1}"
    ):
        bbqlib.load(path)


def test_newer_ivf_directory_names_its_version(tmp_path):
    from bbqlib.index.ivf import storage as ivf_storage

    path = tmp_path / "ivf"
    shutil.copytree(FORMATS / "ivf_v2" / "ivf1_cosine", path)
    manifest = json.loads((path / "MANIFEST").read_text())
    manifest["format_version"] = ivf_storage.FORMAT_VERSION + 1
    (path / "MANIFEST").write_text(json.dumps(manifest))
    with pytest.raises(
        UnsupportedFormatError, match=f"IVF format version {manifest['format_version']}"
    ):
        bbqlib.load(path)


def test_old_ivf_directory_takes_custom_ids_and_saves_the_current_format(tmp_path):
    path = tmp_path / "ivf"
    shutil.copytree(FORMATS / "ivf_v3" / "ivf1_euclidean", path)
    index = bbqlib.load(path)  # format 3: ids are rows
    np.testing.assert_array_equal(index.ids, np.arange(600))
    X = np.random.default_rng(5).normal(size=(10, 16)).astype(np.float32) + 0.3
    index.add(X, ids=np.arange(10) + 10**12)  # the index lives at path: saved there
    manifest = json.loads((path / "MANIFEST").read_text())
    assert manifest["format_version"] == bbqlib.index.ivf.storage.FORMAT_VERSION
    _, meta, _ = read_container(path / manifest["header"])
    # computed at the save: one CRC32 per row (format 8), in a header section
    assert all(s["block_rows"] == 1 and "block_crc32_section" in s for s in meta["vector_segments"])
    back = bbqlib.load(path)
    np.testing.assert_array_equal(back.ids[-10:], np.arange(10) + 10**12)
    np.testing.assert_array_equal(back.ids[:600], np.arange(600))
    _, ids = back.search(X[:2], k=1, visit_percentage=100.0)
    np.testing.assert_array_equal(ids[:, 0], [10**12, 10**12 + 1])


def test_format_4_segments_get_block_checksums_only_if_their_crc_holds(tmp_path):
    """Upgrading a format-4 directory computes block CRC32s of its kept vector files; a
    damaged file is refused, not given fresh checksums."""
    path = tmp_path / "ivf"
    shutil.copytree(FORMATS / "ivf_v4" / "ivf1_cosine", path)
    vec = next(path.glob("vectors.*.npy"))
    raw = bytearray(vec.read_bytes())
    raw[-5] ^= 0x10
    vec.write_bytes(bytes(raw))
    index = bbqlib.load(path)
    with pytest.raises(bbqlib.CorruptFileError, match="CRC32"):
        index.save(path)
    manifest = json.loads((path / "MANIFEST").read_text())
    assert manifest["format_version"] == 4  # nothing written


def test_format_5_header_without_block_checksums_is_refused(tmp_path):
    from bbqlib.index.ivf import storage as ivf_storage

    path = tmp_path / "ivf"
    shutil.copytree(FORMATS / "ivf_v4" / "ivf1_cosine", path)
    manifest = json.loads((path / "MANIFEST").read_text())
    manifest["format_version"] = ivf_storage.BLOCK_CRC_FORMAT  # a v4 header under a v5 name
    (path / "MANIFEST").write_text(json.dumps(manifest))
    # the header's own version is checked against MANIFEST's first
    with pytest.raises(bbqlib.CorruptFileError, match="format version 4 but MANIFEST names"):
        bbqlib.load(path)
    header = path / manifest["header"]
    kind, meta, arrays = read_container(header, mmap=False)
    meta["format_version"] = ivf_storage.BLOCK_CRC_FORMAT  # a v5 header without the checksums
    write_container(header, kind, meta, arrays)
    with pytest.raises(bbqlib.CorruptFileError, match="block checksums"):
        bbqlib.load(path)
