"""RaBitQ queries against IVF list centres: one fused pass per (query, list) pair.

An IVF codes each query against every visited list's centre: ``y = q - c`` (both already in
the rotated frame, so the rotation is applied once per query and once per centre at build
time), then RaBitQ's uniform ``qb``-bit grid over ``y``'s own ``[min, max]`` with
deterministic nearest rounding (:func:`bbqlib.quantizers.rabitq_codes.grid_codes`). Doing it
in NumPy materializes float64 ``[pairs, d]`` gathers, residuals and codes; here each pair is
one pass over ``d`` coordinates and only the packed codes are written.

Bit for bit with the NumPy path: ``y_j = float32(float64(q_j) - float64(c_j))``, ``lo`` /
``hi`` the exact minimum and maximum, ``step = (hi - lo) / (2^qb - 1)``, codes
``clip(rint((y_j - lo) / step), 0, 2^qb - 1)`` (0 where ``step`` is 0), ``ΣY`` their sum.
The centre term ``add_y`` (``||y||²`` for squared L2, else ``<q, c>``) is a float64 sum in
coordinate order, which may differ from NumPy's ``einsum`` (another summation order) in the
last bits. ``tests/reference/rabitq.py``'s ``query_pairs`` is the NumPy reference.
"""

from __future__ import annotations

import numpy as np

from .ivf import pack_row_planes
from .policy import parallel_kernel, prange

__all__ = ["rabitq_query_pairs"]


@parallel_kernel
def rabitq_query_pairs(Q, C, pair_query, pair_list, qbits, is_l2, planes, codes_out, factors_out):
    """Grid codes of ``Q[pair_query[p]] - C[pair_list[p]]`` for every pair ``p``.

    ``Q`` float32 [nq, d] and ``C`` float32 [K, d] (rotated frame); ``qbits`` in 1..8.
    ``planes`` > 0: ``codes_out`` uint8 [P, planes * padded_dim / 8] receives the codes as
    bit planes (least significant first, MSB-first bytes, as
    :func:`bbqlib.packing.pack_planes`; ``planes`` must be ``qbits``); ``planes`` = 0:
    ``codes_out`` uint8 [P, width >= d] receives one code per byte, zero past ``d``.
    ``factors_out`` float64 [P, 4] gets ``(lo, step, ΣY, add_y)``.
    """
    n_pairs = pair_query.shape[0]
    d = Q.shape[1]
    top = np.float64((1 << qbits) - 1)
    width = codes_out.shape[1]
    plane_bytes = width // planes if planes > 0 else 0
    for p in prange(n_pairs):
        q = Q[pair_query[p]]
        c = C[pair_list[p]]
        y = np.empty(d, dtype=np.float64)
        lo = np.inf
        hi = -np.inf
        add = 0.0
        for j in range(d):
            qj = np.float64(q[j])
            cj = np.float64(c[j])
            v = np.float64(np.float32(qj - cj))
            y[j] = v
            lo = min(lo, v)
            hi = max(hi, v)
            add += v * v if is_l2 else qj * cj
        step = (hi - lo) / top
        safe = step if step > 0 else 1.0
        out = codes_out[p]
        kbuf = out if planes == 0 else np.zeros(plane_bytes * 8, dtype=np.uint8)
        total = 0
        for j in range(d):
            k = 0
            if step > 0:
                r = np.rint((y[j] - lo) / safe)
                k = int(min(max(r, 0.0), top))
            kbuf[j] = k
            total += k
        if planes == 0:
            for j in range(d, width):
                out[j] = 0
        else:
            pack_row_planes(kbuf, planes, plane_bytes, out)
        factors_out[p, 0] = lo
        factors_out[p, 1] = step
        factors_out[p, 2] = total
        factors_out[p, 3] = add
