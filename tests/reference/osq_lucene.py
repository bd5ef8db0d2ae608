"""Lucene 10.5's OSQ, preparation and scorer, transcribed into plain NumPy (vectorized over rows).

The twin of :mod:`bbqlib._kernels.osq_lucene`, written from the bytecode of Lucene 10.5.0
(``OptimizedScalarQuantizer``, ``DefaultVectorUtilSupport.dotProduct``, ``VectorUtil``,
``Lucene104ScalarQuantizedVectorsWriter``, ``Lucene104ScalarQuantizedVectorScorer``) statement by
statement: each Java ``float`` operation is a float32 NumPy operation, each ``double`` one a
float64 operation, and every sum is accumulated term by term in index order with
``np.add.accumulate`` (strictly sequential, unlike ``np.sum``'s pairwise summation). The dot
product is the scalar path without fused multiply-adds (``-Dlucene.useScalarFMA=false``).

Java semantics kept on purpose: ``Math.round(float)`` and ``Math.round(double)`` are
``floor(t + 1/2)`` computed exactly (``floor(t + 0.5)`` in float64 rounds wrongly just below
a half and above 2^52), saturate to the int/long range and map NaN to 0; ``Math.min`` and
``Math.max`` propagate NaN and order ``-0.0`` below ``+0.0``; the final codes are stored as
``(byte)`` (low 8 bits) and their sum wraps as a Java ``int``.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = [
    "F32",
    "MINIMUM_MSE_GRID",
    "SCALE_LUT",
    "LuceneOSQ",
    "java_round_float",
    "java_round_double",
    "java_min",
    "java_max",
    "lucene_dot",
    "lucene_doc_normalize",
    "lucene_l2normalize",
    "lucene_centroid",
    "osq_lucene",
    "lucene_doc_bytes",
    "lucene_query_bytes",
    "unpack_lucene_doc_bytes",
    "lucene_scores",
]

F32 = np.float32
#: ``OptimizedScalarQuantizer.MINIMUM_MSE_GRID`` (float constants), bits 1..8.
MINIMUM_MSE_GRID = np.array(
    [0.798, 1.493, 2.051, 2.514, 2.916, 3.278, 3.611, 3.922], dtype=np.float32
)
#: ``Lucene104ScalarQuantizedVectorScorer.SCALE_LUT``: float ``1 / (2^bits - 1)``, bits 1..8.
SCALE_LUT = np.array([1.0 / (2**b - 1) for b in range(1, 9)], dtype=np.float32)
#: ``DEFAULT_LAMBDA = 0.1f``.
LAMBDA = np.float32(0.1)
#: ``VectorUtil``'s unit-norm tolerance, the float ``1e-4f`` compared as a double.
UNIT_TOLERANCE = float(np.float32(1e-4))

_INT_MAX, _INT_MIN = 2**31 - 1, -(2**31)
_LONG_BOUND = float(2**63)


class LuceneOSQ(NamedTuple):
    codes: np.ndarray  # uint8 [n, d]: (byte) of each Math.round
    lower: np.ndarray  # float32 [n]
    upper: np.ndarray  # float32 [n]
    additional: np.ndarray  # float32 [n]: norm2 (euclidean) or centroidDot
    component_sum: np.ndarray  # int64 [n], the Java int (wrapped)


# ------------------------------------------------------------------------------ Java semantics
def java_round_float(t) -> np.ndarray:
    """``Math.round(float)`` -> int64 holding the Java ``int``.

    ``floor(t + 0.5)`` is exact in float64 for every float32 ``t``; NaN gives 0 and the result
    saturates at the int range.
    """
    t = np.asarray(t, dtype=np.float32).astype(np.float64)
    with np.errstate(invalid="ignore"):
        r = np.floor(t + 0.5)
        r = np.where(np.isnan(r), 0.0, np.clip(r, _INT_MIN, _INT_MAX))
    return r.astype(np.int64)


def java_round_double(t) -> np.ndarray:
    """``Math.round(double)`` as the float64 value of the Java ``long``.

    Exact ``floor(t + 1/2)``: ``t - floor(t)`` is exact, so comparing it with 0.5 avoids the
    rounding of ``t + 0.5``. NaN gives 0; the result saturates at ``±2^63`` (``Long.MAX_VALUE``
    converted to float or double is ``2^63``).
    """
    t = np.asarray(t, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        f = np.floor(t)
        r = np.where(t - f >= 0.5, f + 1.0, f)
        r = np.where(np.isnan(t), 0.0, np.clip(r, -_LONG_BOUND, _LONG_BOUND))
    return r


def java_min(a, b) -> np.ndarray:
    """``Math.min``: NaN wins, ``-0.0 < +0.0``, else ``a <= b ? a : b``."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    neg_zero_b = (a == 0) & (b == 0) & np.signbit(b)
    out = np.where(a <= b, a, b)
    out = np.where(neg_zero_b, b, out)
    return np.where(np.isnan(a), a, out)


