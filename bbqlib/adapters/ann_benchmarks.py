"""ann-benchmarks-shaped wrappers of bbqlib's indexes (duck-typed ``BaseANN``).

ann-benchmarks (github.com/erikbern/ann-benchmarks) drives an algorithm through
``Algorithm(metric, *build_args)``, ``fit(X)``, then for each query-argument group
``set_query_arguments(*args)`` and ``query(q, n)`` or ``batch_query(X, n)`` +
``get_batch_results()``; ``str(algo)`` names the run. These classes have that shape without
importing ann-benchmarks (it is not on PyPI), so an ``algos.yaml`` entry can point at them::

    bbqlib-flat:
      docker-tag: ann-benchmarks-bbqlib
      module: bbqlib.adapters.ann_benchmarks
      constructor: BBQFlat
      base-args: ["@metric"]
      run-groups:
        one-bit: {args: [[1]], query-args: [[1, 2, 3, 5, 10]]}

====================  ======================================  ===========================
class                 build arguments                         query arguments
====================  ======================================  ===========================
:class:`BBQFlat`      ``metric, bits=1``                      ``oversample``
:class:`BBQIVF`       ``metric, bits=1, cluster_size=384``    ``visit_percentage``,
                                                              ``oversample=None``
:class:`BBQUSearch`   ``metric, bits=1, connectivity=16,      ``expansion_search``,
                      expansion_add=128``                     ``oversample=None``
====================  ======================================  ===========================

Metrics: ``"angular"`` → cosine, ``"euclidean"`` → euclidean, ``"dot"`` / ``"ip"`` →
max_inner_product. :class:`BBQIVF` needs :mod:`bbqlib.index.ivf`; :class:`BBQUSearch` needs
usearch.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["BBQFlat", "BBQIVF", "BBQUSearch", "METRICS", "similarity_for_metric"]

#: ann-benchmarks metric name -> bbqlib similarity.
METRICS = {
    "angular": "cosine",
    "euclidean": "euclidean",
    "dot": "max_inner_product",
    "ip": "max_inner_product",
}


def similarity_for_metric(metric: str) -> str:
    """bbqlib similarity of an ann-benchmarks metric name."""
    if metric not in METRICS:
        raise ValueError(
            f"metric must be one of {sorted(METRICS)} (ann-benchmarks' float metrics), "
            f"got {metric!r}"
        )
    return METRICS[metric]


class _BaseANN:
    """The ``BaseANN`` interface; subclasses set ``self.index`` in :meth:`fit`."""

    def __init__(self, metric: str):
        self.metric = metric
        self.similarity = similarity_for_metric(metric)
        self.index = None
        self.res: list[np.ndarray] = []
        self.name = type(self).__name__

    # -- to implement ---------------------------------------------------------------------
    def _search(self, X: np.ndarray, n: int) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    # -- BaseANN ----------------------------------------------------------------------------
    def fit(self, X) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def set_query_arguments(self, *args) -> None:
        """No query arguments by default."""

    def query(self, q, n: int) -> np.ndarray:
        """Ids of the ``n`` nearest neighbours of one query (fewer if the index is smaller)."""
        ids = self._search(np.asarray(q, dtype=np.float32).reshape(1, -1), int(n))[0]
        return ids[ids >= 0]

    def batch_query(self, X, n: int) -> None:
        """Search all queries at once; :meth:`get_batch_results` returns the ids."""
        ids = self._search(np.asarray(X, dtype=np.float32), int(n))
        self.res = [row[row >= 0] for row in ids]

    def get_batch_results(self) -> list[np.ndarray]:
        return self.res

    def get_memory_usage(self) -> float | None:
        """Index size in kB (ann-benchmarks' unit), float vectors for the rerank excluded."""
        nbytes = self._index_bytes()
        return None if nbytes is None else nbytes / 1024.0

    def _index_bytes(self) -> int | None:
        return None

    def get_additional(self) -> dict[str, Any]:
        nbytes = self._index_bytes()
        n = len(self.index) if self.index is not None else 0
        return {} if nbytes is None or not n else {"index_bytes_per_vector": nbytes / n}

    def done(self) -> None:
        self.index = None

    def __str__(self) -> str:
        return self.name


class BBQFlat(_BaseANN):
    """:class:`bbqlib.FlatIndex` (scan every code, rerank ``k · oversample`` on floats)."""

    def __init__(self, metric: str, bits: int = 1, query_bits="auto", precondition=None):
        super().__init__(metric)
        self.bits = bits
        self.query_bits = query_bits
        self.precondition = precondition
        self.oversample = None
        self.name = f"BBQFlat(bits={bits})"

    def fit(self, X) -> None:
        from ..index.flat import FlatIndex

        self.index = FlatIndex(
            bits=self.bits,
            query_bits=self.query_bits,
            similarity=self.similarity,
            precondition=self.precondition,
        )
        self.index.add(X)

    def set_query_arguments(self, oversample=None) -> None:
        self.oversample = oversample
        self.name = f"BBQFlat(bits={self.bits}, oversample={oversample})"

    def _search(self, X, n):
        return self.index.search(X, n, oversample=self.oversample)[1]

    def _index_bytes(self):
        return None if self.index is None else self.index.ntotal * self.index.bytes_per_vector


class BBQIVF(_BaseANN):
    """:class:`bbqlib.index.ivf.IVFIndex` (DiskBBQ-style IVF with SOAR)."""

    def __init__(self, metric: str, bits: int = 1, cluster_size: int = 384):
        super().__init__(metric)
        self.bits = bits
        self.cluster_size = cluster_size
        self.visit_percentage = None
        self.oversample = None
        self.name = f"BBQIVF(bits={bits}, cluster_size={cluster_size})"

    def fit(self, X) -> None:
        try:
            from ..index.ivf import IVFIndex
        except ImportError as exc:  # pragma: no cover - depends on the checkout
            raise ImportError("BBQIVF needs bbqlib.index.ivf (IVFIndex)") from exc
        self.index = IVFIndex(
            bits=self.bits, similarity=self.similarity, cluster_size=self.cluster_size
        )
        self.index.add(X)

    def set_query_arguments(self, visit_percentage=None, oversample=None) -> None:
        self.visit_percentage = visit_percentage
        self.oversample = oversample
        self.name = (
            f"BBQIVF(bits={self.bits}, cluster_size={self.cluster_size}, "
            f"visit={visit_percentage}, oversample={oversample})"
        )

    def _search(self, X, n):
        return self.index.search(
            X, n, visit_percentage=self.visit_percentage, oversample=self.oversample
        )[1]

    def _index_bytes(self):
        if self.index is None:
            return None
        per_entry = getattr(self.index, "bytes_per_entry", None)
        if per_entry is None:
            return None
        entries = int(np.sum(self.index.list_sizes))
        return entries * per_entry + self.index.centroids_.nbytes


class BBQUSearch(_BaseANN):
    """:class:`bbqlib.adapters.usearch.USearchIndex` (usearch HNSW over BBQ codes)."""

    def __init__(
        self, metric: str, bits: int = 1, connectivity: int = 16, expansion_add: int = 128
    ):
        super().__init__(metric)
        self.bits = bits
        self.connectivity = connectivity
        self.expansion_add = expansion_add
        self.oversample = None
        self.name = f"BBQUSearch(bits={bits}, M={connectivity})"

    def fit(self, X) -> None:
        from .usearch import USearchIndex

        self.index = USearchIndex(
            bits=self.bits,
            similarity=self.similarity,
            connectivity=self.connectivity,
            expansion_add=self.expansion_add,
            threads=0,
        )
        self.index.add(X)
        self.index.threads = 1  # ann-benchmarks measures single-threaded queries

    def set_query_arguments(self, expansion_search=64, oversample=None) -> None:
        self.index.expansion_search = expansion_search
        self.oversample = oversample
        self.name = (
            f"BBQUSearch(bits={self.bits}, M={self.connectivity}, ef={expansion_search}, "
            f"oversample={oversample})"
        )

    def _search(self, X, n):
        return self.index.search(X, n, oversample=self.oversample)[1]

    def _index_bytes(self):
        return None if self.index is None else self.index.serialized_bytes
