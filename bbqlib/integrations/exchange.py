"""Exchange format for codes and corrections: NumPy arrays, record arrays, Arrow batches.

Encoded vectors travel as three things:

- a **header**, a small JSON-able dict::

      {"format": "bbqlib.codes", "version": 1,
       "encoding_wire": 20, "doc_bits": 1, "query_bits": 4, "layout": "planes",
       "dim": 384, "code_bytes": 48,
       "corrections": [["lower", "<f4"], ["upper", "<f4"], ["additional", "<f4"],
                       ["component_sum", "<u2"]],
       "similarity": "cosine", "quantizer": "BBQQuantizer",
       "fingerprint": "3f0c...", "centroid_dot": 0.168...}

- the **codes**, ``uint8 [n, code_bytes]``: bit planes (1/2/4-bit docs, least significant plane
  first, each ``padded_dim(d) / 8`` bytes, dimension ``8j + t`` in byte ``j`` bit ``7 - t``) or
  one byte per dimension (7/8-bit), exactly :attr:`bbqlib.EncodedVectors.codes`;
- the **corrections**, a packed little-endian structured array ``[n]`` with the fields the
  header lists (BBQ: ``lower, upper, additional, component_sum``, 14 or 16 bytes).

:func:`to_records` joins codes and corrections into one packed structured array
(``itemsize = code_bytes + correction bytes``), one fixed-size record per vector.
:func:`to_arrow` gives an Arrow record batch: a ``fixed_size_binary(code_bytes)`` column
``codes`` plus one column per correction field, the header as JSON in the schema metadata under
``b"bbqlib"`` (kept by Arrow IPC and Parquet). pyarrow is an optional extra
(``pip install bbqlib[arrow]``). Every round trip is bit-exact (NaN payloads included).

Reading back needs the fitted quantizer that made the codes: its encoding, dimension and
fingerprint must match the header, so codes are never scored against another fit.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

import numpy as np

from ..quantizers.encoded import EncodedVectors

__all__ = [
    "EXCHANGE_FORMAT",
    "EXCHANGE_VERSION",
    "ARROW_METADATA_KEY",
    "ExchangeArrays",
    "exchange_header",
    "record_dtype",
    "to_arrays",
    "from_arrays",
    "to_records",
    "from_records",
    "to_arrow",
    "from_arrow",
]

EXCHANGE_FORMAT = "bbqlib.codes"
EXCHANGE_VERSION = 1
#: Schema metadata key holding the JSON header in Arrow batches.
ARROW_METADATA_KEY = b"bbqlib"


class ExchangeArrays(NamedTuple):
    """``(header, codes, corrections)`` of encoded vectors (see the module docstring)."""

    header: dict
    codes: np.ndarray
    corrections: np.ndarray


def exchange_header(enc: EncodedVectors, quantizer=None) -> dict:
    """The JSON-able header of ``enc``; ``quantizer`` (optional) adds its similarity and class."""
    if not isinstance(enc, EncodedVectors):
        raise TypeError(f"enc must be EncodedVectors from encode(), got {type(enc).__name__}")
    if quantizer is not None:
        quantizer._check_encoded(enc)
    e = enc.encoding
    dtype = enc.corrections.dtype
    return {
        "format": EXCHANGE_FORMAT,
        "version": EXCHANGE_VERSION,
        "encoding_wire": int(e.wire),
        "doc_bits": int(e.doc_bits),
        "query_bits": None if e.query_bits is None else int(e.query_bits),
        "layout": e.layout,
        "dim": int(enc.dim),
        "code_bytes": int(enc.codes.shape[1]),
        "corrections": [[name, dtype.fields[name][0].str] for name in dtype.names],
        "similarity": None if quantizer is None else quantizer.similarity_.value,
        "quantizer": None if quantizer is None else type(quantizer).__name__,
        "fingerprint": enc.fingerprint,
        "centroid_dot": float(enc.centroid_dot),
    }


def _corrections_dtype(header: dict) -> np.dtype:
    return np.dtype([(str(name), str(fmt)) for name, fmt in header["corrections"]])


def record_dtype(header: dict) -> np.dtype:
    """The packed record dtype: ``codes`` (``uint8 [code_bytes]``) then the corrections."""
    fields = [("codes", "u1", (int(header["code_bytes"]),))]
    fields += [(str(name), str(fmt)) for name, fmt in header["corrections"]]
    return np.dtype(fields)


def _check_header(header: dict, quantizer) -> None:
    if not isinstance(header, dict):
        raise TypeError(f"header must be a dict, got {type(header).__name__}")
    if header.get("format") != EXCHANGE_FORMAT:
        raise ValueError(
            f"header format must be {EXCHANGE_FORMAT!r}, got {header.get('format')!r}; "
            "not bbqlib codes"
        )
    version = header.get("version")
    if not isinstance(version, int) or not 1 <= version <= EXCHANGE_VERSION:
        raise ValueError(
            f"header version {version!r} is not supported (this bbqlib reads 1 to "
            f"{EXCHANGE_VERSION}); upgrade bbqlib"
        )
    missing = [
        key
        for key in ("encoding_wire", "dim", "code_bytes", "corrections", "fingerprint")
        if key not in header
    ]
    missing += ["centroid_dot"] if "centroid_dot" not in header else []
    if missing:
        raise ValueError(f"header is missing {missing}")
    quantizer._check_fitted()
    enc = quantizer.encoding_
    problems = []
    if int(header["encoding_wire"]) != enc.wire:
        problems.append(f"encoding wire {header['encoding_wire']} != quantizer's {enc.wire}")
    if int(header["dim"]) != quantizer.dim_:
        problems.append(f"dim {header['dim']} != quantizer's {quantizer.dim_}")
    if header["fingerprint"] != quantizer.fingerprint_:
        problems.append(
            f"fingerprint {header['fingerprint']} != quantizer's {quantizer.fingerprint_} "
            "(the codes were made by a different fit)"
        )
    sim = header.get("similarity")
    if sim is not None and sim != quantizer.similarity_.value:
        problems.append(f"similarity {sim!r} != quantizer's {quantizer.similarity_.value!r}")
    if _corrections_dtype(header) != enc.corrections_dtype:
        problems.append(
            f"corrections {header['corrections']} do not match the quantizer's "
            f"{enc.corrections_dtype}"
        )
    if int(header["code_bytes"]) != enc.doc_bytes(quantizer.dim_):
        problems.append(
            f"code_bytes {header['code_bytes']} != {enc.doc_bytes(quantizer.dim_)} "
            "for this encoding"
        )
    if problems:
        raise ValueError(
            "these codes do not belong to this quantizer: " + "; ".join(problems) + "; read "
            "them with the quantizer that encoded them"
        )


def to_arrays(enc: EncodedVectors, quantizer=None) -> ExchangeArrays:
    """``(header, codes, corrections)``: read-only views of ``enc``'s arrays plus the header."""
    return ExchangeArrays(exchange_header(enc, quantizer), enc.codes, enc.corrections)


