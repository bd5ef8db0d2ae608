"""Bulk scoring of quantized codes: dense estimates and top-k scans.

Every code family in bbqlib dequantizes affinely, ``x̂_i = a_x + l_x X_i`` (BBQ/OSQ, RaBitQ
with its rescaled grid, int8), so one correction algebra serves all of them (spec §2.1):

    S = D a_x a_y + a_y l_x ΣX + a_x l_y ΣY + l_x l_y <X, Y>
    euclidean: d² = add_q + add_x - 2 S        inner product: ip = S + add_q + add_x - <c, c>

Per-doc factors are rows ``(a_x, l_x, ΣX, add_x)`` (float32 [n, 4]); per-query factors
``(a_y, l_y, ΣY, add_y)`` (float64 [nq, 4]). A float query uses ``a_y = 0, l_y = 1`` and
``ΣY = Σ y``, which makes ``S = a_x Σy + l_x <X, y>``.

Three layouts of ``<X, Y>``: bit planes (uint64 words, ``Σ_{s,t} 2^{s+t} popcount(q_s & d_t)``),
bytes (uint8 × uint8) and float query × uint8 codes. The scans keep the top ``k`` per query in
a bounded heap inside the scan (memory O(chunks · nq · k)), ranked by the raw value (``-d²`` for
euclidean), ties broken by the lower id, so results do not depend on the thread count.
"""

from __future__ import annotations

import numpy as np

from .policy import kernel, parallel_kernel, prange
from .popcount import popcount64

__all__ = [
    "BLOCK",
    "plane_dot",
    "estimate_planes",
    "estimate_bytes",
    "estimate_float",
    "scan_planes",
    "scan_bytes",
    "scan_float",
    "EMPTY_ID",
]

#: Docs per cache block inside a scan.
BLOCK = 256
#: Id of an empty heap slot (sorts after every real id).
EMPTY_ID = np.iinfo(np.int64).max


@kernel
def plane_dot(q, d, qp, dp, words):
    """``<X, Y>`` of one query (``qp`` planes) and one doc (``dp`` planes), uint64 words each.

    ``Σ_t Σ_s 2^(s+t) popcount(q_s & d_t)``. The first four query planes (every default
    encoding) get their own accumulators so each doc word is loaded once for all of them.
    """
    acc = 0
    for t in range(dp):
        base = t * words
        c0 = 0
        c1 = 0
        c2 = 0
        c3 = 0
        for w in range(words):
            x = d[base + w]
            c0 += popcount64(q[w] & x)
            if qp > 1:
                c1 += popcount64(q[words + w] & x)
            if qp > 2:
                c2 += popcount64(q[2 * words + w] & x)
            if qp > 3:
                c3 += popcount64(q[3 * words + w] & x)
        acc += (c0 + (c1 << 1) + (c2 << 2) + (c3 << 3)) << t
        for s in range(4, qp):
            c = 0
            for w in range(words):
                c += popcount64(q[s * words + w] & d[base + w])
            acc += c << (s + t)
    return acc


@kernel
def byte_dot(q, d):
    acc = 0
    for i in range(d.shape[0]):
        acc += np.int32(q[i]) * np.int32(d[i])
    return acc


@kernel
def float_dot(q, d):
    acc = 0.0
    for i in range(d.shape[0]):
        acc += np.float64(q[i]) * np.float64(d[i])
    return acc


@kernel
def _raw(dim, df, qf, dot, cc, is_l2):
    # df = (a_x, l_x, ΣX, add_x); qf = (a_y, l_y, ΣY, add_y).
    ax = np.float64(df[0])
    lx = np.float64(df[1])
    s = dim * ax * qf[0] + qf[0] * lx * df[2] + ax * qf[1] * qf[2] + lx * qf[1] * dot
    if is_l2:
        return qf[3] + df[3] - 2.0 * s
    return s + qf[3] + df[3] - cc


@kernel
def _offer(keys, ids, key, idx):
    """Offer (key, idx) to a bounded min-heap whose root is the worst kept entry."""
    if key < keys[0] or (key == keys[0] and idx > ids[0]):
        return
    k = keys.shape[0]
    pos = 0
    while True:
        child = 2 * pos + 1
        if child >= k:
            break
        right = child + 1
        if right < k and (
            keys[right] < keys[child] or (keys[right] == keys[child] and ids[right] > ids[child])
        ):
            child = right
        if keys[child] < key or (keys[child] == key and ids[child] > idx):
            keys[pos] = keys[child]
            ids[pos] = ids[child]
            pos = child
        else:
            break
    keys[pos] = key
    ids[pos] = idx


