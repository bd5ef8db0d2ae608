"""SAQ's scanner: what the indexes, the scorers and :meth:`bbqlib.Quantizer.search` ask of a
fitted :class:`~bbqlib.quantizers.saq.SAQQuantizer`.

:class:`SAQScanner` makes SAQ's estimates and error bounds, runs its flat scans
(:mod:`bbqlib.quantizers.saq.search`), its candidate scorers and its IVF list scan
(:mod:`bbqlib.quantizers.saq.lists`), and names the fused one-query IVF kernel
(:func:`bbqlib._kernels.fused.ivf_saq_fused`). The quantizer's ``estimate``, ``search``,
``topk_keys`` and ``scorer`` are the base's, routed here.
"""

from __future__ import annotations

import numpy as np

from ..scanner import IVFOne, Scanner
from .encoding import _eps0

__all__ = ["SAQScanner", "SCANS", "check_scan"]

#: Flat scans ``SAQQuantizer.search(..., scan=...)`` can run.
SCANS = ("auto", "plain", "two-pass", "fastscan")


def check_scan(q, scan) -> None:
    """Raise ``ValueError`` unless ``scan`` is one of :data:`SCANS` that runs for ``q``."""
    if scan not in SCANS:
        raise ValueError(f"scan must be one of {SCANS}, got {scan!r}")
    if scan in ("two-pass", "fastscan"):
        from .search import uses_fastscan

        if not uses_fastscan(q.with_query_bits(4 if scan == "fastscan" else None)):
            raise ValueError(f"scan={scan!r} needs AVX2 (see bbqlib._kernels.lut)")
        if scan == "fastscan" and q.encoding_.query_bits != 4:
            raise ValueError("scan='fastscan' ranks by 4-bit queries: use query_bits=4")


