"""SAQ's flat scans: the float lookup-table scan and the two-pass 4-bit lookup-table scan.

:func:`search` picks one. With AVX2 and a float query it runs
:func:`bbqlib._kernels.saq_fastscan.fastscan_scan` in two passes (4-bit query over every bit
plane, then the float estimate of the docs whose 4-bit key, widened by ``PREFILTER_Z``
standard deviations of the query's rounding, can still reach the k-th best); with
``query_bits=4`` one pass ranks by the 4-bit estimates; otherwise (or without AVX2, or with
``BBQLIB_NO_AVX2=1``) the float lookup-table scan of :mod:`bbqlib._kernels.saq` serves.
"""

from __future__ import annotations

import numpy as np

from ..._kernels import saq as saq_kernels
from ..._kernels.lut import avx2_available
from ..._kernels.policy import num_threads
from ...packing import lut_blocks
from ...search.topk import merge_topk

__all__ = [
    "PREFILTER_Z",
    "PASS1_PLANES",
    "search",
    "quantize_query",
    "float_rows",
    "float_tables",
    "fastscan_queries",
    "fastscan_docs",
    "uses_fastscan",
    "make_scorer",
]

#: Standard deviations of the 4-bit rounding error allowed in the first pass (a z-score: a
#: doc of the float top-k is missed with probability about 6e-5 per doc near the bar).
PREFILTER_Z = 4.0
#: Planes per segment the two-pass search's first pass reads (None: all). Reading only the
#: top plane (the authors' "1-bit stage") or two, with the dropped bits bounded, left
#: 1,862-12,129 and 633-1,021 docs per query for the float pass on the shared data at 1-4
#: bits, against 32-50 with every plane, and ran slower (benchmarks/results/saq.md):
#: the 4-bit lookup tables make every plane cheap, the float pass is the expensive one.
PASS1_PLANES = None
#: Queries per kernel call (bounds tables and heaps).
QUERY_BATCH = 256
EMPTY = np.iinfo(np.int64).max


def uses_fastscan(q) -> bool:
    """True when :func:`search` takes the 4-bit lookup-table path for this quantizer."""
    dims_ok = all(s.dims % 16 == 0 for s in q.plan_.segments)
    return q.encoding_.query_bits in (None, 4) and dims_ok and avx2_available()


def pass1_keep(q, planes: int | None) -> np.ndarray:
    """Planes per segment read by the first pass: ``min(B_s, planes)`` (all when None)."""
    bits = q.plan_.arrays()["bits"]
    return bits.copy() if planes is None else np.minimum(bits, max(1, int(planes)))


def fastscan_docs(q, enc, keep: np.ndarray):
    """``(blocks, cols, ksum, gnorm, gmax, smax)``: codes in blocks of 32, the factors as
    columns, per segment and doc the sum of the top ``keep`` bits of the levels and
    ``g_s = scale_s ‖u_s‖ / 2`` (float32 [S, n]), and the largest ``g_s`` and ``scale_s``
    per segment; made once per set of codes (and ``keep``)."""
    from .bounds import code_lengths, level_sums

    key = ("saq_fastscan", q.fingerprint_)
    if key not in enc._cache:
        codes, fac = q._doc_arrays(enc)
        S = len(q.plan_.segments)
        gnorm = (fac[:, 1 : 1 + S] * code_lengths(q, enc) / 2.0).astype(np.float32)
        gnorm = np.ascontiguousarray(gnorm.T)
        cols = np.ascontiguousarray(fac.T)
        empty = len(enc) == 0
        gmax = np.zeros(S) if empty else gnorm.max(axis=1).astype(np.float64)
        smax = np.zeros(S) if empty else cols[1 : 1 + S].max(axis=1).astype(np.float64)
        enc._cache[key] = (lut_blocks(codes), cols, gnorm, gmax, smax, {})
    blocks, cols, gnorm, gmax, smax, sums = enc._cache[key]
    kk = tuple(int(x) for x in keep)
    if kk not in sums:
        sums[kk] = np.ascontiguousarray(level_sums(q, enc, keep).T)
    return blocks, cols, sums[kk], gnorm, gmax, smax


