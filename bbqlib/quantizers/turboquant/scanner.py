"""TurboQuant's scanner: its flat scan for one query, its list scan, its fused IVF call."""

from __future__ import annotations

import numpy as np

from ..scanner import IVFOne, Scanner

__all__ = ["TurboQuantScanner"]


class TurboQuantScanner(Scanner):
    """One table set per query serves every list it visits (the tables are of the rotated
    query, the lists' centre terms are per (query, list) pair and per entry), so a batch and
    the fused one-query call (:func:`~bbqlib.quantizers.turboquant.kernels.ivf_turboquant_fused`)
    run the same list scan. The flat scan is the base's (:meth:`TurboQuantQuantizer.topk_keys`)."""

    def reads_lut_blocks(self) -> bool:
        return False

    def scan_pairs(self, Qt, centroids, list_cc, pairs, postings, mask, keys, ids, *,
                   reranked=False) -> None:  # fmt: skip
        from ..._kernels.saq_ivf import pair_terms
        from . import kernels as K

        q = self.quantizer
        pair_query, pair_list, pair_start = pairs
        pair_query = np.ascontiguousarray(pair_query, dtype=np.int64)
        pair_list = np.ascontiguousarray(pair_list, dtype=np.int64)
        add = np.empty(len(pair_query), dtype=np.float64)
        Qt = np.ascontiguousarray(Qt, dtype=np.float32)
        if len(add):
            pair_terms(Qt, np.ascontiguousarray(centroids, dtype=np.float32),
                       np.ascontiguousarray(list_cc, dtype=np.float64), pair_query, pair_list,
                       q.similarity_.is_distance, add)  # fmt: skip
        tm, tq = q.tables(Qt)
        K.scan_lists(tm, tq, add, pair_list, np.ascontiguousarray(pair_start, dtype=np.int64),
                     postings.start, np.asarray(postings.codes), np.asarray(postings.factors),
                     postings.ids, *q._scan_args(), mask, keys, ids)  # fmt: skip

    def ivf_one(self, postings, centroids, list_cc):
        from . import kernels as K

        q = self.quantizer
        middle = (centroids, np.ascontiguousarray(list_cc, dtype=np.float64), postings.start,
                  np.asarray(postings.codes), np.asarray(postings.factors), postings.ids,
                  *q._scan_args())  # fmt: skip
        return IVFOne(K.ivf_turboquant_fused, middle, self._checks(postings, False),
                      _Prepare(q))  # fmt: skip


class _Prepare:
    """The query's tables before the fused call, as :meth:`TurboQuantScanner.scan_pairs`
    makes them for a batch (one query equals its row of a batch). Holds no query's state."""

    needs_query = True  # its tables are made here, from the transformed query

    def __init__(self, q):
        self.q = q

    def __call__(self, reranked: bool, qt):
        return self.q.tables(np.ascontiguousarray(qt, dtype=np.float32))
