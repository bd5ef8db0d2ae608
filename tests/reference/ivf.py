"""Plain NumPy references for the IVF search steps (``bbqlib._kernels.ivf``, ``ivf_search``).

* :func:`scan_reference` - every entry of every visited list scored with an explicit integer
  dot of unpacked codes and the correction algebra (spec §2.1), best key per id, top ``k``
  by (key desc, id asc). The kernel keeps a heap of ``2 k`` (SOAR duplicates) and the caller
  de-duplicates; both must give exactly these results.
* :func:`plan_reference` - the visit plan with Python loops: lists in rank order until the
  entry budget (and the allowed-entry budget) is met.
* :func:`centroid_keys_reference` - 7-bit centroid estimates for a query.
"""

from __future__ import annotations

import numpy as np


def keys_reference(dot, df, qf, dim, cc, is_l2):
    """Ranking keys of entries: ``-d²`` (euclidean) or the inner product.

    ``dot`` int64 [m]; ``df`` float32 [m, 4] doc factor rows ``(a_x, l_x, ΣX, add_x)``; ``qf``
    float64 [4] query row ``(a_y, l_y, ΣY, add_y)``. Same operation order as the kernels.
    """
    ay, ly, sy, add_y = (float(v) for v in qf)
    ax = df[:, 0].astype(np.float64)
    lx = df[:, 1].astype(np.float64)
    x_term = dim * ay + ly * sy
    s = ax * x_term + lx * (ay * df[:, 2].astype(np.float64) + ly * dot.astype(np.float64))
    if is_l2:
        return -(add_y + df[:, 3].astype(np.float64) - 2.0 * s)
    return s + add_y + df[:, 3].astype(np.float64) - cc


def scan_reference(
    q_codes,
    qf,
    pair_list,
    pair_start,
    list_start,
    doc_codes,
    df,
    ids,
    list_cc,
    dim,
    is_l2,
    allowed,
    k,
):
    """Best ``k`` distinct ids per query over its visited lists: ``(keys, ids)`` [nq, k].

    ``q_codes`` uint8 [P, d] and ``doc_codes`` uint8 [E, d] are *unpacked* integer codes.
    Missing results are ``-inf`` / ``-1``.
    """
    nq = pair_start.shape[0] - 1
    out_k = np.full((nq, k), -np.inf)
    out_i = np.full((nq, k), -1, dtype=np.int64)
    for q in range(nq):
        best: dict[int, float] = {}
        for p in range(pair_start[q], pair_start[q + 1]):
            j = pair_list[p]
            s, e = list_start[j], list_start[j + 1]
            dots = doc_codes[s:e].astype(np.int64) @ q_codes[p].astype(np.int64)
            keys = keys_reference(dots, df[s:e], qf[p], dim, list_cc[j], is_l2)
            for key, idx in zip(keys, ids[s:e], strict=True):
                idx = int(idx)
                if allowed is not None and not allowed[idx]:
                    continue
                if idx not in best or key > best[idx]:
                    best[idx] = key
        ranked = sorted(best.items(), key=lambda t: (-t[1], t[0]))[:k]
        for r, (idx, key) in enumerate(ranked):
            out_k[q, r] = key
            out_i[q, r] = idx
    return out_k, out_i


def plan_reference(ranked, sizes, need, allowed_sizes=None, need_allowed=0.0):
    """Lists per query (Python lists), visiting in rank order until the budgets are met."""
    plans = []
    for row in ranked:
        chosen = []
        seen = 0.0
        seen_allowed = 0.0
        for j in row:
            if j < 0:
                break
            chosen.append(int(j))
            seen += sizes[j]
            if allowed_sizes is not None:
                seen_allowed += allowed_sizes[j]
            if seen >= need and (allowed_sizes is None or seen_allowed >= need_allowed):
                break
        plans.append(chosen)
    return plans


def centroid_keys_reference(q_codes, qf, c_codes, cf, dim, gg, is_l2):
    """Keys [nq, K] of 7-bit queries against 7-bit centroid codes."""
    out = np.empty((q_codes.shape[0], c_codes.shape[0]))
    for q in range(q_codes.shape[0]):
        dots = c_codes.astype(np.int64) @ q_codes[q].astype(np.int64)
        out[q] = keys_reference(dots, cf, qf[q], dim, gg, is_l2)
    return out


def dedup_topk_reference(keys, ids, k, empty_id):
    """Best ``k`` distinct ids per row (best key per id), by (key desc, id asc)."""
    nq = keys.shape[0]
    k = min(k, keys.shape[1])
    out_k = np.full((nq, k), -np.inf)
    out_i = np.full((nq, k), -1, dtype=np.int64)
    for q in range(nq):
        best: dict[int, float] = {}
        for key, idx in zip(keys[q], ids[q], strict=True):
            idx = int(idx)
            if idx != empty_id and (idx not in best or key > best[idx]):
                best[idx] = float(key)
        ranked = sorted(best.items(), key=lambda t: (-t[1], t[0]))[:k]
        for r, (idx, key) in enumerate(ranked):
            out_k[q, r] = key
            out_i[q, r] = idx
    return out_k, out_i
