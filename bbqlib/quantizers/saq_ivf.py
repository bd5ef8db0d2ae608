"""SAQ in an IVF: residual codes against list centres and the list scan (a mixin).

:class:`SAQPairs` gives :class:`bbqlib.quantizers.saq.SAQQuantizer` what
:class:`bbqlib.IVFIndex` asks of a quantizer: :meth:`~SAQPairs.fit_residuals` (PCA, plan and
rotations refitted on residuals ``x - c``), :meth:`~SAQPairs.encode_pairs` (CAQ codes of each
entry's residual, with the centre term folded into the entry's factor row) and
:meth:`~SAQPairs.scan_pairs`, SAQ's own list scan (:func:`bbqlib._kernels.saq_ivf.ivf_scan_saq`,
one set of lookup tables per query for all the lists it visits). The algebra is in
:mod:`bbqlib._kernels.saq_ivf`.
"""

from __future__ import annotations

import numpy as np

__all__ = ["SAQPairs"]


class SAQPairs:
    """The IVF hooks of a fitted :class:`SAQQuantizer`."""

    @property
    def pair_factor_width(self) -> int:
        """Float32 factors per IVF posting entry: ``1 + 2 S`` (``additional`` with the centre
        term folded in, then ``scale_s`` and ``norm_s`` per coded segment)."""
        self._check_fitted()
        return 1 + 2 * len(self.plan_.segments)

    def fit_residuals(self, R: np.ndarray) -> None:
        """Refit PCA, plan and rotations on residuals ``R = x - c`` (their spectrum, not the
        data's, decides the segments of residual codes)."""
        self._check_fitted()
        self._fit_transformed(np.ascontiguousarray(R, dtype=np.float32))
        self._seal()

    def _frame_tables(self, Y: np.ndarray):
        """Float lookup tables and ``qconst`` of rows in SAQ's frame (coded dimensions)."""
        from .saq_search import float_tables

        Yc = np.ascontiguousarray(Y[:, : self.plan_.coded_dims], dtype=np.float32)
        tables, qconst, _ = float_tables(self, Yc)
        return tables, qconst

    def encode_pairs(self, W, rows, centres, lists) -> tuple[np.ndarray, np.ndarray]:
        """Codes of ``W[rows[p]] - centres[lists[p]]`` and their factor rows [m, 1 + 2S].

        Column 0 is ``‖o‖² + 2g`` (euclidean) or ``<o, c> - g`` (inner products), with
        ``o = x - c`` and ``g`` the code's estimate of ``<o, c>`` over the coded segments
        (:mod:`bbqlib._kernels.saq_ivf`).
        """
        from .._kernels import saq_ivf as KI

        self._check_fitted()
        rows = np.asarray(rows, dtype=np.int64)
        lists = np.asarray(lists, dtype=np.int64)
        m = rows.shape[0]
        codes = np.empty((m, self.plan_.code_bytes), dtype=np.uint8)
        fac = np.empty((m, self.pair_factor_width), dtype=np.float32)
        if m == 0:
            return codes, fac
        used, local = np.unique(lists, return_inverse=True)
        Cr = self.rotate(np.asarray(centres)[used]).astype(np.float64)
        R = self.rotate(np.asarray(W)[rows]).astype(np.float64) - Cr[local]
        Dc = self.plan_.coded_dims
        self._encode_frame(R[:, :Dc].astype(np.float32), codes, fac)
        ctables, cconst = self._frame_tables(Cr.astype(np.float32))
        g = np.empty(m)
        a = self.plan_.arrays()
        KI.entry_totals(
            ctables, cconst, local.astype(np.int64), codes, fac, a["start"], a["dims"],
            a["bits"], a["msb_off"], a["low_off"], g,
        )  # fmt: skip
        if self.similarity_.is_distance:
            fac[:, 0] = np.einsum("ij,ij->i", R, R) + 2.0 * g
        else:
            fac[:, 0] = np.einsum("ij,ij->i", R, Cr[local]) - g
        return codes, fac

    def query_pairs(self, Qt, centres, pair_query, pair_list, *, lut: bool = False):
        """Not used: SAQ scans lists with one table set per query (:meth:`scan_pairs`)."""
        raise NotImplementedError("SAQ lists are scanned by SAQQuantizer.scan_pairs")

    def pair_adds(self, Qt, centres, list_cc, pair_query, pair_list) -> np.ndarray:
        """``‖q - c‖²`` (euclidean) or ``<q, c>`` of each (query, list) pair, float64 [P]."""
        Q = np.asarray(Qt, dtype=np.float64)[pair_query]
        qc = np.einsum("ij,ij->i", Q, np.asarray(centres, dtype=np.float64)[pair_list])
        if not self.similarity_.is_distance:
            return qc
        return np.einsum("ij,ij->i", Q, Q) - 2.0 * qc + np.asarray(list_cc)[pair_list]

    def scan_pairs(self, Qt, centres, list_cc, pairs, postings, allowed, keys, ids) -> None:
        """Offer every entry of each query's visited lists to its heap (``keys`` / ``ids``
        [nq, H], updated in place).

        ``pairs``: ``(pair_query, pair_list, pair_start)`` with ``pair_start`` [nq + 1] local
        to these queries; ``postings``: ``(codes, factors, ids, list_start)``; ``allowed``:
        uint8 mask over ids (empty: all).
        """
        from .._kernels import saq_ivf as KI

        pair_query, pair_list, pair_start = pairs
        codes, factors, entry_ids, list_start = postings
        tables, qconst = self._frame_tables(self.rotate(Qt))
        add = self.pair_adds(Qt, centres, list_cc, pair_query, pair_list)
        a = self.plan_.arrays()
        KI.ivf_scan_saq(
            tables, qconst, add, np.ascontiguousarray(pair_list, dtype=np.int32),
            np.ascontiguousarray(pair_start, dtype=np.int64), list_start, codes, factors,
            entry_ids, a["start"], a["dims"], a["bits"], a["msb_off"], a["low_off"],
            self.similarity_.is_distance, allowed, keys, ids,
        )  # fmt: skip
