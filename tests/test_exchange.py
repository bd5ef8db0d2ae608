"""Exchange format (issue 6): header + codes + corrections, records, Arrow; bit-exact trips."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bbqlib import BBQQuantizer
from bbqlib.integrations import exchange as X

DIMS = [1, 7, 65, 384]


def _quantized(bits, d, sim="euclidean", n=50, seed=0):
    g = np.random.default_rng(seed)
    data = (g.normal(0.2, 1.0, size=(n, d)) * 3).astype(np.float32)
    q = BBQQuantizer(bits=bits, similarity=sim).fit(data)
    return q, q.encode(data), data


def _same(a, b):
    """Bit-exact equality of two EncodedVectors."""
    assert a.codes.tobytes() == b.codes.tobytes()
    assert a.corrections.dtype == b.corrections.dtype
    assert a.corrections.tobytes() == b.corrections.tobytes()
    assert a.encoding == b.encoding and a.dim == b.dim
    assert a.fingerprint == b.fingerprint
    assert a.centroid_dot == b.centroid_dot


def _with_nan(enc):
    """A copy of ``enc`` whose first correction has a NaN with a payload (bit-exactness)."""
    corr = enc.corrections.copy()
    corr["additional"].view(np.uint32)[0] = 0x7FC0BEEF
    return type(enc)(enc.codes, corr, enc.encoding, enc.dim, enc.centroid_dot, enc.fingerprint)


@pytest.mark.parametrize("d", DIMS)
@pytest.mark.parametrize("bits", [1, 2, 4, 7, 8])
def test_arrays_and_records_round_trip(bits, d):
    q, enc, _ = _quantized(bits, d, seed=d)
    enc = _with_nan(enc)
    header, codes, corr = X.to_arrays(enc, q)
    json.loads(json.dumps(header))  # JSON-able
    assert header["encoding_wire"] == q.encoding_.wire and header["dim"] == d
    assert header["similarity"] == "euclidean" and header["quantizer"] == "BBQQuantizer"
    assert codes.shape == (50, q.encoding_.doc_bytes(d))
    _same(X.from_arrays(json.loads(json.dumps(header)), codes, corr, q), enc)
    header, records = X.to_records(enc, q)
    assert records.dtype.itemsize == enc.bytes_per_vector
    _same(X.from_records(header, records, q), enc)
    raw = records.view(np.uint8).reshape(len(records), -1)
    _same(X.from_records(header, raw, q), enc)


@pytest.mark.parametrize("d", DIMS)
@pytest.mark.parametrize("bits", [1, 4, 7])
def test_arrow_round_trip(bits, d, tmp_path):
    pa = pytest.importorskip("pyarrow")
    q, enc, _ = _quantized(bits, d, sim="cosine", seed=d)
    enc = _with_nan(enc)
    batch = X.to_arrow(enc, q)
    assert batch.schema.names == ["codes", *enc.corrections.dtype.names]
    assert batch.column(0).type == pa.binary(enc.codes.shape[1])
    back = X.from_arrow(batch, q)
    _same(back, enc)
    np.testing.assert_array_equal(
        q.estimate(np.ones(d, np.float32), back)[0].view(np.uint32),
        q.estimate(np.ones(d, np.float32), enc)[0].view(np.uint32),
    )
    # Arrow IPC file keeps the metadata; a sliced, multi-chunk table reads back too
    path = tmp_path / "codes.arrow"
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, batch.schema) as writer:
        writer.write_batch(batch.slice(0, 20))
        writer.write_batch(batch.slice(20))
    table = pa.ipc.open_file(str(path)).read_all()
    assert table.column(0).num_chunks == 2
    _same(X.from_arrow(table, q), enc)
    sub = X.from_arrow(batch.slice(5, 10), q)
    _same(sub, enc[5:15])


def test_arrow_parquet_round_trip(tmp_path):
    pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    q, enc, _ = _quantized(2, 63)
    path = tmp_path / "codes.parquet"
    import pyarrow as pa

    pq.write_table(pa.Table.from_batches([X.to_arrow(enc, q)]), path)
    _same(X.from_arrow(pq.read_table(path), q), enc)


def test_header_without_quantizer_and_empty():
    q, enc, _ = _quantized(1, 9)
    h = X.exchange_header(enc)
    assert h["similarity"] is None and h["quantizer"] is None
    _same(X.from_arrays(h, enc.codes, enc.corrections, q), enc)
    empty = enc[0:0]
    h0, c0, r0 = X.to_arrays(empty, q)
    assert X.from_arrays(h0, c0, r0, q).codes.shape == (0, enc.codes.shape[1])


def test_rejects_other_fit_and_bad_arrays():
    q, enc, data = _quantized(1, 9)
    header, codes, corr = X.to_arrays(enc, q)
    other = BBQQuantizer(bits=1, similarity="euclidean").fit(data + 1)
    with pytest.raises(ValueError, match="different fit"):
        X.from_arrays(header, codes, corr, other)
    with pytest.raises(ValueError, match="encoding wire"):
        X.from_arrays(header, codes, corr, BBQQuantizer(bits=2, similarity="l2").fit(data))
    with pytest.raises(ValueError, match="similarity"):
        X.from_arrays({**header, "similarity": "cosine"}, codes, corr, q)
    with pytest.raises(ValueError, match="format"):
        X.from_arrays({**header, "format": "x"}, codes, corr, q)
    with pytest.raises(ValueError, match="version"):
        X.from_arrays({**header, "version": 99}, codes, corr, q)
    with pytest.raises(ValueError, match="missing"):
        X.from_arrays({k: v for k, v in header.items() if k != "dim"}, codes, corr, q)
    with pytest.raises(ValueError, match="uint8"):
        X.from_arrays(header, codes[:, :-1], corr, q)
    with pytest.raises(ValueError, match="shape"):
        X.from_arrays(header, codes, corr[:-1], q)
    with pytest.raises(ValueError, match="dtype"):
        X.from_arrays(header, codes, np.zeros(len(corr), [("lower", "<f8")]), q)
    with pytest.raises(TypeError, match="EncodedVectors"):
        X.to_arrays(codes)
    with pytest.raises(ValueError, match="records"):
        X.from_records(header, np.zeros(3), q)


def test_arrow_rejects_foreign_batches():
    pa = pytest.importorskip("pyarrow")
    q, enc, _ = _quantized(1, 9)
    with pytest.raises(ValueError, match="no bbqlib header"):
        X.from_arrow(pa.RecordBatch.from_pydict({"a": [1]}), q)
    batch = X.to_arrow(enc, q)
    renamed = pa.RecordBatch.from_arrays(
        batch.columns[::-1], names=batch.schema.names[::-1], metadata=batch.schema.metadata
    )
    with pytest.raises(ValueError, match="columns"):
        X.from_arrow(renamed, q)
    with pytest.raises(TypeError, match="RecordBatch"):
        X.from_arrow({"codes": 1}, q)


def test_missing_pyarrow_names_the_extra(monkeypatch):
    import builtins

    real = builtins.__import__

    def fake(name, *args, **kwargs):
        if name == "pyarrow":
            raise ImportError("no pyarrow")
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake)
    q, enc, _ = _quantized(1, 9)
    with pytest.raises(ImportError, match=r"bbqlib\[arrow\]"):
        X.to_arrow(enc, q)
