"""The encoding registry (bbqlib.encoding): one row per encoding of every family."""

from __future__ import annotations

import numpy as np
import pytest

from bbqlib.encoding import (
    CORRECTIONS_I32,
    CORRECTIONS_U16,
    DOC_BITS,
    ENCODINGS,
    FAMILIES,
    NO_CORRECTIONS,
    OFFSET_CORRECTIONS,
    QUERY_BITS,
    RABITQ_CORRECTIONS_U16,
    encoding_from_wire,
    get_encoding,
    padded_dim,
)


def test_defaults_follow_elasticsearch():
    expected = {1: (4, 3.0), 2: (4, 1.5), 3: (4, 1.5), 4: (4, 1.0), 5: (7, 1.0), 6: (7, 1.0),
                7: (7, 1.0), 8: (8, 1.0)}  # fmt: skip
    for bits, (qbits, oversample) in expected.items():
        e = get_encoding(bits)
        assert (e.doc_bits, e.query_bits, e.default_oversample) == (bits, qbits, oversample)
        assert get_encoding(bits, "auto") is e


def test_every_pair_is_in_the_table():
    assert DOC_BITS == (1, 2, 3, 4, 5, 6, 7, 8)
    osq = {(e.doc_bits, e.query_bits): e for e in ENCODINGS.rows("osq")}
    assert set(osq) == {(b, q) for b in DOC_BITS for q in QUERY_BITS}
    for (b, q), e in osq.items():
        assert get_encoding(b, q) is e is ENCODINGS[(b, q)] is ENCODINGS[("osq", b, q)]
        assert e.layout == ("planes" if b <= 6 else "bytes")
        assert e.indexes == ("flat", "ivf")


def test_families_and_their_rows():
    assert set(FAMILIES) == {"osq", "rabitq", "int8_per_dim", "int8_global", "saq"}
    # the built-in families, and those a family's own package registers (TurboQuant's)
    packages = {"turboquant", "turboquant_prod"}
    assert {e.family for e in ENCODINGS.values()} == set(FAMILIES) | packages
    assert all(e.layout == "planes" for e in ENCODINGS.rows("rabitq"))
    assert get_encoding(2, family="rabitq").query_bits is None
    assert get_encoding(1, family="rabitq").corrections_dtype == RABITQ_CORRECTIONS_U16
    assert get_encoding(8, family="int8_per_dim").corrections_dtype == NO_CORRECTIONS
    g = get_encoding(7, family="int8_global")
    assert g.query_bits == 7 and g.corrections(False) == OFFSET_CORRECTIONS
    assert g.corrections(True) == NO_CORRECTIONS and g.bytes_per_vector(10, True) == 10
    assert [e.query_bits for e in ENCODINGS.rows("int8_global")] == [7, 8]
    with pytest.raises(ValueError, match="query_bits must be one of 8 or 'auto'"):
        get_encoding(8, 4, family="int8_global")
    with pytest.raises(ValueError, match="unknown encoding family"):
        get_encoding(1, family="pq")
    # SAQ: one row per query width, the plan decides the codes; flat and IVF indexes
    saq = ENCODINGS.rows("saq")
    assert [e.query_bits for e in saq] == [None, *range(2, 17)]
    assert all(e.doc_bits == 0 and e.layout == "segments" for e in saq)
    assert all(e.indexes == ("flat", "ivf") and e.scan_kernels == ("saq",) for e in saq)
    assert get_encoding(0, None, family="saq").wire == 0x400


def test_scan_kernels_follow_layout_and_query():
    assert get_encoding(1, 4).scan_kernels == ("lut", "popcount")
    assert get_encoding(3, 8).scan_kernels == ("popcount",)
    assert get_encoding(7, 7).scan_kernels == ("bytes",)
    assert get_encoding(2, None).scan_kernels == ("float",)
    assert get_encoding(5).query_kind == "planes" and get_encoding(8, None).query_kind == "float"


