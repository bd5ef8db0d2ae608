"""SAQ's error model: the per-pair standard deviation behind ``estimate(return_bounds=True)``."""

from __future__ import annotations

import numpy as np

__all__ = ["code_lengths", "code_lengths_of", "level_sums", "level_sums_of", "segment_sigma"]

_ROWS = 65536


def code_lengths(quantizer, enc) -> np.ndarray:
    """``sqrt(Σ u²)`` [n, S] of every segment's code (``u = 2k + 1 - 2^B``), cached on ``enc``."""
    key = ("saq_code_lengths", quantizer.fingerprint_)
    if key not in enc._cache:
        enc._cache[key] = code_lengths_of(quantizer.plan_, enc.codes)
    return enc._cache[key]


def code_lengths_of(plan, codes) -> np.ndarray:
    """:func:`code_lengths` of code rows ``codes`` [n, code_bytes] under ``plan``."""
    a = plan.arrays()
    n = len(codes)
    out = np.empty((n, len(plan.segments)))
    for r0 in range(0, n, _ROWS):
        rows = np.unpackbits(np.asarray(codes[r0 : r0 + _ROWS]), axis=1)
        for s, seg in enumerate(plan.segments):
            msb = 8 * int(a["msb_off"][s])
            k = rows[:, msb : msb + seg.dims].astype(np.int64) << (seg.bits - 1)
            low = 8 * int(a["low_off"][s])
            for i, t in enumerate(range(seg.bits - 2, -1, -1)):
                k += rows[:, low + i * seg.dims : low + (i + 1) * seg.dims].astype(np.int64) << t
            u = 2 * k + 1 - 2**seg.bits
            out[r0 : r0 + len(rows), s] = np.sqrt((u * u).sum(axis=1))
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
    return level_sums_of(quantizer.plan_, enc.codes, keep)


def level_sums_of(plan, codes, keep=None) -> np.ndarray:
    """:func:`level_sums` of code rows ``codes`` [n, code_bytes] under ``plan``."""
    a = plan.arrays()
    keep = a["bits"] if keep is None else np.asarray(keep)
    n = len(codes)
    out = np.empty((n, len(plan.segments)), dtype=np.float32)
    for r0 in range(0, n, _ROWS):
        rows = np.unpackbits(np.asarray(codes[r0 : r0 + _ROWS]), axis=1)
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


#: Queries per dense estimate of the bound-driven rerank, and most (query, doc) pairs.
_BOUND_BATCH, _BOUND_PAIRS = 32, 1 << 22


def bound_rerank_search(quantizer, Q, enc, vectors, k, allowed, eps0, cap):
    """:meth:`SAQQuantizer.search_bound_rerank` on validated queries ``Q``: ``(keys, ids,
    vectors_read)``, the optimistic key ``key + eps0 · sd`` (:func:`segment_sigma`) deciding
    which candidates are rescored (RaBitQ's kernel, :func:`bbqlib._kernels.rabitq.bound_rerank`)."""
    from ..._kernels.rabitq import bound_rerank
    from ...search.topk import EMPTY_ID, merge_topk

    n, nq = len(enc), len(Q)
    vectors = np.asarray(vectors)
    if vectors.ndim != 2 or vectors.shape != (n, quantizer.dim_):
        raise ValueError(
            f"vectors must have shape ({n}, {quantizer.dim_}) to match the codes, got "
            f"{vectors.shape}"
        )
    vectors = np.ascontiguousarray(vectors, dtype=np.float32)
    mask = np.empty(0, np.uint8)
    if allowed is not None:
        allowed = np.asarray(allowed)
        if allowed.dtype != bool or allowed.shape != (n,):
            raise ValueError(f"allowed must be a boolean mask of shape ({n},)")
        mask = np.ascontiguousarray(allowed, dtype=np.uint8)
    out_keys = np.full((nq, k), -np.inf)
    ids = np.full((nq, k), -1, dtype=np.int64)
    reads = np.zeros(nq, dtype=np.int64)
    if n == 0:
        return out_keys, ids, reads
    sim = quantizer.similarity_
    batch = max(1, min(_BOUND_BATCH, _BOUND_PAIRS // n))
    for q0 in range(0, nq, batch):
        q1 = min(nq, q0 + batch)
        Qc, q_add = quantizer._query_parts(Q[q0:q1])
        keys = sim.key(quantizer.scanner().estimate_parts(Qc, q_add, enc))
        opt = keys + eps0 * segment_sigma(quantizer, Q[q0:q1], enc)
        heap_keys = np.full((q1 - q0, k), -np.inf)
        heap_ids = np.full((q1 - q0, k), EMPTY_ID, dtype=np.int64)
        bound_rerank(
            np.ascontiguousarray(keys, dtype=np.float64),
            np.ascontiguousarray(opt, dtype=np.float64),
            np.ascontiguousarray(Q[q0:q1]),
            vectors,
            mask,
            max(int(cap), k),
            sim.is_distance,
            heap_keys,
            heap_ids,
            reads[q0:q1],
        )
        heap_keys, heap_ids = merge_topk(heap_keys, heap_ids, k)
        empty = heap_ids == EMPTY_ID
        out_keys[q0:q1] = np.where(empty, -np.inf, heap_keys)
        ids[q0:q1] = np.where(empty, -1, heap_ids)
    return out_keys, ids, reads
