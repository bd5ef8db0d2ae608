"""What the estimator analysis reads from a quantizer, and its argument checks."""

from __future__ import annotations

import numpy as np

from ...similarity import Similarity, resolve_similarity


def _supports_bounds(quantizer) -> bool:
    # Declared by the quantizer class (bbqlib.Quantizer.has_error_bound).
    return bool(getattr(quantizer, "has_error_bound", False))


def _describe(quantizer) -> str:
    name = type(quantizer).__name__.replace("Quantizer", "")
    enc = getattr(quantizer, "encoding_", None)
    if enc is None:
        return name
    qb = "float" if enc.query_bits is None else enc.query_bits
    extra = ""
    method = getattr(quantizer, "method", None)
    if isinstance(method, str):
        extra += f" {method}"
    pre = getattr(quantizer, "precondition", None)
    if pre not in (None, False):
        extra += f", {pre if isinstance(pre, str) else type(pre).__name__}"
    plan = getattr(enc, "plan", "")  # SAQ: segments and widths, e.g. "64@5, 192@2, 128@0"
    if plan:
        extra += f" [{plan}]"
    return f"{name} {enc.doc_bits:g}x{qb}{extra}"


def _centre(quantizer, X: np.ndarray) -> np.ndarray:
    """The quantizer's centre in the input space (its ``centroid_`` un-rotated), else the mean."""
    c = getattr(quantizer, "centroid_", None)
    if c is None or np.shape(c) != (X.shape[1],):
        return X.mean(axis=0, dtype=np.float64)
    c = np.asarray(c, dtype=np.float32)[None, :]
    t = getattr(quantizer, "transform_", None)
    if t is not None:
        c = t.inverse_transform(c)
    return c[0].astype(np.float64)


def _check_confidence(confidence) -> float:
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float, np.floating)):
        raise TypeError(f"confidence must be a float in (0, 1), got {confidence!r}")
    if not 0.0 < float(confidence) < 1.0:
        raise ValueError(f"confidence must be in (0, 1) (e.g. 0.95), got {confidence!r}")
    return float(confidence)


def _check_bands(bands, n: int) -> tuple[int, ...]:
    """Sorted unique band sizes below ``n`` (a band of every vector is just "all")."""
    bands = list(bands)
    for b in bands:
        if isinstance(b, bool) or not isinstance(b, (int, np.integer)) or b < 1:
            raise ValueError(f"bands must be positive integers (e.g. (10, 100)), got {bands!r}")
    return tuple(b for b in sorted({int(b) for b in bands}) if b < n)


def _similarity_of(quantizer) -> Similarity:
    sim = getattr(quantizer, "similarity_", None)
    if sim is None:
        fitted = getattr(quantizer, "is_fitted", None)
        if fitted is False:
            raise ValueError(
                f"the {type(quantizer).__name__} passed as quantizer is not fitted; call "
                "quantizer.fit(vectors) first"
            )
        sim = getattr(quantizer, "similarity", None)
    if sim is None:
        raise TypeError(
            f"quantizer must be a fitted bbqlib quantizer (with similarity_, encode and "
            f"estimate), got {type(quantizer).__name__}"
        )
    return resolve_similarity(sim)


def _default_eps0(quantizer) -> float | None:
    # Declared by the quantizer class (bbqlib.Quantizer.default_eps0).
    value = getattr(quantizer, "default_eps0", None)
    return None if value is None else float(value)
