"""Dask arrays of vectors from files: ``.npy`` (memory-mapped), vector-file shards, Parquet.

Every reader returns a ``dask.array`` of float32 rows whose blocks are read by the worker
that needs them (memory-mapped, one block at a time), never by the driver. Blocks hold at
most :data:`BLOCK_BYTES` of float32 and never span two files.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..formats.vectors import SUPPORTED_SUFFIXES, read_vectors
from ._dask import require

__all__ = ["BLOCK_BYTES", "from_files", "from_parquet", "as_dask_array"]

#: Largest block (partition) of the arrays made here: 256 MiB of float32 rows.
BLOCK_BYTES = 256 << 20


def _rows_per_block(d: int, block_bytes: int) -> int:
    return max(1, block_bytes // (4 * d))


def _read_rows(path: str, start: int, stop: int) -> np.ndarray:
    """Rows ``start:stop`` of a vector file as a float32 C-contiguous array (runs on a worker)."""
    X = read_vectors(path, mmap=True)
    return np.ascontiguousarray(X[start:stop], dtype=np.float32)


def _vector_files(paths) -> list[Path]:
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    out = []
    for p in paths:
        p = Path(p)
        if p.is_dir():
            found = sorted(
                q for q in p.iterdir() if q.is_file() and q.suffix.lower() in SUPPORTED_SUFFIXES
            )
            if not found:
                raise FileNotFoundError(
                    f"directory {p} holds no vector files ({', '.join(SUPPORTED_SUFFIXES)})"
                )
            out += found
        elif p.exists():
            out.append(p)
        else:
            raise FileNotFoundError(f"no vector file or directory at {p}")
    if not out:
        raise ValueError("paths is empty; pass at least one vector file or directory")
    return out


def from_files(paths, *, block_bytes: int = BLOCK_BYTES):
    """A ``dask.array`` [n, d] float32 over ``.npy`` / ``.fvecs`` / ``.fbin`` files.

    Parameters
    ----------
    paths : str, Path, or a list of them
        Files, or directories whose vector files (by suffix, in name order) are the shards;
        rows follow the order of the files.
    block_bytes : int
        Largest block in bytes (default 256 MiB); a block never spans two files.

    Returns
    -------
    dask.array.Array
        Known chunk sizes (the files' headers are read on the driver, not their data).
    """
    dask, _ = require()
    import dask.array as da

    files = _vector_files(paths)
    d = None
    blocks = []
    for f in files:
        X = read_vectors(f, mmap=True)
        if X.ndim != 2:
            raise ValueError(f"{f} holds a {X.ndim}-D array; vector files must be 2-D (n, d)")
        if d is None:
            d = X.shape[1]
        elif X.shape[1] != d:
            raise ValueError(f"{f} has dimension {X.shape[1]}, the first file has {d}")
        step = _rows_per_block(d, block_bytes)
        for start in range(0, X.shape[0], step):
            stop = min(X.shape[0], start + step)
            part = dask.delayed(_read_rows, pure=True)(str(f), start, stop)
            blocks.append(da.from_delayed(part, shape=(stop - start, d), dtype=np.float32))
    return da.concatenate(blocks, axis=0)


def _embedding_block(frame, column: str) -> np.ndarray:
    """A pandas partition's list-of-floats column as float32 [rows, d] (runs on a worker)."""
    values = frame[column].to_numpy()
    if values.size == 0:
        return np.empty((0, 0), dtype=np.float32)
    return np.ascontiguousarray(np.stack([np.asarray(v, dtype=np.float32) for v in values]))


def from_parquet(path, column: str, *, dim: int | None = None, **read_parquet_kwargs):
    """A ``dask.array`` [n, d] float32 of a Parquet dataset's list-of-floats column.

    Parameters
    ----------
    path : str or Path
        A Parquet file or dataset directory (anything ``dask.dataframe.read_parquet`` reads).
    column : str
        The embedding column (list<float> or fixed_size_list<float>).
    dim : int, optional
        The embedding width; read from the first row when not given.
    **read_parquet_kwargs
        Passed to ``dask.dataframe.read_parquet`` (e.g. ``filesystem``, ``split_row_groups``).

    Returns
    -------
    dask.array.Array
        Partitions of the dataframe as blocks; row counts per block come from one pass over
        the Parquet metadata (``dask.dataframe`` partition lengths).
    """
    dask, _ = require()
    import dask.array as da
    import dask.dataframe as dd

    frame = dd.read_parquet(str(path), columns=[column], **read_parquet_kwargs)
    if dim is None:
        head = frame.head(1, npartitions=-1)
        if len(head) == 0:
            raise ValueError(f"the Parquet dataset at {path} has no rows")
        dim = int(np.asarray(head[column].iloc[0]).shape[0])
    lengths = frame.map_partitions(len).compute()
    blocks = []
    for part, rows in zip(frame.to_delayed(), lengths, strict=True):
        if rows == 0:
            continue
        arr = dask.delayed(_embedding_block, pure=True)(part, column)
        blocks.append(da.from_delayed(arr, shape=(int(rows), dim), dtype=np.float32))
    return da.concatenate(blocks, axis=0)


def as_dask_array(X, *, block_bytes: int = BLOCK_BYTES):
    """``X`` as a 2-D ``dask.array``: Dask arrays as they are; NumPy arrays (and memory maps)
    in blocks of ``block_bytes``; a path (file or directory of shards) by :func:`from_files`."""
    _, _ = require()
    import dask.array as da

    if isinstance(X, da.Array):
        out = X
    elif isinstance(X, (str, os.PathLike, list, tuple)) and not isinstance(X, np.ndarray):
        if isinstance(X, (list, tuple)) and X and not isinstance(X[0], (str, os.PathLike)):
            raise TypeError("X must be a dask.array, a NumPy array or vector file path(s)")
        return from_files(X, block_bytes=block_bytes)
    elif isinstance(X, np.ndarray):
        if X.ndim != 2:
            raise ValueError(f"X must be 2-D (n, d), got shape {X.shape}")
        out = da.from_array(X, chunks=(_rows_per_block(X.shape[1], block_bytes), X.shape[1]))
    else:
        raise TypeError(
            f"X must be a dask.array, a NumPy array or vector file path(s), got {type(X).__name__}"
        )
    if out.ndim != 2:
        raise ValueError(f"X must be 2-D (n, d), got {out.ndim}-D")
    if len(out.chunks[1]) != 1:
        out = out.rechunk({1: -1})  # a block must hold whole rows
    return out
