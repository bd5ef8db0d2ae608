"""Optimized scalar quantization (spec §1) in plain NumPy, vectorized over rows.

Lucene/Elasticsearch ``OptimizedScalarQuantizer``, step by step:

1. centre on the centroid, ``x = v - c`` (in float32, as Lucene does);
2. row statistics: mean, population std, ``‖x‖²``, min, max, and ``⟨v, c⟩``;
3. initial interval ``[a, b] = clamp(mean ∓ g_B · std, xmin, xmax)`` (``MINIMUM_MSE_GRID``);
4. up to ``iters`` closed-form coordinate-descent steps on the anisotropic loss
   ``L(a, b) = (1-λ) ⟨x, x - x̂⟩² / ‖x‖² + λ ‖x - x̂‖²``, stopping when the normal equations
   are singular, when the interval no longer moves (``< 1e-8``), or when the loss would grow
   (the worse interval is not accepted);
5. codes by Java's ``Math.round`` (``floor(t + 0.5)``), all zero when ``b == a``;
6. corrections ``(a, b, ‖x‖² or ⟨v, c⟩, Σk)``.

Arithmetic follows ``bbqlib._kernels.osq`` operation by operation so that codes and
intervals agree bit for bit: float32 centring, float64 terms, interval ends rounded to
float32 but combined in float64, and every row sum a :func:`lane_sum` (8 lanes summed in
order, combined pairwise, then the ``d mod 8`` trailing terms one by one).

An optimizer pass at ``[a, b]`` needs only ``K1 = Σk``, ``K2 = Σk²`` (integers: exact) and
``XK = Σ x·k`` (exact products, one lane sum); :func:`pass_terms` turns them into the loss and
the normal-equation sums. This is the definition of spec §1.3-1.4 reassociated
(``s = k / L``):

* ``Σ(1-s)² = (d L² - 2 L K1 + K2) / L²``, ``Σ(1-s)s = (L K1 - K2) / L²``, ``Σs² = K2 / L²``;
* ``Σ x s = XK / L``, ``Σ x (1-s) = Σx - XK / L``;
* with ``x̂ = a + step·k``: ``Σ x x̂ = a Σx + step XK``, ``Σ x̂² = d a² + 2 a step K1 + step² K2``,
  ``⟨x, x - x̂⟩ = ‖x‖² - Σ x x̂``, ``‖x - x̂‖² = ‖x‖² - 2 Σ x x̂ + Σ x̂²``.

The codes follow Lucene's expression; the sums differ from term-by-term float64 sums in the last
bits only (:func:`direct_pass_terms` is the definition, for tests). Lucene 10.5's own arithmetic
is float32 in places: :mod:`reference.osq_lucene` is that one.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

__all__ = [
    "LANES",
    "MINIMUM_MSE_GRID",
    "OSQReference",
    "java_round",
    "lane_reduce",
    "lane_sum",
    "initial_interval",
    "pass_sums",
    "pass_terms",
    "direct_pass_terms",
    "osq_loss",
    "osq_reference",
    "dequantize",
]

#: Half-widths of the MSE-optimal uniform quantizer of N(0, 1), bits 1..8 (spec §1.2).
MINIMUM_MSE_GRID = (0.798, 1.493, 2.051, 2.514, 2.916, 3.278, 3.611, 3.922)
#: Lanes of every row sum.
LANES = 8


class OSQReference(NamedTuple):
    codes: np.ndarray  # uint8 [n, d]
    lower: np.ndarray  # float32 [n]
    upper: np.ndarray  # float32 [n]
    additional: np.ndarray  # float32 [n]
    component_sum: np.ndarray  # int64 [n]
    iterations: np.ndarray  # int64 [n]: accepted coordinate-descent steps per row


def java_round(t: np.ndarray) -> np.ndarray:
    """Java's ``Math.round``: ``floor(t + 0.5)`` (ties go up, unlike NumPy's half-to-even)."""
    return np.floor(t + 0.5)


def _min(p, q):
    """numba's ``min(p, q)``: ``p > q ? q : p`` (keeps ``p`` on ties, e.g. -0.0 vs 0.0)."""
    return np.where(p > q, q, p)


def _max(p, q):
    """numba's ``max(p, q)``: ``p < q ? q : p``."""
    return np.where(p < q, q, p)