def java_max(a, b) -> np.ndarray:
    """``Math.max``: NaN wins, ``+0.0 > -0.0``, else ``a >= b ? a : b``."""
    a, b = np.broadcast_arrays(np.asarray(a), np.asarray(b))
    neg_zero_a = (a == 0) & (b == 0) & np.signbit(a)
    out = np.where(a >= b, a, b)
    out = np.where(neg_zero_a, b, out)
    return np.where(np.isnan(a), a, out)


def _clamp(x, lo, hi):
    """``OptimizedScalarQuantizer.clamp``: ``Math.min(Math.max(x, lo), hi)`` in double."""
    return java_min(java_max(x, lo), hi)


def _seq_sum(terms: np.ndarray) -> np.ndarray:
    """Row sums added term by term in index order from ``+0.0``, in ``terms``' dtype (Java's
    ``s = 0; s += t``: the leading zero turns a first term ``-0.0`` into ``+0.0``)."""
    zero = np.zeros((terms.shape[0], 1), dtype=terms.dtype)
    return np.add.accumulate(np.hstack([zero, terms]), axis=1, dtype=terms.dtype)[:, -1]


# ------------------------------------------------------------------------------ VectorUtil
def lucene_dot(A, B) -> np.ndarray:
    """``VectorUtil.dotProduct`` of paired rows, scalar path without FMA (float32 [n]).

    Above 32 dims: four accumulators over ``i < d & ~3`` in steps of 4, combined as
    ``0 + (((acc1 + acc2) + acc3) + acc4)``, then the tail added one term at a time.
    """
    A = np.atleast_2d(np.asarray(A, dtype=np.float32))
    B = np.atleast_2d(np.asarray(B, dtype=np.float32))
    n, d = A.shape
    res = np.zeros(n, dtype=np.float32)
    i = 0
    if d > 32:
        acc = np.zeros((4, n), dtype=np.float32)
        upper = d & ~3
        while i < upper:
            for j in range(4):
                acc[j] = A[:, i + j] * B[:, i + j] + acc[j]
            i += 4
        res = res + (((acc[0] + acc[1]) + acc[2]) + acc[3])
    while i < d:
        res = A[:, i] * B[:, i] + res
        i += 1
    return res


def lucene_doc_normalize(X) -> tuple[np.ndarray, np.ndarray]:
    """Cosine docs as ``Lucene104ScalarQuantizedVectorsWriter`` normalizes them.

    ``FieldWriter.addValue`` keeps ``mag = (float) Math.sqrt(dotProduct(v, v))`` and
    ``normalizeVectors`` divides every component by it (no unit-norm shortcut).
    Returns ``(normalized float32 [n, d], mag float32 [n])``.
    """
    X = np.asarray(X, dtype=np.float32)
    mag = np.sqrt(lucene_dot(X, X).astype(np.float64)).astype(np.float32)
    with np.errstate(divide="ignore", invalid="ignore"):
        return X / mag[:, None], mag


