"""SAQ's error model: the per-pair standard deviation behind ``estimate(return_bounds=True)``."""

from __future__ import annotations

import numpy as np

__all__ = ["code_lengths", "segment_sigma"]

_ROWS = 65536


def code_lengths(quantizer, enc) -> np.ndarray:
    """``sqrt(Σ u²)`` [n, S] of every segment's code (``u = 2k + 1 - 2^B``), cached on ``enc``."""
    key = ("saq_code_lengths", quantizer.fingerprint_)
    if key in enc._cache:
        return enc._cache[key]
    plan = quantizer.plan_
    a = plan.arrays()
    n = len(enc)
    out = np.empty((n, len(plan.segments)))
    for r0 in range(0, n, _ROWS):
        rows = np.unpackbits(np.asarray(enc.codes[r0 : r0 + _ROWS]), axis=1)
        for s, seg in enumerate(plan.segments):
            msb = 8 * int(a["msb_off"][s])
            k = rows[:, msb : msb + seg.dims].astype(np.int64) << (seg.bits - 1)
            low = 8 * int(a["low_off"][s])
            for i, t in enumerate(range(seg.bits - 2, -1, -1)):
                k += rows[:, low + i * seg.dims : low + (i + 1) * seg.dims].astype(np.int64) << t
            u = 2 * k + 1 - 2**seg.bits
            out[r0 : r0 + len(rows), s] = np.sqrt((u * u).sum(axis=1))
    enc._cache[key] = out
    return out


def segment_sigma(quantizer, Q: np.ndarray, enc) -> np.ndarray:
    """Model sd [nq, n] of the raw estimates of validated, prepared queries ``Q``.

    Coded segment ``s``: ``‖o_s‖ ‖q_s‖ sqrt(1/a_s² - 1) / sqrt(d_s - 1)`` with the code's
    cosine ``a_s = 2 ‖o_s‖ / (scale_s ‖u‖)``; a quantized query adds ``(‖o_s‖ / a_s) ‖e_s‖ /
    sqrt(d_s)`` (``e_s`` its rounding); a dropped tail adds ``sqrt(Σ_i σ_i² q_i²)`` over its
    PCA axes. Terms add in quadrature (independent rotations); squared L2 doubles the sd.
    """
    plan = quantizer.plan_
    S = len(plan.segments)
    fac = np.asarray(enc.corrections).view(np.float32).reshape(len(enc), -1).astype(np.float64)
    scale, norm = fac[:, 1 : 1 + S], fac[:, 1 + S : 1 + 2 * S]
    lengths = code_lengths(quantizer, enc)
    with np.errstate(divide="ignore", invalid="ignore"):
        a = np.where((scale > 0) & (lengths > 0), 2.0 * norm / (scale * lengths), 1.0)
    a = np.clip(a, 1e-12, 1.0)
    Qc = (Q - quantizer.mean_.astype(np.float32)) @ quantizer.frame_
    _, rounding = quantizer._quantize_query(Qc[:, : plan.coded_dims])
    var = np.zeros((len(Q), len(enc)))
    for s, seg in enumerate(plan.segments):
        qn = np.linalg.norm(Qc[:, seg.start : seg.stop].astype(np.float64), axis=1)
        doc = norm[:, s] * np.sqrt(1.0 / a[:, s] ** 2 - 1.0) / np.sqrt(max(seg.dims - 1, 1))
        var += np.square(qn[:, None] * doc[None, :])
        if quantizer.encoding_.query_bits is not None:
            var += np.square(rounding[:, s, None] * (norm[:, s] / a[:, s])[None, :]) / seg.dims
    tail = Qc[:, plan.coded_dims :].astype(np.float64)
    if tail.shape[1]:
        var += ((tail**2) * quantizer.variances_[plan.coded_dims :]).sum(axis=1)[:, None]
    sd = np.sqrt(var)
    return 2.0 * sd if quantizer.similarity_.is_distance else sd


def level_sums(quantizer, enc, keep=None) -> np.ndarray:
    """``Σ (k_s >> r_s)`` float32 [n, S]: the sum of every segment's levels cut to their top
    ``keep[s]`` bits (``r_s = B_s - keep[s]``; all bits by default), from the codes."""
    plan = quantizer.plan_
    a = plan.arrays()
    keep = a["bits"] if keep is None else np.asarray(keep)
    n = len(enc)
    out = np.empty((n, len(plan.segments)), dtype=np.float32)
    for r0 in range(0, n, _ROWS):
        rows = np.unpackbits(np.asarray(enc.codes[r0 : r0 + _ROWS]), axis=1)
        for s, seg in enumerate(plan.segments):
            kept = int(keep[s])
            msb = 8 * int(a["msb_off"][s])
            total = rows[:, msb : msb + seg.dims].sum(1, dtype=np.int64) << (kept - 1)
            low = 8 * int(a["low_off"][s])
            for i in range(kept - 1):  # lower planes, highest first
                part = rows[:, low + i * seg.dims : low + (i + 1) * seg.dims]
                total += part.sum(1, dtype=np.int64) << (kept - 2 - i)
            out[r0 : r0 + len(rows), s] = total
    return np.ascontiguousarray(out)
