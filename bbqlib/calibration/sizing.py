"""Sizing: resident RAM, disk, build time and latency of a configuration at ``n`` vectors.

Bytes follow from what the index stores (exact per-structure counts below); the IVF's
per-vector counts (posting entries per vector with SOAR, vectors per list) and all times come
from a configuration measured by :func:`bbqlib.calibrate` at ``n_measured`` vectors.

Scaling rules
-------------
Flat index (everything in RAM after ``add``; the file is the same minus the scan copy):

* disk ``= n · (code + corrections + stored row) + quantizer state``;
* RAM ``= disk + n · 16`` (factor rows of the scan) ``+ n · (code + 16)`` when the
  lookup-table scan serves the encoding (its blocked copy of the codes and factors);
* latency grows linearly with ``n`` (every code is scanned; the rerank of ``k'`` rows does
  not grow, so this errs high); build time (fit + encode) linearly.

IVF index (on disk, memory-mapped; only centroids and small tables in anonymous RAM):

* posting entries ``E = n · entries_per_vector(n)`` (1 + the share of vectors with a SOAR
  copy; measured, see the list density rule below), lists ``K = n / vectors_per_list``
  (measured; it does not drift with ``n``: 262 at 100,000 and 256 at 1M);
* posting file ``= E · (code + f + 4)`` (codes, factor rows of ``f`` bytes: 16, SAQ
  ``4 (1 + 2 S)``, int32 rows) ``+ (E + 16 K) ·
  code`` (blocks of 32 for the lookup-table scan, half a block of padding per list) ``+ 8 n``
  (assignments); header ``≈ K · (5 d + 56) + n / 8`` and the quantizer state; vectors
  ``n · stored row``;
* RAM to serve ``=`` the posting data a search reads (lookup-table blocks, or codes for
  the other scans, factor rows, rows: every list is read by some query) ``+ K · (5 d + 40)``
  (centroids, their 7-bit codes, list tables) ``+ n`` (tombstone flags) ``+`` the
  quantizer state. The stored vectors stay on disk: a search reads ``k'`` rows of them
  (``rerank_bytes_per_query``);
* latency at the same ``visit_percentage`` grows linearly with ``n`` (the entries scanned
  do); build time as ``n · log(n / cluster_size)`` (hierarchical k-means levels).

Posting entries per vector at ``n`` (the list density rule). SOAR spills more vectors when
the lists cut the data more finely, so entries per vector are not a constant of the data: on
1M x 384 synthetic clustered vectors a build on a 100,000-vector subsample had 1.28, the
whole 1.59 (an IVF sized from the subsample's 1.28 under-stated disk and RAM by about 20%).
:func:`bbqlib.calibrate` with ``n`` above ``len(X)`` therefore also clusters its vectors into
the ``n / cluster_size`` lists the target will have (:func:`~.density.entries_at`: a per-list
target of ``cluster_size · len(X) / n``, no encode) and records the spill rate measured there
in ``Configuration.entries_at``. :func:`sizing` takes the entries per vector of the measured
point nearest ``n`` and, between two points, interpolates linearly in ``log n``; beyond
the points it holds the nearest one (no extrapolation). From 100,000 vectors this measured
1.65 for 1M (200,000: 1.63), so sizing errs high by 2-4% instead of low by 20%.

Build time and latency (stated rules, checked at 1M in ``benchmarks/results/calibrate.md``):
the IVF build grows as ``n · log(n / cluster_size)`` (k-means levels; encode and SOAR
linearly) and batched latency at one ``visit_percentage`` linearly with ``n`` (the entries
scanned grow with ``n``; the per-query cost of planning over ``K`` centroids is small
against the scan). A single query per call (a server) adds Python overhead of its own that
calibration's batched timing does not include.

The Python interpreter, NumPy and the loaded numba kernels (about 170 MB on Linux x86-64,
``benchmarks/results/ivf_memory.md``) are not counted: sizes are what the index adds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..encoding import Encoding
from ..layouts.kernels import use_lut
from ..search.stored import stored_row_bytes

__all__ = ["Sizing", "entries_per_vector_at", "flat_sizes", "ivf_sizes", "sizing"]

#: Bytes of a container's header and footer (JSON meta, section table): order of magnitude.
CONTAINER_BYTES = 8192


@dataclass(frozen=True)
class Sizing:
    """What a configuration needs at ``n`` vectors (bytes, seconds, milliseconds).

    ``build_seconds`` and ``latency_ms`` are None when the configuration was not measured.
    """

    n: int
    dim: int
    index: str
    disk_bytes: int
    ram_bytes: int
    bytes_per_vector: float
    rerank_bytes_per_query: int
    build_seconds: float | None
    latency_ms: float | None

    def __repr__(self) -> str:
        mb = 1 << 20
        t = "" if self.build_seconds is None else f", build ~{self.build_seconds:.0f} s"
        lat = "" if self.latency_ms is None else f", ~{self.latency_ms:.2f} ms/query/core"
        return (
            f"Sizing({self.index}, n={self.n:,}, d={self.dim}: RAM {self.ram_bytes / mb:,.0f} MB, "
            f"disk {self.disk_bytes / mb:,.0f} MB, {self.bytes_per_vector:.0f} B/vector{t}{lat})"
        )


def flat_sizes(n: int, d: int, encoding: Encoding, is_l2: bool, store, state_bytes: int = 0):
    """``(disk, ram)`` bytes of a flat index of ``n`` vectors."""
    per = encoding.bytes_per_vector(d, is_l2) + stored_row_bytes(store, d)
    disk = n * per + state_bytes + CONTAINER_BYTES
    lut = use_lut(encoding.query_planes, encoding.layout)
    ram = n * (per + encoding.flat_scan_bytes(d, is_l2, lut)) + state_bytes
    return int(disk), int(ram)


def ivf_sizes(
    n: int,
    d: int,
    encoding: Encoding,
    store,
    entries_per_vector: float,
    vectors_per_list: float,
    state_bytes: int = 0,
    is_l2: bool = False,
):
    """``(disk, ram)`` bytes of an IVF index of ``n`` vectors (RAM: to serve from disk)."""
    code = encoding.doc_bytes(d)
    factors = encoding.scan_factor_bytes(is_l2)
    E = n * entries_per_vector
    K = max(1.0, n / vectors_per_list)
    lut = use_lut(encoding.query_planes, encoding.layout)
    blocks = encoding.posting_block_bytes(E, K, d)
    postings = E * (code + factors + 4) + blocks + 8 * n
    header = K * (5 * d + 56) + n / 8 + state_bytes
    disk = postings + header + n * stored_row_bytes(store, d) + 2 * CONTAINER_BYTES
    hot = (blocks if lut else E * code) + E * (factors + 4)
    ram = hot + K * (5 * d + 40) + n + state_bytes
    return int(disk), int(ram)


def entries_per_vector_at(config, n: int) -> float:
    """Posting entries per vector of an IVF ``config`` at ``n`` vectors (list density rule).

    The measured points are ``(config.n_measured, config.entries_per_vector)`` and those of
    ``config.entries_at``; between two of them linear in ``log n``, beyond them the nearest.
    """
    points = sorted({(int(config.n_measured), float(config.entries_per_vector))}
                    | {(int(m), float(e)) for m, e in config.entries_at})  # fmt: skip
    if n <= points[0][0]:
        return points[0][1]
    if n >= points[-1][0]:
        return points[-1][1]
    for (n0, e0), (n1, e1) in zip(points, points[1:], strict=False):
        if n0 <= n <= n1:
            if n1 == n0:
                return e1
            t = (math.log(n) - math.log(n0)) / (math.log(n1) - math.log(n0))
            return e0 + t * (e1 - e0)
    return points[-1][1]  # pragma: no cover


def sizing(n: int, d: int | None = None, config=None) -> Sizing:
    """RAM, disk, build time and latency of ``config`` at ``n`` vectors.

    Parameters
    ----------
    n : int
        Vectors to size for.
    d : int, optional
        Dimension (default: the configuration's).
    config : Configuration
        A configuration from :func:`bbqlib.calibrate` (``report.chosen`` or any row of
        ``report.candidates``); its measured figures scale by the module's rules (an IVF's
        posting entries per vector by the list density rule: calibrate with ``n`` set to
        the size you will serve, so that the spill rate is measured at its density).

    Returns
    -------
    Sizing

    Examples
    --------
    >>> import numpy as np, bbqlib
    >>> X = np.random.default_rng(0).normal(size=(3000, 32)).astype(np.float32)
    >>> report = bbqlib.calibrate(X, similarity="euclidean", target_recall=0.9, k=5)
    >>> bbqlib.sizing(1_000_000, 32, report.chosen).disk_bytes > 0
    True
    """
    from .kinds import index_kind
    from .record import Configuration

    if not isinstance(config, Configuration):
        raise TypeError(
            f"config must be a Configuration from bbqlib.calibrate, got {type(config).__name__}"
        )
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    d = config.dim if d is None else int(d)
    enc = config.encoding
    store = config.store_vectors
    is_l2 = config.similarity == "euclidean"
    kind = index_kind(config.index)
    disk, ram = kind.sizes(config, n, d, enc, store, is_l2)
    depth = 0
    if store:
        depth = min(math.ceil(config.k * (config.oversample or 1.0)), 10_000, n)
    rerank = depth * stored_row_bytes(store, d)
    build = latency = None
    m = config.n_measured
    if config.latency_ms is not None and m:
        latency = config.latency_ms * n / m
    if config.build_seconds is not None and m:
        build = config.build_seconds * n / m
        build *= kind.build_scale(config, n, m)
    return Sizing(n, d, config.index, disk, ram, (disk - 2 * 8192) / n, rerank, build, latency)
