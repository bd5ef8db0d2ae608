"""Scoring chosen candidates: estimates of id lists and a usearch metric.

Graph and IVF engines hand bbqlib candidate ids; these kernels score exactly those docs with
the correction algebra of :mod:`bbqlib._kernels.scoring` (the same ``_raw`` expression, in the
same order, no fastmath), so a candidate's estimate equals its entry in the dense estimate to
the last bit.

* ``score_ids_*`` — raw estimates of queries ``[nq]`` against candidate ids ``[nq, m]``
  (``-1`` padding gives ``nan``); serial, plus ``*_parallel`` twins over queries.
* :func:`doc_doc_metric` — a numba ``cfunc`` for usearch: the symmetric doc × doc estimate of
  two records (packed codes zero padded to 8 bytes, five float32 factors, 4 zero bytes).

Layouts follow :mod:`bbqlib.scoring`: ``planes`` (uint64 words), ``bytes`` (uint8 codes) and
``float`` (float32 query against uint8 codes, or against plane-packed docs straight from the
planes, :mod:`bbqlib._kernels.plane_float`, the sums of ``estimate_float_planes``).
"""

from __future__ import annotations

import functools

import numpy as np
from numba import carray

from . import cache as _cache
from .plane_float import pad_query, plane_float_dot
from .policy import kernel, parallel_kernel, prange
from .scoring import _raw, byte_dot, float_dot, plane_dot

__all__ = [
    "score_ids_planes",
    "score_ids_bytes",
    "score_ids_float",
    "score_ids_planes_parallel",
    "score_ids_bytes_parallel",
    "score_ids_float_parallel",
    "id_range",
    "doc_doc_metric",
    "RECORD_TAIL",
]

#: Bytes after the codes in a usearch record: five float32 factors and four zero bytes.
RECORD_TAIL = 24


@kernel(inline="always")
def _ids_planes_row(qw, qf, dw, df, qp, dp, words, dim, cc, is_l2, ids, out):
    for j in range(ids.shape[0]):
        i = ids[j]
        if i < 0:
            out[j] = np.nan
        else:
            out[j] = _raw(dim, df[i], qf, plane_dot(qw, dw[i], qp, dp, words), cc, is_l2)


@kernel(inline="always")
def _ids_bytes_row(qb, qf, db, df, dim, cc, is_l2, ids, out):
    for j in range(ids.shape[0]):
        i = ids[j]
        if i < 0:
            out[j] = np.nan
        else:
            out[j] = _raw(dim, df[i], qf, byte_dot(qb, db[i]), cc, is_l2)


@kernel(inline="always")
def _ids_float_row(qv, qf, codes, df, planes, plane_bytes, dim, cc, is_l2, ids, out, qpad):
    if planes > 0:
        pad_query(qv, qpad)
    for j in range(ids.shape[0]):
        i = ids[j]
        if i < 0:
            out[j] = np.nan
        elif planes == 0:
            out[j] = _raw(dim, df[i], qf, float_dot(qv, codes[i, :dim]), cc, is_l2)
        else:
            dot = plane_float_dot(qpad, codes[i], planes, plane_bytes)
            out[j] = _raw(dim, df[i], qf, dot, cc, is_l2)


@kernel(vectorize=False)
def score_ids_planes(qw, qf, dw, df, qp, dp, words, dim, cc, is_l2, ids, out):
    """Raw estimates ``out[q, j]`` of plane query ``q`` and plane doc ``ids[q, j]``."""
    for q in range(ids.shape[0]):
        _ids_planes_row(qw[q], qf[q], dw, df, qp, dp, words, dim, cc, is_l2, ids[q], out[q])


@parallel_kernel(vectorize=False)
def score_ids_planes_parallel(qw, qf, dw, df, qp, dp, words, dim, cc, is_l2, ids, out):
    for q in prange(ids.shape[0]):
        _ids_planes_row(qw[q], qf[q], dw, df, qp, dp, words, dim, cc, is_l2, ids[q], out[q])


@kernel
def score_ids_bytes(qb, qf, db, df, dim, cc, is_l2, ids, out):
    """Raw estimates ``out[q, j]`` of byte query ``q`` and byte doc ``ids[q, j]``."""
    for q in range(ids.shape[0]):
        _ids_bytes_row(qb[q], qf[q], db, df, dim, cc, is_l2, ids[q], out[q])


@parallel_kernel
def score_ids_bytes_parallel(qb, qf, db, df, dim, cc, is_l2, ids, out):
    for q in prange(ids.shape[0]):
        _ids_bytes_row(qb[q], qf[q], db, df, dim, cc, is_l2, ids[q], out[q])


@kernel
def score_ids_float(qv, qf, codes, df, planes, plane_bytes, dim, cc, is_l2, ids, out):
    """Raw estimates of float queries against uint8 codes (``planes`` > 0: plane-packed rows)."""
    qpad = np.empty(plane_bytes * 8, dtype=np.float32)
    for q in range(ids.shape[0]):
        _ids_float_row(
            qv[q], qf[q], codes, df, planes, plane_bytes, dim, cc, is_l2, ids[q], out[q], qpad
        )


@parallel_kernel
def score_ids_float_parallel(qv, qf, codes, df, planes, plane_bytes, dim, cc, is_l2, ids, out):
    for q in prange(ids.shape[0]):
        qpad = np.empty(plane_bytes * 8, dtype=np.float32)
        _ids_float_row(
            qv[q], qf[q], codes, df, planes, plane_bytes, dim, cc, is_l2, ids[q], out[q], qpad
        )


