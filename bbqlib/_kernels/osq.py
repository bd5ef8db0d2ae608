"""Optimized scalar quantization (OSQ) of a batch of vectors, one row per thread.

The algorithm of Lucene/Elasticsearch's ``OptimizedScalarQuantizer`` (in bbqlib's float64
arithmetic, see below): an initial interval from the row's mean and standard deviation, then
up to ``iters`` closed-form coordinate-descent steps on the anisotropic loss, then Java-style
round-half-up codes. The NumPy reference is ``tests/reference/osq.py``; the two agree bit for
bit.

Arithmetic
----------
Every row sum (``Σx``, ``Σx²``, ``<v, c>``, ``Σ(x - mean)²``, and ``Σ x·k`` in the optimizer)
is a *lane sum*: lane ``j`` of 8 adds the terms ``8t + j`` in order, the lanes are combined as
``((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))``, then the ``d mod 8`` trailing terms are
added one by one. The order is fixed, so results do not depend on the machine or the thread
count, and it is one 8-wide vector, so the loops run in SIMD registers without fastmath. They
are written as LLVM vector IR (:func:`_lane_stats`, :func:`_lane_var`, :func:`_lane_sums`, on
the loop of :mod:`bbqlib._kernels.lanes`): numba compiles with the SLP vectorizer off, and the
loop vectorizer may not reorder float sums. The row minimum and maximum are taken the same
way (exact in any order).

One optimizer pass at an interval ``[a, b]`` reads the row once and keeps three sums of the
codes ``k_i = round((clamp(x_i, a, b) - a) · L / (b - a))``, ``L = 2^bits - 1``:
``K1 = Σ k_i`` and ``K2 = Σ k_i²`` are integers (exact in float64 in any order, below 2^53),
and each product ``x_i k_i`` of ``XK = Σ x_i k_i`` is exact (a 24-bit float32 significand
times ``k <= 255`` fits in float64's 53 bits); only the sum is rounded. Everything Lucene sums
per pass follows from these and the row constants ``X1 = Σx``, ``X2 = Σx²``
(:func:`_pass_terms`): with ``s_i = k_i / L`` the normal-equation sums ``Σ(1-s)², Σ(1-s)s,
Σs²`` are int64 numerators over ``L²`` (one rounding each, where Lucene rounds every term),
``Σ x s = XK / L``, ``Σ x (1-s) = X1 - XK / L``, and with ``x̂_i = a + step·k_i`` the loss
needs ``Σ x x̂ = a·X1 + step·XK`` and ``Σ x̂² = d·a² + 2·a·step·K1 + step²·K2``.

This is the algorithm's definition in float64, reassociated: the codes follow the spec's
expression (clamp, scale, ``floor(t + 0.5)``); what the reassociation changes are the last
bits of the float64 sums. The closed-form loss subtracts from ``‖x‖²``, so its error is a few
ulps of ``‖x‖²`` rather than of the loss: a step that changes the loss by less than that is
taken or refused by rounding, which moves the interval by a rounding-level amount. Through the
float32 rounding of ``a, b`` this rarely shows: on the shared MiniLM and word-vector sets every
code, interval and correction is the one of term-by-term float64 sums, at 1, 2, 4 and 7 bits.

It is not Lucene's own arithmetic: Lucene 10.5 sums ``‖x‖²`` and ``<v, c>`` in float32, keeps
``scale``, the step inverse and the grid constants in float32, and rounds the final codes with
float32 ``Math.round`` (Elasticsearch uses float32 with FMA; spec §10). Against the Lucene jar
on the same vectors and centroid the levels agree for all but about 0.2% of vectors and the
float32 interval ends for about 10-30% (``docs/lucene.md``). :mod:`bbqlib._kernels.osq_lucene`
is Lucene's arithmetic, bit for bit.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .lanes import LANES, V8F64, check_rows, combine, lane_loop, row_args, splat
from .policy import kernel, parallel_kernel, prange

__all__ = ["LANES", "MINIMUM_MSE_GRID", "osq_quantize"]

#: Half-widths of the MSE-optimal uniform quantizer of a standard normal, for 1..8 bits.
MINIMUM_MSE_GRID = np.array(
    [0.798, 1.493, 2.051, 2.514, 2.916, 3.278, 3.611, 3.922], dtype=np.float64
)


@kernel(inline="always")
def _java_round(t):
    # Java's Math.round: floor(t + 0.5), not NumPy's half-to-even.
    return math.floor(t + 0.5)


# ------------------------------------------------------------------------------ lane loops (IR)
def _vmin(builder, p, q):
    # numba's min(p, q): p > q ? q : p (keeps p on ties, as the scalar code does)
    return builder.select(builder.fcmp_ordered(">", p, q), q, p)


def _vmax(builder, p, q):
    # numba's max(p, q): p < q ? q : p
    return builder.select(builder.fcmp_ordered("<", p, q), q, p)


def _check_rows(v, c):
    """Typing guard: ``v`` and ``c`` C-contiguous 1-D float32 (the lane loops' rows)."""
    check_rows((types.float32,), v=v, c=c)


def _centred(builder, v8, c8):
    """``x = float64(v8 - c8)``: centring in float32, as Lucene does, then widened."""
    return builder.fpext(builder.fsub(v8, c8), V8F64)


@intrinsic
def _lane_stats(typingctx, v, c, blocks):
    """``(Σx, Σx², Σ v·c, min x, max x)`` over the first ``8 * blocks`` of ``x = v - c``.

    Terms as in :func:`_row_stats` (``x`` the float32 difference, widened), lanes combined by
    :func:`~bbqlib._kernels.lanes.combine`.
    """
    _check_rows(v, c)
    sig = types.UniTuple(types.float64, 5)(v, c, types.intp)

    def codegen(context, builder, signature, args):
        zero = splat(builder, 0.0)
        init = [zero, zero, zero, splat(builder, np.inf), splat(builder, -np.inf)]

        def body(vecs, accs):
            v8, c8 = vecs
            x = _centred(builder, v8, c8)
            total, norm2, cdot, xmin, xmax = accs
            vc = builder.fmul(builder.fpext(v8, V8F64), builder.fpext(c8, V8F64))
            return [
                builder.fadd(total, x),
                builder.fadd(norm2, builder.fmul(x, x)),
                builder.fadd(cdot, vc),
                _vmin(builder, xmin, x),
                _vmax(builder, xmax, x),
            ]

        out = lane_loop(context, builder, row_args(signature, args, 2), args[2], init, body)
        ops = [builder.fadd] * 3 + [lambda p, q: _vmin(builder, p, q)]
        ops += [lambda p, q: _vmax(builder, p, q)]
        values = [combine(builder, vec, op) for vec, op in zip(out, ops, strict=True)]
        return context.make_tuple(builder, signature.return_type, values)

    return sig, codegen


@intrinsic
def _lane_var(typingctx, v, c, blocks, mean):
    """``Σ (x - mean)²`` over the first ``8 * blocks`` of ``x = v - c``, in lanes."""
    _check_rows(v, c)
    sig = types.float64(v, c, types.intp, types.float64)

    def codegen(context, builder, signature, args):
        mean_v = splat(builder, args[3])

        def body(vecs, accs):
            v8, c8 = vecs
            dev = builder.fsub(_centred(builder, v8, c8), mean_v)
            return [builder.fadd(accs[0], builder.fmul(dev, dev))]

        (out,) = lane_loop(
            context, builder, row_args(signature, args, 2), args[2], [splat(builder, 0.0)], body
        )
        return combine(builder, out, builder.fadd)

    return sig, codegen


@intrinsic
def _lane_sums(typingctx, v, c, blocks, a, b, inv):
    """``(Σ x·k, Σ k, Σ k²)`` over the first ``8 * blocks`` of ``x = v - c``, in lanes.

    ``k = floor((min(max(x, a), b) - a) · inv + 0.5)``, as in :func:`_pass_sums`.
    """
    _check_rows(v, c)
    f64 = types.float64
    sig = types.UniTuple(f64, 3)(v, c, types.intp, f64, f64, f64)

    def codegen(context, builder, signature, args):
        a_v, b_v, inv_v = (splat(builder, value) for value in args[3:])
        half = splat(builder, 0.5)
        floor = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(V8F64, [V8F64]), "llvm.floor.v8f64"
        )
        zero = splat(builder, 0.0)

        def body(vecs, accs):
            v8, c8 = vecs
            x = _centred(builder, v8, c8)
            s, p, q = accs
            clamped = _vmin(builder, _vmax(builder, x, a_v), b_v)
            t = builder.fmul(builder.fsub(clamped, a_v), inv_v)
            k = builder.call(floor, [builder.fadd(t, half)])
            return [
                builder.fadd(s, builder.fmul(x, k)),
                builder.fadd(p, k),
                builder.fadd(q, builder.fmul(k, k)),
            ]

        out = lane_loop(
            context, builder, row_args(signature, args, 2), args[2], [zero, zero, zero], body
        )
        values = [combine(builder, vec, builder.fadd) for vec in out]
        return context.make_tuple(builder, signature.return_type, values)

    return sig, codegen


