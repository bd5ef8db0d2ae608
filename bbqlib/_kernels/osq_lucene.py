"""Lucene 10.5's OSQ, preparation and scorer in float32, operation for operation (no fastmath).

The kernels of ``BBQQuantizer(arithmetic="lucene")``. Each one follows the bytecode of Lucene
10.5.0 statement by statement, so its float32 / float64 results are Lucene's bit for bit (checked
against the jar by ``tests/test_lucene_oracle.py``); the NumPy reference is
``tests/reference/osq_lucene.py``.

* :func:`lucene_dot` - ``VectorUtil.dotProduct`` on the scalar path with fused multiply-adds
  off (``DefaultVectorUtilSupport``, ``-Dlucene.useScalarFMA=false``): above 32 dims four float
  accumulators over ``i < d & ~3``, combined as ``((acc1 + acc2) + acc3) + acc4``, then the tail.
* :func:`normalize_docs`, :func:`l2normalize_rows`, :func:`centroid_sums` - the writer's
  cosine preparation (``mag = (float) sqrt(dot(v, v))``, ``v[i] / mag``), ``VectorUtil.l2normalize``
  (unchanged within ``1e-4f`` of unit length), and the per-segment centroid (float sums in doc
  order, divided by ``(float) n``).
* :func:`osq_quantize_lucene` - ``OptimizedScalarQuantizer.scalarQuantize``: float32 centring,
  ``norm2`` and ``<v, c>`` summed in float, Welford mean/variance in double, the initial interval
  from the float grid constants, ``optimizeIntervals`` with a float ``scale`` and ``stepInv``,
  double sums of float terms, ``loss`` in double, and final codes by ``Math.round(float)``.
* :func:`lucene_scores_planes` / :func:`lucene_scores_bytes` and their top-k twins - the
  scorer's ``quantizedScore`` in float32 over bbqlib's packed layouts (the integer dot product
  is exact whatever the layout).

Java semantics kept: ``Math.round`` is an exact ``floor(t + 1/2)`` that saturates and maps NaN
to 0; ``Math.min`` / ``Math.max`` propagate NaN and put ``-0.0`` below ``+0.0``; codes are
stored as ``(byte)`` and summed as a wrapping ``int``. numba compiles float arithmetic without
contraction, so no multiply-add is fused; sums are sequential loops (no reassociation).
"""

from __future__ import annotations

import math

import numpy as np

from .policy import kernel, parallel_kernel, prange

__all__ = [
    "MINIMUM_MSE_GRID",
    "SCALE_LUT",
    "SIM_EUCLIDEAN",
    "SIM_DOT",
    "SIM_MIP",
    "lucene_dot",
    "centroid_dot",
    "row_dots",
    "normalize_docs",
    "l2normalize_rows",
    "centroid_sums",
    "osq_quantize_lucene",
]

#: ``OptimizedScalarQuantizer.MINIMUM_MSE_GRID`` (float constants), bits 1..8.
MINIMUM_MSE_GRID = np.array(
    [0.798, 1.493, 2.051, 2.514, 2.916, 3.278, 3.611, 3.922], dtype=np.float32
)
#: ``Lucene104ScalarQuantizedVectorScorer.SCALE_LUT``: float ``1 / (2^bits - 1)``, bits 1..8.
SCALE_LUT = np.array([1.0 / (2**b - 1) for b in range(1, 9)], dtype=np.float32)
#: ``VectorUtil``'s unit-norm tolerance: the float ``1e-4f`` compared as a double.
UNIT_TOLERANCE = float(np.float32(1e-4))
#: Score mappings of :func:`_finish`: squared distance, inner product, max inner product.
SIM_EUCLIDEAN, SIM_DOT, SIM_MIP = 0, 1, 2

# IEEE division (x / 0 is inf or nan, as in Java) instead of numba's ZeroDivisionError.
_inline = kernel(inline="always", error_model="numpy")
_serial = kernel(error_model="numpy")
_parallel = parallel_kernel(error_model="numpy")

_F32_MAX = float(np.finfo(np.float32).max)
#: Id of an empty heap slot (sorts after every real id).
_EMPTY = np.iinfo(np.int64).max
_LONG_BOUND = float(2**63)


# ------------------------------------------------------------------------------ Java semantics
@_inline
def _jmin(a, b):
    """``Math.min`` (float or double): NaN wins, ``-0.0 < +0.0``."""
    if a != a:
        return a
    if a == 0.0 and b == 0.0 and math.copysign(1.0, b) < 0.0:
        return b
    return a if a <= b else b


@_inline
def _jmax(a, b):
    """``Math.max`` (float or double): NaN wins, ``+0.0 > -0.0``."""
    if a != a:
        return a
    if a == 0.0 and b == 0.0 and math.copysign(1.0, a) < 0.0:
        return b
    return a if a >= b else b


@_inline
def _clamp(x, lo, hi):
    """``OptimizedScalarQuantizer.clamp``: ``Math.min(Math.max(x, lo), hi)`` in double."""
    return _jmin(_jmax(x, lo), hi)