# ----------------------------------------------------------------------------- probed lists
# Docs are stored list by list: rows ``list_ptr[l] .. list_ptr[l + 1]`` belong to list ``l``
# and ``row_ids[r]`` is the caller's id of row ``r``. ``probes[q]`` lists the lists to visit
# (``-1``: none). Keys are ``-d²`` or the inner product; ties break by the lower caller id.


@kernel
def id_range(ids):
    """``(min, max)`` of a non-empty int64 array in one pass (cheaper than two NumPy calls)."""
    lo = ids[0]
    hi = ids[0]
    for j in range(1, ids.shape[0]):
        v = ids[j]
        lo = min(lo, v)
        hi = max(hi, v)
    return lo, hi


# ----------------------------------------------------------------------------- usearch metric
# A record is the codes (bit planes, or one byte per dimension, zero padded to a multiple of 8
# bytes) followed by RECORD_TAIL bytes: float32 (a_x, l_x, ΣX, add_x, sqrt(D)·a_x) and four
# zero bytes. The first four are the factor row the scan kernels use; the fifth carries the
# dimension, so one compiled callback serves every dimension (and caches to disk): the
# term D·a_x·a_y becomes (sqrt(D)·a_x)·(sqrt(D)·a_y). Zero padding adds nothing to <X, Y>.


@kernel(inline="always")
def _sym_distance(xf, yf, dot, fo, is_l2):
    # xf, yf: the records as float32. Symmetric in (x, y) bit for bit: every product and
    # two-term sum commutes.
    ax = np.float64(xf[fo])
    ay = np.float64(yf[fo])
    lx = np.float64(xf[fo + 1])
    ly = np.float64(yf[fo + 1])
    s = np.float64(xf[fo + 4]) * np.float64(yf[fo + 4])
    s = s + (ay * (lx * np.float64(xf[fo + 2])) + ax * (ly * np.float64(yf[fo + 2])))
    s = s + (lx * ly) * dot
    add = np.float64(xf[fo + 3]) + np.float64(yf[fo + 3])
    if is_l2:
        return np.float32(add - 2.0 * s)
    # 1 - ip + <c, c>: <c, c> is the same for every pair, so it is left out (ranks only).
    return np.float32(1.0 - (s + add))


# The records are read through typed carrays of the same pointer (uint64 words, float32,
# bytes): a numba array.view() per record would cost more than the distance itself.


@kernel(inline="always")
def _sym_planes(a, b, n, planes, is_l2):
    size = np.int64(n)
    code_bytes = size - RECORD_TAIL
    words = code_bytes // (8 * planes)
    xw = carray(a, size // 8, np.uint64)
    yw = carray(b, size // 8, np.uint64)
    dot = plane_dot(xw, yw, planes, planes, words)
    xf = carray(a, size // 4, np.float32)
    yf = carray(b, size // 4, np.float32)
    return _sym_distance(xf, yf, dot, code_bytes // 4, is_l2)


@kernel(inline="always")
def _sym_bytes(a, b, n, is_l2):
    size = np.int64(n)
    code_bytes = size - RECORD_TAIL
    x = carray(a, code_bytes, np.uint8)
    y = carray(b, code_bytes, np.uint8)
    dot = byte_dot(x, y)
    xf = carray(a, size // 4, np.float32)
    yf = carray(b, size // 4, np.float32)
    return _sym_distance(xf, yf, dot, code_bytes // 4, is_l2)


# One plain function per (layout, metric); compiled by doc_doc_metric on first use.
def _p1_l2(a, b, n, m):
    return _sym_planes(a, b, n, 1, True)


def _p1_ip(a, b, n, m):
    return _sym_planes(a, b, n, 1, False)


def _p2_l2(a, b, n, m):
    return _sym_planes(a, b, n, 2, True)


def _p2_ip(a, b, n, m):
    return _sym_planes(a, b, n, 2, False)


def _p4_l2(a, b, n, m):
    return _sym_planes(a, b, n, 4, True)


def _p4_ip(a, b, n, m):
    return _sym_planes(a, b, n, 4, False)


def _bytes_l2(a, b, n, m):
    return _sym_bytes(a, b, n, True)


def _bytes_ip(a, b, n, m):
    return _sym_bytes(a, b, n, False)


_METRICS = {
    (1, True): _p1_l2,
    (1, False): _p1_ip,
    (2, True): _p2_l2,
    (2, False): _p2_ip,
    (4, True): _p4_l2,
    (4, False): _p4_ip,
    (0, True): _bytes_l2,
    (0, False): _bytes_ip,
}


@functools.cache
def doc_doc_metric(planes: int, is_l2: bool):
    """The symmetric doc × doc distance of two records, as a C callback for usearch.

    Parameters
    ----------
    planes : {1, 2, 4} for bit-plane records, 0 for byte records (7/8-bit codes)
    is_l2 : True: estimated ``d²``; False: ``1 - ip`` up to a constant (``<c, c>``)

    Returns
    -------
    numba.core.ccallback.CFunc
        usearch's ``ArrayArraySize`` signature ``float32(void*, void*, uint64, uint64)``
        (the first size is the record length); ``.address`` is the function pointer. Compiled
        once per process (and cached in bbqlib's per-user kernel cache,
        :mod:`bbqlib._kernels.cache`); keep the object alive while an index uses it.
    """
    from numba import types

    key = (int(planes), bool(is_l2))
    if key not in _METRICS:
        raise ValueError(f"planes must be 1, 2, 4 (bit planes) or 0 (bytes), got {planes!r}")
    signature = types.float32(types.voidptr, types.voidptr, types.uint64, types.uint64)
    # bbqlib's per-user cache: numba's cache=True would write into the package folder.
    return _cache.cached_cfunc(signature, _METRICS[key], nopython=True)
