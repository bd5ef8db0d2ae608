"""The driver of :func:`estimation_error`: score query blocks, split them into bands, summarize."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from ..._validation import check_vectors, prepare_for_similarity
from ...similarity import Similarity, exact_raw
from ._inputs import (
    _centre,
    _check_bands,
    _check_confidence,
    _default_eps0,
    _describe,
    _similarity_of,
    _supports_bounds,
)
from .accumulator import _BandAccumulator
from .reports import ErrorReport, PairSample

#: Default neighbour bands: each query's true top-10 and top-100 (nested), and the rest.
DEFAULT_BANDS = (10, 100)
# Pairs scored per block of queries (bounds the dense [nq_block, n] temporaries to ~40 MB each).
_PAIRS_PER_BLOCK = 1 << 22


def estimation_error(
    quantizer,
    queries,
    vectors,
    *,
    encoded=None,
    bands: Iterable[int] = DEFAULT_BANDS,
    eps0: float | None = None,
    bounds: bool | None = None,
    normalize: bool = False,
    confidence: float = 0.95,
    rank_sample: int | None = 2000,
    pairs_per_query: int = 200,
    seed: int = 0,
    label: str | None = None,
) -> ErrorReport:
    """Per-pair estimation error of a fitted quantizer against exact values, summarized.

    Parameters
    ----------
    quantizer : fitted Quantizer
        Any bbqlib quantizer (``estimate(Q, enc)`` gives raw values: squared L2 for
        euclidean, inner products otherwise).
    queries : float array [nq, d]
    vectors : float array [n, d]
        The stored vectors (the exact values are computed from them, in float64, after the
        similarity's rule: cosine normalizes).
    encoded : EncodedVectors, optional
        ``quantizer.encode(vectors)``, when already at hand.
    bands : sequence of int
        Top-``k`` bands of true neighbours per query (nested: ``top-10`` is inside
        ``top-100``); ``"rest"`` is every pair beyond the largest. Bands of ``n`` or more
        vectors are dropped.
    eps0 : float, optional
        Confidence multiplier of the error bound (the quantizer's default, 1.9 for RaBitQ, when
        None). Only used when bounds are measured.
    bounds : bool, optional
        Measure bound coverage. ``None``: when the quantizer has bounds. ``True`` on a quantizer
        without bounds raises its error.
    normalize : bool
        Divide each error by ``‖q − c‖·‖o − c‖`` (twice that for squared L2), ``c`` the
        quantizer's centre: the error of the estimated cosine of the centred pair, the scale of
        RaBitQ's error bound (Gao & Long, SIGMOD 2024). Relative errors and coverage do not change.
    confidence : float
        Level of the bias interval (0.95).
    rank_sample : int or None
        Spearman's rho of bands with more vectors per query than this (``"all"``, ``"rest"``)
        is computed on a seeded random subsample of that many vectors per query (ranking all
        costs O(n log n) per query); None uses every vector. Kendall's tau uses every pair of
        vectors in bands of up to 128, else 10,000 random pairs per query.
    pairs_per_query : int
        Uniformly sampled pairs per query kept in ``report.pairs`` for plots (besides every
        pair of the largest top band).
    seed : int
        Seed of the subsamples.
    label : str, optional
        Name of the method in tables (default: class, bits, query bits, precondition).

    Returns
    -------
    ErrorReport

    Notes
    -----
    The bias interval is two-way cluster-robust (Cameron, Gelbach & Miller, "Robust inference
    with multiway clustering", 2011): errors that share a query or a stored vector are allowed
    to be correlated, which an independent-pairs interval would ignore (it is typically several
    times too narrow here). The pairs are a fixed sample of queries and vectors; the interval
    speaks about the population they come from, for this one fitted quantizer. For the mean over
    random rotations use :func:`unbiasedness_test`.

    Examples
    --------
    >>> import numpy as np, bbqlib
    >>> from bbqlib.analysis import estimation_error
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(500, 32)).astype(np.float32)
    >>> q = bbqlib.BBQQuantizer(bits=4, similarity="euclidean").fit(X)
    >>> rep = estimation_error(q, X[:20], X, bands=(10,))
    >>> rep.band_names
    ['all', 'top-10', 'rest']
    >>> bool(rep["top-10"].spearman > 0.5)
    True
    """
    similarity = _similarity_of(quantizer)
    confidence = _check_confidence(confidence)
    if rank_sample is not None and (
        isinstance(rank_sample, bool) or not isinstance(rank_sample, int) or rank_sample < 2
    ):
        raise ValueError(f"rank_sample must be an int >= 2 or None, got {rank_sample!r}")
    if isinstance(pairs_per_query, bool) or not isinstance(pairs_per_query, int):
        raise TypeError(f"pairs_per_query must be an int >= 0, got {pairs_per_query!r}")
    if pairs_per_query < 0:
        raise ValueError(f"pairs_per_query must be >= 0, got {pairs_per_query}")
    X = prepare_for_similarity(check_vectors(vectors, "vectors"), similarity, "vectors")
    Q = prepare_for_similarity(
        check_vectors(queries, "queries", dim=X.shape[1]), similarity, "queries"
    )
    nq, n = Q.shape[0], X.shape[0]
    tops = _check_bands(bands, n)
    top = tops[-1] if tops else 0
    if encoded is None:
        encoded = quantizer.encode(X)
    if bounds is None:
        bounds = _supports_bounds(quantizer)
    bounds = bool(bounds)

    scale_q = scale_x = None
    if normalize:
        c = _centre(quantizer, X)
        scale_x = np.linalg.norm(X.astype(np.float64) - c, axis=1)
        scale_q = np.linalg.norm(Q.astype(np.float64) - c, axis=1)
        if similarity.is_distance:
            scale_q = 2.0 * scale_q

    names = ["all"] + [f"top-{k}" for k in tops] + (["rest"] if top and top < n else [])
    accs = {name: _BandAccumulator(name, nq, n, bounds) for name in names}
    rng = np.random.default_rng(seed)
    kept: list[tuple] = []
    X64 = X.astype(np.float64)
    block = max(1, min(nq, _PAIRS_PER_BLOCK // max(n, 1)))
    used_eps0 = None
    for q0 in range(0, nq, block):
        Qb = Q[q0 : q0 + block]
        nb = Qb.shape[0]
        q_rows = np.arange(q0, q0 + nb)
        if bounds:
            kwargs = {} if eps0 is None else {"eps0": eps0}
            est, lower, upper = quantizer.estimate(Qb, encoded, return_bounds=True, **kwargs)
            lower = np.asarray(lower, dtype=np.float64)
            upper = np.asarray(upper, dtype=np.float64)
        else:
            est = quantizer.estimate(Qb, encoded)
        est = np.asarray(est, dtype=np.float64)
        exact = exact_raw(similarity, Qb, X64)
        raw_err = est - exact
        if normalize:
            s = scale_q[q0 : q0 + nb, None] * scale_x[None, :]
            safe = np.where(s > 0, s, 1.0)
            err = np.where(s > 0, raw_err / safe, 0.0)
        else:
            s = safe = None
            err = raw_err
        half = inside = None
        if bounds:
            inside = (lower <= exact) & (exact <= upper)
            half = (upper - lower) / 2.0
            if normalize:
                half = np.where(s > 0, half / safe, 0.0)

        fields = {"est": est, "exact": exact, "err": err, "raw": raw_err}
        if bounds:
            fields.update(half=half, inside=inside)
        top_ids = _top_ids(exact, top, similarity) if top else np.empty((nb, 0), np.int64)
        ids_all = np.broadcast_to(np.arange(n), (nb, n))
        accs["all"].add(q_rows, ids_all, fields, rng, rank_sample)
        for k in tops:
            idx = top_ids[:, :k]
            band = {key: np.take_along_axis(a, idx, axis=1) for key, a in fields.items()}
            accs[f"top-{k}"].add(q_rows, idx, band, rng, rank_sample)
        if "rest" in accs:
            mask = np.ones((nb, n), dtype=bool)
            mask[np.arange(nb)[:, None], top_ids] = False
            shape = (nb, n - top)
            band = {key: a[mask].reshape(shape) for key, a in fields.items()}
            accs["rest"].add(q_rows, ids_all[mask].reshape(shape), band, rng, rank_sample)
        # Pairs kept for plots: every top pair, plus a uniform sample (with replacement).
        if top:
            kept.append(_keep(q_rows, top_ids, exact, err, np.arange(top)[None, :], False))
        if pairs_per_query:
            cols = rng.integers(0, n, size=(nb, pairs_per_query))
            ranks = np.full(cols.shape, top, dtype=np.int64)
            if top:
                hit = cols[:, :, None] == top_ids[:, None, :]  # [nb, m, top]: small
                found = hit.any(axis=2)
                ranks[found] = hit.argmax(axis=2)[found]
            kept.append(_keep(q_rows, cols, exact, err, ranks, True))
    if bounds:
        used_eps0 = float(eps0) if eps0 is not None else _default_eps0(quantizer)

    pairs = _join_kept(kept)
    sim_scale = (
        "normalized" if normalize else ("squared L2" if similarity.is_distance else "inner product")
    )
    bpv = getattr(encoded, "bytes_per_vector", None)
    return ErrorReport(
        method=label if label is not None else _describe(quantizer),
        similarity=similarity.value,
        scale=sim_scale,
        n_queries=nq,
        n_vectors=n,
        bytes_per_vector=None if bpv is None else int(bpv),
        eps0=used_eps0,
        confidence=confidence,
        ci_method="two-way cluster-robust (queries and vectors), t with min(G)-1 df",
        bands=tuple(accs[name].stats(confidence) for name in names),
        top=top,
        pairs=pairs,
    )


def _top_ids(exact: np.ndarray, k: int, similarity: Similarity) -> np.ndarray:
    """Ids of each row's true top ``k`` [nb, k], best first, ties by the lower id."""
    key = -exact if similarity.is_distance else exact
    nb, n = key.shape
    rows = np.arange(nb)[:, None]
    part = np.argpartition(-key, k - 1, axis=1)[:, :k] if k < n else np.tile(np.arange(n), (nb, 1))
    order = np.lexsort((part, -key[rows, part]), axis=1)
    return part[rows, order]


def _keep(q_rows, idx, exact, err, ranks, uniform: bool):
    """Columns of a :class:`PairSample` for the pairs ``idx`` [nb, m] of a block."""
    ranks = np.broadcast_to(ranks, idx.shape)
    return (
        np.repeat(q_rows, idx.shape[1]),
        idx.ravel().astype(np.int64),
        np.take_along_axis(exact, idx, axis=1).ravel(),
        np.take_along_axis(err, idx, axis=1).ravel(),
        ranks.ravel().astype(np.int64),
        np.full(idx.size, uniform),
    )


def _join_kept(kept) -> PairSample:
    if not kept:
        e = np.empty(0)
        ei = np.empty(0, np.int64)
        return PairSample(ei, ei, e, e, ei, np.empty(0, bool))
    cols = [np.concatenate(c) for c in zip(*kept, strict=True)]
    return PairSample(*cols)
