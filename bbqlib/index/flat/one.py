"""``FlatIndex.search`` of one query: the quantizer's one-query scan, few compiled calls.

``FlatIndex.search`` and ``IVFIndex.search`` call :func:`flat_search` /
:func:`bbqlib.index.ivf.one.ivf_search_one` first; they answer a query given as a
float32 array of shape ``[d]`` or ``[1, d]`` (C-contiguous) by the quantizer's scanner
(:mod:`bbqlib.quantizers.scanner`: every family; for BBQ at <= 4 query bits on AVX2 CPUs, the
default, the lookup-table kernels of :mod:`bbqlib._kernels.single`), and return ``None``
where they cannot, so the general path runs (and raises the usual errors for bad input).
The results are the general path's, bit for bit: the same compiled bodies run, on the
calling thread.
"""

from __future__ import annotations

import numpy as np

from ...search.finish import result_columns
from ..one import float_rows, one_query, prepared_query, rerank_finish
from ..tiers import tier_of

__all__ = ["flat_one", "flat_search", "flat_tiers", "flat_search_one", "warm_saved_flat"]

_EMPTY_MASK = np.empty(0, np.uint8)


def flat_one(q, codes):
    """The quantizer's one-query scan of ``codes`` (kept with them), or None."""
    key = ("flat_one", q.fingerprint_)  # not "single": older pickles keep that one
    one = codes._cache.get(key, False)
    if one is False:
        one = codes._cache[key] = q.scanner().flat_one(codes)
    return one


def _mask(index) -> np.ndarray:
    """uint8 mask of the live rows (empty: all), kept until the next delete or add."""
    deleted = index._deleted
    if deleted is None:
        return _EMPTY_MASK
    cached = getattr(index, "_single_mask", None)
    if cached is None or cached[0] is not deleted:
        mask = _EMPTY_MASK if not deleted.any() else (~deleted).view(np.uint8)
        cached = index._single_mask = (deleted, mask)
    return cached[1]


def flat_search(index, queries, *args):
    """``FlatIndex.search``: one query by the quantizer's one-query scan where it applies
    (and its kernel is compiled or may be), else the batch path."""
    one = _flat_one_of(index)
    if one is not None:
        tier = None if one.kernel is None else tier_of(one.kernel)
        if tier is not None and not tier.ready():  # not compiled yet (COMPILE_SINGLE_AFTER)
            return tier.on_batch_path(index._search_batch, queries, index.quantizer.dim_, *args,
                                      index=index)  # fmt: skip
        result = flat_search_one(index, one, queries, *args)
        if result is not None:
            return result
    return index._search_batch(queries, *args)


def flat_tiers(index) -> tuple:
    """The tier of the one-query kernel ``index`` runs (none: the batch path's kernels)."""
    one = _flat_one_of(index)
    return () if one is None or one.kernel is None else (tier_of(one.kernel),)


def _flat_one_of(index):
    q = index.quantizer
    if not q.is_fitted:
        return None
    codes = index._parts()[0]
    if codes is None or len(codes) == 0:
        return None
    return flat_one(q, codes)


def flat_search_one(index, one, queries, k, oversample, rerank, filter, scores, pad_to_k=None):
    """``FlatIndex.search`` of one query by ``one`` (:class:`FlatOne`), or None where the
    general path must run."""
    q = index.quantizer
    if filter is not None or not q.is_fitted:
        return None
    opts = index._fast_options(k, oversample, rerank, scores, pad_to_k)  # the batch path's
    if opts is None:
        return None
    x = one_query(queries, q.dim_)
    if x is None:
        return None
    codes, vectors = index._parts()
    if codes is None or len(codes) == 0:
        return None
    rerank = opts.rerank
    if rerank:
        vectors = float_rows(vectors)
        if vectors is None:
            return None
    sim = q.similarity_
    n = len(codes)
    columns = opts.k
    if columns > n:  # the columns follow pad_to_k (result_columns), as on the batch path
        if opts.pad_to_k is None:
            return None  # the batch path warns
        columns = result_columns(columns, n, 1, opts.pad_to_k)
    depth = opts.depth(n)
    Qp = prepared_query(x, sim)
    if Qp is None:
        return None
    keys, rows = one.scan(Qp, _mask(index), depth)
    if rerank:  # a loaded file's blocks of these rows are checked on their first read
        index._check_vector_rows(vectors, rows)
    out, rows = rerank_finish(Qp, vectors, keys, rows, columns, sim, rerank, opts.scores)
    return out, index._ids.of_rows(rows)


def warm_saved_flat(cls, folder) -> None:
    """``FlatIndex.warm_saved_kernels``: where the kernel cache holds the lookup-table
    one-query kernel, one query of a saved 64-vector probe per rerank kind (dots, distances).
    An opened index's arrays are read-only maps, compiled apart from an in-memory index's."""
    from ..._kernels import single as KO
    from ..._kernels.cache import has_entries

    if not has_entries(KO.flat_lut_one):
        return  # compiling costs far more than loading: left to the first query
    X = np.random.default_rng(0).normal(size=(64, 16)).astype(np.float32)
    for similarity in ("cosine", "euclidean"):
        probe = cls(bits=1, similarity=similarity)
        probe.add(X)
        probe.save(folder / f"{similarity}.bbq")
        cls.open(folder / f"{similarity}.bbq").search(X[0], k=10)
