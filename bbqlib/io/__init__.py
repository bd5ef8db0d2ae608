"""File formats: bbqlib containers, vector files, ann-benchmarks HDF5."""

from .ann_benchmarks import (
    AnnBenchmarksDataset,
    read_ann_benchmarks,
    read_ann_benchmarks_metric,
    write_ann_benchmarks,
)
from .container import CorruptFileError, read_container, write_container
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