def from_arrays(header: dict, codes, corrections, quantizer) -> EncodedVectors:
    """EncodedVectors from a header, codes ``uint8 [n, code_bytes]`` and corrections ``[n]``.

    The arrays are copied only when they are not already contiguous with the expected dtype.
    Raises ValueError when the header does not match ``quantizer`` (encoding, dimension,
    fingerprint, similarity, correction fields) or the arrays do not match the header.
    """
    _check_header(header, quantizer)
    codes = np.asarray(codes)
    cb = int(header["code_bytes"])
    if codes.dtype != np.uint8 or codes.ndim != 2 or codes.shape[1] != cb:
        raise ValueError(f"codes must be uint8 [n, {cb}], got {codes.dtype} {codes.shape}")
    want = _corrections_dtype(header)
    corrections = np.asarray(corrections)
    if corrections.dtype != want:
        raise ValueError(
            f"corrections must have dtype {want} (from the header), got {corrections.dtype}"
        )
    if corrections.shape != (codes.shape[0],):
        raise ValueError(
            f"corrections must have shape ({codes.shape[0]},) like the codes, "
            f"got {corrections.shape}"
        )
    return EncodedVectors(
        np.ascontiguousarray(codes),
        np.ascontiguousarray(corrections),
        quantizer.encoding_,
        int(header["dim"]),
        float(header["centroid_dot"]),
        header["fingerprint"],
    )


def to_records(enc: EncodedVectors, quantizer=None) -> tuple[dict, np.ndarray]:
    """``(header, records)``: one packed structured record per vector (:func:`record_dtype`)."""
    header = exchange_header(enc, quantizer)
    records = np.empty(len(enc), dtype=record_dtype(header))
    records["codes"] = enc.codes
    for name in enc.corrections.dtype.names:
        records[name] = enc.corrections[name]
    return header, records


def from_records(header: dict, records, quantizer) -> EncodedVectors:
    """Inverse of :func:`to_records` (records may also be raw bytes ``uint8 [n, itemsize]``)."""
    _check_header(header, quantizer)
    dtype = record_dtype(header)
    records = np.asarray(records)
    if records.dtype != dtype:
        if records.dtype == np.uint8 and records.ndim == 2 and records.shape[1] == dtype.itemsize:
            records = np.ascontiguousarray(records).view(dtype)[:, 0]
        else:
            raise ValueError(
                f"records must have dtype {dtype} (or be uint8 [n, {dtype.itemsize}]), got "
                f"{records.dtype} {records.shape}"
            )
    corrections = np.empty(records.shape[0], dtype=_corrections_dtype(header))
    for name in corrections.dtype.names:
        corrections[name] = records[name]
    return from_arrays(header, np.ascontiguousarray(records["codes"]), corrections, quantizer)


