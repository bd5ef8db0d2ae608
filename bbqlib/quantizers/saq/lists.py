"""SAQ in an IVF: residual codes against list centres and the list scan.

:func:`encode_pairs` codes each entry's residual ``x - c`` (CAQ codes, with the centre term
folded into the entry's factor row), what :meth:`SAQQuantizer.encode_pairs` returns;
:func:`scan_pairs` is the batch path's list scan
(:meth:`bbqlib.quantizers.saq.scanner.SAQScanner.scan_pairs`): one set of lookup tables per
query for all the lists it visits, the float tables
(:func:`bbqlib._kernels.saq_ivf.ivf_scan_saq`) or the 4-bit ones
(:func:`bbqlib._kernels.saq_ivf.ivf_fastscan_saq`, doc side from :func:`list_docs`).
The algebra is in :mod:`bbqlib._kernels.saq_ivf`.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "IVF_SCAN",
    "IVF_SCANS",
    "encode_pairs",
    "frame_tables",
    "ivf_scan_mode",
    "list_docs",
    "pair_adds",
    "scan_pairs",
]


def frame_tables(q, Y: np.ndarray):
    """Float lookup tables and ``qconst`` of rows in SAQ's frame (coded dimensions)."""
    from .search import float_tables

    Yc = np.ascontiguousarray(Y[:, : q.plan_.coded_dims], dtype=np.float32)
    tables, qconst, _ = float_tables(q, Yc)
    return tables, qconst


def encode_pairs(q, W, rows, centres, lists) -> tuple[np.ndarray, np.ndarray]:
    """Codes of ``W[rows[p]] - centres[lists[p]]`` and their factor rows [m, 1 + 2S].

    Column 0 is ``‖o‖² + 2g`` (euclidean) or ``<o, c> - g`` (inner products), with
    ``o = x - c`` and ``g`` the code's estimate of ``<o, c>`` over the coded segments
    (:mod:`bbqlib._kernels.saq_ivf`).
    """
    from ..._kernels import saq_ivf as saq_ivf_kernels

    rows = np.asarray(rows, dtype=np.int64)
    lists = np.asarray(lists, dtype=np.int64)
    m = rows.shape[0]
    codes = np.empty((m, q.plan_.code_bytes), dtype=np.uint8)
    fac = np.empty((m, q.pair_factor_width), dtype=np.float32)
    if m == 0:
        return codes, fac
    used, local = np.unique(lists, return_inverse=True)
    Cr = q.rotate(np.asarray(centres)[used]).astype(np.float64)
    R = q.rotate(np.asarray(W)[rows]).astype(np.float64) - Cr[local]
    Dc = q.plan_.coded_dims
    q._encode_frame(R[:, :Dc].astype(np.float32), codes, fac)
    ctables, cconst = frame_tables(q, Cr.astype(np.float32))
    g = np.empty(m)
    a = q.plan_.arrays()
    saq_ivf_kernels.entry_totals(
        ctables, cconst, local.astype(np.int64), codes, fac, a["start"], a["dims"],
        a["bits"], a["msb_off"], a["low_off"], g,
    )  # fmt: skip
    if q.similarity_.is_distance:
        fac[:, 0] = np.einsum("ij,ij->i", R, R) + 2.0 * g
    else:
        fac[:, 0] = np.einsum("ij,ij->i", R, Cr[local]) - g
    return codes, fac


def pair_adds(q, Qt, centres, list_cc, pair_query, pair_list) -> np.ndarray:
    """``‖q - c‖²`` (euclidean) or ``<q, c>`` of each (query, list) pair, float64 [P]
    (:func:`bbqlib._kernels.saq_ivf.pair_terms`: no gathered copies of the rows)."""
    from ..._kernels import saq_ivf as saq_ivf_kernels

    out = np.empty(len(pair_query), dtype=np.float64)
    if len(out):
        saq_ivf_kernels.pair_terms(
            np.ascontiguousarray(Qt), np.ascontiguousarray(centres),
            np.ascontiguousarray(list_cc, dtype=np.float64),
            np.ascontiguousarray(pair_query, dtype=np.int64),
            np.ascontiguousarray(pair_list, dtype=np.int64), q.similarity_.is_distance, out,
        )  # fmt: skip
    return out


