"""Scanners: what the indexes ask of a fitted quantizer to answer one query in one call.

A quantizer hands the indexes one :class:`Scanner` (``quantizer.scanner()``); the indexes
never compare family or layout names and never test a quantizer's class. For an IVF the
scanner names the fused kernel of its code layout (:mod:`bbqlib._kernels.fused`) and the
family's *middle*: the arguments with which that kernel codes the query against each visited
list's centre and scans the list. The index supplies the rest (the plan, the list and row
checks, the rerank). A scanner that returns None from :meth:`Scanner.ivf_one` leaves the
query to the batch path (e.g. Lucene's arithmetic), which gives the same
results.

Scanners are shared by concurrent searches: they hold only what derives from the fitted
quantizer and the postings they were asked about, never a query's state.

The fused kernels are imported at a scanner's first use, not with this module.

The scanners here serve the code layouts several families share: :class:`OSQScanner`
(queries OSQ-coded per list: BBQ, int8 ``osq``), :class:`ResidualScanner` (float residual
queries: RaBitQ and BBQ float queries), :class:`ScaledScanner` (int8 ``per_dim``) and
:class:`GridScanner` (int8 ``global``). A family picks one by its ``scanner_class`` or
overrides ``scanner()``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..encoding import padded_dim

__all__ = [
    "FlatOne",
    "IVFOne",
    "Scanner",
    "NoScanner",
    "OSQScanner",
    "ResidualScanner",
    "ScaledScanner",
    "GridScanner",
]

_NO_CRCS = np.zeros(0, dtype=np.uint32)
_EMPTY_F32 = np.zeros(0, dtype=np.float32)


class IVFOne(NamedTuple):
    """A family's part of the one-call IVF search over one postings object.

    ``kernel``: the fused kernel (:mod:`bbqlib._kernels.fused`); ``middle``: its family
    arguments, without the trailing ``(allowed, heap, depth)`` the index appends;
    ``checks``: ``(lists_ok, list_crcs, block_start, check_bytes, check_width)``, what the
    kernel's list checks read (the lists' flags are marked in place as lists pass);
    ``prepare``: optional, the family's per-call arguments (below).
    """

    kernel: object
    middle: tuple
    checks: tuple
    prepare: object = None


#: ``IVFOne.prepare(reranked, qt) -> tuple | None``: the family's arguments of one call that
#: depend on its settings (``reranked``: the exact rerank picks ``k`` of more candidates) or
#: on module settings read per call, put before ``middle``; None leaves this query to the
#: batch path. A family whose fused kernel makes the query's own arrays itself gets
#: ``qt=None``; one whose ``prepare.needs_query`` is true gets the prepared, transformed
#: query float32 [1, d] and may make them here.


class FlatOne(NamedTuple):
    """A family's part of a one-query flat search over one set of codes.

    ``scan(qp, allowed, depth) -> (keys, rows)``: the best ``depth`` docs of one prepared
    query ``qp`` float32 [1, d] (validated, normalized for cosine), best first, ``-inf`` /
    ``-1`` padding; ``allowed``: uint8 mask over the docs (empty: all). ``kernel``: the
    compiled kernel the single-query tier waits for, or None when the scan runs the batch
    path's kernels.
    """

    kernel: object
    scan: object


class Scanner:
    """A fitted quantizer's scans. This base scores the family's query codes
    (``_query_codes``) against its doc codes (``_doc_codes``) with the kernels of their code
    layout (:mod:`bbqlib.layouts.scan`), answers a flat query through the family's
    :meth:`~bbqlib.Quantizer.topk_keys` (the batch path's scan, without the index's batch
    overhead) and has no fused IVF kernel."""

    def __init__(self, quantizer):
        self.quantizer = quantizer

    def estimate(self, Q, enc, *, return_bounds: bool = False, eps0=None) -> np.ndarray:
        """Raw estimates [nq, n] of queries ``Q`` (as given: validated here) against ``enc``
        (:meth:`bbqlib.Quantizer.estimate`); this base has no error bound."""
        from ..layouts.scan import estimate_raw

        q = self.quantizer
        if return_bounds:
            raise ValueError(
                f"{type(q).__name__} has no error bound (its estimator is biased and carries "
                "no confidence interval); use bbqlib.RaBitQQuantizer for return_bounds=True"
            )
        return estimate_raw(q.query_codes(Q), q._cached_doc_codes(enc)).astype(np.float32)

    def topk_keys(self, Qp, enc, k: int, *, allowed=None, id_base: int = 0):
        """Top ``k`` ranking keys and ids per prepared query
        (:meth:`bbqlib.Quantizer.topk_keys`)."""
        from ..layouts import scan as layout_scan

        q = self.quantizer
        return layout_scan.topk_keys(q._query_codes(Qp), q._cached_doc_codes(enc), k,
                                     allowed=allowed, id_base=id_base)  # fmt: skip

    def scorer(self, query, enc):
        """``score_ids(ids)`` of one query (as given) against ``enc``
        (:meth:`bbqlib.Quantizer.scorer`)."""
        from ..search.candidates import CandidateScorer

        q = self.quantizer
        qc = q.query_codes(query)
        if len(qc) != 1:
            raise ValueError(
                f"query must be one vector [d], got {len(qc)} rows; make one scorer per query"
            )
        return CandidateScorer(qc, q._cached_doc_codes(enc))

    def flat_one(self, codes) -> FlatOne | None:
        """The one-query flat scan of ``codes`` (an :class:`EncodedVectors`), or None."""
        q = self.quantizer

        def scan(qp, allowed, depth):
            keys, rows = q.topk_keys(qp, codes, depth, allowed=allowed if allowed.size else None)
            return keys[0], rows[0]

        return FlatOne(None, scan)

    def reads_lut_blocks(self) -> bool:
        """Whether the list scan reads the postings' lookup-table blocks (their CRC32s are
        the ones checked at first read)."""
        from ..layouts.lists import reads_lut_blocks

        return reads_lut_blocks(self.quantizer.encoding_)

    def scan_pairs(self, Qt, centroids, list_cc, pairs, postings, mask, keys, ids, *,
                   reranked=False) -> None:  # fmt: skip
        """The batch path's list scan of a chunk of queries: every entry of each query's
        visited lists offered to its heap (``keys`` / ``ids``, updated in place); ``pairs``
        local to ``Qt`` (:func:`bbqlib.layouts.lists.scan_list_pairs`, by code layout)."""
        from ..layouts.lists import scan_list_pairs

        scan_list_pairs(self.quantizer, Qt, centroids, list_cc, pairs, postings, mask, keys, ids)

    def ivf_one(self, postings, centroids: np.ndarray, list_cc: np.ndarray) -> IVFOne | None:
        """The fused IVF call's family part for ``postings`` (their list centres
        ``centroids`` float32 [K, d] and ``<c, c>`` ``list_cc``), or None."""
        return None

    def _checks(self, postings, lut: bool) -> tuple:
        """The list checks over what the scan reads: lookup-table blocks or the codes."""
        if lut:
            blocks, block_starts = postings.lut_layout()
            crcs = postings.lut_crc if postings.lut_crc is not None else _NO_CRCS
            return (postings._verified_blocks, crcs, block_starts, blocks.reshape(-1),
                    np.int64(blocks.shape[1]))  # fmt: skip
        codes = np.asarray(postings.codes)
        crcs = postings.crc if postings.crc is not None else _NO_CRCS
        width = codes.shape[1] * codes.itemsize if codes.ndim == 2 else 0
        return (postings._verified, crcs, postings.start, codes.view(np.uint8).reshape(-1),
                np.int64(width))  # fmt: skip


class NoScanner(Scanner):
    """No one-query path: every search runs the batch path (e.g. Lucene's arithmetic,
    whose validation and scoring are its own)."""

    def flat_one(self, codes):
        return None


class OSQScanner(Scanner):
    """Queries OSQ-coded against each list's centre (one optimizer step, ``query_pairs``):
    the lookup-table scan for plane docs and queries of at most 4 bits on AVX2, the popcount
    scan for other plane docs, the byte scan for byte docs."""

    def flat_one(self, codes):
        from .._kernels import single as KO
        from ..layouts.kernels import use_lut

        q = self.quantizer
        enc = q.encoding_
        if enc.query_bits is None or not use_lut(enc.query_planes, enc.layout):
            return super().flat_one(codes)
        d = q._cached_doc_codes(codes)
        blocks, cols = d.lut_layout()
        width = padded_dim(q.dim_)
        fixed = (np.ascontiguousarray(q.centroid_, dtype=np.float32), enc.query_bits, q.iters,
                 q.lam, d.is_l2, width, blocks, cols, d.planes, d.words * 8, len(d), d.dim,
                 d.centroid_dot, d.is_l2)  # fmt: skip

        def scan(qp, allowed, depth):
            return KO.flat_lut_one(q.transform_rows(qp) if q.transform_ is not None else qp,
                                   *fixed, allowed, depth)  # fmt: skip

        return FlatOne(KO.flat_lut_one, scan)

    def ivf_one(self, postings, centroids, list_cc):
        from .._kernels import fused as KF
        from ..layouts.kernels import use_lut

        q = self.quantizer
        enc = q.encoding_
        if enc.query_bits is None:
            return ResidualScanner(q).ivf_one(postings, centroids, list_cc)
        is_l2 = q.similarity_.is_distance
        dim = q.dim_
        bits, lam = enc.query_bits, q.lam
        common = (postings.factors, postings.ids, list_cc)
        if use_lut(enc.query_planes, enc.layout):
            blocks, block_starts = postings.lut_layout()
            width = padded_dim(dim)
            middle = (centroids, bits, lam, is_l2, width, postings.start, block_starts, blocks,
                      *common, enc.doc_planes, width // 8, dim)  # fmt: skip
            return IVFOne(KF.ivf_lut_fused, middle, self._checks(postings, True))
        if enc.query_planes > 0:  # quantized queries against plane docs: popcount
            qplanes = enc.query_planes
            middle = (centroids, bits, lam, is_l2, qplanes, qplanes * padded_dim(dim) // 8,
                      postings.start, np.asarray(postings.codes).view(np.uint64), *common,
                      enc.doc_planes, enc.words_per_plane(dim), dim)  # fmt: skip
            return IVFOne(KF.ivf_planes_fused, middle, self._checks(postings, False))
        middle = (centroids, bits, lam, is_l2, postings.start, np.asarray(postings.codes),
                  *common, dim)  # fmt: skip
        return IVFOne(KF.ivf_bytes_fused, middle, self._checks(postings, False))


class ResidualScanner(Scanner):
    """Float residual queries ``q - c`` against plane or byte docs (the float list scan)."""

    scaled = False

    def _scale(self) -> tuple[np.ndarray, np.ndarray]:
        return _EMPTY_F32, _EMPTY_F32

    def ivf_one(self, postings, centroids, list_cc):
        from .._kernels import fused as KF

        q = self.quantizer
        enc = q.encoding_
        if enc.query_bits is not None:
            return None
        dim = q.dim_
        scale, offset = self._scale()
        middle = (centroids, self.scaled, scale, offset, q.similarity_.is_distance,
                  postings.start, np.asarray(postings.codes), postings.factors, postings.ids,
                  list_cc, enc.doc_planes, padded_dim(dim) // 8, dim)  # fmt: skip
        return IVFOne(KF.ivf_float_fused, middle, self._checks(postings, False))


class ScaledScanner(ResidualScanner):
    """int8 ``per_dim`` float queries ``s ∘ q`` (the scales and offsets of the fit)."""

    scaled = True

    def _scale(self):
        q = self.quantizer
        return (np.ascontiguousarray(q.scale_, dtype=np.float32),
                np.ascontiguousarray(q.offset_, dtype=np.float32))  # fmt: skip


class GridScanner(Scanner):
    """int8 ``global``: residual queries coded on the docs' fixed grid, the byte scan."""

    def ivf_one(self, postings, centroids, list_cc):
        from .._kernels import fused as KF

        q = self.quantizer
        middle = (centroids, float(q.lower_), float(q.upper_), float(q.alpha_),
                  float(q.inv_alpha_), int(q.levels_), q.similarity_.is_distance,
                  postings.start, np.asarray(postings.codes), postings.factors, postings.ids,
                  list_cc, q.dim_)  # fmt: skip
        return IVFOne(KF.ivf_grid_fused, middle, self._checks(postings, False))