def lucene_l2normalize(X) -> np.ndarray:
    """``VectorUtil.l2normalize`` of each row (a copy), as the scorer normalizes cosine queries.

    Rows whose float ``dotProduct(v, v)``, as a double, is within ``1e-4f`` of 1 are returned
    unchanged; others are divided by ``(float) Math.sqrt``. A zero row raises, as Lucene does.
    """
    X = np.array(X, dtype=np.float32)
    sq = lucene_dot(X, X).astype(np.float64)
    if (sq == 0).any():
        raise ValueError("Cannot normalize a zero-length vector")
    scale = np.abs(sq - 1.0) > UNIT_TOLERANCE
    norms = np.sqrt(sq).astype(np.float32)
    X[scale] = X[scale] / norms[scale, None]
    return X


def lucene_centroid(X, cosine: bool) -> np.ndarray:
    """The centroid ``Lucene104ScalarQuantizedVectorsWriter.flush`` writes for one segment.

    ``dimensionSums[i] += v[i]`` (cosine: ``v[i] / mag``) in float32, doc after doc; then
    ``sums[i] / (float) n``; for cosine ``VectorUtil.l2normalize`` of the result.
    """
    X = np.asarray(X, dtype=np.float32)
    terms = lucene_doc_normalize(X)[0] if cosine else X
    sums = _seq_sum(np.ascontiguousarray(terms.T))  # per dimension, doc after doc, from 0
    centroid = sums / np.float32(X.shape[0])
    if cosine:
        centroid = lucene_l2normalize(centroid[None, :])[0]
    return centroid


# ------------------------------------------------------------------------------ OSQ
def _loss(x, a32, b32, points: int, norm2, lam) -> np.ndarray:
    """``OptimizedScalarQuantizer.loss`` per row (float64), ``x`` float32 [n, d]."""
    a = a32.astype(np.float64)[:, None]
    b = b32.astype(np.float64)[:, None]
    step = (b - a) / np.float64(F32(points) - F32(1.0))
    with np.errstate(divide="ignore", invalid="ignore"):
        step_inv = 1.0 / step
        xd = x.astype(np.float64)
        xiq = a + step * java_round_double((_clamp(xd, a, b) - a) * step_inv)
        xe = _seq_sum(xd * (xd - xiq))
        e = _seq_sum((xd - xiq) * (xd - xiq))
        lam = np.float64(lam)
        return (1.0 - lam) * xe * xe / norm2.astype(np.float64) + lam * e


def _optimize(x, a32, b32, norm2, points: int, iters: int, lam) -> tuple[np.ndarray, np.ndarray]:
    """``optimizeIntervals``: up to ``iters`` coordinate-descent steps per row."""
    a32 = a32.copy()
    b32 = b32.copy()
    best = _loss(x, a32, b32, points, norm2, lam)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        scale = (F32(1.0) - lam) / norm2  # float
    active = np.isfinite(scale)
    lam64 = np.float64(lam)
    xd = x.astype(np.float64)
    for _ in range(iters):
        if not active.any():
            break
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            step_inv = (F32(points) - F32(1.0)) / (b32 - a32)  # float
            ad, bd = a32.astype(np.float64)[:, None], b32.astype(np.float64)[:, None]
            t = (_clamp(xd, ad, bd) - ad) * step_inv.astype(np.float64)[:, None]
            k = java_round_double(t).astype(np.float32)  # (float) Math.round(double)
            s = k / F32(points - 1)  # float
            sd = s.astype(np.float64)
            daa = _seq_sum((1.0 - sd) * (1.0 - sd))
            dab = _seq_sum((1.0 - sd) * sd)
            dbb = _seq_sum((s * s).astype(np.float64))
            dax = _seq_sum(xd * (1.0 - sd))
            dbx = _seq_sum((x * s).astype(np.float64))
            sc = scale.astype(np.float64)
            m0 = sc * dax * dax + lam64 * daa
            m1 = sc * dax * dbx + lam64 * dab
            m2 = sc * dbx * dbx + lam64 * dbb
            det = m0 * m2 - m1 * m1
            active &= ~(det == 0)
            a_opt = ((m2 * dax - m1 * dbx) / det).astype(np.float32)
            b_opt = ((m0 * dbx - m1 * dax) / det).astype(np.float32)
            still = (np.abs(a32 - a_opt).astype(np.float64) < 1e-8) & (
                np.abs(b32 - b_opt).astype(np.float64) < 1e-8
            )
            active &= ~still
            new = _loss(x, a_opt, b_opt, points, norm2, lam)
            active &= ~(new > best)  # a NaN loss is accepted, as in Java
        a32 = np.where(active, a_opt, a32)
        b32 = np.where(active, b_opt, b32)
        best = np.where(active, new, best)
    return a32, b32


