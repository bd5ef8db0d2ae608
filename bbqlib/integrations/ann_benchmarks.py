"""ann-benchmarks wrappers of bbqlib's indexes (the harness's ``BaseANN`` interface).

ann-benchmarks (github.com/erikbern/ann-benchmarks) drives an algorithm through
``Algorithm(metric, *build_args)``, ``fit(X)``, then for each query-argument group
``set_query_arguments(*args)`` and ``query(q, n)`` (or ``batch_query(X, n)`` +
``get_batch_results()`` with ``--batch``); ``str(algo)`` names the run and
``get_memory_usage()`` is read before and after ``fit``. These classes have that interface
without importing the harness (it is not on PyPI); ``python -m bbqlib ann-benchmarks-plugin
HARNESS_DIR`` installs them into a harness checkout
(:mod:`bbqlib.integrations.ann_benchmarks_plugin`).

=======================  ========================================  ==============================
class                    build arguments                           query arguments
=======================  ========================================  ==============================
:class:`BBQFlat`         ``metric, bits=1, query_bits="auto",      ``oversample``
                         precondition=None``
:class:`QuantizedFlat`   ``metric, flavour="bbq", bits=1``         ``oversample``
                         (flavours: :data:`FLAT_FLAVOURS`)
:class:`BBQIVF`          ``metric, bits=1, cluster_size=384``      ``visit_percentage``,
                                                                   ``oversample=None``
:class:`BBQUSearch`      ``metric, bits=1, connectivity=16,        ``expansion_search``,
                         expansion_add=128``                       ``oversample=None``
=======================  ========================================  ==============================

They behave like the harness's own wrappers (``ann_benchmarks/algorithms/*/module.py``):

* **memory**: :meth:`~_BaseANN.get_memory_usage` is the process's resident set in kB, as the
  harness's ``BaseANN`` returns it (the harness reports the growth over ``fit``); the bytes of
  the codes alone are in :meth:`~_BaseANN.get_additional` (``index_bytes``);
* **no compilation in queries**: ``fit`` first builds and searches a throwaway index on its
  first rows, then searches the real one, so numba's kernels are compiled (or loaded from the
  cache) inside the build time; the memory that costs is reported as ``warm_up_kb``;
* **one thread**: ``fit`` builds on numba's threads (as hnswlib and faiss build on theirs),
  then pins the calling thread to one for :meth:`~_BaseANN.query`, as the harness's hnswlib and
  faiss HNSW wrappers pin theirs; :meth:`~_BaseANN.batch_query` (the harness's ``--batch``,
  which hands the container every CPU) uses all of them, or ``batch_threads`` if set;
  :meth:`~_BaseANN.done` restores the caller's thread count;
* **input**: any real numeric array (int32/int64 as in MNIST-style sets, float64, float16) is
  converted to float32, as the harness's faiss and hnswlib wrappers do; the caller's arrays
  are never written.

Metrics: ``"angular"`` → cosine, ``"euclidean"`` → euclidean, ``"dot"`` / ``"ip"`` →
max_inner_product.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

from .._kernels.policy import set_threads, threads

__all__ = [
    "BBQFlat",
    "BBQIVF",
    "BBQUSearch",
    "FLAT_FLAVOURS",
    "METRICS",
    "QuantizedFlat",
    "process_memory_kb",
    "similarity_for_metric",
]

#: ann-benchmarks metric name -> bbqlib similarity.
METRICS = {
    "angular": "cosine",
    "euclidean": "euclidean",
    "dot": "max_inner_product",
    "ip": "max_inner_product",
}

#: Rows of the throwaway index ``fit`` builds first, to compile or load the kernels.
WARM_UP_ROWS = 2000


def _bbq(bits: int, similarity: str, **params):
    from ..quantizers import BBQQuantizer

    return BBQQuantizer(bits=bits, similarity=similarity, **params)


def _rabitq(bits: int, similarity: str, **params):
    from ..quantizers import RaBitQQuantizer

    return RaBitQQuantizer(bits=bits, similarity=similarity, **params)


def _saq(bits: float, similarity: str, **params):
    from ..quantizers import SAQQuantizer

    return SAQQuantizer(bits=bits, similarity=similarity, **params)


#: Quantizer flavours of :class:`QuantizedFlat`: name -> ``factory(bits, similarity, **params)``
#: returning an unfitted bbqlib quantizer. A new flavour is one entry here (and one row in
#: :data:`bbqlib.integrations.ann_benchmarks_plugin.DEFINITIONS` to benchmark it).
FLAT_FLAVOURS: dict[str, Callable[..., Any]] = {
    "bbq": _bbq,
    "rabitq": _rabitq,
    "saq": _saq,
}


def similarity_for_metric(metric: str) -> str:
    """bbqlib similarity of an ann-benchmarks metric name."""
    if metric not in METRICS:
        raise ValueError(
            f"metric must be one of {sorted(METRICS)} (ann-benchmarks' float metrics), "
            f"got {metric!r}"
        )
    return METRICS[metric]


def process_memory_kb() -> float:
    """Resident set size of this process in kB: what ann-benchmarks' ``BaseANN`` measures.

    Uses psutil (the harness's own way) when it is installed, else ``/proc/self/statm``, else
    the peak resident size from :func:`resource.getrusage`.
    """
    try:
        import psutil
    except ImportError:
        pass
    else:
        return psutil.Process().memory_info().rss / 1024.0
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1024.0
    except (OSError, ValueError, IndexError, AttributeError):
        import resource
        import sys

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return float(peak) / (1024.0 if sys.platform == "darwin" else 1.0)  # bytes on macOS


def _as_float32(X, name: str) -> np.ndarray:
    """Any real numeric array as C-contiguous float32 (a copy only when needed)."""
    a = np.asarray(X)
    if a.dtype.kind not in "biuf":
        raise TypeError(f"{name} must be a numeric array, got dtype {a.dtype}")
    return np.ascontiguousarray(a, dtype=np.float32)


class _BaseANN:
    """The harness's ``BaseANN`` interface; subclasses build ``self.index`` in :meth:`_build`."""

    def __init__(self, metric: str):
        self.metric = metric
        self.similarity = similarity_for_metric(metric)
        self.index = None
        self.res: list[np.ndarray] = []
        self._caller_threads: int | None = None
        self.warm_up_kb = 0.0
        #: numba (and usearch) threads of :meth:`batch_query`; None: all of them, as the
        #: harness's ``--batch`` mode hands the algorithm every CPU.
        self.batch_threads: int | None = None

    # -- to implement -----------------------------------------------------------------------
    def _build(self, X: np.ndarray) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _search(self, X: np.ndarray, n: int) -> np.ndarray:  # pragma: no cover - abstract
        raise NotImplementedError

    def _index_bytes(self) -> int:  # pragma: no cover - abstract
        raise NotImplementedError

    def _params(self) -> dict[str, Any]:
        """Every build and query parameter, in the order ``__str__`` names them."""
        return {}

    def _set_search_threads(self, n: int | None) -> None:
        """Engines with their own threads (usearch) follow numba's count here."""

    # -- BaseANN ----------------------------------------------------------------------------
    def fit(self, X) -> None:
        """Build the index with its kernels compiled or loaded, then pin queries to one thread.

        A throwaway index on the first :data:`WARM_UP_ROWS` rows is built and searched first;
        the resident memory that takes (numba's kernels, mostly) is ``warm_up_kb`` in
        :meth:`get_additional`, and stays inside the harness's index size, as an engine's
        code would. The real index then answers one query and a small batch before ``fit``
        returns, so no timed query compiles anything.
        """
        X = _as_float32(X, "X")
        if X.ndim != 2 or not len(X):
            raise ValueError(f"X must be a non-empty 2-D array [n, d], got shape {X.shape}")
        rss = process_memory_kb()
        self._build(X[:WARM_UP_ROWS])
        self._warm_up_queries(X)
        self.index = None
        # The resident set may also shrink meanwhile (the allocator returning freed pages):
        # a negative growth means the warm-up cost nothing measurable.
        self.warm_up_kb = max(0.0, process_memory_kb() - rss)
        self._build(X)
        self._warm_up_queries(X)
        if self._caller_threads is None:
            self._caller_threads = set_threads(1)

    def _warm_up_queries(self, X: np.ndarray) -> None:
        """The two shapes the harness sends: a small batch on all threads, one query on one."""
        k = min(10, len(self.index))
        with threads(self.batch_threads):
            self._set_search_threads(self.batch_threads)
            self._search(X[:3], k)
        with threads(1):
            self._set_search_threads(1)
            self._search(X[:1], k)

    def set_query_arguments(self, *args) -> None:
        """No query arguments by default."""

    def query(self, q, n: int) -> np.ndarray:
        """Ids of the ``n`` nearest neighbours of one query (fewer if the index is smaller)."""
        ids = self._search(_as_float32(q, "q").reshape(1, -1), int(n))[0]
        return ids[ids >= 0]

    def batch_query(self, X, n: int) -> None:
        """Search all queries at once on :attr:`batch_threads` threads (default all of them);
        :meth:`get_batch_results` returns the ids."""
        previous = set_threads(self.batch_threads)
        self._set_search_threads(self.batch_threads)
        try:
            ids = self._search(_as_float32(X, "X"), int(n))
        finally:
            set_threads(previous)
            self._set_search_threads(previous)
        self.res = [row[row >= 0] for row in ids]

    def get_batch_results(self) -> list[np.ndarray]:
        return self.res

    def get_memory_usage(self) -> float:
        """This process's resident set in kB, like the harness's ``BaseANN`` (never None)."""
        return process_memory_kb()

    def get_additional(self) -> dict[str, Any]:
        """Stored beside the harness's results: ``index_bytes`` (codes, corrections and
        structure; the float vectors for the rerank excluded), ``index_bytes_per_vector`` and
        ``warm_up_kb`` (resident memory of loading the kernels, part of the index size)."""
        if self.index is None or not len(self.index):
            return {}
        nbytes = int(self._index_bytes())
        return {
            "index_bytes": nbytes,
            "index_bytes_per_vector": nbytes / len(self.index),
            "warm_up_kb": self.warm_up_kb,
        }

    def done(self) -> None:
        """Free the index and give the calling thread its numba thread count back."""
        self.index = None
        if self._caller_threads is not None:
            set_threads(self._caller_threads)
            self._caller_threads = None

    def __str__(self) -> str:
        args = ", ".join(f"{key}={value}" for key, value in self._params().items())
        return f"{type(self).__name__}({args})"

    @property
    def name(self) -> str:
        """The run's name (the harness's ``BaseANN.__str__`` returns ``self.name``)."""
        return str(self)


class QuantizedFlat(_BaseANN):
    """:class:`bbqlib.FlatIndex` over any quantizer flavour of :data:`FLAT_FLAVOURS`.

    Every code is scanned, then the best ``k · oversample`` are reranked on float vectors.
    """

    def __init__(self, metric: str, flavour: str = "bbq", bits: int = 1, **quantizer_params):
        super().__init__(metric)
        if flavour not in FLAT_FLAVOURS:
            raise ValueError(f"flavour must be one of {sorted(FLAT_FLAVOURS)}, got {flavour!r}")
        self.flavour = flavour
        self.bits = bits
        self.quantizer_params = dict(quantizer_params)
        self.oversample = None

    def _build(self, X):
        from ..index.flat.index import FlatIndex

        quantizer = FLAT_FLAVOURS[self.flavour](self.bits, self.similarity, **self.quantizer_params)
        self.index = FlatIndex(quantizer)
        self.index.add(X)

    def set_query_arguments(self, oversample=None) -> None:
        self.oversample = oversample

    def _search(self, X, n):
        return self.index.search(X, n, oversample=self.oversample, pad_to_k=False)[1]

    def _index_bytes(self):
        return self.index.ntotal * self.index.bytes_per_vector

    def _params(self):
        return {
            "flavour": self.flavour,
            "bits": self.bits,
            **self.quantizer_params,
            "oversample": self.oversample,
        }


class BBQFlat(QuantizedFlat):
    """:class:`bbqlib.FlatIndex` with BBQ codes (scan every code, rerank ``k · oversample``)."""

    def __init__(self, metric: str, bits: int = 1, query_bits="auto", precondition=None):
        super().__init__(metric, "bbq", bits, query_bits=query_bits, precondition=precondition)

    def _params(self):
        params = super()._params()
        del params["flavour"]
        return params


class BBQIVF(_BaseANN):
    """:class:`bbqlib.index.ivf.IVFIndex` (DiskBBQ-style IVF with SOAR)."""

    def __init__(self, metric: str, bits: int = 1, cluster_size: int = 384):
        super().__init__(metric)
        self.bits = bits
        self.cluster_size = cluster_size
        self.visit_percentage = None
        self.oversample = None

    def _build(self, X):
        from ..index.ivf import IVFIndex

        self.index = IVFIndex(
            bits=self.bits, similarity=self.similarity, cluster_size=self.cluster_size
        )
        self.index.add(X)

    def set_query_arguments(self, visit_percentage=None, oversample=None) -> None:
        self.visit_percentage = visit_percentage
        self.oversample = oversample

    def _search(self, X, n):
        vp, over = self.visit_percentage, self.oversample
        return self.index.search(X, n, visit_percentage=vp, oversample=over, pad_to_k=False)[1]

    def _index_bytes(self):
        entries = int(np.sum(self.index.list_sizes))
        return entries * self.index.bytes_per_entry + self.index.centroids_.nbytes

    def _params(self):
        return {
            "bits": self.bits,
            "cluster_size": self.cluster_size,
            "visit_percentage": self.visit_percentage,
            "oversample": self.oversample,
        }


class BBQUSearch(_BaseANN):
    """:class:`bbqlib.integrations.usearch.USearchIndex` (usearch HNSW over BBQ codes)."""

    def __init__(
        self, metric: str, bits: int = 1, connectivity: int = 16, expansion_add: int = 128
    ):
        super().__init__(metric)
        self.bits = bits
        self.connectivity = connectivity
        self.expansion_add = expansion_add
        self.expansion_search = 64
        self.oversample = None

    def _build(self, X):
        from .usearch import USearchIndex

        self.index = USearchIndex(
            bits=self.bits,
            similarity=self.similarity,
            connectivity=self.connectivity,
            expansion_add=self.expansion_add,
            expansion_search=self.expansion_search,
            threads=0,  # build on every core, as the harness's hnswlib wrapper does
        )
        self.index.add(X)

    def _set_search_threads(self, n):
        if self.index is not None:
            self.index.threads = 0 if n is None else n

    def set_query_arguments(self, expansion_search=64, oversample=None) -> None:
        self.expansion_search = expansion_search
        self.oversample = oversample
        if self.index is not None:
            self.index.expansion_search = expansion_search

    def _search(self, X, n):
        return self.index.search(X, n, oversample=self.oversample, pad_to_k=False)[1]

    def _index_bytes(self):
        return self.index.serialized_bytes

    def _params(self):
        return {
            "bits": self.bits,
            "connectivity": self.connectivity,
            "expansion_add": self.expansion_add,
            "expansion_search": self.expansion_search,
            "oversample": self.oversample,
        }
