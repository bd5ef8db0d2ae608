"""Plain NumPy references for the pair coders (``bbqlib._kernels.pairs``): the arithmetic
the batch path used before the coders became kernels.

* :func:`residual_pairs_reference` - ``y = float32(q - c)`` (float64 difference) and rows
  ``(0, 1, Σy, ||y||² or <q, c>)``;
* :func:`scaled_pairs_reference` - ``y = float32(s ∘ q)`` and rows ``(0, 1, Σy,
  ||q||² - 2 m_c or m_c + <c, c>)`` with ``m_c = <q, c> + <q, offset>``;
* :func:`grid_pairs_reference` - the residual on int8 ``global``'s grid (Lucene's float32
  rounding) and rows ``(lower, alpha, Σk, ||y||² or <q, c>)``.

The kernels' codes and ``y`` equal these exactly; their sums are lane sums (a fixed order),
so the factor rows agree to a few units in the last place of float64.
"""

from __future__ import annotations

import numpy as np

__all__ = ["residual_pairs_reference", "scaled_pairs_reference", "grid_pairs_reference"]


def residual_pairs_reference(Q, C, pair_query, pair_list, is_l2):
    Q64 = Q[pair_query].astype(np.float64)
    C64 = C[pair_list].astype(np.float64)
    y = (Q64 - C64).astype(np.float32)
    f = np.zeros((len(y), 4))
    f[:, 1] = 1.0
    f[:, 2] = y.astype(np.float64).sum(axis=1)
    y64 = y.astype(np.float64)
    f[:, 3] = (y64 * y64).sum(axis=1) if is_l2 else (Q64 * C64).sum(axis=1)
    return y, f


def scaled_pairs_reference(Q, C, pair_query, pair_list, scale, offset, is_l2):
    Qp = Q[pair_query]
    y = (Qp * scale).astype(np.float32)
    Q64 = Qp.astype(np.float64)
    C64 = C[pair_list].astype(np.float64)
    mc = (Q64 * C64).sum(axis=1) + Q64 @ offset.astype(np.float64)
    f = np.zeros((len(y), 4))
    f[:, 1] = 1.0
    f[:, 2] = y.astype(np.float64).sum(axis=1)
    f[:, 3] = (Q64 * Q64).sum(axis=1) - 2.0 * mc if is_l2 else mc + (C64 * C64).sum(axis=1)
    return y, f


def grid_pairs_reference(Q, C, pair_query, pair_list, lower, upper, alpha, inv_alpha, levels,
                         is_l2):  # fmt: skip
    y, f = residual_pairs_reference(Q, C, pair_query, pair_list, is_l2)
    lo, hi, sc = np.float32(lower), np.float32(upper), np.float32(inv_alpha)
    dxs = sc * (np.clip(y, lo, hi) - lo)
    codes = np.clip(np.floor(dxs.astype(np.float64) + 0.5), 0, levels).astype(np.uint8)
    f[:, 0] = lower
    f[:, 1] = alpha
    f[:, 2] = codes.sum(axis=1, dtype=np.int64)
    return codes, f