def osq_lucene(X, centroid, bits: int, euclidean: bool, iters: int = 5, lam=LAMBDA) -> LuceneOSQ:
    """``OptimizedScalarQuantizer.scalarQuantize`` of every row of ``X`` (never modified)."""
    V = np.atleast_2d(np.asarray(X, dtype=np.float32))
    c = np.asarray(centroid, dtype=np.float32)
    n, d = V.shape
    lam = np.float32(lam)
    x = V - c  # float
    cdot = _seq_sum(V * c) if not euclidean else np.zeros(n, dtype=np.float32)
    norm2 = _seq_sum(x * x)
    lo = np.full(n, np.finfo(np.float32).max, dtype=np.float32)
    hi = np.full(n, -np.finfo(np.float32).max, dtype=np.float32)
    mean = np.zeros(n)
    var = np.zeros(n)
    for i in range(d):
        xi = x[:, i]
        lo = java_min(lo, xi)
        hi = java_max(hi, xi)
        delta = xi.astype(np.float64) - mean
        mean = mean + delta / float(i + 1)
        var = var + delta * (xi.astype(np.float64) - mean)
    var = var / float(d)
    std = np.sqrt(var)
    g = np.float64(MINIMUM_MSE_GRID[bits - 1])
    lo64, hi64 = lo.astype(np.float64), hi.astype(np.float64)
    a = _clamp(-g * std + mean, lo64, hi64).astype(np.float32)
    b = _clamp(g * std + mean, lo64, hi64).astype(np.float32)
    a, b = _optimize(x, a, b, norm2, 1 << bits, iters, lam)

    n_steps = F32((1 << bits) - 1)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        step = (b - a) / n_steps
        xi = _clamp(
            x.astype(np.float64), a.astype(np.float64)[:, None], b.astype(np.float64)[:, None]
        ).astype(np.float32)
        assignment = java_round_float((xi - a[:, None]) / step[:, None])
    total = assignment.sum(axis=1)
    component_sum = (total + 2**31) % 2**32 - 2**31  # Java int arithmetic wraps
    codes = (assignment & 0xFF).astype(np.uint8)
    return LuceneOSQ(codes, a, b, norm2 if euclidean else cdot, component_sum)


