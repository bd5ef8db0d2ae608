"""Bulk scoring of quantized codes: dense estimates and top-k scans.

Every code family in bbqlib dequantizes affinely, ``x̂_i = a_x + l_x X_i`` (BBQ/OSQ, RaBitQ
with its rescaled grid, int8), so one correction algebra serves all of them (spec §2.1):

    S = D a_x a_y + a_y l_x ΣX + a_x l_y ΣY + l_x l_y <X, Y>
    euclidean: d² = add_q + add_x - 2 S        inner product: ip = S + add_q + add_x - <c, c>

Per-doc factors are rows ``(a_x, l_x, ΣX, add_x)`` (float32 [n, 4]); per-query factors
``(a_y, l_y, ΣY, add_y)`` (float64 [nq, 4]). A float query uses ``a_y = 0, l_y = 1`` and
``ΣY = Σ y``, which makes ``S = a_x Σy + l_x <X, y>``.

Three layouts of ``<X, Y>``: bit planes (uint64 words, ``Σ_{s,t} 2^{s+t} popcount(q_s & d_t)``),
bytes (uint8 × uint8) and float query × codes (uint8 bytes, ``float_dot``; bit planes read
straight from the planes, :mod:`bbqlib._kernels.plane_float`). The scans keep the top ``k``
per query in a bounded heap inside the scan (memory O(chunks · nq · k)), ranked by the raw
value (``-d²`` for euclidean), ties broken by the lower id, so results do not depend on the
thread count.
"""

from __future__ import annotations

import numpy as np

from .plane_float import pad_query, plane_float_dot, plane_float_dots
from .policy import kernel, parallel_kernel, prange
from .popcount import popcount64
from .prefetch import prefetch_row

__all__ = [
    "BLOCK",
    "plane_dot",
    "plane_dot_q4",
    "estimate_planes",
    "estimate_bytes",
    "estimate_float",
    "scan_planes",
    "scan_bytes",
    "scan_float",
    "scan_float_planes",
    "estimate_float_planes",
    "EMPTY_ID",
]

#: Docs per cache block inside a scan.
BLOCK = 256
#: Rows a scan asks the CPU for ahead of the one it scores (``prefetch_row``).
AHEAD = 8
#: Id of an empty heap slot (sorts after every real id).
EMPTY_ID = np.iinfo(np.int64).max
#: Longest ``byte_dot`` summed in int32 (255² · 32768 < 2³¹, so the sum cannot overflow).
BYTE_RUN = 32768


@kernel(inline="always")
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


@kernel(inline="always")
def plane_dot_q4(q, d, dp, words):
    """``plane_dot`` for a 4-plane query (every default plane encoding), without the
    per-plane branches: four accumulators, each doc word loaded once."""
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
            c1 += popcount64(q[words + w] & x)
            c2 += popcount64(q[2 * words + w] & x)
            c3 += popcount64(q[3 * words + w] & x)
        acc += (c0 + (c1 << 1) + (c2 << 2) + (c3 << 3)) << t
    return acc


@kernel(inline="always")
def byte_dot(q, d):
    # An int32 accumulator lets LLVM vectorize the loop in 32-bit lanes (an int64 one does
    # not vectorize as well); it is
    # exact while 255² · d < 2³¹, i.e. d <= BYTE_RUN. Longer vectors take the int64 loop.
    n = d.shape[0]
    if n > BYTE_RUN:
        acc = 0
        for i in range(n):
            acc += np.int32(q[i]) * np.int32(d[i])
        return acc
    part = np.int32(0)
    for i in range(n):
        part = np.int32(part + np.int32(q[i]) * np.int32(d[i]))
    return np.int64(part)


# Not inlined at numba's level: LLVM inlines it and keeps its reassociation flags, which let
# it vectorize the sum, as faiss's SQ8 does (a float64 sum in order cannot be vectorized).
# Float-query dots are scores to rank by, not estimates whose bias is published; their error
# stays within the float32 bound of a sum of d products (gamma_d with u = 2^-24).
@kernel(fastmath={"reassoc", "contract"})
def float_dot(q, d):
    """Dot of a float32 query with one row of codes, float32 lanes in any order."""
    acc = np.float32(0.0)
    for i in range(d.shape[0]):
        acc += q[i] * np.float32(d[i])
    return np.float64(acc)


# ----------------------------------------------------------------------------- id lists
# One inline body per layout; the serial kernels serve one query (a scorer call, where waking
# the thread pool would cost more than the work), the parallel ones batches of queries.


@kernel(inline="always")
def _raw(dim, df, qf, dot, cc, is_l2):
    # df = (a_x, l_x, ΣX, add_x); qf = (a_y, l_y, ΣY, add_y). Same expression order as
    # ``_block_keys`` so dense estimates and scans agree to the last bit.
    ax = np.float64(df[0])
    lx = np.float64(df[1])
    s = ax * (dim * qf[0] + qf[1] * qf[2]) + lx * (qf[0] * df[2] + qf[1] * dot)
    if is_l2:
        return qf[3] + df[3] - 2.0 * s
    return s + qf[3] + df[3] - cc


