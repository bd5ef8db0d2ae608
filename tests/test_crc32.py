"""The compiled CRC32 against its reference, ``zlib.crc32``, and the row checks built on it."""

from __future__ import annotations

import zlib

import numpy as np
import pytest

from bbqlib import CorruptFileError
from bbqlib._kernels import crc32 as crc32_kernels
from bbqlib.storage.blocks import BlockChecksums, BlockCRCWriter, row_bytes, row_crcs


def _crc_rows(rows: np.ndarray) -> list[int]:
    return [zlib.crc32(r.tobytes()) for r in rows]


@pytest.mark.parametrize("width", [0, 1, 3, 7, 8, 9, 15, 16, 17, 63, 1536])
@pytest.mark.parametrize("fill", ["random", "zeros", "ones"])
def test_row_crcs_equal_zlib(width, fill):
    rng = np.random.default_rng(width)
    if fill == "random":
        rows = rng.integers(0, 256, size=(9, width), dtype=np.uint8)
    else:
        rows = np.full((9, width), 0 if fill == "zeros" else 0xFF, dtype=np.uint8)
    out = np.empty(9, dtype=np.uint32)
    crc32_kernels.row_crcs(rows, out)
    assert out.tolist() == _crc_rows(rows)


def test_chaining_equals_zlib_over_the_concatenation():
    rng = np.random.default_rng(1)
    a = rng.integers(0, 256, 37, dtype=np.uint8)
    b = rng.integers(0, 256, 91, dtype=np.uint8)
    assert crc32_kernels.crc32_update(b, crc32_kernels.crc32_update(a, 0)) == zlib.crc32(
        a.tobytes() + b.tobytes()
    )
    assert crc32_kernels.crc32_update(b, 12345) == zlib.crc32(b.tobytes(), 12345)


@pytest.mark.parametrize("kind", ["float32", "float16", "int8"])
def test_row_bytes_views_every_stored_kind(kind):
    from bbqlib.search.stored import to_stored

    X = np.random.default_rng(2).normal(size=(11, 24)).astype(np.float32)
    stored = to_stored(X, kind)
    view = row_bytes(stored)
    assert view.shape == (11, stored.nbytes // 11) and np.shares_memory(view, stored)
    assert row_crcs(stored).tolist() == [zlib.crc32(stored[i].tobytes()) for i in range(11)]


@pytest.mark.parametrize("block_rows", [1, 4, 256])
def test_check_marks_good_blocks_and_names_the_bad_one(block_rows):
    rng = np.random.default_rng(block_rows)
    X = rng.normal(size=(30, 8)).astype(np.float32)
    writer = BlockCRCWriter(block_rows)
    for part in np.array_split(X, [5, 6, 17]):  # batches across block edges
        writer.update(part)
    crcs = writer.finish()
    want = [zlib.crc32(X[lo : lo + block_rows].tobytes()) for lo in range(0, 30, block_rows)]
    assert crcs.tolist() == want
    checks = BlockChecksums(crcs, block_rows)
    checks.check(X, np.array([3, -1, 3, 29]))
    blocks = {3 // block_rows, 29 // block_rows}
    assert set(np.flatnonzero(checks._checked)) == blocks
    damaged = X.copy()
    damaged[13, 2] += 1.0
    with pytest.raises(CorruptFileError, match="fail"):
        BlockChecksums(crcs, block_rows).check(damaged, np.array([0, 13]))
    checks.check(damaged, np.array([3]))  # checked before the damage: not read again
    if 13 // block_rows not in blocks:
        with pytest.raises(CorruptFileError):
            checks.check(damaged, np.array([13]))


def test_check_all_reads_every_row():
    X = np.random.default_rng(4).normal(size=(50, 8)).astype(np.float32)
    checks = BlockChecksums.of(X)
    assert checks.block_rows == 1 and checks.crcs.size == 50
    checks.check_all(X)
    assert checks.all_checked
    damaged = X.copy()
    damaged[49, 7] = np.nan
    with pytest.raises(CorruptFileError, match="row 49 fails its CRC32"):
        BlockChecksums.of(X).check_all(damaged)
