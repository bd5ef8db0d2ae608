"""Read and write the vector file formats of the ANN world.

Formats (all little-endian, chosen by the file suffix):

========== =================================================================== ==========
suffix     layout                                                              values
========== =================================================================== ==========
``.npy``   NumPy's own format, a 2-D array                                     any dtype
``.fvecs`` per row: ``int32 d`` then ``d`` values (TEXMEX / INRIA, SIFT1M)     float32
``.ivecs`` same as ``.fvecs``                                                  int32
``.bvecs`` same as ``.fvecs``, 1-byte values                                   uint8
``.fbin``  ``int32 n, int32 d`` once, then ``n * d`` values row-major          float32
``.ibin``  (big-ann-benchmarks format)                                         int32
``.u8bin``                                                                     uint8
========== =================================================================== ==========

Readers memory-map by default, so a data set larger than RAM costs only address space:
:func:`iter_vector_batches` then streams it as float32 blocks. Writers are atomic (temporary
file in the same directory, ``fsync``, ``os.replace``): a crash leaves the old file or the new
one, never half of one.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Union

import numpy as np

from ..storage.atomic import atomic_path
from ..storage.errors import CorruptFileError

__all__ = [
    "SUPPORTED_SUFFIXES",
    "iter_vector_batches",
    "read_vectors",
    "write_bvecs",
    "write_fbin",
    "write_fvecs",
    "write_ibin",
    "write_ivecs",
    "write_u8bin",
    "write_vectors",
]

PathLike = Union[str, "os.PathLike[str]"]

_VECS_DTYPES = {".fvecs": np.dtype("<f4"), ".ivecs": np.dtype("<i4"), ".bvecs": np.dtype("u1")}
_BIN_DTYPES = {".fbin": np.dtype("<f4"), ".ibin": np.dtype("<i4"), ".u8bin": np.dtype("u1")}
SUPPORTED_SUFFIXES = (".npy", *_VECS_DTYPES, *_BIN_DTYPES)

_INT32_MAX = np.iinfo(np.int32).max
_WRITE_BLOCK_BYTES = 64 << 20  # bounded memory when writing from a memory-mapped source
_CHECK_BLOCK_ROWS = 1 << 20


# --------------------------------------------------------------------------- reading


def read_vectors(path: PathLike, *, mmap: bool = True) -> np.ndarray:
    """Read a 2-D array of vectors from ``.npy``, ``.[fib]vecs`` or ``.fbin/.ibin/.u8bin``.

    Parameters
    ----------
    path : str or os.PathLike
        The file; its suffix (case-insensitive) selects the format, see :data:`SUPPORTED_SUFFIXES`.
    mmap : bool, default True
        Return a read-only memory-mapped view instead of reading the file into RAM. For
        ``.[fib]vecs`` the view is strided (it skips each row's 4-byte dimension header), so
        nothing is copied; :func:`iter_vector_batches` makes contiguous float32 blocks from it.

    Returns
    -------
    numpy.ndarray
        Shape ``[n, d]``, dtype of the format (float32, int32 or uint8; a ``.npy`` keeps its
        own). With ``mmap=False`` a C-contiguous, writeable array owned by the caller.

    Raises
    ------
    FileNotFoundError
        The file does not exist.
    ValueError
        Unknown suffix, empty or truncated file, or a header inconsistent with the file size or
        (``.[fib]vecs``) with the other rows. The message names the file and the sizes.

    Notes
    -----
    For ``.[fib]vecs`` every row's dimension header is checked against the first, which reads
    every page of the file once (in blocks, through the page cache).

    Examples
    --------
    >>> X = read_vectors("sift_base.fvecs")                   # doctest: +SKIP
    >>> X.shape, X.dtype                                      # doctest: +SKIP
    ((1000000, 128), dtype('float32'))
    """
    path, suffix, size = _existing_file(path)
    if suffix == ".npy":
        return _read_npy(path, mmap)
    if suffix in _VECS_DTYPES:
        view = _map_vecs(path, suffix, size)
    else:
        view = _map_bin(path, suffix, size)
    return view if mmap else np.array(view, order="C")


def _existing_file(path: PathLike) -> tuple[Path, str, int]:
    path = Path(path)
    suffix = _suffix(path)
    if not path.is_file():
        raise FileNotFoundError(errno.ENOENT, "vector file not found", str(path))
    size = path.stat().st_size
    if size == 0:
        raise CorruptFileError(f"{str(path)!r} is empty (0 bytes); a {suffix} file needs a header")
    return path, suffix, size


def _suffix(path: Path) -> str:
    suffix = path.suffix.lower()
    if suffix not in SUPPORTED_SUFFIXES:
        raise ValueError(
            f"path: unsupported file suffix {path.suffix!r} in {str(path)!r}; supported suffixes "
            f"are {', '.join(SUPPORTED_SUFFIXES)}. Rename the file or convert it to one of them."
        )
    return suffix


def _read_npy(path: Path, mmap: bool) -> np.ndarray:
    try:
        X = np.load(path, mmap_mode="r" if mmap else None, allow_pickle=False)
    except (FileNotFoundError, PermissionError):
        raise
    except Exception as exc:  # noqa: BLE001 - np.load fails in many ways on a damaged header
        # (ValueError, EOFError, SyntaxError, tokenize.TokenError, OverflowError, ...)
        raise CorruptFileError(f"{str(path)!r} is not a readable .npy file: {exc}") from exc
    if X.ndim != 2:
        raise CorruptFileError(
            f"{str(path)!r} holds an array of shape {X.shape}; expected 2-D [n, d]. "
            "Reshape it (e.g. X.reshape(len(X), -1)) and save it again."
        )
    return X


def _map_vecs(path: Path, suffix: str, size: int) -> np.ndarray:
    dtype = _VECS_DTYPES[suffix]
    if size < 4:
        raise CorruptFileError(
            f"{str(path)!r} is truncated: {size} bytes, less than one 4-byte header"
        )
    d = int(np.fromfile(path, dtype="<i4", count=1)[0])
    if d <= 0:
        raise CorruptFileError(
            f"{str(path)!r}: the first row's dimension header is {d}, expected a positive int32; "
            f"the file is not a {suffix} file (or has another byte order)"
        )
    row = np.dtype([("d", "<i4"), ("v", dtype, (d,))])  # packed: 4 + d * itemsize bytes
    n, extra = divmod(size, row.itemsize)
    if extra:
        raise CorruptFileError(
            f"{str(path)!r} is truncated or not a {suffix} file: rows of d = {d} take "
            f"{row.itemsize} bytes (4-byte header + {d} x {dtype.itemsize}), so the size should "
            f"be a multiple of {row.itemsize} (e.g. {n * row.itemsize} or "
            f"{(n + 1) * row.itemsize} bytes), but it is {size} bytes"
        )
    rows = np.memmap(path, dtype=row, mode="r", shape=(n,))
    headers = rows["d"]
    for start in range(0, n, _CHECK_BLOCK_ROWS):
        block = np.asarray(headers[start : start + _CHECK_BLOCK_ROWS])
        bad = np.flatnonzero(block != d)
        if bad.size:
            i = int(bad[0])
            raise CorruptFileError(
                f"{str(path)!r}: row {start + i} has dimension header {int(block[i])}, expected "
                f"{d} as in row 0; the file is corrupt or mixes vectors of different dimensions"
            )
    return rows["v"]


def _map_bin(path: Path, suffix: str, size: int) -> np.ndarray:
    dtype = _BIN_DTYPES[suffix]
    if size < 8:
        raise CorruptFileError(
            f"{str(path)!r} is truncated: {size} bytes, less than the 8-byte header"
        )
    # The writers store int32, readers in the wild use uint32: both agree below 2**31.
    n, d = (int(v) for v in np.fromfile(path, dtype="<u4", count=2))
    expected = 8 + n * d * dtype.itemsize
    if d == 0 or size != expected:
        raise CorruptFileError(
            f"{str(path)!r}: header says n = {n}, d = {d} ({dtype} values), so the file should "
            f"be {expected} bytes (d >= 1), but it is {size} bytes; it is truncated or not a "
            f"{suffix} file"
        )
    if n == 0:  # np.memmap cannot map zero bytes
        return np.empty((0, d), dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r", offset=8, shape=(n, d))


def iter_vector_batches(
    source: PathLike | np.ndarray | Any, batch_size: int = 65536
) -> Iterator[np.ndarray]:
    """Yield consecutive row blocks of a vector source as float32 C-contiguous copies.

    The way to stream a build from data larger than RAM: only one block is materialised at a
    time, the rest stays memory-mapped (the page cache decides what is resident).

    Parameters
    ----------
    source : str, os.PathLike or array-like
        A file path (read with :func:`read_vectors`, memory-mapped), or a 2-D array-like with
        ``shape`` and slicing (``numpy.ndarray``, ``numpy.memmap``, an ``h5py`` dataset).
    batch_size : int, default 65536
        Rows per block; the last block holds the remainder.

    Yields
    ------
    numpy.ndarray
        ``float32`` ``[min(batch_size, rows left), d]``, C-contiguous, owned by the caller.

    Examples
    --------
    >>> X = np.arange(10 * 3, dtype=np.float64).reshape(10, 3)
    >>> [b.shape[0] for b in iter_vector_batches(X, batch_size=4)]
    [4, 4, 2]
    """
    # Validate now, not at the first next(): a generator would defer these errors.
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)):
        raise TypeError(f"batch_size: expected a positive int, got {type(batch_size).__name__}")
    if batch_size < 1:
        raise ValueError(f"batch_size: must be >= 1, got {batch_size}")
    if isinstance(source, (str, os.PathLike)):
        X = read_vectors(source, mmap=True)
    elif hasattr(source, "shape") and hasattr(source, "__getitem__"):
        X = source  # keep lazy sources lazy (np.asarray would read an h5py dataset whole)
    else:
        X = np.asarray(source)
    if len(X.shape) != 2:
        raise ValueError(
            f"source: expected 2-D vectors [n, d], got shape {tuple(X.shape)}; "
            "use X.reshape(1, -1) for a single vector"
        )
    return _batches(X, int(batch_size))


def _batches(X: Any, batch_size: int) -> Iterator[np.ndarray]:
    for start in range(0, X.shape[0], batch_size):
        yield np.array(X[start : start + batch_size], dtype=np.float32, order="C", copy=True)


# --------------------------------------------------------------------------- writing


def write_vectors(path: PathLike, X: np.ndarray) -> Path:
    """Write ``X`` atomically in the format named by the suffix of ``path``.

    ``.npy`` keeps ``X``'s dtype; the other formats cast to theirs (see the ``write_*``
    functions). Returns the path written.
    """
    path = Path(path)
    suffix = _suffix(path)
    if suffix == ".npy":
        X = _as_matrix(X, None, suffix)
        with atomic_path(path) as tmp, open(tmp, "wb") as f:
            np.save(f, X, allow_pickle=False)
        return path
    return _write(path, X, suffix)


def write_fvecs(path: PathLike, X: np.ndarray) -> Path:
    """Write ``X`` [n, d] as ``.fvecs`` (per row ``int32 d`` + d float32), atomically."""
    return _write(path, X, ".fvecs")


def write_ivecs(path: PathLike, X: np.ndarray) -> Path:
    """Write integer ``X`` [n, d] as ``.ivecs`` (per row ``int32 d`` + d int32), atomically."""
    return _write(path, X, ".ivecs")


def write_bvecs(path: PathLike, X: np.ndarray) -> Path:
    """Write integer ``X`` [n, d] in 0..255 as ``.bvecs`` (per row ``int32 d`` + d uint8)."""
    return _write(path, X, ".bvecs")


def write_fbin(path: PathLike, X: np.ndarray) -> Path:
    """Write ``X`` [n, d] as ``.fbin`` (``int32 n, int32 d``, then float32 rows), atomically."""
    return _write(path, X, ".fbin")


def write_ibin(path: PathLike, X: np.ndarray) -> Path:
    """Write integer ``X`` [n, d] as ``.ibin`` (``int32 n, int32 d``, then int32 rows)."""
    return _write(path, X, ".ibin")


def write_u8bin(path: PathLike, X: np.ndarray) -> Path:
    """Write integer ``X`` [n, d] in 0..255 as ``.u8bin`` (``int32 n, int32 d``, then uint8)."""
    return _write(path, X, ".u8bin")


def _write(path: PathLike, X: np.ndarray, fmt: str) -> Path:
    """Write in format ``fmt`` (a suffix) whatever the suffix of ``path`` is."""
    path = Path(path)
    is_vecs = fmt in _VECS_DTYPES
    dtype = _VECS_DTYPES[fmt] if is_vecs else _BIN_DTYPES[fmt]
    X = _as_matrix(X, dtype, fmt)
    n, d = X.shape
    if is_vecs and n == 0:
        raise ValueError(
            f"X: cannot write 0 vectors to {fmt}: the format stores d in each row, so an empty "
            "file could not be read back; use .fbin/.ibin/.u8bin or .npy for empty sets"
        )
    if n > _INT32_MAX:
        raise ValueError(f"X: {fmt} stores the count as int32; got n = {n} > {_INT32_MAX}")
    record = np.dtype([("d", "<i4"), ("v", dtype, (d,))]) if is_vecs else np.dtype((dtype, (d,)))
    check_range = dtype.kind in "iu" and not np.can_cast(X.dtype, dtype, "safe")
    rows_per_block = max(1, _WRITE_BLOCK_BYTES // record.itemsize)
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        if not is_vecs:
            f.write(np.array([n, d], dtype="<i4").tobytes())
        for start in range(0, n, rows_per_block):
            block = np.asarray(X[start : start + rows_per_block])
            if check_range and block.size:
                _check_range(block, dtype, fmt)
            out = np.empty(len(block), dtype=record)
            if is_vecs:
                out["d"] = d
                out["v"] = block
            else:
                out[...] = block
            f.write(out.tobytes())
    return path


def _as_matrix(X: Any, dtype: np.dtype | None, fmt: str) -> np.ndarray:
    # np.asarray keeps a memmap a memmap: nothing is read before the block loop.
    X = X if isinstance(X, np.ndarray) else np.asarray(X)
    if X.ndim != 2 or X.shape[1] == 0:
        raise ValueError(
            f"X: expected 2-D vectors [n, d] with d >= 1, got shape {X.shape}; "
            "use X.reshape(1, -1) for a single vector"
        )
    if X.shape[1] > _INT32_MAX:
        raise ValueError(f"X: {fmt} stores d as int32; got d = {X.shape[1]}")
    # Integers may go to any integer format (range-checked while writing); floats only to float.
    if dtype is not None and X.dtype.kind not in ("biuf" if dtype.kind == "f" else "biu"):
        raise TypeError(
            f"X: {fmt} stores {dtype.name} values and {X.dtype} cannot be cast to it without "
            f"changing kind; convert explicitly (e.g. X.astype(np.{dtype.name})) if intended"
        )
    return X


def _check_range(block: np.ndarray, dtype: np.dtype, fmt: str) -> None:
    info = np.iinfo(dtype)
    lo, hi = block.min(), block.max()
    if lo < info.min or hi > info.max:
        raise ValueError(
            f"X: {fmt} stores {dtype.name} values in [{info.min}, {info.max}], but X holds "
            f"values in [{lo}, {hi}] that would wrap around; clip or choose another format"
        )