# ------------------------------------------------------------------------------ stored bytes
def _planes(levels, planes: int) -> np.ndarray:
    """``planes`` bit planes over ``ceil8(d)`` dims, MSB first (packAsBinary's order)."""
    levels = np.atleast_2d(np.asarray(levels, dtype=np.int64))
    n, d = levels.shape
    padded = np.zeros((n, -(-d // 8) * 8), dtype=np.int64)
    padded[:, :d] = levels
    out = []
    for s in range(planes):
        bits = ((padded >> s) & 1).reshape(n, -1, 8)
        out.append((bits << np.arange(7, -1, -1)).sum(axis=2))
    return np.concatenate(out, axis=1).astype(np.uint8)


def lucene_doc_bytes(levels, doc_bits: int) -> np.ndarray:
    """The doc bytes ``Lucene104ScalarQuantizedVectorsWriter`` stores for levels [n, d].

    1 bit: ``packAsBinary`` (ceil8(d) / 8 bytes); 2 bits: ``transposeDibit`` (low plane, then
    high plane); 4 bits: ``packNibbles`` over ``ceil2(d)`` dims, byte ``i`` =
    ``level[i] << 4 | level[i + half]``; 7 bits: one byte per dimension.
    """
    levels = np.atleast_2d(np.asarray(levels, dtype=np.int64))
    n, d = levels.shape
    if doc_bits in (1, 2):
        return _planes(levels, doc_bits)
    if doc_bits == 4:
        even = np.zeros((n, d + d % 2), dtype=np.int64)
        even[:, :d] = levels
        half = even.shape[1] // 2
        return ((even[:, :half] << 4) | even[:, half:]).astype(np.uint8)
    return levels.astype(np.uint8)


def unpack_lucene_doc_bytes(packed, doc_bits: int, dim: int) -> np.ndarray:
    """Levels [n, dim] back from :func:`lucene_doc_bytes`."""
    packed = np.atleast_2d(np.asarray(packed, dtype=np.int64))
    n = packed.shape[0]
    if doc_bits in (1, 2):
        plane = packed.shape[1] // doc_bits
        levels = np.zeros((n, plane * 8), dtype=np.int64)
        for s in range(doc_bits):
            p = packed[:, s * plane : (s + 1) * plane]
            bits = (p[:, :, None] >> np.arange(7, -1, -1)) & 1
            levels |= bits.reshape(n, -1) << s
        return levels[:, :dim].astype(np.uint8)
    if doc_bits == 4:
        return np.concatenate([packed >> 4, packed & 15], axis=1)[:, :dim].astype(np.uint8)
    return packed[:, :dim].astype(np.uint8)


def lucene_query_bytes(levels, doc_bits: int) -> np.ndarray:
    """The query bytes the scorer compares: ``transposeHalfByte`` (4 stripes of ceil8(d) / 8
    bytes, LSB stripe first) for the asymmetric encodings (1- and 2-bit docs), else the levels
    themselves, one byte per dimension."""
    if doc_bits in (1, 2):
        return _planes(levels, 4)
    return np.atleast_2d(np.asarray(levels)).astype(np.uint8)


# ------------------------------------------------------------------------------ scorer
def lucene_scores(
    q_levels,
    q_lower,
    q_upper,
    q_additional,
    q_sum,
    d_levels,
    d_lower,
    d_upper,
    d_additional,
    d_sum,
    *,
    doc_bits: int,
    query_bits: int,
    centroid_dp,
    similarity: str,
    raw: bool = False,
) -> np.ndarray:
    """``Lucene104ScalarQuantizedVectorScorer.quantizedScore`` for every (query, doc): float32.

    ``similarity`` is ``"euclidean"``, ``"dot_product"``, ``"cosine"`` or
    ``"max_inner_product"``; ``raw=True`` returns the value before the similarity's mapping
    (squared distance, or inner product).
    """
    qd = np.asarray(q_levels, dtype=np.int64) @ np.asarray(d_levels, dtype=np.int64).T
    qc = qd.astype(np.float32)  # i2f / l2f of the integer dot
    dim = F32(np.asarray(d_levels).shape[1])
    x1 = np.asarray(d_sum).astype(np.float32)[None, :]
    ax = np.asarray(d_lower, dtype=np.float32)[None, :]
    lx = (np.asarray(d_upper, dtype=np.float32)[None, :] - ax) * SCALE_LUT[doc_bits - 1]
    ay = np.asarray(q_lower, dtype=np.float32)[:, None]
    ly = (np.asarray(q_upper, dtype=np.float32)[:, None] - ay) * SCALE_LUT[query_bits - 1]
    y1 = np.asarray(q_sum).astype(np.float32)[:, None]
    score = ax * ay * dim + ay * lx * x1 + ax * ly * y1 + lx * ly * qc
    q_add = np.asarray(q_additional, dtype=np.float32)[:, None]
    d_add = np.asarray(d_additional, dtype=np.float32)[None, :]
    with np.errstate(divide="ignore", over="ignore", invalid="ignore"):
        if similarity == "euclidean":
            score = (q_add + d_add) - F32(2.0) * score
            if raw:
                return score
            return F32(1.0) / (F32(1.0) + java_max(score, F32(0.0)))
        score = score + ((q_add + d_add) - F32(centroid_dp))
        if raw:
            return score
        if similarity == "max_inner_product":
            neg = F32(1.0) / (F32(1.0) + F32(-1.0) * score)
            return np.where(score < 0, neg, score + F32(1.0)).astype(np.float32)
        clamped = java_min(F32(1.0), java_max(score, F32(-1.0)))  # Math.clamp(score, -1, 1)
        return (F32(1.0) + clamped) / F32(2.0)
