"""Read and write ann-benchmarks' HDF5 data-set files.

Layout (as written by ``ann_benchmarks/datasets.py``, ``write_output``):

- datasets ``train`` [n, d] and ``test`` [m, d] (float, in the dtype given: float32 for the
  harness's own sets), ``neighbors`` [m, k] (the exact top-k train ids of each test vector,
  best first) and ``distances`` [m, k]. The harness's current ``write_output`` stores them as
  int64 and float64 (``dtype=int`` / ``float``); files published by older versions hold
  int32 / float32, and :func:`write_ann_benchmarks` writes those (half the size); both read;
- file attributes ``distance`` (``"euclidean"``, ``"angular"`` or ``"dot"`` for float data),
  ``point_type`` (``"float"``), ``dimension`` (d) and ``type`` (``"dense"``).

h5py is an optional extra (``pip install bbqlib[hdf5]``), imported only when these functions run.
"""

from __future__ import annotations

import errno
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from bbqlib.io.errors import CorruptFileError
from bbqlib.io.vectors import PathLike, atomic_path, iter_vector_batches

__all__ = [
    "ANN_BENCHMARKS_DISTANCES",
    "AnnBenchmarksDataset",
    "read_ann_benchmarks",
    "read_ann_benchmarks_metric",
    "write_ann_benchmarks",
]

#: The ``distance`` attribute values of ann-benchmarks' float data sets.
ANN_BENCHMARKS_DISTANCES = ("euclidean", "angular", "dot")
_DATASETS = ("train", "test", "neighbors", "distances")


class AnnBenchmarksDataset(NamedTuple):
    """The four arrays of an ann-benchmarks file.

    Unpacks as ``train, test, neighbors, distances``; the metric is
    :func:`read_ann_benchmarks_metric`.
    """

    train: np.ndarray
    test: np.ndarray
    neighbors: np.ndarray
    distances: np.ndarray


def _h5py() -> Any:
    try:
        import h5py
    except ImportError as exc:
        raise ImportError(
            "reading or writing ann-benchmarks HDF5 files needs h5py: pip install bbqlib[hdf5]"
        ) from exc
    return h5py


def _open(path: PathLike) -> Any:
    h5py = _h5py()
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(errno.ENOENT, "ann-benchmarks file not found", str(path))
    try:
        return h5py.File(path, "r")
    except (OSError, RuntimeError, ValueError, KeyError) as exc:  # "file signature not found"...
        raise CorruptFileError(f"{str(path)!r} is not a readable HDF5 file: {exc}") from exc


#: What h5py raises on damaged files (its errors map HDF5's C error stack onto these).
_H5_ERRORS = (OSError, RuntimeError, KeyError, ValueError, TypeError, IndexError, AttributeError)


def read_ann_benchmarks(path: PathLike, *, mmap: bool = False) -> AnnBenchmarksDataset:
    """Read an ann-benchmarks HDF5 data set.

    Parameters
    ----------
    path : str or os.PathLike
        An ann-benchmarks ``.hdf5`` file (e.g. ``glove-100-angular.hdf5``).
    mmap : bool, default False
        Memory-map each dataset stored contiguously and uncompressed (the layout ann-benchmarks
        writes) instead of reading it into RAM; others are read.

    Returns
    -------
    AnnBenchmarksDataset
        ``(train, test, neighbors, distances)`` in their stored dtypes. The metric is
        :func:`read_ann_benchmarks_metric`.

    Raises
    ------
    ImportError
        h5py is not installed.
    FileNotFoundError
        Missing file.
    CorruptFileError
        (a ``ValueError``) Not HDF5, damaged, a dataset missing or shapes that do not fit
        together; the message names the file and what is wrong.

    Examples
    --------
    >>> path = "glove-25-angular.hdf5"
    >>> train, test, neighbors, distances = read_ann_benchmarks(path)  # doctest: +SKIP
    >>> read_ann_benchmarks_metric(path)  # doctest: +SKIP
    'angular'
    """
    f = _open(path)
    try:
        with f:
            missing = [name for name in _DATASETS if name not in f]
            if missing:
                raise CorruptFileError(
                    f"{str(path)!r} is not an ann-benchmarks file: datasets {missing} are "
                    f"missing (it has {sorted(f.keys())})"
                )
            h5py = _h5py()
            odd = [name for name in _DATASETS if not isinstance(f[name], h5py.Dataset)]
            if odd:
                raise CorruptFileError(f"{str(path)!r}: {odd} are not datasets")
            arrays = [_load(f[name], path, mmap) for name in _DATASETS]
    except CorruptFileError:
        raise
    except _H5_ERRORS as exc:  # damage found while reading (h5py raises many kinds)
        raise CorruptFileError(f"{str(path)!r} is a damaged HDF5 file: {exc}") from exc
    dataset = AnnBenchmarksDataset(*arrays)
    try:
        _check_shapes(dataset, f"{str(path)!r}")
    except ValueError as exc:
        raise CorruptFileError(str(exc)) from None
    return dataset


