"""SAQ's estimates, error model and searches: the scoring half of :class:`SAQQuantizer`.

:class:`SAQScoring` is a mixin of :class:`bbqlib.quantizers.saq.SAQQuantizer`; the scans
themselves live in :mod:`bbqlib.quantizers.saq.search` and :mod:`bbqlib._kernels.saq`.
"""

from __future__ import annotations

import numpy as np

from ..._validation import check_k
from ..encoded import EncodedVectors
from ..scanner import IVFOne, Scanner
from .encoding import DEFAULT_EPS0, _eps0

__all__ = ["SAQScanner", "SAQScoring", "SCANS"]

#: Flat scans :meth:`SAQQuantizer.search` can run.
SCANS = ("auto", "plain", "two-pass", "fastscan")


class SAQScoring:
    """Estimates, bounds, searches and scorers of a fitted :class:`SAQQuantizer`."""

    def scanner(self):
        """:class:`SAQScanner`: the one-query paths of Flat and IVF."""
        self._check_fitted()
        return SAQScanner(self)

    # -- estimates --------------------------------------------------------------------------
    def estimate(self, Q, enc: EncodedVectors, *, return_bounds: bool = False, eps0=DEFAULT_EPS0):
        """Raw estimates [nq, n]: squared L2 (euclidean) or inner products.

        ``return_bounds=True`` also returns ``estimate ∓ eps0 · error_sd`` (see
        :meth:`error_sd`; a z-score, not a guarantee, and a 0-bit tail's dropped term is
        modelled as noise although it is a bias for near neighbours).
        """
        self._check_encoded(enc)
        Q = self._validated(Q, "Q", allow_1d=True)
        Qc, q_add = self._query_parts(Q)
        est = self._estimate_parts(Qc, q_add, enc)
        if not return_bounds:
            return est.astype(np.float32)
        half = _eps0(eps0) * self._sigma(Q, enc)
        return (
            est.astype(np.float32),
            (est - half).astype(np.float32),
            (est + half).astype(np.float32),
        )

    def search_bound_rerank(self, Q, codes, vectors, k, *, allowed=None, eps0=DEFAULT_EPS0,
                            cap: int = 10_000):  # fmt: skip
        """Top ``k`` with exact scores, rescoring only candidates whose optimistic bound
        (``eps0`` model sds, :meth:`error_sd`) beats the k-th exact value: ``(keys, ids,
        vectors_read)`` as :meth:`bbqlib.RaBitQQuantizer.search_bound_rerank`."""
        from .bounds import bound_rerank_search

        self._check_encoded(codes)
        Q = self._validated(Q, "Q", allow_1d=True)
        return bound_rerank_search(self, Q, codes, vectors, check_k(k), allowed, _eps0(eps0), cap)

    def _estimate_parts(self, Qc, q_add, enc) -> np.ndarray:
        tables, qconst, _ = self._tables(Qc)
        codes, fac = self._doc_arrays(enc)
        a = self.plan_.arrays()
        out = np.empty((len(Qc), len(enc)))
        if len(enc) and len(Qc):
            from ..._kernels import saq as K

            K.estimate_rows(
                tables,
                qconst,
                q_add,
                codes,
                fac,
                a["start"],
                a["dims"],
                a["bits"],
                a["msb_off"],
                a["low_off"],
                self.similarity_.is_distance,
                out,
            )
        return out

    def error_sd(self, Q, enc: EncodedVectors) -> np.ndarray:
        """Model standard deviation [nq, n] of each raw estimate.

        Per coded segment ``‖o_s‖ ‖q_s‖ sqrt((1 - a_s²) / a_s²) / sqrt(d_s - 1)`` (``a_s`` the
        cosine of the code, from the stored factors and the codes), plus the rounding of a
        quantized query and, for a dropped tail, ``sqrt(Σ σ_i² q_i²)`` over its PCA axes; in
        quadrature, twice for squared L2.
        """
        self._check_encoded(enc)
        Q = self._validated(Q, "Q", allow_1d=True)
        return self._sigma(Q, enc)

    def _sigma(self, Q, enc) -> np.ndarray:
        from .bounds import segment_sigma

        return segment_sigma(self, Q, enc)

    # -- search -----------------------------------------------------------------------------
    def search(
        self, Q, enc: EncodedVectors, k: int, *, allowed=None, id_base: int = 0, scan="auto"
    ):
        """Top ``k`` per query by estimate: ``(raw, ids)`` [nq, k], best first (``nan``/-1).

        ``scan``: ``"auto"`` (default) takes the fastest scan that ranks by this quantizer's
        estimates: with AVX2, a float query runs ``"two-pass"`` (a 4-bit lookup-table pass
        over every bit plane, then the float estimate of the docs whose 4-bit key, widened by
        4 sds of the query's rounding, can still reach the k-th best) and ``query_bits=4``
        runs ``"fastscan"`` (one 4-bit pass); otherwise ``"plain"`` (float lookup tables per
        code byte, every doc). ``last_rescored_`` [nq] counts the second pass's docs.
        """
        self._check_scan(scan)
        k = check_k(k)
        Qp = self._validated(Q, "Q", allow_1d=True)
        keys, ids = self.topk_keys(Qp, enc, k, allowed=allowed, id_base=id_base, scan=scan)
        raw = self.similarity_.raw(keys)
        raw[ids < 0] = np.nan
        return raw, ids

    def _check_scan(self, scan) -> None:
        if scan not in SCANS:
            raise ValueError(f"scan must be one of {SCANS}, got {scan!r}")
        if scan in ("two-pass", "fastscan"):
            from .search import uses_fastscan

            if not uses_fastscan(self.with_query_bits(4 if scan == "fastscan" else None)):
                raise ValueError(f"scan={scan!r} needs AVX2 (see bbqlib._kernels.lut)")
            if scan == "fastscan" and self.encoding_.query_bits != 4:
                raise ValueError("scan='fastscan' ranks by 4-bit queries: use query_bits=4")

    def topk_keys(self, Qp: np.ndarray, enc: EncodedVectors, k: int, *, allowed=None,
                  id_base: int = 0, scan="auto") -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """Top ``k`` per prepared query: ``(keys, ids)`` (the hook :class:`~bbqlib.FlatIndex`
        calls; SAQ's own scans of :mod:`bbqlib.quantizers.saq.search`)."""
        from .search import search

        self._check_encoded(enc)
        Qc, q_add = self._query_parts(Qp)
        keys, ids, rescored = search(self, Qc, q_add, enc, k, allowed, id_base, mode=scan)
        self.last_rescored_ = rescored
        return keys, ids

    def scorer(self, query, enc: EncodedVectors):
        """A callable ``score_ids(ids) -> float32`` of one query's estimates for chosen docs
        (as :meth:`bbqlib.Quantizer.scorer`; equal to ``estimate(query, enc)[0, ids]``)."""
        from .search import make_scorer

        self._check_encoded(enc)
        return make_scorer(self, self._validated(query, "query", allow_1d=True), enc)


