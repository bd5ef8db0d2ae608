"""Argument validation shared by the clustering functions (uniform errors naming the parameter)."""

from __future__ import annotations

import math

import numpy as np

from ._blocks import _BLOCK_ROWS


def _check_int(name: str, value, lo: int, hi: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    value = int(value)
    if value < lo or (hi is not None and value > hi):
        bound = f"in [{lo}, {hi}]" if hi is not None else f">= {lo}"
        raise ValueError(f"{name} must be {bound}, got {value}; pass a value {bound}")
    return value


def _check_matrix(name: str, X, *, check_finite: bool = True) -> np.ndarray:
    """A 2-D real array with at least one row and column; not copied when already an array."""
    if isinstance(X, np.memmap):
        X = X.view(np.ndarray)  # numba types memmap as a subclass; a plain view is free
    else:
        X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(
            f"{name} must be a 2-D array of shape (n, d), got {X.ndim} dimension(s) "
            f"with shape {X.shape}; reshape it, e.g. {name}.reshape(1, -1) for one vector"
        )
    if X.dtype.kind not in "fiub":
        raise TypeError(
            f"{name} must hold real numbers (float or integer), got dtype {X.dtype}; "
            f"convert it with np.asarray({name}, dtype=np.float32)"
        )
    if X.shape[0] < 1 or X.shape[1] < 1:
        raise ValueError(f"{name} must have at least one row and one column, got shape {X.shape}")
    if check_finite and X.dtype.kind == "f":
        for start in range(0, X.shape[0], _BLOCK_ROWS):
            block = X[start : start + _BLOCK_ROWS]
            if not np.isfinite(block).all():
                bad = start + int(np.flatnonzero(~np.isfinite(block).all(axis=1))[0])
                raise ValueError(
                    f"{name} must be finite, but row {bad} holds NaN or infinity; "
                    f"drop or repair that row before clustering"
                )
    return X


def _check_lambda(lam) -> float:
    if isinstance(lam, bool) or not isinstance(lam, (int, float, np.integer, np.floating)):
        raise TypeError(f"lam must be a real number, got {type(lam).__name__} {lam!r}")
    lam = float(lam)
    if not (math.isfinite(lam) and lam >= 0.0):
        raise ValueError(f"lam must be finite and >= 0, got {lam}; the SOAR default is 1.0")
    return lam


def _check_centroids(centroids, d: int | None) -> np.ndarray:
    C = _check_matrix("centroids", centroids)
    if d is not None and C.shape[1] != d:
        raise ValueError(
            f"centroids must have the vectors' dimension {d}, got {C.shape[1]}; "
            f"pass the centroids built from these vectors"
        )
    return np.array(C, dtype=np.float32, order="C", copy=True)  # small; always writeable