def scan_pairs(
    q, Qt, centres, list_cc, pairs, postings, allowed, keys, ids, *, scan="auto",
    reranked=False,
) -> np.ndarray | None:  # fmt: skip
    """Offer every entry of each query's visited lists to its heap (``keys`` / ``ids``
    [nq, H], updated in place).

    ``pairs``: ``(pair_query, pair_list, pair_start)`` with ``pair_start`` [nq + 1] local
    to these queries; ``postings``: the index's :class:`~bbqlib.index.ivf.postings.Postings`
    (or a tuple ``(codes, factors, ids, list_start)``: the float scan only); ``allowed``:
    uint8 mask over ids (empty: all). ``scan``: ``"auto"`` (:data:`IVF_SCAN`), ``"plain"``
    (float lookup tables, :func:`bbqlib._kernels.saq_ivf.ivf_scan_saq`), ``"fastscan"``
    (4-bit query, one pass) or ``"two-pass"`` (4-bit pass, float re-score of the entries
    that can still reach the heap: :func:`bbqlib._kernels.saq_ivf.ivf_fastscan_saq`).
    ``reranked``: the caller re-scores more than ``k`` of the heaps' entries with the
    exact vectors, so ``"auto"`` takes the one 4-bit pass for float queries too
    (:func:`ivf_scan_mode`). The queries are put in SAQ's frame by
    ``SAQQuantizer._frame_queries``, as the fused one-query call does.
    Returns the entries re-scored per query (two-pass), else None.
    """
    from ..._kernels import saq_ivf as saq_ivf_kernels

    pair_query, pair_list, pair_start = pairs
    mode = ivf_scan_mode(q, IVF_SCAN if scan == "auto" else scan, reranked)
    if isinstance(postings, tuple):
        if mode != "plain":
            raise ValueError(f"scan={mode!r} needs the Postings object, not a tuple")
        codes, factors, entry_ids, list_start = postings
    else:
        codes, factors = postings.codes, postings.factors
        entry_ids, list_start = postings.ids, postings.start
    Yc = q._frame_queries(Qt)
    add = pair_adds(q, Qt, centres, list_cc, pair_query, pair_list)
    a = q.plan_.arrays()
    is_l2 = q.similarity_.is_distance
    pair_list = np.ascontiguousarray(pair_list, dtype=np.int32)
    pair_start = np.ascontiguousarray(pair_start, dtype=np.int64)
    if mode == "plain":
        tables, qconst = frame_tables(q, Yc)
        saq_ivf_kernels.ivf_scan_saq(
            tables, qconst, add, pair_list, pair_start, list_start, codes, factors,
            entry_ids, a["start"], a["dims"], a["bits"], a["msb_off"], a["low_off"], is_l2,
            allowed, keys, ids,
        )  # fmt: skip
        return None
    from .search import PREFILTER_Z, fastscan_queries, float_rows

    blocks, block_starts, cols, ksum, gnorm, gmax = list_docs(q, postings)
    tables, lo, step, w, const, rounding, _ = fastscan_queries(q, Yc, a["bits"])
    refine = mode == "two-pass"
    if refine:
        # the float query whatever query_bits is (no copy of the quantizer per call)
        frows, fconst, _ = float_rows(q, Yc, unrounded=True)
    else:
        frows, fconst = np.zeros((1, 8), np.float32), np.zeros((1, 1))
    rescored = np.zeros(len(Yc), dtype=np.int64)
    saq_ivf_kernels.ivf_fastscan_saq(
        tables, lo, step, w, const, PREFILTER_Z * rounding, frows, fconst, add,
        pair_list, pair_start, list_start, block_starts, blocks, codes, factors, cols,
        ksum, gnorm, gmax, entry_ids, a["start"], a["dims"], a["bits"], a["msb_off"],
        a["low_off"], is_l2, refine, allowed, keys, ids, rescored,
    )  # fmt: skip
    return rescored


def list_docs(q, postings):
    """``(blocks, block_starts, cols, ksum, gnorm, gmax)`` of the posting lists (the doc
    side of :func:`bbqlib._kernels.saq_ivf.ivf_fastscan_saq`), made once per postings
    object and kept on it (left out of its pickles)."""
    from ...packing import lut_list_blocks
    from .bounds import code_lengths_of, level_sums_of

    key = (q.fingerprint_, id(postings.codes), len(postings.codes))
    cached = getattr(postings, "_saq_fastscan", None)
    if cached is not None and cached[0] == key:
        return cached[1]
    codes = np.asarray(postings.codes)
    fac = np.asarray(postings.factors)
    S = len(q.plan_.segments)
    blocks, block_starts = lut_list_blocks(codes, postings.start)
    gnorm = fac[:, 1 : 1 + S] * code_lengths_of(q.plan_, codes) / 2.0
    gnorm = np.ascontiguousarray(gnorm.T, dtype=np.float32)
    gmax = gnorm.max(axis=1).astype(np.float64) if len(codes) else np.zeros(S)
    ksum = np.ascontiguousarray(level_sums_of(q.plan_, codes).T)
    value = (blocks, block_starts, np.ascontiguousarray(fac.T), ksum, gnorm, gmax)
    postings._saq_fastscan = (key, value)
    return value


#: The IVF list scan of ``scan="auto"``: ``"auto"`` picks, where the 4-bit lookup-table scan
#: runs (AVX2, segment widths multiples of 16), one 4-bit pass (``query_bits=4``, or float
#: queries when the exact rerank picks k of more than k candidates: it then does the float
#: pass's work) or two passes (float queries without rerank or with oversample 1), else
#: the float lookup-table scan; ``"plain"`` forces the latter.
IVF_SCAN = "auto"
IVF_SCANS = ("auto", "plain", "two-pass", "fastscan")


def ivf_scan_mode(q, scan: str, reranked: bool = False) -> str:
    """The list scan that serves ``scan`` for quantizer ``q`` (see :data:`IVF_SCAN`);
    ``reranked``: the search re-scores more than ``k`` candidates exactly afterwards."""
    from .search import uses_fastscan

    if scan not in IVF_SCANS:
        raise ValueError(f"scan must be one of {IVF_SCANS}, got {scan!r}")
    qb = q.encoding_.query_bits
    if scan == "auto":
        if not uses_fastscan(q):
            return "plain"
        return "two-pass" if qb is None and not reranked else "fastscan"
    if scan != "plain" and not uses_fastscan(q.with_query_bits(4 if scan == "fastscan" else None)):
        raise ValueError(f"scan={scan!r} needs AVX2 and segment widths multiple of 16")
    return scan
