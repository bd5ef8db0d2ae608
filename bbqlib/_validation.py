"""Input checks shared by the public API: one error template, no asserts.

Every check raises ``ValueError`` / ``TypeError`` naming the parameter, the constraint, the
value received and the fix. Checks never modify the caller's arrays.
"""

from __future__ import annotations

import numpy as np

from ._kernels import validation as validation_kernels
from ._params import check_int
from .similarity import Similarity


def row_sq_norms(X: np.ndarray) -> np.ndarray:
    """float64 squared norms of float32 rows (``inf`` / ``nan`` where a row is not finite)."""
    X = np.ascontiguousarray(X, dtype=np.float32)
    out = np.empty(X.shape[0], dtype=np.float64)
    if X.size:
        validation_kernels.row_sq_norms(X, out)
    else:
        out[:] = 0.0
    return out


def normalize_rows(X: np.ndarray, norms: np.ndarray, out: np.ndarray) -> None:
    """``out = float32(X / norms[:, None])``, in place, without a float64 temporary."""
    validation_kernels.normalize_rows(X, norms, out)


def apply_similarity(X: np.ndarray, similarity: Similarity, sq: np.ndarray | None) -> np.ndarray:
    """Rows as the similarity scores them (normalized for cosine, from the squared norms
    ``sq`` that :func:`check_similarity_rules` returned), never modifying ``X``."""
    if similarity is not Similarity.COSINE:
        return X
    out = np.empty_like(X)
    if X.size:
        normalize_rows(X, np.sqrt(sq), out)
    return out


__all__ = [
    "NotFittedError",
    "MAX_SQ_NORM",
    "check_vectors",
    "check_source",
    "owned_rows",
    "check_k",
    "check_in",
    "prepare_for_similarity",
    "check_similarity_rules",
    "apply_similarity",
    "UNIT_NORM_TOLERANCE",
]

#: Tolerance on ``| ||v||² - 1 |`` for ``dot_product`` (Elasticsearch uses 1e-4).
UNIT_NORM_TOLERANCE = 1e-4
#: Largest squared norm of a row (about 2.1e37, norms up to 4.6e18). The kernels work in
#: float32: ``‖x - y‖² <= 2‖x‖² + 2‖y‖²`` and the correction algebra's terms must stay
#: below float32's maximum (3.4e38), so rows up to a sixteenth of it are accepted; larger
#: ones are finite in float64 but would overflow to inf in the scores.
MAX_SQ_NORM = float(np.finfo(np.float32).max) / 16


class NotFittedError(ValueError, AttributeError):
    """Raised when a quantizer or index is used before ``fit`` / ``add``."""


class DataWarning(UserWarning):
    """Warned by an index's first ``add`` when a cheap check of the data finds something the
    defaults will not handle well (too few bits per vector, variance on few coordinates for
    codes without a rotation); the message names the finding and the fix
    (:mod:`bbqlib.quantizers.data_checks`, ``docs/hard-data.md``)."""


def check_vectors(
    X,
    name: str = "X",
    *,
    dim: int | None = None,
    allow_1d: bool = False,
    allow_empty: bool = False,
    max_sq_norm: float | None = MAX_SQ_NORM,
) -> np.ndarray:
    """Validate a float matrix and return it as C-contiguous float32 (a copy when converted).

    Parameters
    ----------
    X : array_like of float, shape (n, d) (or (d,) when ``allow_1d``)
    name : parameter name used in messages.
    dim : expected dimension, if known.
    allow_1d : treat a 1-D array as one row.
    allow_empty : accept zero rows.
    max_sq_norm : largest squared norm of a row (:data:`MAX_SQ_NORM`); None: any finite row
        (``arithmetic="lucene"``, which reproduces Lucene's float32 scores, overflow included).
    """
    arr = np.asarray(X)
    if arr.dtype == object or not np.issubdtype(arr.dtype, np.floating):
        raise TypeError(
            f"{name} must be a float array (float16/32/64), got dtype {arr.dtype}; "
            f"convert with np.asarray({name}, dtype=np.float32)"
        )
    if arr.ndim == 1 and allow_1d:
        arr = arr[None, :]
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D (n, d), got shape {arr.shape}")
    if arr.shape[0] == 0 and not allow_empty:
        raise ValueError(f"{name} is empty (shape {arr.shape}); pass at least one vector")
    if arr.shape[1] == 0:
        raise ValueError(f"{name} has zero dimensions (shape {arr.shape})")
    if dim is not None and arr.shape[1] != dim:
        raise ValueError(
            f"{name} has dimension {arr.shape[1]} but the quantizer/index was fitted with "
            f"dimension {dim}; pass vectors of dimension {dim}"
        )
    with np.errstate(over="ignore"):  # beyond float32 range becomes inf, reported below
        out = np.ascontiguousarray(arr, dtype=np.float32)
    sq = row_sq_norms(out)
    if not np.isfinite(sq).all():
        bad = np.flatnonzero(~np.isfinite(out).all(axis=1))
        if bad.size:
            raise ValueError(
                f"{name} contains NaN or inf (or values beyond float32 range) in "
                f"{bad.size} row(s), first at row {bad[0]}; remove or fix them"
            )
    big = np.flatnonzero(~(sq <= max_sq_norm)) if max_sq_norm is not None else sq[:0]
    if big.size:
        raise ValueError(
            f"{name} has {big.size} row(s) whose squared norm exceeds {max_sq_norm:.3g} (row "
            f"{big[0]}: {sq[big[0]]:.3g}); scores of such vectors overflow float32. Scale "
            "the vectors down (rankings do not change under a common scale)"
        )
    return out