def _load(dset: Any, path: PathLike, mmap: bool) -> np.ndarray:
    offset = dset.id.get_offset()  # None unless contiguous and allocated
    if mmap and offset is not None and dset.chunks is None and not dset.external:
        return np.memmap(path, dtype=dset.dtype, mode="r", offset=offset, shape=dset.shape)
    return dset[()]


def read_ann_benchmarks_metric(path: PathLike) -> str:
    """The ``distance`` attribute of an ann-benchmarks file: ``"euclidean"``, ``"angular"``..."""
    f = _open(path)
    try:
        with f:
            if "distance" not in f.attrs:
                raise CorruptFileError(
                    f"{str(path)!r} has no 'distance' attribute; it is not an ann-benchmarks file"
                )
            value = f.attrs["distance"]
    except CorruptFileError:
        raise
    except _H5_ERRORS as exc:
        raise CorruptFileError(f"{str(path)!r} is a damaged HDF5 file: {exc}") from exc
    return value.decode() if isinstance(value, bytes) else str(value)


def write_ann_benchmarks(
    path: PathLike,
    train: np.ndarray,
    test: np.ndarray,
    neighbors: np.ndarray,
    distances: np.ndarray,
    distance: str,
) -> Path:
    """Write a data set in exactly ann-benchmarks' HDF5 layout, atomically.

    Parameters
    ----------
    path : str or os.PathLike
        Output file (ann-benchmarks names them ``<name>-<d>-<distance>.hdf5``).
    train, test : array-like, [n, d] and [m, d]
        Stored as float32; ``train`` is copied in blocks, so a memory-mapped array larger than
        RAM is fine.
    neighbors : array-like of int, [m, k]
        Exact top-k ``train`` ids per test vector, best first; stored as int32 (as in the
        published files; the harness's current ``write_output`` uses int64, read alike).
    distances : array-like, [m, k]
        Their distances (ann-benchmarks' convention for ``distance``); stored as float32
        (the current ``write_output`` uses float64).
    distance : {"euclidean", "angular", "dot"}
        The metric, stored in the ``distance`` attribute.

    Returns
    -------
    pathlib.Path
        The path written.
    """
    h5py = _h5py()
    if distance not in ANN_BENCHMARKS_DISTANCES:
        raise ValueError(
            f"distance: must be one of {ANN_BENCHMARKS_DISTANCES} (float data sets), "
            f"got {distance!r}"
        )
    train = train if hasattr(train, "shape") else np.asarray(train)
    test, neighbors, distances = (np.asarray(a) for a in (test, neighbors, distances))
    if neighbors.dtype.kind not in "iu":
        raise TypeError(f"neighbors: expected integer ids, got dtype {neighbors.dtype}")
    dataset = AnnBenchmarksDataset(train, test, neighbors, distances)
    _check_shapes(dataset, "write_ann_benchmarks")
    if neighbors.size and (neighbors.min() < 0 or neighbors.max() >= train.shape[0]):
        raise ValueError(
            f"neighbors: ids must lie in [0, {train.shape[0]}) (rows of train), got "
            f"[{neighbors.min()}, {neighbors.max()}]"
        )
    path = Path(path)
    with atomic_path(path) as tmp, h5py.File(tmp, "w") as f:
        f.attrs["type"] = "dense"
        f.attrs["distance"] = distance
        f.attrs["dimension"] = int(train.shape[1])
        f.attrs["point_type"] = "float"
        out = f.create_dataset("train", shape=train.shape, dtype="f")
        start = 0
        for block in iter_vector_batches(train, batch_size=65536):
            out[start : start + len(block)] = block
            start += len(block)
        f.create_dataset("test", data=np.asarray(test, dtype=np.float32))
        f.create_dataset("neighbors", data=neighbors.astype(np.int32))
        f.create_dataset("distances", data=np.asarray(distances, dtype=np.float32))
    return path


def _check_shapes(ds: AnnBenchmarksDataset, where: str) -> None:
    train, test, neighbors, distances = (tuple(a.shape) for a in ds)
    problems = []
    if len(train) != 2 or len(test) != 2 or train[1:] != test[1:]:
        problems.append(f"train {train} and test {test} must be 2-D with the same d")
    if len(neighbors) != 2 or neighbors != distances or neighbors[:1] != test[:1]:
        problems.append(
            f"neighbors {neighbors} and distances {distances} must both be [len(test), k]"
        )
    if problems:
        raise ValueError(f"{where}: inconsistent shapes: " + "; ".join(problems))