class SAQScanner(Scanner):
    """SAQ's estimates, scans and scorers; on an IVF one fused call per query
    (:func:`bbqlib._kernels.fused.ivf_saq_fused`: the query rotated and its 4-bit tables made
    in the call) where the 4-bit lookup-table list scan serves (AVX2, segment widths
    multiples of 16; else the batch path's float tables). The flat one-query scan is the
    base's: :meth:`topk_keys` without the index's batch overhead."""

    # -- estimates --------------------------------------------------------------------------
    def estimate(self, Q, enc, *, return_bounds: bool = False, eps0=None):
        """Raw estimates [nq, n]: squared L2 (euclidean) or inner products.

        ``return_bounds=True`` also returns ``estimate ∓ eps0 · error_sd`` (see
        :meth:`SAQQuantizer.error_sd`; a z-score, not a guarantee, and a 0-bit tail's
        dropped term is modelled as noise although it is a bias for near neighbours).
        """
        q = self.quantizer
        Q = q._validated(Q, "Q", allow_1d=True)
        Qc, q_add = q._query_parts(Q)
        est = self.estimate_parts(Qc, q_add, enc)
        if not return_bounds:
            return est.astype(np.float32)
        half = _eps0(eps0) * q._sigma(Q, enc)
        return (
            est.astype(np.float32),
            (est - half).astype(np.float32),
            (est + half).astype(np.float32),
        )

    def estimate_parts(self, Qc, q_add, enc) -> np.ndarray:
        """Raw estimates float64 [nq, n] of centred, rotated queries ``Qc`` and their
        additive terms ``q_add`` (``SAQQuantizer._query_parts``), by the float tables."""
        from ..._kernels import saq as saq_kernels

        q = self.quantizer
        tables, qconst, _ = q._tables(Qc)
        codes, fac = q._doc_arrays(enc)
        a = q.plan_.arrays()
        out = np.empty((len(Qc), len(enc)))
        if len(enc) and len(Qc):
            saq_kernels.estimate_rows(
                tables, qconst, q_add, codes, fac, a["start"], a["dims"], a["bits"],
                a["msb_off"], a["low_off"], q.similarity_.is_distance, out,
            )  # fmt: skip
        return out

    # -- flat scans and scorers -------------------------------------------------------------
    def topk_keys(self, Qp, enc, k: int, *, allowed=None, id_base: int = 0, scan="auto"):
        """Top ``k`` per prepared query: ``(keys, ids)`` by SAQ's own scans
        (:func:`bbqlib.quantizers.saq.search.search`; ``scan`` one of :data:`SCANS`). Sets
        ``last_rescored_`` [nq] on the quantizer: the docs the second pass re-scored."""
        from .search import search

        q = self.quantizer
        check_scan(q, scan)
        Qc, q_add = q._query_parts(Qp)
        keys, ids, rescored = search(q, Qc, q_add, enc, k, allowed, id_base, mode=scan)
        q.last_rescored_ = rescored
        return keys, ids

    def scorer(self, query, enc):
        """``score_ids(ids)`` of one query: float32 estimates equal to
        ``estimate(query, enc)[0, ids]`` (:func:`bbqlib.quantizers.saq.search.make_scorer`)."""
        from .search import make_scorer

        q = self.quantizer
        return make_scorer(q, q._validated(query, "query", allow_1d=True), enc)

    # -- IVF lists --------------------------------------------------------------------------
    def reads_lut_blocks(self) -> bool:
        return False  # SAQ's blocks are made from the codes in memory: the codes are checked

    def scan_pairs(self, Qt, centroids, list_cc, pairs, postings, mask, keys, ids, *,
                   reranked=False, scan="auto") -> np.ndarray | None:  # fmt: skip
        """The batch path's list scan, one table set per query for all its lists
        (:func:`bbqlib.quantizers.saq.lists.scan_pairs`); returns the entries the two-pass
        scan re-scored per query, else None."""
        from . import lists

        return lists.scan_pairs(self.quantizer, Qt, centroids, list_cc, pairs, postings, mask,
                                keys, ids, scan=scan, reranked=reranked)  # fmt: skip

    def ivf_one(self, postings, centroids, list_cc):
        from ..._kernels import fused as KF
        from .lists import list_docs
        from .search import uses_fastscan

        q = self.quantizer
        if not uses_fastscan(q):
            return None
        blocks, block_starts, cols, ksum, gnorm, gmax = list_docs(q, postings)
        a = q.plan_.arrays()
        middle = (centroids, np.ascontiguousarray(list_cc, dtype=np.float64), postings.start,
                  block_starts, blocks, np.asarray(postings.codes), np.asarray(postings.factors),
                  cols, ksum, gnorm, gmax, postings.ids, a["start"], a["dims"], a["bits"],
                  a["msb_off"], a["low_off"], q.similarity_.is_distance)  # fmt: skip
        return IVFOne(KF.ivf_saq_fused, middle, self._checks(postings, False), _Prepare(q))


class _Prepare:
    """The per-call arguments of SAQ's fused IVF call: the list scan ``IVF_SCAN`` picks
    (read per query), one pass or two; the query's own arrays are made in the call.
    Holds no query's state (concurrent searches share it)."""

    def __init__(self, q):
        from . import lists
        from .search import PREFILTER_Z

        keep = np.ascontiguousarray(q.plan_.arrays()["bits"], dtype=np.int64)  # every plane
        self.q = q
        self.lists = lists
        self.fixed = (float(PREFILTER_Z), q._coded, keep)
        self.modes = {}  # (IVF_SCAN, reranked) -> the call's arguments, None for "plain"

    def __call__(self, reranked: bool, qt=None):
        """``(refine, z, frame, keep)`` or None where the float-table scan serves (the
        batch path)."""
        scan = self.lists.IVF_SCAN
        key = (scan, reranked)
        if key not in self.modes:
            mode = self.lists.ivf_scan_mode(self.q, scan, reranked)
            self.modes[key] = None if mode == "plain" else (mode == "two-pass", *self.fixed)
        return self.modes[key]