@kernel(inline="always")
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


@parallel_kernel(vectorize=False)
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
# Each scan splits the docs into ``out_keys.shape[0]`` chunks (one per thread) and walks each
# chunk in cache blocks of BLOCK docs. Per (block, query) it computes all integer dots first,
# then all keys, then offers only keys that beat the heap's worst entry: separate tight loops
# instead of one branchy loop per pair. ``allowed`` is a uint8 mask over docs (empty: all
# allowed); ids are ``id_base + row``.


@kernel(inline="always")
def _block_keys(dots, m, b0, df, qf, dim, cc, is_l2, out):
    # The correction algebra of ``_raw`` with the query's scalars hoisted out of the loop.
    ay = qf[0]
    ly = qf[1]
    add_y = qf[3]
    x_term = dim * ay + ly * qf[2]
    for j in range(m):
        row = b0 + j
        ax = np.float64(df[row, 0])
        lx = np.float64(df[row, 1])
        s = ax * x_term + lx * (ay * df[row, 2] + ly * dots[j])
        if is_l2:
            out[j] = -(add_y + df[row, 3] - 2.0 * s)
        else:
            out[j] = s + add_y + df[row, 3] - cc


@kernel(inline="always")
def _offer_block(keys, ids, block_keys, m, b0, allowed, id_base):
    use_mask = allowed.shape[0] > 0
    worst = keys[0]
    for j in range(m):
        key = block_keys[j]
        if key >= worst and not (use_mask and allowed[b0 + j] == 0):
            _offer(keys, ids, key, id_base + b0 + j)
            worst = keys[0]


@kernel(inline="always")
def _offer_entries(keys, heap_ids, block_keys, m, row0, ids, allowed):
    """Offer posting entries ``row0 .. row0 + m`` (their ids ``ids[row]``, filtered by the
    uint8 mask ``allowed`` over ids unless it is empty) to the heap ``keys`` / ``heap_ids``."""
    use_mask = allowed.shape[0] > 0
    worst = keys[0]
    for j in range(m):
        key = block_keys[j]
        if key >= worst:
            idx = ids[row0 + j]
            if use_mask and allowed[idx] == 0:
                continue
            _offer(keys, heap_ids, key, np.int64(idx))
            worst = keys[0]


@parallel_kernel(vectorize=False)
def scan_planes(qw, qf, dw, df, qp, dp, words, dim, cc, is_l2, allowed, id_base, out_keys, out_ids):
    n = dw.shape[0]
    chunks = out_keys.shape[0]
    per = (n + chunks - 1) // chunks
    for c in prange(chunks):
        dots = np.empty(BLOCK, dtype=np.int64)
        block_keys = np.empty(BLOCK, dtype=np.float64)
        stop = min(n, (c + 1) * per)
        for b0 in range(c * per, stop, BLOCK):
            m = min(stop - b0, BLOCK)
            for q in range(qw.shape[0]):
                query = qw[q]
                if qp == 4:
                    for j in range(m):
                        dots[j] = plane_dot_q4(query, dw[b0 + j], dp, words)
                else:
                    for j in range(m):
                        dots[j] = plane_dot(query, dw[b0 + j], qp, dp, words)
                _block_keys(dots, m, b0, df, qf[q], dim, cc, is_l2, block_keys)
                _offer_block(out_keys[c, q], out_ids[c, q], block_keys, m, b0, allowed, id_base)


@parallel_kernel
def scan_bytes(qb, qf, db, df, dim, cc, is_l2, allowed, id_base, out_keys, out_ids):
    n = db.shape[0]
    chunks = out_keys.shape[0]
    per = (n + chunks - 1) // chunks
    for c in prange(chunks):
        dots = np.empty(BLOCK, dtype=np.int64)
        block_keys = np.empty(BLOCK, dtype=np.float64)
        stop = min(n, (c + 1) * per)
        for b0 in range(c * per, stop, BLOCK):
            m = min(stop - b0, BLOCK)
            for q in range(qb.shape[0]):
                query = qb[q]
                for j in range(m):
                    if q == 0 and b0 + j + AHEAD < stop:  # the first pass over a block reads it
                        prefetch_row(db, b0 + j + AHEAD)
                    dots[j] = byte_dot(query, db[b0 + j])
                _block_keys(dots, m, b0, df, qf[q], dim, cc, is_l2, block_keys)
                _offer_block(out_keys[c, q], out_ids[c, q], block_keys, m, b0, allowed, id_base)