def test_wire_numbers_are_unique_and_round_trip():
    wires = [e.wire for e in ENCODINGS.values()]
    assert len(set(wires)) == len(wires)
    for e in ENCODINGS.values():
        assert encoding_from_wire(e.wire) is e is ENCODINGS[e.wire]
    # stable: written into files
    assert get_encoding(1, 4).wire == 20 and get_encoding(7, 7).wire == 119
    assert get_encoding(2, None, family="rabitq").wire == 0x120
    with pytest.raises(ValueError, match="wire"):
        encoding_from_wire(9999)


def test_corrections_dtype_fields_and_sizes():
    names = ("lower", "upper", "additional", "component_sum")
    assert CORRECTIONS_U16.names == names and CORRECTIONS_I32.names == names
    assert CORRECTIONS_U16.itemsize == 14 and CORRECTIONS_I32.itemsize == 16
    for e in ENCODINGS.rows("osq"):
        small = e.doc_bits <= 4
        assert e.corrections_dtype == (CORRECTIONS_U16 if small else CORRECTIONS_I32)
        assert e.correction_bytes == (14 if small else 16)
    # little-endian on disk whatever the machine
    for dt in (CORRECTIONS_U16, CORRECTIONS_I32):
        assert all(dt[f].str[0] in "<|" for f in names)


@pytest.mark.parametrize(
    ("bits", "qbits", "dim", "doc_bytes", "query_bytes", "per_vector"),
    [
        (1, 4, 384, 48, 192, 62),
        (2, 4, 384, 96, 192, 110),
        (4, 4, 384, 192, 192, 206),
        (7, 7, 384, 384, 384, 400),
        (8, 8, 384, 384, 384, 400),
        (3, 4, 384, 144, 192, 158),
        (5, 7, 384, 240, 336, 256),
        (6, 7, 100, 96, 112, 112),
        (1, 4, 1, 8, 32, 22),
        (1, 8, 65, 16, 128, 30),
        (4, 7, 100, 64, 112, 78),
        (7, None, 10, 10, 40, 26),
        (1, None, 10, 8, 40, 22),
    ],
)
def test_packed_lengths(bits, qbits, dim, doc_bytes, query_bytes, per_vector):
    e = get_encoding(bits, qbits)
    assert e.doc_bytes(dim) == doc_bytes
    assert e.query_bytes(dim) == query_bytes
    assert e.bytes_per_vector(dim) == per_vector


def test_planes():
    assert get_encoding(2, 8).doc_planes == 2 and get_encoding(2, 8).query_planes == 8
    assert get_encoding(1, None).query_planes == 0
    assert get_encoding(7, 7).doc_planes == 0 and get_encoding(7, 7).query_planes == 0


def test_max_dim():
    """A uint16 component sum holds d·(2^B − 1) <= 65535: 4-bit docs need d <= 4369."""
    assert get_encoding(4).max_dim == 4369
    assert get_encoding(2).max_dim == 21845
    assert get_encoding(1).max_dim == 65535
    assert get_encoding(7).max_dim >= 10**7
    assert get_encoding(3).max_dim == 9362 and get_encoding(6).max_dim >= 10**7


@pytest.mark.parametrize(("dim", "padded"), [(1, 64), (63, 64), (64, 64), (65, 128), (384, 384)])
def test_padded_dim(dim, padded):
    assert padded_dim(dim) == padded


@pytest.mark.parametrize("bits", [0, 9, 16, True, "1", None, 1.5])
def test_bad_doc_bits(bits):
    with pytest.raises(ValueError, match="bits"):
        get_encoding(bits)


@pytest.mark.parametrize("qbits", [1, 2, 5, 16, True, "four", 4.5])
def test_bad_query_bits(qbits):
    with pytest.raises(ValueError, match="query_bits"):
        get_encoding(1, qbits)


def test_records_are_immutable():
    e = get_encoding(1)
    with pytest.raises(AttributeError):
        e.doc_bits = 2
    assert "osq: 1-bit docs" in repr(e) and "4-bit" in repr(e)
    assert isinstance(e.corrections_dtype, np.dtype)