@_inline
def _jround_float(t):
    """``Math.round(float)`` -> int64 holding the Java int (exact, saturating, NaN -> 0)."""
    if t != t:
        return 0
    r = np.floor(np.float64(t) + 0.5)  # exact for every float32 t (np.floor stays float)
    if r >= 2147483647.0:
        return 2147483647
    if r <= -2147483648.0:
        return -2147483648
    return int(r)


@_inline
def _jround_double(t):
    """``Math.round(double)`` as the float64 value of the Java long (exact, saturating).

    ``t - floor(t)`` is exact, so comparing it with 0.5 avoids rounding ``t + 0.5``.
    """
    if t != t:
        return 0.0
    if t >= _LONG_BOUND:
        return _LONG_BOUND
    if t <= -_LONG_BOUND:
        return -_LONG_BOUND
    f = np.floor(t)
    if t - f >= 0.5:
        f += 1.0
    return f


# ------------------------------------------------------------------------------ VectorUtil
@_inline
def lucene_dot(a, b):
    """``VectorUtil.dotProduct(float[], float[])``, scalar path, no FMA (float32)."""
    n = a.shape[0]
    res = np.float32(0.0)
    i = 0
    if n > 32:
        acc1 = np.float32(0.0)
        acc2 = np.float32(0.0)
        acc3 = np.float32(0.0)
        acc4 = np.float32(0.0)
        upper = n & ~3
        while i < upper:
            acc1 = a[i] * b[i] + acc1
            acc2 = a[i + 1] * b[i + 1] + acc2
            acc3 = a[i + 2] * b[i + 2] + acc3
            acc4 = a[i + 3] * b[i + 3] + acc4
            i += 4
        res = res + (((acc1 + acc2) + acc3) + acc4)
    while i < n:
        res = a[i] * b[i] + res
        i += 1
    return res


@_serial
def centroid_dot(c):
    """``VectorUtil.dotProduct(c, c)``: the centroid's ``centroidDP`` (float32)."""
    return lucene_dot(c, c)


@_serial
def row_dots(X, out):
    """``out[r] = VectorUtil.dotProduct(X[r], X[r])`` (float32 squared norms, Lucene's way)."""
    for r in range(X.shape[0]):
        out[r] = lucene_dot(X[r], X[r])


@_serial
def normalize_docs(X, out):
    """Cosine docs as the writer normalizes them: ``v[i] / (float) sqrt(dot(v, v))``."""
    for r in range(X.shape[0]):
        v = X[r]
        mag = np.float32(math.sqrt(np.float64(lucene_dot(v, v))))
        for i in range(v.shape[0]):
            out[r, i] = v[i] / mag


@_serial
def l2normalize_rows(X, out, zero):
    """``VectorUtil.l2normalize`` of each row into ``out``; ``zero[r] = 1`` for a zero row.

    A row whose squared norm (float dot, as a double) is within ``1e-4f`` of 1 is copied
    unchanged; others are divided by ``(float) Math.sqrt``. Zero rows are copied and flagged
    (Lucene throws there).
    """
    for r in range(X.shape[0]):
        v = X[r]
        sq = np.float64(lucene_dot(v, v))
        zero[r] = 1 if sq == 0.0 else 0
        if sq == 0.0 or abs(sq - 1.0) <= UNIT_TOLERANCE:
            for i in range(v.shape[0]):
                out[r, i] = v[i]
        else:
            norm = np.float32(math.sqrt(sq))
            for i in range(v.shape[0]):
                out[r, i] = v[i] / norm


@_serial
def centroid_sums(X, cosine, sums):
    """``dimensionSums`` of the writer: ``sums[i] += v[i]`` (cosine: ``v[i] / mag``), doc order.

    ``sums`` float32 [d], zeroed by the caller; per dimension the float additions happen in
    doc order, exactly as ``FieldWriter.addValue`` makes them.
    """
    d = X.shape[1]
    for r in range(X.shape[0]):
        v = X[r]
        if cosine:
            mag = np.float32(math.sqrt(np.float64(lucene_dot(v, v))))
            for i in range(d):
                sums[i] = sums[i] + v[i] / mag
        else:
            for i in range(d):
                sums[i] = sums[i] + v[i]


# ------------------------------------------------------------------------------ OSQ
@_serial
def _loss(x, a32, b32, points, norm2, lam):
    """``OptimizedScalarQuantizer.loss`` (double) of the centred float row ``x`` at [a, b]."""
    a = np.float64(a32)
    b = np.float64(b32)
    step = (b - a) / np.float64(np.float32(points) - np.float32(1.0))
    step_inv = 1.0 / step
    xe = 0.0
    e = 0.0
    for i in range(x.shape[0]):
        xi = np.float64(x[i])
        xiq = a + step * _jround_double((_clamp(xi, a, b) - a) * step_inv)
        xe += xi * (xi - xiq)
        e += (xi - xiq) * (xi - xiq)
    lam64 = np.float64(lam)
    return (1.0 - lam64) * xe * xe / np.float64(norm2) + lam64 * e


