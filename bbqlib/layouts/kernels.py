"""The one table from a code layout to its kernels, and their leading arguments.

Every scorer in bbqlib (dense estimates, top-k scans, candidate ids, IVF lists) asks this
module which numba kernel serves a (query, doc) pair and with which arguments, instead of
branching on layouts itself. Query kinds: ``planes`` (bit planes × bit planes, popcounts),
``bytes`` (uint8 × uint8) and ``float`` (float32 query × codes of either layout). Plane docs
against queries of at most 4 bits also have the lookup-table scan (:mod:`bbqlib._kernels.lut`)
where the CPU has AVX2.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .._kernels import candidates as KC
from .._kernels import ivf as KI
from .._kernels import scoring as KS
from .codes import DocCodes, QueryCodes

__all__ = [
    "LayoutKernels",
    "KERNELS",
    "kernels_for",
    "packed_args",
    "use_lut",
    "LUT_MAX_QUERY_PLANES",
]

#: Widest query the lookup-table scan takes (a table entry, four codes, must fit a byte
#: four times over: 4 · 4 · 15 = 240).
LUT_MAX_QUERY_PLANES = 4


@dataclass(frozen=True)
class LayoutKernels:
    """The kernels of one query kind (all take :func:`packed_args` first, except where noted).

    ``estimate`` / ``scan``: dense estimates and top-k heaps (float queries against byte docs;
    against plane docs :mod:`bbqlib.layouts.scan` calls ``estimate_float_planes`` /
    ``scan_float_planes``); ``ids`` / ``ids_parallel``: estimates at
    candidate ids; ``lists``: heaps over posting lists with a query per (query, list) pair.
    """

    estimate: Callable
    scan: Callable
    ids: Callable
    ids_parallel: Callable
    lists: Callable


KERNELS = {
    "planes": LayoutKernels(
        KS.estimate_planes, KS.scan_planes, KC.score_ids_planes, KC.score_ids_planes_parallel,
        KI.ivf_scan_planes,
    ),
    "bytes": LayoutKernels(
        KS.estimate_bytes, KS.scan_bytes, KC.score_ids_bytes, KC.score_ids_bytes_parallel,
        KI.ivf_scan_bytes,
    ),
    "float": LayoutKernels(
        KS.estimate_float, KS.scan_float, KC.score_ids_float, KC.score_ids_float_parallel,
        KI.ivf_scan_float,
    ),
}  # fmt: skip


def kernels_for(q: QueryCodes, d: DocCodes) -> LayoutKernels:
    """The kernels of a (queries, docs) pair; a quantized query must match the doc layout."""
    if q.kind != "float" and q.kind != d.kind:
        raise ValueError(f"query layout {q.kind!r} does not match doc layout {d.kind!r}")
    return KERNELS[q.kind]


def packed_args(q: QueryCodes, d: DocCodes) -> tuple:
    """Leading arguments of the ``ids`` / ``lists`` kernels: queries, docs as stored."""
    kernels_for(q, d)
    common = (d.dim, d.centroid_dot, d.is_l2)
    if q.kind == "planes":
        return (q.data, q.factors, d.data, d.factors, q.planes, d.planes, d.words, *common)
    if q.kind == "bytes":
        return (q.data, q.factors, d.data, d.factors, *common)
    codes = d.data.view(np.uint8) if d.kind == "planes" else d.data
    qv = np.ascontiguousarray(q.data, np.float32)
    return (qv, q.factors, codes, d.factors, d.planes, d.words * 8, *common)


def use_lut(query_planes: int, doc_layout: str) -> bool:
    """Whether the lookup-table scan serves plane docs against ``query_planes``-bit queries."""
    from .._kernels.lut import avx2_available

    return doc_layout == "planes" and 0 < query_planes <= LUT_MAX_QUERY_PLANES and avx2_available()
