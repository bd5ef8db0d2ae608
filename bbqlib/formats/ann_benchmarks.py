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
Reading never calls libhdf5 in the caller's process: a damaged file can make libhdf5 hang or
crash, so a worker process parses it under a timeout (:mod:`bbqlib.formats.hdf5_guard`).
"""

from __future__ import annotations

import errno
import importlib.util
import sys
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from bbqlib.formats.hdf5_guard import HDF5Layout, describe_hdf5, load_dataset
from bbqlib.formats.vectors import PathLike, atomic_path, iter_vector_batches
from bbqlib.storage.errors import CorruptFileError

__all__ = [
    "ANN_BENCHMARKS_DISTANCES",
    "ANN_BENCHMARKS_METRICS",
    "AnnBenchmarksDataset",
    "read_ann_benchmarks",
    "read_ann_benchmarks_metric",
    "write_ann_benchmarks",
]

#: The ``distance`` attribute values of ann-benchmarks' float data sets.
ANN_BENCHMARKS_DISTANCES = ("euclidean", "angular", "dot")
#: Every ``distance`` value of ann-benchmarks' files (``hamming``, ``jaccard``: bit and set data).
ANN_BENCHMARKS_METRICS = (*ANN_BENCHMARKS_DISTANCES, "hamming", "jaccard")
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


_NEEDS_H5PY = "reading or writing ann-benchmarks HDF5 files needs h5py: pip install bbqlib[hdf5]"


def _h5py() -> Any:
    try:
        import h5py
    except ImportError as exc:
        raise ImportError(_NEEDS_H5PY) from exc
    return h5py


def _check_h5py_installed() -> None:
    """ImportError naming the extra, without importing h5py here (the worker does)."""
    if "h5py" in sys.modules:
        missing = sys.modules["h5py"] is None
    else:
        missing = importlib.util.find_spec("h5py") is None
    if missing:
        raise ImportError(_NEEDS_H5PY)


def _describe(path: PathLike, timeout: float | None, **request: Any) -> HDF5Layout:
    _check_h5py_installed()
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(errno.ENOENT, "ann-benchmarks file not found", str(path))
    if timeout is not None and not timeout > 0:
        raise ValueError(f"timeout: must be a positive number of seconds, got {timeout!r}")
    return describe_hdf5(path, timeout=timeout, **request)


def read_ann_benchmarks(
    path: PathLike, *, mmap: bool = False, timeout: float | None = None
) -> AnnBenchmarksDataset:
    """Read an ann-benchmarks HDF5 data set.

    Parameters
    ----------
    path : str or os.PathLike
        An ann-benchmarks ``.hdf5`` file (e.g. ``glove-100-angular.hdf5``).
    mmap : bool, default False
        Memory-map each dataset stored contiguously and uncompressed (the layout ann-benchmarks
        writes) instead of reading it into RAM; others are read.
    timeout : float, optional
        Seconds libhdf5 may take to parse the file (default: 60 plus 1 per 32 MiB of file).
        libhdf5 can hang or crash on a damaged file, so it runs in a short-lived worker
        process (:mod:`bbqlib.formats.hdf5_guard`) that is killed after ``timeout``; this process
        then reads the contiguous datasets' bytes itself. Costs a process start (a fraction
        of a second) per call.

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
        (a ``ValueError``) Not HDF5, damaged (h5py fails, or the worker hangs or crashes), a
        dataset missing, shapes or dtypes that do not fit together (``train`` and ``test``
        alike, integer ``neighbors``, float ``distances``), or ``neighbors`` ids outside
        ``train``; the message names the file and what is wrong.

    Examples
    --------
    >>> path = "glove-25-angular.hdf5"
    >>> train, test, neighbors, distances = read_ann_benchmarks(path)  # doctest: +SKIP
    >>> read_ann_benchmarks_metric(path)  # doctest: +SKIP
    'angular'
    """
    with _describe(path, timeout, datasets=_DATASETS) as layout:
        missing = [name for name in _DATASETS if name not in layout.datasets]
        if missing:
            raise CorruptFileError(
                f"{str(path)!r} is not an ann-benchmarks file: datasets {missing} are "
                f"missing (it has {layout.keys})"
            )
        odd = [name for name in _DATASETS if not layout.datasets[name]["dataset"]]
        if odd:
            raise CorruptFileError(f"{str(path)!r}: {odd} are not datasets")
        dataset = AnnBenchmarksDataset(*(load_dataset(layout, n, mmap=mmap) for n in _DATASETS))
    try:
        _check_shapes(dataset, f"{str(path)!r}")
    except ValueError as exc:
        raise CorruptFileError(str(exc)) from None
    neighbors = dataset.neighbors
    if dataset.train.dtype != dataset.test.dtype:
        raise CorruptFileError(
            f"{str(path)!r}: train ({dataset.train.dtype}) and test ({dataset.test.dtype}) "
            "must hold the same type of values"
        )
    if neighbors.dtype.kind not in "iu" or dataset.distances.dtype.kind != "f":
        raise CorruptFileError(
            f"{str(path)!r}: neighbors must hold integer ids and distances floats, got "
            f"{neighbors.dtype} and {dataset.distances.dtype}"
        )
    if neighbors.size and (neighbors.min() < 0 or neighbors.max() >= len(dataset.train)):
        raise CorruptFileError(
            f"{str(path)!r}: neighbors ids must lie in [0, {len(dataset.train)}) (rows of "
            f"train), found [{neighbors.min()}, {neighbors.max()}]"
        )
    return dataset


def read_ann_benchmarks_metric(path: PathLike, *, timeout: float | None = None) -> str:
    """The ``distance`` attribute of an ann-benchmarks file: ``"euclidean"``, ``"angular"``...

    Read through the same guarded worker as :func:`read_ann_benchmarks` (``timeout`` alike);
    a value ann-benchmarks does not know (:data:`ANN_BENCHMARKS_METRICS`) is a
    :class:`CorruptFileError`.
    """
    with _describe(path, timeout, attrs=("distance",), read=False) as layout:
        if "distance" not in layout.attrs:
            raise CorruptFileError(
                f"{str(path)!r} has no 'distance' attribute; it is not an ann-benchmarks file"
            )
        value = layout.attrs["distance"]
    if value not in ANN_BENCHMARKS_METRICS:
        raise CorruptFileError(
            f"{str(path)!r}: distance attribute {value!r} is none of ann-benchmarks' "
            f"metrics {ANN_BENCHMARKS_METRICS}"
        )
    return value


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