# ----------------------------------------------------------------------------- Arrow


def _pyarrow() -> Any:
    try:
        import pyarrow
    except ImportError as exc:
        raise ImportError(
            "Arrow exchange needs pyarrow: pip install bbqlib[arrow] (or pip install pyarrow)"
        ) from exc
    return pyarrow


def to_arrow(enc: EncodedVectors, quantizer=None):
    """Encoded vectors as a ``pyarrow.RecordBatch``.

    Columns: ``codes`` (``fixed_size_binary(code_bytes)``, zero-copy from ``enc.codes``) and
    one column per correction field (``float32``, ``uint16`` or ``int32``); the header is JSON
    in the schema metadata under ``b"bbqlib"``.

    Examples
    --------
    >>> import numpy as np, bbqlib
    >>> from bbqlib.integrations.exchange import to_arrow, from_arrow
    >>> X = np.random.default_rng(0).normal(size=(100, 16)).astype(np.float32)
    >>> q = bbqlib.BBQQuantizer(bits=1).fit(X)
    >>> enc = q.encode(X)
    >>> batch = to_arrow(enc, q)  # doctest: +SKIP
    >>> batch.schema.names  # doctest: +SKIP
    ['codes', 'lower', 'upper', 'additional', 'component_sum']
    >>> back = from_arrow(batch, q)  # doctest: +SKIP
    """
    pa = _pyarrow()
    header = exchange_header(enc, quantizer)
    codes = np.ascontiguousarray(enc.codes)
    n, cb = codes.shape
    code_col = pa.FixedSizeBinaryArray.from_buffers(
        pa.binary(cb), n, [None, pa.py_buffer(codes.reshape(-1))]
    )
    columns = [code_col]
    names = ["codes"]
    for name in enc.corrections.dtype.names:
        columns.append(pa.array(np.ascontiguousarray(enc.corrections[name])))
        names.append(name)
    metadata = {ARROW_METADATA_KEY: json.dumps(header).encode()}
    return pa.RecordBatch.from_arrays(columns, names=names, metadata=metadata)


def from_arrow(batch, quantizer) -> EncodedVectors:
    """EncodedVectors from a ``pyarrow.RecordBatch`` or ``Table`` made by :func:`to_arrow`.

    The header in the schema metadata must match ``quantizer`` (see :func:`from_arrays`).
    """
    pa = _pyarrow()
    if isinstance(batch, pa.Table):
        batches = batch.combine_chunks().to_batches()
        if len(batches) > 1:  # pragma: no cover - combine_chunks leaves one
            raise ValueError(f"table has {len(batches)} batches after combine_chunks()")
        batch = batches[0] if batches else pa.RecordBatch.from_pylist([], schema=batch.schema)
    if not isinstance(batch, pa.RecordBatch):
        raise TypeError(f"batch must be a pyarrow RecordBatch or Table, got {type(batch).__name__}")
    meta = batch.schema.metadata or {}
    if ARROW_METADATA_KEY not in meta:
        raise ValueError(
            "batch has no bbqlib header in its schema metadata (key b'bbqlib'); "
            "was it written by bbqlib.integrations.exchange.to_arrow?"
        )
    header = json.loads(meta[ARROW_METADATA_KEY].decode())
    _check_header(header, quantizer)
    cb = int(header["code_bytes"])
    names = batch.schema.names
    want = ["codes"] + [name for name, _ in header["corrections"]]
    if names != want:
        raise ValueError(f"batch columns must be {want}, got {names}")
    col = batch.column(0)
    if col.type != pa.binary(cb) or col.null_count:
        raise ValueError(
            f"column 'codes' must be fixed_size_binary({cb}) without nulls, got {col.type} "
            f"with {col.null_count} null(s)"
        )
    n = len(col)
    data = np.frombuffer(col.buffers()[1], dtype=np.uint8)
    codes = data[col.offset * cb : (col.offset + n) * cb].reshape(n, cb)
    corr_dtype = _corrections_dtype(header)
    corrections = np.empty(n, dtype=corr_dtype)
    for i, name in enumerate(corr_dtype.names, start=1):
        c = batch.column(i)
        if c.null_count:
            raise ValueError(f"column {name!r} has {c.null_count} null(s)")
        values = c.to_numpy(zero_copy_only=False)
        if values.dtype != corr_dtype[name]:
            raise ValueError(f"column {name!r} must be {corr_dtype[name]}, got {values.dtype}")
        corrections[name] = values
    return from_arrays(header, codes, corrections, quantizer)
