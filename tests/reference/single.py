"""Plain NumPy references for the single-query kernels (``bbqlib._kernels.single``).

* :func:`prepare_reference` - squared norm (float64) and the cosine normalization of a row;
* :func:`best_k_reference` - the best ``k`` of exact values by (key desc, row asc);
* :func:`flat_one_reference` - OSQ of the query against the centroid, the integer dot with
  every doc's unpacked codes, keys by the correction algebra, top ``k``;
* :func:`plan_one_reference` - 7-bit OSQ of the query against ``g``, every centroid's key,
  rank order (lower list among ties), lists until the entry budget is met;
* :func:`plan_two_reference` - with parent centroids: parents ordered by the bound on their
  children's key, children scored parent by parent until no bound beats the ``want``-th
  best, the ``want`` best lists, the budget (every list ranked when they fall short);
* :func:`ivf_one_reference` - the query coded against each visited list's centre (one
  optimizer step), every entry scored, best key per id, top ``k``.
"""

from __future__ import annotations

import numpy as np

from .ivf import centroid_keys_reference, keys_reference, plan_reference, scan_reference
from .osq import osq_reference

__all__ = [
    "prepare_reference",
    "best_k_reference",
    "query_factors",
    "flat_one_reference",
    "plan_one_reference",
    "plan_two_reference",
    "ivf_one_reference",
]


def prepare_reference(x: np.ndarray, cosine: bool):
    """``(sq, out)``: float64 ``Σ x²`` and, for cosine, ``float32(x / sqrt(sq))``."""
    x64 = np.asarray(x, dtype=np.float64)
    sq = float(np.sum(x64 * x64))
    out = (x64 / np.sqrt(sq)).astype(np.float32) if cosine and np.isfinite(sq) and sq > 0 else x
    return sq, out


def best_k_reference(raw, cand, is_distance: bool, k: int, pad: float):
    """Raw values and rows of the best ``k`` valid candidates (``cand >= 0``) by (key desc,
    row asc), key ``-raw`` for distances; padded with ``pad`` / ``-1``."""
    pairs = [
        (-float(v) if is_distance else float(v), int(c))
        for v, c in zip(raw, cand, strict=True)
        if c >= 0
    ]
    pairs.sort(key=lambda t: (-t[0], t[1]))
    out_raw = np.full(k, pad)
    out_rows = np.full(k, -1, dtype=np.int64)
    for r, (key, row) in enumerate(pairs[:k]):
        out_raw[r] = -key if is_distance else key
        out_rows[r] = row
    return out_raw, out_rows


def query_factors(q, centroid, bits: int, euclidean: bool, iters: int, lam: float):
    """Integer codes [d] and the float64 factor row ``(a, l, Σk, add)`` of one query."""
    ref = osq_reference(q[None, :], centroid, bits, euclidean=euclidean, iters=iters, lam=lam)
    lo = np.float64(np.float32(ref.lower[0]))
    hi = np.float64(np.float32(ref.upper[0]))
    qf = np.array(
        [lo, (hi - lo) / float(2**bits - 1), float(ref.codes[0].sum()), ref.additional[0]],
        dtype=np.float64,
    )
    return ref.codes[0].astype(np.int64), qf


def flat_one_reference(
    q, centroid, bits, iters, lam, euclidean, doc_codes, df, dim, cc, is_l2, allowed, k
):
    """Top ``k`` ``(keys, rows)`` of one query over every doc (``doc_codes`` unpacked)."""
    codes, qf = query_factors(q, centroid, bits, euclidean, iters, lam)
    dots = doc_codes.astype(np.int64) @ codes
    keys = keys_reference(dots, df, qf, dim, cc, is_l2)
    rows = np.arange(len(keys))
    if allowed is not None:
        keys, rows = keys[allowed], rows[allowed]
    order = np.lexsort((rows, -keys))[:k]
    out_k = np.full(k, -np.inf)
    out_i = np.full(k, -1, dtype=np.int64)
    out_k[: order.size] = keys[order]
    out_i[: order.size] = rows[order]
    return out_k, out_i


def plan_one_reference(q, g, gg, c_codes, cf, cc, sizes, is_l2, by_distance, need):
    """Lists visited by one query (``rank_lists`` without parents, then the budget)."""
    codes, qf = query_factors(q, g, 7, is_l2, 5, 0.1)
    keys = centroid_keys_reference(codes[None, :], qf[None, :], c_codes, cf, len(q), gg, is_l2)
    keys = keys[0]
    if by_distance and not is_l2:
        keys = 2.0 * keys - cc
    ranked = np.lexsort((np.arange(keys.size), -keys))
    return plan_reference(ranked[None, :], sizes, need)[0]


def plan_two_reference(q, table, sizes, is_l2, by_distance, need, want):
    """Lists visited by one query with parents (``table``: a ``CentroidTable``)."""
    by_distance = by_distance or is_l2
    K = table.codes.shape[0]
    args = (q, table.g, table.gg, table.codes, table.factors, table.cc, sizes, is_l2)
    if want >= K:
        return plan_one_reference(*args, by_distance, need)
    codes, qf = query_factors(q, table.g, 7, is_l2, 5, 0.1)
    dim = len(q)
    ckeys = centroid_keys_reference(
        codes[None, :], qf[None, :], table.codes, table.factors, dim, table.gg, is_l2
    )[0]
    if by_distance and not is_l2:
        ckeys = 2.0 * ckeys - table.cc
    pkeys = centroid_keys_reference(
        codes[None, :], qf[None, :], table.parent_codes, table.parent_factors, dim, table.gg,
        is_l2,
    )[0]  # fmt: skip
    q64 = np.asarray(q, dtype=np.float64)
    qq = float(q64 @ q64)
    r = table.parent_radius
    if by_distance:
        d2 = -pkeys if is_l2 else qq + table.parent_cc - 2.0 * pkeys
        gap = np.maximum(np.sqrt(np.maximum(d2, 0.0)) - r, 0.0)
        bound = -(gap * gap) if is_l2 else qq - gap * gap
    else:
        bound = pkeys + np.sqrt(qq) * r
    scored: list[tuple[float, int]] = []
    for p in np.argsort(-bound, kind="stable"):
        if len(scored) >= want:
            worst = sorted(scored, key=lambda t: (-t[0], t[1]))[want - 1][0]
            if worst > -np.inf and bound[p] < worst:
                break
        for c in table.child_order[table.child_offsets[p] : table.child_offsets[p + 1]]:
            scored.append((float(ckeys[c]), int(c)))
    ranked = [c for _, c in sorted(scored, key=lambda t: (-t[0], t[1]))[:want]]
    if sizes[ranked].sum() < need:
        return plan_one_reference(*args, by_distance, need)
    return plan_reference(np.array([ranked]), sizes, need)[0]


def ivf_one_reference(
    q, centroids, lists, bits, lam, euclidean, list_start, doc_codes, df, ids, list_cc, dim, k
):
    """Best ``k`` distinct ``(keys, ids)`` of one query over its visited lists."""
    q_codes = []
    qfs = []
    for j in lists:
        codes, qf = query_factors(q, centroids[j], bits, euclidean, 1, lam)
        q_codes.append(codes)
        qfs.append(qf)
    P = len(lists)
    keys, out = scan_reference(
        np.array(q_codes).reshape(P, -1), np.array(qfs).reshape(P, 4), np.asarray(lists),
        np.array([0, P]), list_start, doc_codes, df, ids, list_cc, dim, euclidean, None, k,
    )  # fmt: skip
    return keys[0], out[0]
