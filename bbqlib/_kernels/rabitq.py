"""RaBitQ kernels: Extended RaBitQ's exact rescaling-factor sweep and the bound-driven rerank.

Code search (spec §2.2)
-----------------------
For a row ``a = |o'|`` (absolute rotated residual) and ``M = 2^(B-1) - 1`` magnitude levels, a
scale ``t > 0`` gives the rescaled rounding ``m_i(t) = #{k in 1..M : k / a_i <= t}`` (that is
``min(floor(t a_i), M)``, with the event times ``k / a_i`` computed once, the same way
everywhere, so that states and events agree to the last bit). The code maximizes the cosine

    f(t) = N(t) / sqrt(S(t)),   N = Σ (m_i + 1/2) a_i,   S = Σ (m_i + 1/2)^2

over every distinct event time (``f`` only changes there). The paper walks all ``D·M`` events
in order; here the same maximum is found by branch and bound:

1. ``f`` is evaluated on a grid of ``t``: ``GRID_INTERVALS`` uniform steps up to
   ``2 (M + 1) / max a``, then a geometric tail that stops when every coordinate is saturated,
   when ``Σ (M + 1/2) a_i / sqrt(S(t))`` (a bound on ``f`` for all larger ``t``) falls to the
   best value, or after ``TAIL_STEPS`` steps (coordinates below ``2^-30`` of the largest).
2. Each grid interval ``(t1, t2]`` gets an upper bound on ``f``: an event ``(i, k)`` in it adds
   ``a_i`` to ``N`` and ``2k`` to ``S``, a slope ``a_i / 2k = 1 / (2 t_event)`` between
   ``1/(2 t2)`` and ``1/(2 t1)``; walked in ``t`` order the states form a concave chain from
   ``(S1, N1)`` to ``(S2, N2)``, under the line of slope ``1/(2 t1)`` through the start and the
   line of slope ``1/(2 t2)`` through the end. ``N / sqrt(S)`` along a line is quasi-convex,
   so the bound is the largest of its values at the start, the end and the lines' crossing.
   Its slack is second order in the interval width.
3. Intervals whose bound beats the best value are split in ``SPLIT`` parts (``SPLIT - 1`` grid
   states, ``O(d)`` each) while they hold more than about ``SPLIT_EVENTS · d`` events, and
   walked otherwise: their events are generated, sorted and applied one by one, ``f`` being
   evaluated after each group of equal event times.

The result is the paper's maximum (the tests compare it with a full walk of every event); the
work is a few dozen ``O(d)`` grid states plus the events of the few intervals near the optimum.

Bound rerank (spec §1.4)
------------------------
Candidates are visited in estimate order; one is rescored on its float vector iff its
optimistic bound (lower bound of ``d²`` / upper bound of the inner product, as a "higher is
better" key) beats the current k-th exact key. The first ``k`` are always rescored; after them
the threshold only rises, so candidates whose bound is below the k-th exact key of the first
``k`` are dropped before sorting.
"""

from __future__ import annotations

import numpy as np

from .policy import kernel, parallel_kernel, prange
from .scoring import EMPTY_ID, _offer

__all__ = [
    "SPLIT",
    "SPLIT_EVENTS",
    "GRID_INTERVALS",
    "TAIL_RATIO",
    "TAIL_STEPS",
    "levels_at",
    "sweep_levels",
    "bound_rerank",
]

#: Uniform grid intervals up to ``M + 1`` levels of the largest coordinate.
GRID_INTERVALS = 8
#: Parts an interval is split into while it holds more than ``SPLIT_EVENTS * d`` events.
SPLIT = 4
SPLIT_EVENTS = 0.125
#: Growth factor of the grid beyond ``2 (M + 1) / max a``.
TAIL_RATIO = 1.25
#: Most geometric grid steps (1.25^100 > 2^30).
TAIL_STEPS = 100
# Relative margin under which ``t * a_i`` is re-checked against the event time ``k / a_i``.
_MARGIN = 1e-12


@kernel
def levels_at(a, t, M, m):
    """``m_i = #{k in 1..M : k / a_i <= t}`` for every coordinate (``a_i <= 0``: 0)."""
    for i in range(a.shape[0]):
        ai = a[i]
        if ai <= 0.0 or t <= 0.0:
            m[i] = 0
            continue
        x = t * ai
        if x >= M + 1.0:
            m[i] = M
            continue
        fl = np.floor(x)
        c = int(fl)
        # floor(t * a_i) can be off by one from the event count near an integer: settle it
        # with the event times themselves.
        frac = x - fl
        if frac < _MARGIN * (x + 1.0) or frac > 1.0 - _MARGIN * (x + 1.0):
            while c < M and (c + 1) / ai <= t:
                c += 1
            while c > 0 and c / ai > t:
                c -= 1
        m[i] = c