# ----------------------------------------------------------------------------- dense estimates


@parallel_kernel
def estimate_planes(qw, qf, dw, df, qp, dp, words, dim, cc, is_l2, out):
    """Raw estimates [nq, n] of plane-packed queries ``qw`` against plane-packed docs ``dw``."""
    for j in prange(dw.shape[0]):
        for q in range(qw.shape[0]):
            dot = plane_dot(qw[q], dw[j], qp, dp, words)
            out[q, j] = _raw(dim, df[j], qf[q], dot, cc, is_l2)


@parallel_kernel
def estimate_bytes(qb, qf, db, df, dim, cc, is_l2, out):
    """Raw estimates [nq, n] of byte queries against byte docs."""
    for j in prange(db.shape[0]):
        for q in range(qb.shape[0]):
            out[q, j] = _raw(dim, df[j], qf[q], byte_dot(qb[q], db[j]), cc, is_l2)


@parallel_kernel
def estimate_float(qv, qf, codes, df, dim, cc, is_l2, out):
    """Raw estimates [nq, n] of float queries against unpacked uint8 codes."""
    for j in prange(codes.shape[0]):
        for q in range(qv.shape[0]):
            out[q, j] = _raw(dim, df[j], qf[q], float_dot(qv[q], codes[j]), cc, is_l2)


# ----------------------------------------------------------------------------- top-k scans
# Each scan splits the docs into ``out_keys.shape[0]`` chunks (one per thread), walks each
# chunk in cache blocks of BLOCK docs, and offers every (query, doc) pair to that chunk's heap.
# ``allowed`` is a uint8 mask over docs (empty: all allowed); ids are ``id_base + row``.


@parallel_kernel
def scan_planes(qw, qf, dw, df, qp, dp, words, dim, cc, is_l2, allowed, id_base, out_keys, out_ids):
    n = dw.shape[0]
    chunks = out_keys.shape[0]
    per = (n + chunks - 1) // chunks
    use_mask = allowed.shape[0] > 0
    for c in prange(chunks):
        for b0 in range(c * per, min(n, (c + 1) * per), BLOCK):
            b1 = min(min(n, (c + 1) * per), b0 + BLOCK)
            for q in range(qw.shape[0]):
                keys = out_keys[c, q]
                ids = out_ids[c, q]
                for j in range(b0, b1):
                    if use_mask and allowed[j] == 0:
                        continue
                    raw = _raw(dim, df[j], qf[q], plane_dot(qw[q], dw[j], qp, dp, words), cc, is_l2)
                    _offer(keys, ids, -raw if is_l2 else raw, id_base + j)


@parallel_kernel
def scan_bytes(qb, qf, db, df, dim, cc, is_l2, allowed, id_base, out_keys, out_ids):
    n = db.shape[0]
    chunks = out_keys.shape[0]
    per = (n + chunks - 1) // chunks
    use_mask = allowed.shape[0] > 0
    for c in prange(chunks):
        for b0 in range(c * per, min(n, (c + 1) * per), BLOCK):
            b1 = min(min(n, (c + 1) * per), b0 + BLOCK)
            for q in range(qb.shape[0]):
                keys = out_keys[c, q]
                ids = out_ids[c, q]
                for j in range(b0, b1):
                    if use_mask and allowed[j] == 0:
                        continue
                    raw = _raw(dim, df[j], qf[q], byte_dot(qb[q], db[j]), cc, is_l2)
                    _offer(keys, ids, -raw if is_l2 else raw, id_base + j)


@parallel_kernel
def scan_float(qv, qf, codes, df, dim, cc, is_l2, allowed, id_base, out_keys, out_ids):
    n = codes.shape[0]
    chunks = out_keys.shape[0]
    per = (n + chunks - 1) // chunks
    use_mask = allowed.shape[0] > 0
    for c in prange(chunks):
        for b0 in range(c * per, min(n, (c + 1) * per), BLOCK):
            b1 = min(min(n, (c + 1) * per), b0 + BLOCK)
            for q in range(qv.shape[0]):
                keys = out_keys[c, q]
                ids = out_ids[c, q]
                for j in range(b0, b1):
                    if use_mask and allowed[j] == 0:
                        continue
                    raw = _raw(dim, df[j], qf[q], float_dot(qv[q], codes[j]), cc, is_l2)
                    _offer(keys, ids, -raw if is_l2 else raw, id_base + j)
