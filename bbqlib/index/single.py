"""Moved to :mod:`bbqlib.index.tiers` (tiers), :mod:`bbqlib.index.one`,
:mod:`bbqlib.index.flat.one`; this path is removed in bbqlib 0.4."""

from .._deprecated import moved

<<<<<<< HEAD
moved(__name__, "bbqlib.index.tiers")
=======
from __future__ import annotations

import time

import numpy as np

from .._kernels import single as KO
from .._kernels.cache import has_entries
from .._validation import MAX_SQ_NORM, UNIT_NORM_TOLERANCE
from ..search.finish import SCORE_KINDS, result_columns
from ..search.rerank import candidate_count, check_oversample
from ..similarity import Similarity, scores_from_raw

__all__ = [
    "COMPILE_SINGLE_AFTER",
    "SingleQueryTier",
    "FLAT_TIER",
    "one_query",
    "prepared_query",
    "flat_search",
    "flat_tiers",
    "tier_of",
    "rerank_finish",
    "finish_scores",
    "flat_search_one",
]

_EMPTY_MASK = np.empty(0, np.uint8)

#: Tiered compilation of the single-query paths (docs/startup.md). A path's fused kernels
#: cost more to compile than the batch path's (``benchmarks/serving/serving.py --sections
#: startup`` reports both), so while neither this process nor the disk cache has them,
#: one-query searches take the batch path, until that has cost this many seconds; then the
#: next one compiles them.
#: ``bbqlib.warmup(index)`` compiles them at once; tests set 0 (``tests/conftest.py``).
COMPILE_SINGLE_AFTER = 2.0


class SingleQueryTier:
    """Whether a single-query path may run yet (see :data:`COMPILE_SINGLE_AFTER`).

    ``kernel`` is the path's main kernel: once this process has compiled or loaded it, or
    the disk cache holds any entry of it, the path runs (a new argument type may still
    compile at its first query, as on the batch path).
    """

    def __init__(self, kernel):
        self._kernel = kernel
        self._ready = False
        self.batch_seconds = 0.0  # one-query searches answered by the batch path meanwhile

    def ready(self) -> bool:
        if not self._ready:
            k = self._kernel
            self._ready = (
                self.batch_seconds >= COMPILE_SINGLE_AFTER or bool(k.signatures) or has_entries(k)
            )
        return self._ready

    def open(self) -> None:
        """Let the path run (and compile) from now on: ``bbqlib.warmup(index)``."""
        self._ready = True

    def on_batch_path(self, search, queries, dim: int, *args):
        """``search(queries, *args)``, its time charged to the tier when it is one query."""
        if one_query(queries, dim) is None:
            return search(queries, *args)
        t0 = time.perf_counter()
        try:
            return search(queries, *args)
        finally:
            self.batch_seconds += time.perf_counter() - t0


#: The tier of each single-query kernel (:func:`tier_of`).
_TIERS: dict = {}


def tier_of(kernel) -> SingleQueryTier:
    """The tier of a single-query path's main kernel (one per kernel, made at first use)."""
    tier = _TIERS.get(kernel)
    if tier is None:
        tier = _TIERS.setdefault(kernel, SingleQueryTier(kernel))
    return tier


FLAT_TIER = tier_of(KO.flat_lut_one)


def one_query(queries, dim: int) -> np.ndarray | None:
    """``queries`` as a float32 row [d] (no copy) when it is one C-contiguous float32 query
    of dimension ``dim``, else None."""
    if type(queries) is not np.ndarray or queries.dtype != np.float32:
        return None
    if queries.ndim == 2 and queries.shape[0] == 1:
        queries = queries[0]
    if queries.ndim != 1 or queries.shape[0] != dim or not queries.flags.c_contiguous:
        return None
    return queries


