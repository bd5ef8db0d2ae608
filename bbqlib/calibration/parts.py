"""Indexes that share work with another index: the pieces calibration compares.

Calibration (:mod:`bbqlib.calibration`) measures many configurations on the same data. Most of
what an index holds does not change between them, so these helpers make a configuration
from parts that were computed once:

* :func:`flat_from_parts`: a :class:`~bbqlib.FlatIndex` over codes already encoded and
  vectors already stored (one encode serves every query width and every kind of stored
  vectors; :meth:`bbqlib.Quantizer.with_query_bits` keeps the codes valid);
* :func:`ivf_recoded`: an :class:`~bbqlib.IVFIndex` with the lists of another one (the same
  clustering and SOAR assignments) coded by another quantizer. The lists are computed in
  the untransformed space of the reference and moved into the quantizer's space by its
  transform; every transform bbqlib has is linear and orthogonal, so nearest centroids, SOAR
  losses and list means are the same as a build in the transformed space would find (up to
  float rounding);
* :func:`ivf_variant`: the same IVF lists with another query width or other stored vectors;
* :func:`ivf_coverage`: for each query, the share of its true neighbours that lie in the
  lists a search visits: an upper bound of the recall of every quantizer over these lists.

They are internal to calibration (not public API); an index they return searches, saves and
grows as any other.
"""

from __future__ import annotations

import copy

import numpy as np

from ..index.flat.index import FlatIndex
from ..index.ids import RowIds
from ..index.ivf import IVFIndex
from ..index.ivf import build as B
from ..index.ivf import plan as P
from ..index.ivf import storage as ST
from ..quantizers import EncodedVectors, Quantizer
from ..search.stored import check_store_vectors
from ..similarity import Similarity

__all__ = ["flat_from_parts", "ivf_fit", "ivf_recoded", "ivf_variant", "ivf_coverage"]


def flat_from_parts(
    quantizer: Quantizer, codes: EncodedVectors, vectors, store_vectors, **defaults
) -> FlatIndex:
    """A flat index over ``codes`` (encoded by ``quantizer``'s fit) and stored ``vectors``.

    ``vectors`` must be of the kind ``store_vectors`` names (None when False); ids are rows.
    """
    store = check_store_vectors(store_vectors)
    if codes.fingerprint != quantizer.fingerprint_:
        raise ValueError("codes were encoded by another fit than this quantizer's")
    index = FlatIndex(quantizer, store_vectors=store, **defaults)
    index._codes = [codes]
    index._vectors = [vectors] if store else []
    index._ids = RowIds(len(codes))
    return index


def ivf_fit(reference: IVFIndex, quantizer: Quantizer, source) -> Quantizer:
    """``quantizer`` fitted as :func:`ivf_recoded` fits it (the data, then the residuals
    against ``reference``'s lists), without coding the lists; returns it."""
    _check_reference(reference)
    quantizer.fit(B.fit_sample(source, reference.seed))
    W, C = _lists_in(reference, quantizer)
    primary = np.asarray(reference._assign)[:, 0]
    quantizer.fit_residuals(B.residual_sample(W, C, primary, seed=reference.seed))
    return quantizer


def _check_reference(reference: IVFIndex) -> None:
    if reference.transform_ is not None or reference.store_vectors != "float32":
        raise ValueError("the reference IVF index must be untransformed with float32 vectors")
    if reference.n_deleted or len(reference._segments) != 1:
        raise ValueError("the reference IVF index must be one build without deletions")


def _lists_in(reference: IVFIndex, quantizer: Quantizer):
    """The reference's vectors and centroids in the (fitted) quantizer's space."""
    X = reference._segments[0].array
    W = quantizer.transform_rows(X) if quantizer.transform_ is not None else X
    C = reference._C if quantizer.transform_ is None else quantizer.transform_rows(reference._C)
    return W, C


