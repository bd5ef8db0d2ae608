"""Posting-list scans of a chunk of queries, by code layout: what the shared scanners run on
the batch path (:meth:`bbqlib.quantizers.scanner.Scanner.scan_pairs`).

The quantizer codes each query against each visited list's centre
(:meth:`bbqlib.Quantizer.query_pairs`); the layout picks the kernel of
:data:`~bbqlib.layouts.kernels.KERNELS` (or the lookup-table list scan for plane docs against
queries of at most 4 bits on AVX2 CPUs). One kernel call per chunk keeps a heap of ranking
keys per query over all its lists.
"""

from __future__ import annotations

import numpy as np

from ..encoding import padded_dim
from .kernels import KERNELS, use_lut

__all__ = ["reads_lut_blocks", "scan_list_pairs", "scan_lists_of_codes"]


def reads_lut_blocks(encoding) -> bool:
    """Whether the list scan reads the postings' lookup-table blocks (plane docs, queries of
    at most 4 bits, AVX2): the data whose CRC32s are checked at first read."""
    return use_lut(encoding.query_planes, encoding.layout)


def scan_list_pairs(quantizer, Qt, centroids, list_cc, pairs, postings, mask, keys, ids):
    """Offer every entry of each query's visited lists to its heap (``keys`` / ``ids``
    [nq, H], updated in place).

    ``pairs``: ``(pair_query, pair_list, pair_start)``, local to the queries ``Qt``
    (transformed, float32); ``postings``: the index's posting lists (``start``, ``codes``,
    ``factors``, ``ids``, ``lut_layout()``); ``mask``: uint8 over ids (empty: all).
    """
    pair_query, pair_list, pair_start = pairs
    row = quantizer.encoding_
    is_l2 = quantizer.similarity_.is_distance
    dim = Qt.shape[1]
    lut = reads_lut_blocks(row)
    qdata, qf = quantizer.query_pairs(Qt, centroids, pair_query, pair_list, lut=lut)
    head = (qdata, qf, pair_list, pair_start, postings.start)
    tail = (mask, keys, ids)
    if lut:
        from .._kernels.lut import ivf_scan_lut

        blocks, block_starts = postings.lut_layout()
        ivf_scan_lut(
            *head, block_starts, blocks, postings.factors, postings.ids, list_cc,
            row.doc_planes, padded_dim(dim) // 8, dim, is_l2, *tail,
        )  # fmt: skip
    elif row.query_kind == "planes":
        KERNELS["planes"].lists(
            *head, postings.codes.view(np.uint64), postings.factors, postings.ids, list_cc,
            row.query_planes, row.doc_planes, row.words_per_plane(dim), dim, is_l2, *tail,
        )  # fmt: skip
    elif row.query_kind == "bytes":
        KERNELS["bytes"].lists(
            *head, postings.codes, postings.factors, postings.ids, list_cc, dim, is_l2, *tail
        )
    else:
        KERNELS["float"].lists(
            np.ascontiguousarray(qdata, np.float32), *head[1:], postings.codes,
            postings.factors, postings.ids, list_cc, row.doc_planes,
            padded_dim(dim) // 8, dim, is_l2, *tail,
        )  # fmt: skip


def scan_lists_of_codes(qc, docs, pairs, list_start, rows, list_cc, keys, ids):
    """The list scan of query codes made once per query (not per list): ``qc`` / ``docs``
    (:class:`QueryCodes` / :class:`DocCodes`), ``pairs`` ``(pair_query, pair_list,
    pair_start)``, the lists' entries ``rows[list_start[j]:list_start[j + 1]]`` (rows of
    ``docs``), heaps ``keys`` / ``ids`` updated in place (:class:`bbqlib.index.ListsIndex`)."""
    pair_query, pair_list, pair_start = pairs
    head = (qc.data[pair_query], qc.factors[pair_query], pair_list, pair_start, list_start)
    tail = (np.empty(0, np.uint8), keys, ids)
    lists = KERNELS[qc.kind].lists
    if qc.kind == "planes":
        lists(*head, docs.data, docs.factors, rows, list_cc, qc.planes, docs.planes, docs.words,
              docs.dim, docs.is_l2, *tail)  # fmt: skip
    elif qc.kind == "bytes":
        lists(*head, docs.data, docs.factors, rows, list_cc, docs.dim, docs.is_l2, *tail)
    else:
        codes = docs.data.view(np.uint8) if docs.kind == "planes" else docs.data
        lists(np.ascontiguousarray(head[0], np.float32), *head[1:], codes, docs.factors, rows,
              list_cc, docs.planes, docs.words * 8, docs.dim, docs.is_l2, *tail)  # fmt: skip
