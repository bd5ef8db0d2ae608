"""Other projects' vector files: .npy/.fvecs/.fbin and friends, ann-benchmarks HDF5.

The package also re-exports the container functions of :mod:`bbqlib.storage`, so it holds
every name the old ``bbqlib.io`` had (that path is a deprecated shim of this package).
"""

from ..storage.container import CorruptFileError, read_container, write_container
from .ann_benchmarks import (
    AnnBenchmarksDataset,
    read_ann_benchmarks,
    read_ann_benchmarks_metric,
    write_ann_benchmarks,
)
from .vectors import iter_vector_batches, read_vectors, write_vectors

__all__ = [
    "AnnBenchmarksDataset",
    "CorruptFileError",
    "iter_vector_batches",
    "read_ann_benchmarks",
    "read_ann_benchmarks_metric",
    "read_container",
    "read_vectors",
    "write_ann_benchmarks",
    "write_container",
    "write_vectors",
]