@_serial
def _optimize(x, a32, b32, norm2, points, iters, lam):
    """``optimizeIntervals``: the interval after up to ``iters`` coordinate-descent steps."""
    best = _loss(x, a32, b32, points, norm2, lam)
    scale = (np.float32(1.0) - lam) / norm2
    if not math.isfinite(scale):
        return a32, b32
    lam64 = np.float64(lam)
    sc = np.float64(scale)
    levels = np.float32(points - 1)
    for _ in range(iters):
        step_inv = (np.float32(points) - np.float32(1.0)) / (b32 - a32)
        ad = np.float64(a32)
        bd = np.float64(b32)
        inv = np.float64(step_inv)
        daa = 0.0
        dab = 0.0
        dbb = 0.0
        dax = 0.0
        dbx = 0.0
        for i in range(x.shape[0]):
            xi = x[i]
            k = np.float32(_jround_double((_clamp(np.float64(xi), ad, bd) - ad) * inv))
            s = k / levels
            sd = np.float64(s)
            daa += (1.0 - sd) * (1.0 - sd)
            dab += (1.0 - sd) * sd
            dbb += np.float64(s * s)
            dax += np.float64(xi) * (1.0 - sd)
            dbx += np.float64(xi * s)
        m0 = sc * dax * dax + lam64 * daa
        m1 = sc * dax * dbx + lam64 * dab
        m2 = sc * dbx * dbx + lam64 * dbb
        det = m0 * m2 - m1 * m1
        if det == 0.0:
            break
        a_opt = np.float32((m2 * dax - m1 * dbx) / det)
        b_opt = np.float32((m0 * dbx - m1 * dax) / det)
        if np.float64(abs(a32 - a_opt)) < 1e-8 and np.float64(abs(b32 - b_opt)) < 1e-8:
            break
        loss = _loss(x, a_opt, b_opt, points, norm2, lam)
        if loss > best:  # a NaN loss is accepted, as in Java
            break
        a32 = a_opt
        b32 = b_opt
        best = loss
    return a32, b32


@_serial
def _quantize_row(v, c, x, bits, iters, lam, euclidean, out):
    """``scalarQuantize`` of one row: codes into ``out[:d]``; ``(a, b, additional, Σk)``.

    ``x`` is float32 scratch [d] for the centred row.
    """
    d = v.shape[0]
    cdot = np.float32(0.0)
    norm2 = np.float32(0.0)
    lo = np.float32(_F32_MAX)
    hi = np.float32(-_F32_MAX)
    mean = 0.0
    var = 0.0
    for i in range(d):
        if not euclidean:
            cdot = cdot + v[i] * c[i]
        xi = v[i] - c[i]
        x[i] = xi
        lo = _jmin(lo, xi)
        hi = _jmax(hi, xi)
        norm2 = norm2 + xi * xi
        delta = np.float64(xi) - mean
        mean = mean + delta / np.float64(i + 1)
        var = var + delta * (np.float64(xi) - mean)
    var = var / np.float64(d)
    std = math.sqrt(var)
    g = np.float64(MINIMUM_MSE_GRID[bits - 1])
    lo64 = np.float64(lo)
    hi64 = np.float64(hi)
    a = np.float32(_clamp(-g * std + mean, lo64, hi64))
    b = np.float32(_clamp(g * std + mean, lo64, hi64))
    a, b = _optimize(x, a, b, norm2, 1 << bits, iters, lam)

    step = (b - a) / np.float32((1 << bits) - 1)
    ad = np.float64(a)
    bd = np.float64(b)
    ksum = 0
    for h in range(d):
        xi = np.float32(_clamp(np.float64(x[h]), ad, bd))
        k = _jround_float((xi - a) / step)
        out[h] = k & 0xFF
        ksum += k
    ksum = ((ksum + 2147483648) & 0xFFFFFFFF) - 2147483648  # Java int arithmetic wraps
    return a, b, (norm2 if euclidean else cdot), ksum


@_parallel
def osq_quantize_lucene(
    X, centroid, bits, iters, lam, euclidean, codes, lower, upper, additional, component_sum
):
    """Lucene's ``scalarQuantize`` of every row of ``X`` against ``centroid``.

    Parameters
    ----------
    X : float32 [n, d]; centroid : float32 [d]
    bits : 1..8; iters : 5 (Lucene's default); lam : float32 0.1 (``DEFAULT_LAMBDA``)
    euclidean : additional = ``norm2`` if True, else ``<v, c>``
    codes : uint8 [n, d]; lower, upper, additional : float32 [n]; component_sum : int64 [n]
    """
    d = X.shape[1]
    for r in prange(X.shape[0]):
        x = np.empty(d, dtype=np.float32)
        a, b, add, ksum = _quantize_row(X[r], centroid, x, bits, iters, lam, euclidean, codes[r])
        lower[r] = a
        upper[r] = b
        additional[r] = add
        component_sum[r] = ksum