@parallel_kernel
def scan_float(qv, qf, codes, df, dim, cc, is_l2, allowed, id_base, out_keys, out_ids):
    n = codes.shape[0]
    chunks = out_keys.shape[0]
    per = (n + chunks - 1) // chunks
    for c in prange(chunks):
        dots = np.empty(BLOCK, dtype=np.float64)
        block_keys = np.empty(BLOCK, dtype=np.float64)
        stop = min(n, (c + 1) * per)
        for b0 in range(c * per, stop, BLOCK):
            m = min(stop - b0, BLOCK)
            for q in range(qv.shape[0]):
                query = qv[q]
                for j in range(m):
                    if q == 0 and b0 + j + AHEAD < stop:  # the first pass over a block reads it
                        prefetch_row(codes, b0 + j + AHEAD)
                    dots[j] = float_dot(query, codes[b0 + j])
                _block_keys(dots, m, b0, df, qf[q], dim, cc, is_l2, block_keys)
                _offer_block(out_keys[c, q], out_ids[c, q], block_keys, m, b0, allowed, id_base)


@kernel(inline="always")
def _padded_queries(qv, plane_bytes):
    """Float queries [nq, dim] in :func:`~bbqlib._kernels.plane_float.pad_query`'s lanes."""
    out = np.empty((qv.shape[0], plane_bytes * 8), dtype=np.float32)
    for q in range(qv.shape[0]):
        pad_query(qv[q], out[q])
    return out


@kernel(inline="always")
def _plane_block_dots(qpad, codes, b0, m, planes, plane_bytes, dots):
    """Dots of one padded float query and plane docs ``b0 .. b0 + m``, four docs at a time
    (the values of one at a time, :func:`~bbqlib._kernels.plane_float.plane_float_dots`)."""
    four = m - m % 4
    query = (qpad,)
    for j in range(0, four, 4):
        docs = (codes[b0 + j], codes[b0 + j + 1], codes[b0 + j + 2], codes[b0 + j + 3])
        dots[j], dots[j + 1], dots[j + 2], dots[j + 3] = plane_float_dots(
            query, docs, planes, plane_bytes
        )
    for j in range(four, m):
        dots[j] = plane_float_dot(qpad, codes[b0 + j], planes, plane_bytes)


@parallel_kernel
def estimate_float_planes(qv, qf, packed, df, planes, plane_bytes, dim, cc, is_l2, out):
    """Raw estimates [nq, n] of float queries against plane-packed docs (``packed`` uint8
    [n, planes * plane_bytes]): :func:`~bbqlib._kernels.plane_float.plane_float_dot`."""
    qpad = _padded_queries(qv, plane_bytes)
    for j in prange(packed.shape[0]):
        for q in range(qpad.shape[0]):
            dot = plane_float_dot(qpad[q], packed[j], planes, plane_bytes)
            out[q, j] = _raw(dim, df[j], qf[q], dot, cc, is_l2)


@parallel_kernel
def scan_float_planes(
    qv, qf, packed, df, planes, plane_bytes, dim, cc, is_l2, allowed, id_base, out_keys, out_ids
):
    """:func:`scan_float` over plane-packed docs (``packed`` uint8 [n, planes * plane_bytes]),
    dots straight from the planes (:func:`~bbqlib._kernels.plane_float.plane_float_dot`):
    two queries against two docs at a time, or one query against four, which share plane
    words and query lanes, with the same values as one of each."""
    n = packed.shape[0]
    nq = qv.shape[0]
    chunks = out_keys.shape[0]
    per = (n + chunks - 1) // chunks
    qpad = _padded_queries(qv, plane_bytes)
    for c in prange(chunks):
        dots = np.empty(BLOCK, dtype=np.float64)
        dots2 = np.empty(BLOCK, dtype=np.float64)
        block_keys = np.empty(BLOCK, dtype=np.float64)
        stop = min(n, (c + 1) * per)
        for b0 in range(c * per, stop, BLOCK):
            m = min(stop - b0, BLOCK)
            for q in range(0, nq - 1, 2):
                pair = (qpad[q], qpad[q + 1])
                for j in range(0, m - 1, 2):
                    dots[j], dots2[j], dots[j + 1], dots2[j + 1] = plane_float_dots(
                        pair, (packed[b0 + j], packed[b0 + j + 1]), planes, plane_bytes
                    )
                if m % 2 == 1:
                    dots[m - 1], dots2[m - 1] = plane_float_dots(
                        pair, (packed[b0 + m - 1],), planes, plane_bytes
                    )
                _block_keys(dots, m, b0, df, qf[q], dim, cc, is_l2, block_keys)
                _offer_block(out_keys[c, q], out_ids[c, q], block_keys, m, b0, allowed, id_base)
                _block_keys(dots2, m, b0, df, qf[q + 1], dim, cc, is_l2, block_keys)
                _offer_block(
                    out_keys[c, q + 1], out_ids[c, q + 1], block_keys, m, b0, allowed, id_base
                )
            if nq % 2 == 1:  # one query (or the last of an odd count): four docs at a time
                q = nq - 1
                _plane_block_dots(qpad[q], packed, b0, m, planes, plane_bytes, dots)
                _block_keys(dots, m, b0, df, qf[q], dim, cc, is_l2, block_keys)
                _offer_block(out_keys[c, q], out_ids[c, q], block_keys, m, b0, allowed, id_base)