def check_source(X, name: str = "X", *, dim: int | None = None):
    """Dtype and shape of vectors to add, without reading their values.

    The checks :func:`check_vectors` makes before it reads anything, so a memory map or an
    h5py dataset stays lazy; the values are checked block by block as they are read. Every
    ``add`` goes through here: floats only (complex, bool, integer and object arrays are
    rejected with a TypeError), 2-D, at least one row and one dimension, ``dim`` if known.
    Returns ``X`` (an ``ndarray`` view of a memmap, ``np.asarray`` of a list; lazy sources
    with ``shape``, ``dtype`` and slicing as they are).
    """
    if isinstance(X, np.memmap):
        X = X.view(np.ndarray)
    elif not (hasattr(X, "shape") and hasattr(X, "dtype") and hasattr(X, "__getitem__")):
        X = np.asarray(X)
    dtype = np.dtype(X.dtype)
    if dtype.hasobject or not np.issubdtype(dtype, np.floating):
        raise TypeError(
            f"{name} must be a float array (float16/32/64), got dtype {dtype}; "
            f"convert with np.asarray({name}, dtype=np.float32)"
        )
    shape = tuple(X.shape)
    if len(shape) != 2:
        raise ValueError(f"{name} must be 2-D (n, d), got shape {shape}")
    if shape[0] == 0:
        raise ValueError(f"{name} is empty (shape {shape}); pass at least one vector")
    if shape[1] == 0:
        raise ValueError(f"{name} has zero dimensions (shape {shape})")
    if dim is not None and shape[1] != dim:
        raise ValueError(
            f"{name} has dimension {shape[1]} but the quantizer/index was fitted with "
            f"dimension {dim}; pass vectors of dimension {dim}"
        )
    return X


def owned_rows(rows: np.ndarray, source) -> np.ndarray:
    """``rows`` itself when it shares no memory with the caller's ``source``, else a copy.

    What an index keeps must not change when the caller reuses its buffer.
    """
    if isinstance(source, np.ndarray) and np.may_share_memory(rows, source):
        return rows.copy()
    return rows


def check_k(k, name: str = "k") -> int:
    """A positive integer."""
    return check_int(k, name, 1)


def check_in(value, allowed, name: str):
    """``value`` must be one of ``allowed``."""
    if value not in allowed:
        raise ValueError(f"{name} must be one of {list(allowed)}, got {value!r}")
    return value


def check_similarity_rules(
    X: np.ndarray, similarity: Similarity, name: str = "X"
) -> np.ndarray | None:
    """Check the similarity's input rules on validated float32 rows, without copying.

    cosine: no zero vectors; dot_product: unit vectors (as Elasticsearch). Returns the rows'
    float64 squared norms where a rule needed them (cosine, dot_product), else None.
    """
    if similarity is Similarity.COSINE:
        sq = row_sq_norms(X)
        zero = np.flatnonzero(sq == 0)
        if zero.size:
            raise ValueError(
                f"{name} has {zero.size} zero vector(s) (first at row {zero[0]}), which have no "
                "direction under cosine similarity; remove them or use euclidean"
            )
        return sq
    if similarity is Similarity.DOT_PRODUCT:
        sq = row_sq_norms(X)
        off = np.flatnonzero(np.abs(sq - 1.0) > UNIT_NORM_TOLERANCE)
        if off.size:
            raise ValueError(
                f"dot_product requires unit-length vectors, but {off.size} row(s) of {name} are "
                f"not (row {off[0]} has squared norm {sq[off[0]]:.6g}); normalize them, or use "
                "similarity='cosine' (normalizes for you) or 'max_inner_product' (any length)"
            )
        return sq
    return None


def prepare_for_similarity(X: np.ndarray, similarity: Similarity, name: str = "X") -> np.ndarray:
    """Apply the similarity's input rules to validated float32 rows.

    cosine normalizes (zero vectors are an error); dot_product requires unit vectors, as in
    Elasticsearch. Returns a new array when it normalizes, never modifies ``X``.
    """
    return apply_similarity(X, similarity, check_similarity_rules(X, similarity, name))