class SAQScanner(Scanner):
    """SAQ's one-query paths: the flat scan through :meth:`SAQQuantizer.topk_keys` (the
    base's), and on an IVF one fused call (:func:`bbqlib._kernels.fused.ivf_saq_fused`) with
    the query's 4-bit tables made before it, where the 4-bit lookup-table list scan serves
    (AVX2, segment widths multiples of 16; else the batch path's float tables)."""

    def reads_lut_blocks(self) -> bool:
        return False  # SAQ's blocks are made from the codes in memory: the codes are checked

    def scan_pairs(self, Qt, centroids, list_cc, pairs, postings, mask, keys, ids, *,
                   reranked=False) -> None:  # fmt: skip
        """One table set per query for all its lists (:meth:`SAQQuantizer.scan_pairs`)."""
        self.quantizer.scan_pairs(Qt, centroids, list_cc, pairs, postings, mask, keys, ids,
                                  reranked=reranked)  # fmt: skip

    def ivf_one(self, postings, centroids, list_cc):
        from ..._kernels import fused as KF
        from .search import uses_fastscan

        q = self.quantizer
        if not uses_fastscan(q):
            return None
        blocks, block_starts, cols, ksum, gnorm, gmax = q._ivf_fast_docs(postings)
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

    def __call__(self, reranked: bool):
        """``(refine, z, frame, keep)`` or None where the float-table scan serves (the
        batch path)."""
        scan = self.lists.IVF_SCAN
        key = (scan, reranked)
        if key not in self.modes:
            mode = self.lists.ivf_scan_mode(self.q, scan, reranked)
            self.modes[key] = None if mode == "plain" else (mode == "two-pass", *self.fixed)
        return self.modes[key]
