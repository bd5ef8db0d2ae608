"""Bit packing (spec §3): upstream byte examples and round trips against the reference."""

from __future__ import annotations

import numpy as np
import pytest
from reference.packing import (
    pack_as_binary,
    pack_dibit,
    pack_planes_reference,
    transpose_half_byte,
    unpack_planes_reference,
)

from bbqlib.encoding import padded_dim
from bbqlib.packing import pack_bits, pack_planes, plane_words, unpack_planes

DIMS = [1, 3, 7, 8, 9, 63, 64, 65, 127, 384, 1000]

# Spec §3.2 (ES ESVectorUtilTests.testPackAsBinaryCorrectness), byte aligned.
PACK_AS_BINARY = [
    ([1, 1, 0, 0, 1], [0b11001000]),
    ([1, 1, 0, 0, 1, 0, 1, 0], [0b11001010]),
    ([1, 1, 0, 0, 1, 0, 1, 0, 1, 1], [0b11001010, 0b11000000]),
    ([1, 1, 0, 0, 1, 0, 1, 0, 1, 1, 1, 0, 0, 1, 1, 0], [0b11001010, 0b11100110]),
]


@pytest.mark.parametrize(("bits", "expected"), PACK_AS_BINARY)
def test_pack_as_binary_spec_bytes(bits, expected):
    n = len(expected)
    assert pack_as_binary([bits], align=8)[0].tolist() == expected  # the reference itself
    packed = pack_bits(np.array([bits], np.uint8))[0]
    assert packed.size == padded_dim(len(bits)) // 8 == 8  # one uint64 word
    assert packed[:n].tolist() == expected and not packed[n:].any()  # zero padding
    one_plane = pack_planes(np.array([bits]), 1)[0]
    assert one_plane[:n].tolist() == expected


def test_transpose_half_byte_spec_stripes():
    """Y = [8,15,10,7,4,0,9,9] -> stripes 0x53, 0x70, 0x58, 0xE3 (Java bytes 83, 112, 88, -29)."""
    Y = np.array([[8, 15, 10, 7, 4, 0, 9, 9]])
    assert transpose_half_byte(Y)[0].tolist() == [0x53, 0x70, 0x58, 0xE3]
    packed = pack_planes(Y, 4)[0]
    plane = padded_dim(8) // 8
    assert packed.size == 4 * plane
    assert packed[::plane].tolist() == [0x53, 0x70, 0x58, 0xE3]  # first byte of each plane
    assert packed[::plane].astype(np.int8).tolist() == [83, 112, 88, -29]
    assert not packed.reshape(4, plane)[:, 1:].any()


def test_spec_example_query_stripes():
    """Spec §8: query codes [9,3,15,9,5,12,8,0] -> stripes 0xF8, 0x60, 0x2C, 0xB6."""
    packed = pack_planes(np.array([[9, 3, 15, 9, 5, 12, 8, 0]]), 4)[0]
    assert packed[:: padded_dim(8) // 8].tolist() == [0xF8, 0x60, 0x2C, 0xB6]


@pytest.mark.parametrize(
    ("codes", "expected"),
    [
        ([1, 3, 2, 0, 1], [0b11001000, 0b01100000]),
        ([1, 3, 2, 0, 1, 2, 1, 2], [0b11001010, 0b01100101]),
    ],
)
def test_dibit_spec_bytes(codes, expected):
    """Spec §3.4 (ES testPackDibitCorrectness): low bit plane, then high bit plane."""
    assert pack_dibit([codes])[0].tolist() == expected
    packed = pack_planes(np.array([codes]), 2)[0]
    plane = padded_dim(len(codes)) // 8
    assert [packed[0], packed[plane]] == expected


def test_spec_example_one_bit_doc():
    """Spec §8: B=1 codes [1,0,1,1,0,1,0,0] pack to 0xB4."""
    assert pack_planes(np.array([[1, 0, 1, 1, 0, 1, 0, 0]]), 1)[0, 0] == 0xB4


@pytest.mark.parametrize("d", DIMS)
@pytest.mark.parametrize("planes", range(1, 9))
def test_pack_matches_reference_and_round_trips(d, planes):
    g = np.random.default_rng(d * 10 + planes)
    codes = g.integers(0, 1 << planes, size=(17, d)).astype(np.uint8)
    codes[0] = 0
    codes[1] = (1 << planes) - 1  # every bit set
    packed = pack_planes(codes, planes)
    assert packed.dtype == np.uint8
    assert packed.shape == (17, planes * padded_dim(d) // 8)
    np.testing.assert_array_equal(packed, pack_planes_reference(codes, planes))
    np.testing.assert_array_equal(unpack_planes(packed, planes, d), codes)
    np.testing.assert_array_equal(unpack_planes_reference(packed, planes, d), codes)
    # padding dims are zero in every plane
    bits = np.unpackbits(packed.reshape(17, planes, -1), axis=2)
    assert not bits[:, :, d:].any()


@pytest.mark.parametrize("d", [1, 65, 384])
def test_plane_words_is_a_view_of_the_bytes(d):
    codes = np.random.default_rng(d).integers(0, 16, size=(5, d)).astype(np.uint8)
    packed = pack_planes(codes, 4)
    words = plane_words(packed)
    assert words.dtype == np.uint64 and words.shape == (5, 4 * padded_dim(d) // 64)
    assert np.shares_memory(words, packed)
    np.testing.assert_array_equal(words.view(np.uint8), packed)


def test_pack_does_not_modify_input():
    codes = np.random.default_rng(0).integers(0, 4, size=(3, 70)).astype(np.uint8)
    before = codes.copy()
    pack_planes(codes, 2)
    unpack_planes(pack_planes(codes, 2), 2, 70)
    np.testing.assert_array_equal(codes, before)


def test_empty_batch():
    packed = pack_planes(np.zeros((0, 10), np.uint8), 2)
    assert packed.shape == (0, 2 * 64 // 8)
    assert unpack_planes(packed, 2, 10).shape == (0, 10)