# ------------------------------------------------------------------------------ row kernels
@kernel(inline="always")
def _row_stats(v, c):
    """``(Σx, Σx², <v, c>, min x, max x, Σ(x - mean)²)`` of ``x = v - c`` (lane sums).

    Centring in float32, as Lucene does, then float64 terms: ``x``, ``x·x``, ``v·c``.
    """
    d = v.shape[0]
    blocks = d // LANES
    total, norm2, cdot, xmin, xmax = _lane_stats(v, c, blocks)
    for i in range(blocks * LANES, d):  # the trailing d mod 8 terms, in order
        xi = v[i] - c[i]
        total += xi
        norm2 += np.float64(xi) * xi
        cdot += np.float64(v[i]) * c[i]
        xmin = min(xmin, xi)
        xmax = max(xmax, xi)
    mean = total / d
    var = _lane_var(v, c, blocks, mean)
    for i in range(blocks * LANES, d):
        dev = np.float64(v[i] - c[i]) - mean
        var += dev * dev
    return total, norm2, cdot, xmin, xmax, var


@kernel(inline="always")
def _pass_sums(v, c, a, b, inv):
    """``(K1, K2, XK)`` of ``x = v - c`` at ``[a, b]``, ``inv = L / (b - a)`` (0 if b == a).

    ``K1`` and ``K2`` hold integer values in float64 (exact below 2^53) until returned as int.
    ``k`` is ``_java_round`` kept as a float: ``np.floor`` of the same expression.
    """
    d = v.shape[0]
    blocks = d // LANES
    xk, k1, k2 = _lane_sums(v, c, blocks, a, b, inv)
    for i in range(blocks * LANES, d):  # the trailing d mod 8 terms, in order
        x = np.float64(v[i] - c[i])
        k = np.floor((min(max(x, a), b) - a) * inv + 0.5)
        xk += x * k
        k1 += k
        k2 += k * k
    return int(k1), int(k2), xk


