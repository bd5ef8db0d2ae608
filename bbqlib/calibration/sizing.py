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

* posting entries ``E = n · entries_per_vector`` (1 + the share of vectors with a SOAR
  copy, measured), lists ``K = n / vectors_per_list`` (measured);
* posting file ``= E · (code + 16 + 4)`` (codes, factor rows, int32 rows) ``+ (E + 16 K) ·
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

``entries_per_vector`` is taken as measured and not scaled, but SOAR spills more vectors
when lists are denser: on 1M x 384 synthetic clustered vectors it was 1.28 for a build on
a 100,000-vector subsample and 1.59 for the whole (``benchmarks/results/calibrate.md``), so
an IVF sized from a run at a tenth of ``n`` under-states disk and RAM by about 20%. Size
from a configuration measured at (or near) the target ``n``: :func:`bbqlib.calibrate` on
the whole base measures the list shape there (within 1% of the disk and 2% of the RSS
growth at 1M).

The Python interpreter, NumPy and the loaded numba kernels (about 170 MB on Linux x86-64,
``benchmarks/results/ivf_memory.md``) are not counted: sizes are what the index adds.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..encoding import Encoding
from ..scoring import use_lut
from ..scoring.stored import stored_row_bytes

__all__ = ["Sizing", "flat_sizes", "ivf_sizes", "sizing"]

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
    code = encoding.doc_bytes(d)
    per = encoding.bytes_per_vector(d, is_l2) + stored_row_bytes(store, d)
    disk = n * per + state_bytes + CONTAINER_BYTES
    ram = n * (per + 16) + state_bytes
    if use_lut(encoding.query_planes, encoding.layout):
        ram += n * (code + 16)
    return int(disk), int(ram)


def ivf_sizes(
    n: int,
    d: int,
    encoding: Encoding,
    store,
    entries_per_vector: float,
    vectors_per_list: float,
    state_bytes: int = 0,
):
    """``(disk, ram)`` bytes of an IVF index of ``n`` vectors (RAM: to serve from disk)."""
    code = encoding.doc_bytes(d)
    E = n * entries_per_vector
    K = max(1.0, n / vectors_per_list)
    lut = use_lut(encoding.query_planes, encoding.layout)
    blocks = (E + 16 * K) * code if encoding.layout == "planes" else 0.0
    postings = E * (code + 20) + blocks + 8 * n
    header = K * (5 * d + 56) + n / 8 + state_bytes
    disk = postings + header + n * stored_row_bytes(store, d) + 2 * CONTAINER_BYTES
    hot = (blocks if lut else E * code) + E * 20
    ram = hot + K * (5 * d + 40) + n + state_bytes
    return int(disk), int(ram)


def _log_ratio(n: int, cluster_size: int) -> float:
    return max(1.0, math.log(max(2.0, n / max(1, cluster_size))))


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
        ``report.candidates``); its measured figures scale by the module's rules.

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
    if config.index == "flat":
        disk, ram = flat_sizes(n, d, enc, is_l2, store, config.state_bytes)
    else:
        disk, ram = ivf_sizes(
            n, d, enc, store, config.entries_per_vector, config.vectors_per_list,
            config.state_bytes,
        )  # fmt: skip
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
        if config.index == "ivf":
            cs = config.cluster_size or 384
            build *= _log_ratio(n, cs) / _log_ratio(m, cs)
    return Sizing(n, d, config.index, disk, ram, (disk - 2 * 8192) / n, rerank, build, latency)
