"""Rerank vectors in float32, float16 or int8: how they are stored, and exact scores on them.

Both indexes keep the prepared vectors (normalized for cosine, untransformed) for the exact
rerank. At d = 384 float32 rows are 1,536 bytes, about 89% of an IVF directory; a rerank
only has to *order* ``k'`` candidates, so a cheaper copy often loses no recall. The kinds
(``store_vectors=`` on :class:`~bbqlib.FlatIndex` and :class:`~bbqlib.IVFIndex`):

``"float32"``
    ``<f4 [n, d]``, ``4·d`` bytes per vector (``True`` means this).
``"float16"``
    ``<f2 [n, d]``, ``2·d`` bytes; rows are gathered as float32 for the exact kernel.
``"int8"``
    One structured record per vector, ``[("scale", "<f4"), ("codes", "i1", (d,))]``:
    ``d + 4`` bytes. Symmetric per-vector scale ``s = max_j |x_j| / 127`` and codes
    ``c_j = round(x_j / s)`` in [-127, 127]; the rerank scores ``x̂ = s · c``. A per-vector
    scale needs no fitting (adds never clip, as a per-dimension grid fitted on the first
    batch would) and adapts to each vector's norm; the error of each component is at most
    ``s / 2``, so an inner product moves by at most ``s/2 · ||q||_1``.
``False``
    Nothing kept: searches return quantized scores (``rerank=False``).

The recall each kind costs is measured in ``benchmarks/results/calibrate.md``.
"""

from __future__ import annotations

import numpy as np

from .._kernels import rerank as KR
from .rerank import exact_values

__all__ = [
    "VECTOR_KINDS",
    "check_store_vectors",
    "vector_dtype",
    "stored_row_bytes",
    "to_stored",
    "stored_rows",
    "stored_exact_values",
    "stored_kind_of",
]

#: The kinds of stored rerank vectors, cheapest last.
VECTOR_KINDS = ("float32", "float16", "int8")


def check_store_vectors(value, name: str = "store_vectors", kinds=VECTOR_KINDS):
    """One of ``kinds`` (default ``"float32"``, ``"float16"``, ``"int8"``) or ``False``
    (``True`` is ``"float32"``)."""
    if isinstance(value, (bool, np.bool_)):
        return "float32" if value else False
    if isinstance(value, str) and value in kinds:
        return value
    raise ValueError(
        f"{name} must be one of {', '.join(map(repr, kinds))}, True (float32) or False "
        f"(no rerank vectors), got {value!r}"
    )


def vector_dtype(kind: str, dim: int) -> np.dtype:
    """The dtype of one stored row: ``<f4`` / ``<f2`` (arrays [n, d]) or the int8 record."""
    if kind == "float32":
        return np.dtype("<f4")
    if kind == "float16":
        return np.dtype("<f2")
    if kind == "int8":
        return np.dtype([("scale", "<f4"), ("codes", "i1", (int(dim),))])
    raise ValueError(f"unknown stored vector kind {kind!r}")


def stored_row_bytes(kind, dim: int) -> int:
    """Bytes of one stored row (0 when nothing is stored)."""
    if not kind:
        return 0
    if kind == "int8":
        return int(dim) + 4
    return vector_dtype(kind, dim).itemsize * int(dim)


def stored_kind_of(arr: np.ndarray) -> str:
    """The kind of a stored array (``ValueError`` for anything else)."""
    if arr.dtype.names == ("scale", "codes") and arr.ndim == 1:
        return "int8"
    if arr.ndim == 2 and arr.dtype == np.dtype("<f4"):
        return "float32"
    if arr.ndim == 2 and arr.dtype == np.dtype("<f2"):
        return "float16"
    raise ValueError(f"not an array of stored vectors: {arr.dtype} {arr.shape}")


def to_stored(X: np.ndarray, kind: str) -> np.ndarray:
    """Prepared float32 rows ``X`` [m, d] as ``kind`` (float32: ``X`` itself, no copy)."""
    if kind == "float32":
        return np.ascontiguousarray(X, dtype="<f4")
    if kind == "float16":
        return np.ascontiguousarray(X, dtype="<f2")
    if kind != "int8":
        raise ValueError(f"unknown stored vector kind {kind!r}")
    X = np.asarray(X, dtype=np.float32)
    out = np.empty(X.shape[0], dtype=vector_dtype("int8", X.shape[1]))
    peak = np.abs(X).max(axis=1) if X.shape[1] else np.zeros(X.shape[0], np.float32)
    scale = (peak / np.float32(127.0)).astype(np.float32)
    safe = np.where(scale > 0, scale, np.float32(1.0))
    out["scale"] = scale
    out["codes"] = np.clip(np.rint(X / safe[:, None]), -127, 127).astype(np.int8)
    return out


def stored_rows(arr: np.ndarray, rows=None) -> np.ndarray:
    """Rows of a stored array as float32 [m, d] (all rows when ``rows`` is None)."""
    part = arr if rows is None else arr[np.asarray(rows)]
    if part.dtype.names is None:
        return np.asarray(part, dtype=np.float32)
    return part["codes"].astype(np.float32) * part["scale"][:, None]


def stored_exact_values(queries, stored, candidates, mode: int, *, parallel: bool = True):
    """:func:`bbqlib.search.rerank.exact_values` on stored vectors of any kind.

    float32 and float16 go straight to the exact kernel; int8 records to its int8 twin
    (:func:`bbqlib._kernels.rerank.exact_int8`), which dequantizes each candidate row as
    :func:`stored_rows` does and scores it the same way, so the values are the same.
    """
    if stored.dtype.names is None:
        return exact_values(queries, stored, candidates, mode, parallel=parallel)
    cand = np.ascontiguousarray(candidates, dtype=np.int64)
    out = np.empty(cand.shape, dtype=np.float64)
    if cand.size == 0:
        return out
    queries = np.ascontiguousarray(queries, dtype=np.float32)
    records = stored.view(np.ndarray) if isinstance(stored, np.memmap) else stored
    args = (queries, records["codes"], records["scale"], cand, int(mode), out)
    if parallel:
        KR.exact_int8(*args)
    else:
        KR._int8_one_thread(*args)
    return out