@kernel(inline="always")
def _pass_terms(k1, k2, xk, a, b, d, lv, x1, x2, lam):
    """Loss at ``[a, b]`` and the normal-equation sums, from one pass's ``(K1, K2, XK)``.

    ``d`` dims, ``lv = L`` (int), ``x1 = Σx``, ``x2 = Σx² > 0``. Returns
    ``(loss, daa, dab, dbb, dax, dbx)``; the integer numerators are exact in int64.
    """
    levels = float(lv)
    ll = lv * lv
    step = (b - a) / levels
    daa = (d * ll - 2 * lv * k1 + k2) / ll
    dab = (lv * k1 - k2) / ll
    dbb = k2 / ll
    dbx = xk / levels
    dax = x1 - dbx
    sxq = a * x1 + step * xk  # Σ x x̂
    sqq = d * a * a + 2.0 * a * step * k1 + step * step * k2  # Σ x̂²
    xe = x2 - sxq  # Σ x (x - x̂)
    e = x2 - 2.0 * sxq + sqq  # Σ (x - x̂)²
    loss = (1.0 - lam) * xe * xe / x2 + lam * e
    return loss, daa, dab, dbb, dax, dbx


@kernel(inline="always")
def _pass(v, c, a, b, lv, x1, x2, lam):
    """One optimizer pass at ``[a, b]``: ``(loss, daa, dab, dbb, dax, dbx)``."""
    levels = float(lv)
    inv = levels / (b - a) if b != a else 0.0
    k1, k2, xk = _pass_sums(v, c, a, b, inv)
    return _pass_terms(k1, k2, xk, a, b, v.shape[0], lv, x1, x2, lam)