@kernel
def _grid_state(a, t, M):
    """``(N, S)`` of the levels at ``t``: ``Σ (m + 1/2) a`` and ``Σ (m + 1/2)^2``.

    Same counts as :func:`levels_at` (fused, without storing the levels).
    """
    n_acc = 0.0
    s_acc = 0.0
    top = M + 1.0
    for i in range(a.shape[0]):
        ai = a[i]
        x = t * ai
        if x >= top:
            c = M
        else:
            c = int(x)  # x >= 0: truncation is floor
            frac = x - c
            if frac < _MARGIN * (x + 1.0) or frac > 1.0 - _MARGIN * (x + 1.0):
                if ai > 0.0 and t > 0.0:
                    while c < M and (c + 1) / ai <= t:
                        c += 1
                    while c > 0 and c / ai > t:
                        c -= 1
                else:
                    c = 0
        y = c + 0.5
        n_acc += y * ai
        s_acc += y * y
    return n_acc, s_acc


@kernel
def _interval_bound(t1, n1, s1, t2, n2, s2):
    """Upper bound of ``f`` over the path states between grid points ``t1 < t2``.

    Between them the path gains ``(x, y)`` in ``(N, S)`` along a concave chain whose slopes
    (``a_i / 2k = 1 / (2 t_event)``) lie in ``[1/(2 t2), 1/(2 t1))``: it stays under the
    line of slope ``1/(2 t1)`` through the start and the line of slope ``1/(2 t2)`` through
    the end. ``N / sqrt(S)`` along each line is quasi-convex, so the bound is the largest
    value at the start, the end and the lines' crossing.
    """
    f1 = n1 / np.sqrt(s1)
    f2 = n2 / np.sqrt(s2)
    best = max(f1, f2)
    dx = n2 - n1
    dy = s2 - s1
    lam2 = 0.5 / t2
    if t1 <= 0.0:
        g = (n2 - lam2 * dy) / np.sqrt(s1)
    else:
        lam1 = 0.5 / t1
        yk = (dx - lam2 * dy) / (lam1 - lam2)
        yk = min(max(yk, 0.0), dy)
        g = (n1 + min(lam1 * yk, dx)) / np.sqrt(s1 + yk)
    return max(best, g) * (1.0 + 1e-12)


@kernel
def _walk_interval(a, M, t1, t2, n1, s1, m1, m2, buf_t, buf_i, best, best_t):
    """Walk the events of ``(t1, t2]`` in order; return ``(best, best_t, buf_t, buf_i)``
    (the event buffers grow when an interval needs more room)."""
    levels_at(a, t1, M, m1)
    levels_at(a, t2, M, m2)
    count = 0
    for i in range(a.shape[0]):
        count += m2[i] - m1[i]
    if count == 0:
        return best, best_t, buf_t, buf_i
    if count > buf_t.shape[0]:
        buf_t = np.empty(2 * count, dtype=np.float64)
        buf_i = np.empty(2 * count, dtype=np.int64)
    p = 0
    for i in range(a.shape[0]):
        for k in range(m1[i] + 1, m2[i] + 1):
            buf_t[p] = k / a[i]
            buf_i[p] = i
            p += 1
    ev_t = buf_t[:count]
    order = np.argsort(ev_t)
    n_acc = n1
    s_acc = s1
    for p in range(count):
        e = order[p]
        i = buf_i[e]
        m1[i] += 1
        n_acc += a[i]
        s_acc += 2.0 * m1[i]
        # f is defined at event times: apply every event of a tie before evaluating.
        if p + 1 < count and ev_t[order[p + 1]] == ev_t[e]:
            continue
        f = n_acc / np.sqrt(s_acc)
        if f > best or (f == best and ev_t[e] < best_t):
            best = f
            best_t = ev_t[e]
    return best, best_t, buf_t, buf_i