def ivf_recoded(
    reference: IVFIndex, quantizer: Quantizer, source, *, fitted: bool = False
) -> IVFIndex:
    """The lists of ``reference`` coded by ``quantizer`` (fitted here, as a build would).

    ``reference`` must have no transform, keep float32 vectors, be in memory and hold no
    deletions; ``source`` is the matrix it was built from (the quantizer's fit sample is
    drawn from it with the reference's seed, as :meth:`IVFIndex.add` draws it). The result
    keeps no vectors (see :func:`ivf_variant`). ``fitted=True``: ``quantizer`` comes from
    :func:`ivf_fit` on the same reference and source and is not fitted again.
    """
    _check_reference(reference)
    index = IVFIndex(
        quantizer, cluster_size=reference.cluster_size, seed=reference.seed,
        soar=reference.soar, store_vectors=False,
    )  # fmt: skip
    if not fitted:
        quantizer.fit(B.fit_sample(source, reference.seed))
    W, C = _lists_in(reference, quantizer)
    n = W.shape[0]
    assign = np.asarray(reference._assign)
    primary, secondary = assign[:, 0], assign[:, 1]
    if not fitted:
        quantizer.fit_residuals(B.residual_sample(W, C, primary, seed=reference.seed))
    index._set_centroids(C)
    ids = np.arange(n, dtype=np.int64)
    index._postings = B.encode_postings(W, ids, C, primary, secondary, quantizer, False)
    index._assign = assign
    index._ntotal = n
    index._segments = []
    index._set_deleted(np.zeros(n, dtype=bool))
    index._row_ids = RowIds(n)
    index._fitted = True
    return index


def ivf_variant(
    index: IVFIndex, *, query_bits="keep", store_vectors=None, vectors=None, **defaults
) -> IVFIndex:
    """``index`` with another query width and/or other stored vectors (lists shared).

    ``vectors``: the stored rows of every vector, of the kind ``store_vectors`` names.
    ``defaults``: ``visit_percentage`` / ``oversample`` search defaults.
    """
    out = copy.copy(index)
    if query_bits != "keep":
        out.quantizer = index.quantizer.with_query_bits(query_bits)
    if store_vectors is not None:
        out.store_vectors = check_store_vectors(store_vectors)
        out._segments = [ST.Segment(vectors)] if out.store_vectors else []
    for name, value in defaults.items():
        if name not in ("visit_percentage", "oversample"):
            raise TypeError(f"unknown search default {name!r}")
        setattr(out, name, value)
    out.last_search_stats = {}
    return out


def ivf_coverage(index: IVFIndex, queries, gt_rows, visit_percentage: float, depth: int):
    """Per query: the share of ``gt_rows`` [nq, k] in a list that a search visits.

    The plan is the one :meth:`IVFIndex.search` makes with this ``visit_percentage`` and
    rerank depth ``depth`` (no filter, no deletions).
    """
    q = index.quantizer
    Qt = q.transform_rows(q._validated(queries, "queries", allow_1d=True))
    sim = q.similarity_
    ratio = float(visit_percentage) / 100.0
    heap = 2 * int(depth)
    need = max(2.0 * ratio * index._ntotal, heap)
    sizes = index._postings.sizes
    by_distance = sim is not Similarity.MAX_INNER_PRODUCT
    pair_list, pair_query, _ = P.plan_batch(
        Qt, index._table, sizes, sim.is_distance, by_distance, ratio, need, heap
    )
    visited = np.zeros((Qt.shape[0], index.n_lists), dtype=bool)
    visited[pair_query, pair_list] = True
    gt = np.asarray(gt_rows, dtype=np.int64)
    assign = np.asarray(index._assign)
    rows = np.arange(gt.shape[0])[:, None]
    hit = visited[rows, assign[gt, 0]]
    second = assign[gt, 1]
    hit |= (second >= 0) & visited[rows, np.maximum(second, 0)]
    return hit.mean(axis=1)