def prepared_query(x: np.ndarray, similarity: Similarity) -> np.ndarray | None:
    """One query row as ``prepare_for_similarity`` makes it, as [1, d] (normalized for
    cosine, a new array then); None when it breaks a rule (the general path raises)."""
    cosine = similarity is Similarity.COSINE
    out = np.empty_like(x) if cosine else x
    sq = KO.prepare_one(x, cosine, out)
    if not sq <= MAX_SQ_NORM:  # not finite, or beyond check_vectors' bound
        return None
    if cosine and sq == 0.0:
        return None
    if similarity is Similarity.DOT_PRODUCT and abs(sq - 1.0) > UNIT_NORM_TOLERANCE:
        return None
    return out.reshape(1, -1)


def float_rows(vectors) -> np.ndarray | None:
    """The float vectors as the exact kernel takes them (float32), else None."""
    if vectors is None:
        return None
    vec = vectors.view(np.ndarray) if isinstance(vectors, np.memmap) else vectors
    if type(vec) is not np.ndarray or vec.dtype != np.float32 or not vec.flags.c_contiguous:
        return None
    return vec


def rerank_finish(Qp, vectors, keys, rows, k: int, similarity: Similarity, rerank: bool, scores):
    """Exact rerank of candidate ``rows`` [m] (``-1`` padding; ``keys`` their estimated keys,
    best first) and the exit: ``(scores float32 [1, k], rows int64 [1, k])`` as
    ``rerank_keys`` + ``finish`` make them."""
    dist = similarity.is_distance
    pad = np.inf if dist and scores == "raw" else -np.inf  # scoring.pad_value, inlined
    if rerank:
        if dist:
            raw, out_rows = KO.rerank_sqdists(Qp, vectors, rows, k, pad)
        else:
            raw, out_rows = KO.rerank_dots(Qp, vectors, rows, k, pad)
    else:
        m = min(k, rows.shape[0])
        raw = np.full((1, k), pad)
        out_rows = np.full((1, k), -1, dtype=np.int64)
        valid = rows[:m] >= 0
        raw[0, :m] = np.where(valid, -keys[:m] if dist else keys[:m], pad)
        out_rows[0, :m] = np.where(valid, rows[:m], -1)
    return finish_scores(raw, out_rows, similarity, pad, scores), out_rows


def finish_scores(raw, out_rows, similarity: Similarity, pad: float, scores) -> np.ndarray:
    """float32 [1, k] results from exact values ``raw`` of ``out_rows`` (``-1``: none)."""
    if scores == "raw":
        return raw.astype(np.float32)
    valid = out_rows >= 0
    values = scores_from_raw(similarity, np.where(valid, raw, 0.0))
    return np.where(valid, values, pad).astype(np.float32)


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
            return tier.on_batch_path(index._search_batch, queries, index.quantizer.dim_, *args)
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
    if rerank is None:  # the index's default
        rerank = bool(index.store_vectors)
    if filter is not None or not (rerank is True or rerank is False) or not q.is_fitted:
        return None
    if type(k) is not int or k < 1 or scores not in SCORE_KINDS:
        return None
    if pad_to_k is not None and pad_to_k is not True and pad_to_k is not False:
        return None
    x = one_query(queries, q.dim_)
    if x is None:
        return None
    codes, vectors = index._parts()
    if codes is None or len(codes) == 0:
        return None
    if rerank:
        vectors = float_rows(vectors)
        if vectors is None or not index.store_vectors:
            return None
    sim = q.similarity_
    default = q.encoding_.default_oversample
    oversample = default if oversample is None else check_oversample(oversample, default)
    n = len(codes)
    columns = k
    if k > n:  # the columns follow pad_to_k (result_columns), as on the batch path
        if pad_to_k is None:
            return None  # the batch path warns
        columns, k = result_columns(k, n, 1, pad_to_k), n
    depth = candidate_count(k, oversample, n) if rerank else k
    Qp = prepared_query(x, sim)
    if Qp is None:
        return None
    keys, rows = one.scan(Qp, _mask(index), depth)
    if rerank:  # a loaded file's blocks of these rows are checked on their first read
        index._check_vector_rows(vectors, rows)
    out, rows = rerank_finish(Qp, vectors, keys, rows, columns, sim, rerank, scores)
    return out, index._ids.of_rows(rows)
>>>>>>> bench-regroup