@kernel
def _sweep_row(a, M, m_out):
    """Exact best rescaled rounding of one row; writes ``m_out`` and returns ``t*``."""
    d = a.shape[0]
    amax = 0.0
    a_sum = 0.0
    nonzero = 0
    for i in range(d):
        if a[i] > amax:
            amax = a[i]
        if a[i] > 0.0:
            a_sum += a[i]
            nonzero += 1
    if M == 0 or amax <= 0.0 or d == 1:  # d = 1: every level gives f = 1; keep level 0
        for i in range(d):
            m_out[i] = 0
        return 0.0
    # 1. coarse grid: GRID_INTERVALS steps up to 2 (M + 1) / max a, then a geometric tail
    step = max(1, (M + 1 + GRID_INTERVALS - 1) // GRID_INTERVALS)
    uniform = (2 * (M + 1) + step - 1) // step + 1
    cap = uniform + TAIL_STEPS + 1
    gt = np.empty(cap, dtype=np.float64)
    gn = np.empty(cap, dtype=np.float64)
    gs = np.empty(cap, dtype=np.float64)
    best = -1.0
    best_t = 0.0
    g = 0
    for j in range(uniform):
        t = (j * step) / amax
        n_acc, s_acc = _grid_state(a, t, M)
        gt[g] = t
        gn[g] = n_acc
        gs[g] = s_acc
        g += 1
        f = n_acc / np.sqrt(s_acc)
        if f > best:
            best = f
            best_t = t
    n_inf = (M + 0.5) * a_sum
    s_sat = (M + 0.5) * (M + 0.5) * nonzero + 0.25 * (d - nonzero)
    t = gt[g - 1]
    for _ in range(TAIL_STEPS):
        if gs[g - 1] >= s_sat or n_inf / np.sqrt(gs[g - 1]) <= best:
            break
        t = t * TAIL_RATIO
        n_acc, s_acc = _grid_state(a, t, M)
        gt[g] = t
        gn[g] = n_acc
        gs[g] = s_acc
        g += 1
        f = n_acc / np.sqrt(s_acc)
        if f > best or (f == best and t < best_t):
            best = f
            best_t = t
    # 2. branch and bound: a stack of intervals (t1, N1, S1, t2, N2, S2, bound); intervals
    # with many events are split in SPLIT parts (SPLIT - 1 grid states, O(d) each), few-event
    # intervals are walked event by event.
    bounds = np.empty(g - 1, dtype=np.float64)
    for j in range(g - 1):
        bounds[j] = _interval_bound(gt[j], gn[j], gs[j], gt[j + 1], gn[j + 1], gs[j + 1])
    order = np.argsort(bounds)  # ascending: the best bound ends on top of the stack
    stack_cap = g + 64 * SPLIT
    st = np.empty((stack_cap, 7), dtype=np.float64)
    top = 0
    for p in range(g - 1):
        j = order[p]
        if bounds[j] > best:
            st[top, 0] = gt[j]
            st[top, 1] = gn[j]
            st[top, 2] = gs[j]
            st[top, 3] = gt[j + 1]
            st[top, 4] = gn[j + 1]
            st[top, 5] = gs[j + 1]
            st[top, 6] = bounds[j]
            top += 1
    m1 = np.empty(d, dtype=np.int64)
    m2 = np.empty(d, dtype=np.int64)
    buf_t = np.empty(4 * d, dtype=np.float64)
    buf_i = np.empty(4 * d, dtype=np.int64)
    sub_t = np.empty(SPLIT + 1, dtype=np.float64)
    sub_n = np.empty(SPLIT + 1, dtype=np.float64)
    sub_s = np.empty(SPLIT + 1, dtype=np.float64)
    while top > 0:
        top -= 1
        if st[top, 6] <= best:
            continue
        t1 = st[top, 0]
        t2 = st[top, 3]
        # events in the interval: at most (S2 - S1) / 2 (each adds 2k >= 2 to S), and about
        # (t2 - t1) * Σ a while coordinates are not saturated
        events = min((t2 - t1) * a_sum, 0.5 * (st[top, 5] - st[top, 2]))
        if events <= SPLIT_EVENTS * d or t2 - t1 <= 1e-9 * t2 or top + SPLIT > stack_cap:
            best, best_t, buf_t, buf_i = _walk_interval(
                a, M, t1, t2, st[top, 1], st[top, 2], m1, m2, buf_t, buf_i, best, best_t
            )
            continue
        sub_t[0] = t1
        sub_n[0] = st[top, 1]
        sub_s[0] = st[top, 2]
        sub_t[SPLIT] = t2
        sub_n[SPLIT] = st[top, 4]
        sub_s[SPLIT] = st[top, 5]
        for q in range(1, SPLIT):
            tq = t1 + (t2 - t1) * q / SPLIT
            n_acc, s_acc = _grid_state(a, tq, M)
            sub_t[q] = tq
            sub_n[q] = n_acc
            sub_s[q] = s_acc
            f = n_acc / np.sqrt(s_acc)
            if f > best or (f == best and tq < best_t):
                best = f
                best_t = tq
        for q in range(SPLIT):
            b = _interval_bound(
                sub_t[q], sub_n[q], sub_s[q], sub_t[q + 1], sub_n[q + 1], sub_s[q + 1]
            )
            if b > best:
                st[top, 0] = sub_t[q]
                st[top, 1] = sub_n[q]
                st[top, 2] = sub_s[q]
                st[top, 3] = sub_t[q + 1]
                st[top, 4] = sub_n[q + 1]
                st[top, 5] = sub_s[q + 1]
                st[top, 6] = b
                top += 1
    levels_at(a, best_t, M, m_out)
    return best_t


@parallel_kernel
def sweep_levels(a, M, out_levels, out_t):
    """Exact Extended-RaBitQ magnitude levels of every row.

    a : float64 [n, d], absolute rotated residuals (any positive scale per row).
    M : int, ``2^(B-1) - 1``.
    out_levels : uint8 [n, d] (``m_i`` in ``0..M``); out_t : float64 [n], the best ``t``
    (in units of ``1 / a``).
    """
    n, d = a.shape
    for r in prange(n):
        m = np.empty(d, dtype=np.int64)
        out_t[r] = _sweep_row(a[r], M, m)
        for i in range(d):
            out_levels[r, i] = m[i]


@kernel
def _exact_key(query, vector, is_l2):
    acc = 0.0
    if is_l2:
        for i in range(query.shape[0]):
            diff = np.float64(query[i]) - np.float64(vector[i])
            acc += diff * diff
        return -acc
    for i in range(query.shape[0]):
        acc += np.float64(query[i]) * np.float64(vector[i])
    return acc


@parallel_kernel
def bound_rerank(keys, opt, queries, vectors, allowed, cap, is_l2, out_keys, out_ids, out_reads):
    """Bound-driven exact rerank, one query per thread.

    keys, opt : float64 [nq, n], estimated and optimistic keys (higher is better: ``-d²`` or
        the inner product; ``opt = key + half-width``).
    queries : float32 [nq, d] (prepared, unrotated); vectors : float32 [n, d].
    allowed : uint8 [n] mask, or empty for all docs.
    cap : most vectors rescored per query (at least ``k``).
    out_keys, out_ids : [nq, k] heaps (filled with ``-inf`` / ``EMPTY_ID``), unsorted on return.
    out_reads : int64 [nq], vectors rescored per query.
    """
    nq, n = keys.shape
    k = out_keys.shape[1]
    use_mask = allowed.shape[0] > 0
    for q in prange(nq):
        # 1. the k best estimates, ties by lower id
        first_keys = np.full(k, -np.inf)
        first_ids = np.full(k, EMPTY_ID, dtype=np.int64)
        for j in range(n):
            if use_mask and allowed[j] == 0:
                continue
            _offer(first_keys, first_ids, keys[q, j], j)
        heap_keys = out_keys[q]
        heap_ids = out_ids[q]
        reads = 0
        taken = np.zeros(n, dtype=np.uint8)
        for p in range(k):
            j = first_ids[p]
            if j == EMPTY_ID:
                continue
            taken[j] = 1
            _offer(heap_keys, heap_ids, _exact_key(queries[q], vectors[j], is_l2), j)
            reads += 1
        threshold = heap_keys[0] if heap_ids[0] != EMPTY_ID else -np.inf
        # 2. later candidates whose bound beats the threshold, in estimate order
        count = 0
        for j in range(n):
            if taken[j] == 0 and opt[q, j] > threshold and not (use_mask and allowed[j] == 0):
                count += 1
        pool = np.empty(count, dtype=np.int64)
        pool_keys = np.empty(count, dtype=np.float64)
        p = 0
        for j in range(n):
            if taken[j] == 0 and opt[q, j] > threshold and not (use_mask and allowed[j] == 0):
                pool[p] = j
                pool_keys[p] = -keys[q, j]
                p += 1
        order = np.argsort(pool_keys, kind="mergesort")  # stable: ties keep the lower id
        for p in range(count):
            if reads >= cap:
                break
            j = pool[order[p]]
            threshold = heap_keys[0] if heap_ids[0] != EMPTY_ID else -np.inf
            if opt[q, j] <= threshold:
                continue
            _offer(heap_keys, heap_ids, _exact_key(queries[q], vectors[j], is_l2), j)
            reads += 1
        out_reads[q] = reads