@kernel(inline="always")
def _row_interval(v, c, bits, iters, lam):
    """Statistics and optimized interval of one row ``x = v - c``: ``(a, b, norm2, cdot)``.

    ``v``, ``c`` float32 [d] (a row and its centroid; strided views are copied); ``a``, ``b``
    are float32 values held in float64, ``norm2 = ||v - c||²`` and ``cdot = <v, c>`` float64.
    Shared by :func:`osq_quantize` and :func:`bbqlib._kernels.ivf.quantize_pairs`, which
    differ only in where the centroid comes from and how the final codes are written.
    """
    v = np.ascontiguousarray(v)  # the same array when it is (a row of) a C array
    c = np.ascontiguousarray(c)
    d = v.shape[0]
    lv = (1 << bits) - 1
    grid = MINIMUM_MSE_GRID[bits - 1]
    total, norm2, cdot, xmin, xmax, var = _row_stats(v, c)
    mean = total / d
    std = math.sqrt(var / d)
    a = np.float64(np.float32(min(max(-grid * std + mean, xmin), xmax)))
    b = np.float64(np.float32(min(max(grid * std + mean, xmin), xmax)))

    if norm2 > 0.0 and iters > 0:
        scale = (1.0 - lam) / norm2
        best, daa, dab, dbb, dax, dbx = _pass(v, c, a, b, lv, total, norm2, lam)
        for _ in range(iters):
            m0 = scale * dax * dax + lam * daa
            m1 = scale * dax * dbx + lam * dab
            m2 = scale * dbx * dbx + lam * dbb
            det = m0 * m2 - m1 * m1
            if det == 0.0:
                break
            # the new ends are rounded to float32, as Lucene stores them
            a_new = np.float64(np.float32((m2 * dax - m1 * dbx) / det))
            b_new = np.float64(np.float32((m0 * dbx - m1 * dax) / det))
            if abs(a - a_new) < 1e-8 and abs(b - b_new) < 1e-8:
                break
            loss, n_aa, n_ab, n_bb, n_ax, n_bx = _pass(v, c, a_new, b_new, lv, total, norm2, lam)
            if loss > best:
                break  # the worse interval is not accepted
            a = a_new
            b = b_new
            best = loss
            daa, dab, dbb, dax, dbx = n_aa, n_ab, n_bb, n_ax, n_bx
    return a, b, norm2, cdot


@kernel(inline="always")
def _row_codes(v, c, a, b, levels, out):
    """Final codes of ``x = v - c`` at ``[a, b]`` into ``out[:d]`` (uint8); returns ``Σk``.

    ``round((clamp(x, a, b) - a) / step)``, Lucene's expression (a division, not the
    optimizer's multiplication by ``1 / step``); no float sums, so the loop vectorizer packs it.
    """
    d = v.shape[0]
    step = (b - a) / levels
    if step == 0.0:
        out[:d] = 0  # Java: round(NaN) == 0 when the interval collapses
        return 0
    ksum = 0
    for i in range(d):
        xi = np.float64(v[i] - c[i])
        k = int(_java_round((min(max(xi, a), b) - a) / step))
        out[i] = k
        ksum += k
    return ksum


@kernel
def _quantize_range(
    X, centroid, bits, iters, lam, euclidean, codes, lower, upper, additional, component_sum,
    r0, r1,
):  # fmt: skip
    """Rows ``r0:r1`` of :func:`osq_quantize`.

    A separate (not inlined) function: one compiled body serves the multi-threaded kernel (a
    call per row) and one-thread calls (all rows), and the parallel compiler only wraps a
    call, which halves the first compile of ``osq_quantize``.
    """
    levels = float((1 << bits) - 1)
    for r in range(r0, r1):
        a, b, norm2, cdot = _row_interval(X[r], centroid, bits, iters, lam)
        component_sum[r] = _row_codes(X[r], centroid, a, b, levels, codes[r])
        lower[r] = a
        upper[r] = b
        additional[r] = norm2 if euclidean else cdot


def _quantize_one_thread(*args) -> None:
    """:func:`osq_quantize` on the calling thread (the body over every row)."""
    _quantize_range(*args, 0, args[0].shape[0])


#: Floats per thread: enough work to outweigh a parallel region's fork and join (with the
#: optimizer's steps; docs/threads.md, ``benchmarks/serving/serving.py --sections
#: contention``), so a query batch of a few hundred rows is quantized on the calling thread.
QUANTIZE_PER_THREAD = 200_000


def _quantize_work(X, centroid, bits, iters, *rest) -> int:
    return X.size * max(1, iters) // 5


@parallel_kernel(work=_quantize_work, min_work=QUANTIZE_PER_THREAD, serial=_quantize_one_thread)
def osq_quantize(
    X, centroid, bits, iters, lam, euclidean, codes, lower, upper, additional, component_sum
):
    """Quantize rows of ``X`` against ``centroid`` (outputs preallocated, one row each).

    Parameters
    ----------
    X : float32 [n, d]; centroid : float32 [d]
    bits : int, 1..8; iters : coordinate-descent steps (5 for docs, 1 for IVF queries)
    lam : anisotropic weight (0.1); euclidean : additional = ||v-c||² if True else <v, c>
    codes : uint8 [n, d]; lower, upper, additional : float32 [n]; component_sum : int64 [n]
    """
    for r in prange(X.shape[0]):
        _quantize_range(
            X, centroid, bits, iters, lam, euclidean, codes, lower, upper, additional,
            component_sum, r, r + 1,
        )  # fmt: skip