def lane_reduce(terms: np.ndarray, op, start: float) -> np.ndarray:
    """Row reduction of ``terms`` [n, d] in the kernel's order.

    Lane ``j`` (of 8, starting at ``start``) takes ``op`` of the terms ``8t + j`` in order; the
    lanes are combined as ``op(op(op(l0, l1), op(l2, l3)), op(op(l4, l5), op(l6, l7)))``; the
    ``d mod 8`` trailing terms are then taken one by one.
    """
    terms = np.asarray(terms, dtype=np.float64)
    n, d = terms.shape
    m = d - d % LANES
    acc = np.full((n, LANES), start, dtype=np.float64)
    for t in range(0, m, LANES):
        acc = op(acc, terms[:, t : t + LANES])
    lanes = [acc[:, j] for j in range(LANES)]
    while len(lanes) > 1:
        lanes = [op(lanes[j], lanes[j + 1]) for j in range(0, len(lanes), 2)]
    out = lanes[0]
    for i in range(m, d):
        out = op(out, terms[:, i])
    return out


def lane_sum(terms: np.ndarray) -> np.ndarray:
    """Row sums in the kernel's order (:func:`lane_reduce` with ``+`` from 0)."""
    return lane_reduce(terms, np.add, 0.0)


def _clamp(x: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.minimum(np.maximum(x, a[:, None]), b[:, None])


def initial_interval(x: np.ndarray, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """``clamp(mean ∓ g_B·std, xmin, xmax)`` of centred rows ``x`` (float64), float32 values."""
    d = x.shape[1]
    mean = lane_sum(x) / d
    dev = x - mean[:, None]
    std = np.sqrt(lane_sum(dev * dev) / d)
    g = MINIMUM_MSE_GRID[bits - 1]
    xmin = lane_reduce(x, _min, np.inf)
    xmax = lane_reduce(x, _max, -np.inf)
    a = _min(_max(-g * std + mean, xmin), xmax).astype(np.float32)
    b = _min(_max(g * std + mean, xmin), xmax).astype(np.float32)
    return a, b


def _inverse_step(a, b, levels: int):
    """``levels / (b - a)``, 0 when ``b == a`` (every code is then 0)."""
    width = b - a
    with np.errstate(divide="ignore"):
        return np.where(width != 0.0, levels / np.where(width != 0.0, width, 1.0), 0.0)


def pass_sums(x, a, b, levels: int):
    """``(K1, K2, XK)`` per row of ``x`` at ``[a, b]``: ``Σk``, ``Σk²`` (int64), ``Σ x·k``."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    inv = _inverse_step(a, b, levels)
    with np.errstate(invalid="ignore", over="ignore"):
        k = java_round((_clamp(x, a, b) - a[:, None]) * inv[:, None])
    k1 = k.sum(axis=1).astype(np.int64)  # integer values: exact in any order
    k2 = (k * k).sum(axis=1).astype(np.int64)
    return k1, k2, lane_sum(x * k)


def pass_terms(k1, k2, xk, a, b, d: int, levels: int, x1, x2, lam: float):
    """Loss and normal-equation sums ``(loss, daa, dab, dbb, dax, dbx)`` of one pass.

    From ``K1, K2, XK`` (:func:`pass_sums`), ``x1 = Σx`` and ``x2 = ‖x‖²``; the kernel's
    ``_pass_terms``, operation for operation (the integer numerators are exact).
    """
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    lv = int(levels)
    ll = lv * lv
    step = (b - a) / float(lv)
    daa = (d * ll - 2 * lv * k1 + k2) / ll
    dab = (lv * k1 - k2) / ll
    dbb = k2 / ll
    dbx = xk / float(lv)
    dax = x1 - dbx
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        sxq = a * x1 + step * xk  # Σ x x̂
        sqq = d * a * a + 2.0 * a * step * k1 + step * step * k2  # Σ x̂²
        xe = x2 - sxq  # ⟨x, x - x̂⟩
        e = x2 - 2.0 * sxq + sqq  # ‖x - x̂‖²
        loss = (1.0 - lam) * xe * xe / x2 + lam * e
    return loss, daa, dab, dbb, dax, dbx


def direct_pass_terms(x, a, b, levels: int, lam: float):
    """The same six values straight from the definitions (spec §1.3-1.4), float64 sums."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    inv = _inverse_step(a, b, levels)
    k = java_round((_clamp(x, a, b) - a[:, None]) * inv[:, None])
    s = k / levels
    q = a[:, None] + ((b - a) / levels)[:, None] * k
    err = x - q
    norm2 = (x * x).sum(axis=1)
    xe = (x * err).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        loss = (1.0 - lam) * xe * xe / norm2 + lam * (err * err).sum(axis=1)
    sums = [(1 - s) ** 2, (1 - s) * s, s * s, x * (1 - s), x * s]
    return (loss, *(t.sum(axis=1) for t in sums))


def osq_loss(x, a, b, levels, norm2, lam: float) -> np.ndarray:
    """Anisotropic loss (spec §1.3) of intervals ``[a, b]`` per row of ``x`` (float64).

    As the optimizer computes it (:func:`pass_terms`); ``levels = 2^bits - 1``.
    """
    lv = int(levels)
    k1, k2, xk = pass_sums(x, a, b, lv)
    return pass_terms(k1, k2, xk, a, b, x.shape[1], lv, lane_sum(x), norm2, lam)[0]


def osq_reference(
    X: np.ndarray,
    centroid: np.ndarray,
    bits: int,
    *,
    euclidean: bool,
    iters: int = 5,
    lam: float = 0.1,
) -> OSQReference:
    """Quantize every row of ``X`` against ``centroid`` with ``bits`` bits (spec §1).

    Parameters
    ----------
    X : float [n, d] (cast to float32); centroid : float [d] (cast to float32)
    bits : 1..8
    euclidean : additional correction ``‖v - c‖²`` if True, else ``⟨v, c⟩``
    iters, lam : coordinate-descent steps and anisotropic weight (Lucene: 5 and 0.1)
    """
    X = np.asarray(X, dtype=np.float32)
    c = np.asarray(centroid, dtype=np.float32)
    n, d = X.shape
    lv = 2**bits - 1

    x = (X - c).astype(np.float64)  # float32 centring, then float64
    x1 = lane_sum(x)
    norm2 = lane_sum(x * x)
    cdot = lane_sum(X.astype(np.float64) * c.astype(np.float64))
    a32, b32 = initial_interval(x, bits)
    a, b = a32.astype(np.float64), b32.astype(np.float64)

    active = (norm2 > 0.0) & (iters > 0)  # norm2 == 0: nothing to optimize
    scale = (1.0 - lam) / np.where(active, norm2, 1.0)
    # loss and normal-equation sums at the current interval, per row
    state = np.array(pass_terms(*pass_sums(x, a, b, lv), a, b, d, lv, x1, norm2, lam))
    iterations = np.zeros(n, dtype=np.int64)

    for _ in range(iters):
        rows = np.flatnonzero(active)
        if rows.size == 0:
            break
        best, daa, dab, dbb, dax, dbx = state[:, rows]
        ar, br, sc = a[rows], b[rows], scale[rows]
        # Normal equations of the loss for fixed assignments (spec §1.4).
        m0 = sc * dax * dax + lam * daa
        m1 = sc * dax * dbx + lam * dab
        m2 = sc * dbx * dbx + lam * dbb
        det = m0 * m2 - m1 * m1
        singular = det == 0.0
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            safe = np.where(singular, 1.0, det)
            # the new ends are rounded to float32, as Lucene stores them
            a_new = ((m2 * dax - m1 * dbx) / safe).astype(np.float32).astype(np.float64)
            b_new = ((m0 * dbx - m1 * dax) / safe).astype(np.float32).astype(np.float64)
            unmoved = (np.abs(ar - a_new) < 1e-8) & (np.abs(br - b_new) < 1e-8)
        xr = x[rows]
        new = np.array(
            pass_terms(
                *pass_sums(xr, a_new, b_new, lv), a_new, b_new, d, lv, x1[rows], norm2[rows], lam
            )
        )
        worse = new[0] > best
        accept = ~(singular | unmoved | worse)
        took = rows[accept]
        a[took], b[took] = a_new[accept], b_new[accept]
        state[:, took] = new[:, accept]
        iterations[took] += 1
        active[rows[~accept]] = False

    step = (b - a) / lv
    with np.errstate(divide="ignore", invalid="ignore"):
        t = (_clamp(x, a, b) - a[:, None]) / np.where(step != 0.0, step, 1.0)[:, None]
    # Java: Math.round(NaN) == 0 when the interval collapses (b == a).
    k = np.where(step[:, None] != 0.0, java_round(t), 0.0)
    codes = k.astype(np.uint8)
    with np.errstate(over="ignore"):  # as the kernel: ‖x‖² beyond float32 is stored as inf
        additional = (norm2 if euclidean else cdot).astype(np.float32)
    return OSQReference(
        codes=codes,
        lower=a.astype(np.float32),
        upper=b.astype(np.float32),
        additional=additional,
        component_sum=codes.sum(axis=1, dtype=np.int64),
        iterations=iterations,
    )


def dequantize(codes: np.ndarray, lower, upper, bits: int) -> np.ndarray:
    """Centred reconstruction ``x̂ = a + k (b - a) / (2^B - 1)`` in float64 [n, d]."""
    a = np.asarray(lower, dtype=np.float64)[:, None]
    b = np.asarray(upper, dtype=np.float64)[:, None]
    return a + np.asarray(codes, dtype=np.float64) * (b - a) / (2**bits - 1)
