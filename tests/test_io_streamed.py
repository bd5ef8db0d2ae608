"""The streamed container writer: pieces from anywhere, the same bytes as write_container."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from bbqlib.storage.container import read_container, write_container
from bbqlib.storage.streamed import StreamedContainer, crc32_combine, write_rows


@pytest.mark.parametrize("sizes", [(0, 0), (1, 0), (0, 5), (3, 7), (1000, 1), (4096, 70000)])
def test_crc32_combine_matches_zlib(rng, sizes):
    a = rng.integers(0, 256, sizes[0], dtype=np.uint8).tobytes()
    b = rng.integers(0, 256, sizes[1], dtype=np.uint8).tobytes()
    assert crc32_combine(zlib.crc32(a), zlib.crc32(b), len(b)) == zlib.crc32(a + b)


def test_pieces_in_any_order_give_write_container_bytes(rng, tmp_path):
    arrays = {
        "codes": rng.integers(0, 256, (1001, 13), dtype=np.uint8),
        "factors": rng.normal(size=(1001, 4)).astype(np.float32),
        "ids": np.arange(1001, dtype=np.int32)[::-1].copy(),
        "empty": np.empty((0, 3), dtype=np.int64),
    }
    meta = {"generation": 3, "note": "x" * 5000}  # a header longer than the first reservation
    want = write_container(tmp_path / "want.bbq", "ivf_postings", meta, arrays)
    sc = StreamedContainer(tmp_path / "got.bbq", "ivf_postings", meta,
                           [(k, v.dtype, v.shape) for k, v in arrays.items()])  # fmt: skip
    sc.allocate()
    crcs = {}
    for name, arr in arrays.items():
        cuts = [0, 1, 400, 401, arr.shape[0]] if arr.shape[0] else [0, 0]
        pieces = [(a, b) for a, b in zip(cuts[:-1], cuts[1:], strict=True) if b >= a]
        got = {a: write_rows(sc, name, a, arr[a:b]) for a, b in reversed(pieces)}
        crc = 0
        for a, b in pieces:
            crc = crc32_combine(crc, got[a], arr[a:b].nbytes)
        crcs[name] = crc
    assert not (tmp_path / "got.bbq").exists()
    path = sc.finish(crcs)
    assert path.read_bytes() == want.read_bytes()
    kind, meta2, back = read_container(path, verify=True)
    assert kind == "ivf_postings" and meta2 == meta
    assert all(np.array_equal(back[k], v) for k, v in arrays.items())


def test_rows_outside_the_section_are_refused(tmp_path):
    sc = StreamedContainer(tmp_path / "x.bbq", "k", {}, [("a", np.float32, (10, 4))])
    sc.allocate()
    with pytest.raises(ValueError, match="do not fit"):
        write_rows(sc, "a", 8, np.zeros((3, 4), np.float32))
    with pytest.raises(ValueError, match="do not fit"):
        write_rows(sc, "a", 0, np.zeros((3, 5), np.float32))
    sc.discard()
    assert not sc.partial.exists()