def fastscan_queries(q, Qc, keep: np.ndarray):
    """4-bit tables and per-segment constants of centred, rotated queries ``Qc`` (module doc
    of :mod:`bbqlib._kernels.saq_fastscan`): ``(tables, lo, step, w, const, rounding,
    trunc)`` with ``rounding = ‖q̂_s - q_s‖ / sqrt(d_s)`` and ``trunc = ‖q_s‖ sqrt((4^r_s - 1)
    / 12)`` (``r_s`` the planes the first pass drops); one kernel call
    (:func:`bbqlib._kernels.saq_query.fastscan_tables`), the same for one query and a batch."""
    from ..._kernels.saq_query import fastscan_tables

    a = q.plan_.arrays()
    nq, S = len(Qc), len(a["start"])
    Qc = _query_rows(Qc)
    tables = np.empty((nq, 2 * (q.plan_.coded_dims // 8) * 32), dtype=np.uint8)
    lo, step, w, const, rounding, trunc = (np.empty((nq, S)) for _ in range(6))
    keep = np.ascontiguousarray(keep, dtype=np.int64)
    fastscan_tables(Qc, a["start"], a["dims"], a["bits"], keep, tables, lo, step, w, const,
                    rounding, trunc)  # fmt: skip
    return tables, lo, step, w, const, rounding, trunc


def search(
    q, Qc, q_add, enc, k, allowed, id_base, *, mode: str = "auto", pass1_planes=PASS1_PLANES
):
    """Top ``k``: ``(keys, ids, rescored)``; ``mode`` "auto", "plain", "fastscan" or "two-pass".

    ``keys`` float64 [nq, k] are ranking keys (higher is better: ``-d²`` or the inner
    product), ``-inf`` / ``-1`` padding.

    ``pass1_planes``: planes per segment the two-pass search's first pass reads (default
    :data:`PASS1_PLANES`: all). ``rescored`` [nq]: docs re-scored by the second
    pass (-1 when there is none).
    """
    if mode == "auto":
        if not uses_fastscan(q):
            mode = "plain"
        else:
            mode = "two-pass" if q.encoding_.query_bits is None else "fastscan"
    n, nq = len(enc), len(Qc)
    is_l2 = q.similarity_.is_distance
    mask = np.empty(0, np.uint8) if allowed is None else np.ascontiguousarray(allowed, np.uint8)
    a = q.plan_.arrays()
    seg = (a["start"], a["dims"], a["bits"], a["msb_off"], a["low_off"])
    keep = pass1_keep(q, pass1_planes if mode == "two-pass" else None)
    codes, fac = q._doc_arrays(enc)
    out = np.full((nq, k), -np.inf)
    ids = np.full((nq, k), -1, dtype=np.int64)
    rescored = np.full(nq, -1, dtype=np.int64)
    for q0 in range(0, nq, QUERY_BATCH):
        q1 = min(nq, q0 + QUERY_BATCH)
        Qb, add = Qc[q0:q1], q_add[q0:q1]
        if mode == "plain":
            keys, hid = _plain(q, Qb, add, codes, fac, seg, is_l2, mask, id_base, k)
        else:
            from ..._kernels.saq_fastscan import fastscan_scan

            blocks, cols, ksum, gnorm, gmax, smax = fastscan_docs(q, enc, keep)
            tables, lo, step, w, const, rounding, trunc = fastscan_queries(q, Qb, keep)
            refine = mode == "two-pass"
            frows, fconst, _ = float_rows(q, Qb) if refine else (_NO_F, _NO_C, 0)
            keys = np.full((q1 - q0, k), -np.inf)
            hid = np.full((q1 - q0, k), EMPTY, dtype=np.int64)
            if n:
                fastscan_scan(
                    tables,
                    lo,
                    step,
                    w,
                    const,
                    add,
                    PREFILTER_Z * rounding,
                    PREFILTER_Z * trunc,
                    frows,
                    fconst,
                    blocks,
                    codes,
                    fac,
                    cols,
                    ksum,
                    gnorm,
                    gmax,
                    smax,
                    a["start"],
                    a["dims"],
                    a["bits"],
                    keep,
                    a["msb_off"],
                    a["low_off"],
                    is_l2,
                    refine,
                    mask,
                    id_base,
                    keys,
                    hid,
                    rescored[q0:q1],
                )
            keys, hid = merge_topk(keys, hid, k)
        empty = hid == EMPTY
        out[q0:q1] = np.where(empty, -np.inf, keys)
        ids[q0:q1] = np.where(empty, -1, hid)
    return out, ids, rescored


_NO_F = np.zeros((1, 8), dtype=np.float32)
_NO_C = np.zeros((1, 1))


def quantize_query(q, Qc: np.ndarray, qb: int | None = None):
    """Per-segment uniform rounding of ``Qc`` to ``qb`` bits (default: ``query_bits``).

    Returns ``(q̂ float32, ‖q̂ - q‖ [nq, S])`` or, with ``qb`` given, also the integer
    codes (uint8 [nq, coded]), ``lo`` and ``step`` [nq, S]; one kernel call
    (:func:`bbqlib._kernels.saq_query.round_queries`). Columns past the coded dimensions of
    ``q̂`` and the codes are left unset.
    """
    from ..._kernels.saq_query import round_queries

    explicit = qb is not None
    qb = qb if explicit else q.encoding_.query_bits
    a = q.plan_.arrays()
    S = len(a["start"])
    if qb is None:
        return Qc, np.zeros((len(Qc), S))
    Qc = _query_rows(Qc)
    out = np.empty(Qc.shape, dtype=np.float32)
    codes = np.empty(Qc.shape, dtype=np.uint16 if qb > 8 else np.uint8)
    lo, step, err = (np.empty((len(Qc), S)) for _ in range(3))
    round_queries(Qc, a["start"], a["dims"], 2**qb - 1, out, codes, lo, step, err)
    if explicit:
        return out, err, codes, lo, step
    return out, err


def _query_rows(Qc) -> np.ndarray:
    """``Qc`` C-contiguous for the kernels: float32 or float64 as given (the rounding reads
    float64 rows at full precision, as it always did), anything else as float32."""
    Qc = np.asarray(Qc)
    dtype = Qc.dtype if Qc.dtype in (np.float32, np.float64) else np.float32
    return np.ascontiguousarray(Qc, dtype=dtype)


def float_rows(q, Qc: np.ndarray, *, unrounded: bool = False):
    """``(rows, qconst, rounding)`` of centred, rotated query rows: the rows as the float
    tables see them (rounded to ``query_bits`` if set, unless ``unrounded``: the two-pass
    scans' float query; float32, coded dimensions) and their per-segment constants
    ``(2^B_s - 1)/2 · Σ q_s`` (:func:`bbqlib._kernels.saq_query.segment_constants`)."""
    from ..._kernels.saq_query import segment_constants

    if unrounded:
        Qq, rounding = Qc, np.zeros((len(Qc), len(q.plan_.segments)))
    else:
        Qq, rounding = quantize_query(q, Qc)
    Qq = np.ascontiguousarray(Qq[:, : q.plan_.coded_dims], dtype=np.float32)
    a = q.plan_.arrays()
    qconst = np.empty((len(Qq), len(a["start"])))
    segment_constants(Qq, a["start"], a["dims"], a["bits"], qconst)
    return Qq, qconst, rounding


def float_tables(q, Qc: np.ndarray):
    """``(tables, qconst, rounding)`` of centred, rotated query rows."""
    Qq, qconst, rounding = float_rows(q, Qc)
    tables = np.empty((len(Qq), q.plan_.coded_dims // 8, 256), dtype=np.float32)
    saq_kernels.build_tables(Qq, tables)
    return tables, qconst, rounding


def _plain(q, Qb, add, codes, fac, seg, is_l2, mask, id_base, k):
    n = len(codes)
    chunks = max(1, min(num_threads(), -(-n // 1024)))
    tables, qconst, _ = q._tables(Qb)
    keys = np.full((chunks, len(Qb), k), -np.inf)
    hid = np.full((chunks, len(Qb), k), EMPTY, dtype=np.int64)
    if n:
        saq_kernels.scan_rows(
            tables, qconst, add, codes, fac, *seg, is_l2, mask, id_base, keys, hid
        )
    keys = keys.transpose(1, 0, 2).reshape(len(Qb), -1)
    hid = hid.transpose(1, 0, 2).reshape(len(Qb), -1)
    return merge_topk(keys, hid, k)


def make_scorer(q, Q, enc):
    """``score_ids(ids)``: float32 estimates of the one validated query ``Q`` [1, d]."""
    from ...search.candidates import check_ids

    if len(Q) != 1:
        raise ValueError(
            f"query must be one vector [d], got {len(Q)} rows; make one scorer per query"
        )
    Qc, q_add = q._query_parts(Q)
    tables, qconst, _ = float_tables(q, Qc)
    codes, fac = q._doc_arrays(enc)
    a = q.plan_.arrays()
    is_l2 = q.similarity_.is_distance

    def score_ids(ids) -> np.ndarray:
        ids = check_ids(ids, len(codes))
        out = np.empty((1, len(ids)))
        if len(ids):
            saq_kernels.estimate_rows(
                tables,
                qconst,
                q_add,
                codes[ids],
                fac[ids],
                a["start"],
                a["dims"],
                a["bits"],
                a["msb_off"],
                a["low_off"],
                is_l2,
                out,
            )
        return out[0].astype(np.float32)

    return score_ids
