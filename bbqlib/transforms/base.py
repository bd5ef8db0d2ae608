"""The contract shared by bbqlib's random orthogonal transforms.

A transform is an orthogonal map ``R^d -> R^d``, deterministic from ``(dim, seed)`` and its
parameters. ``fit`` draws it, ``transform`` applies it to rows, ``inverse_transform`` undoes it,
and ``get_state`` / ``from_state`` let an index file store it exactly (the arrays are stored
too, so a file does not depend on the random generator of the library version that wrote it).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, ClassVar

import numpy as np

__all__ = ["Transform"]


def _check_int(name: str, value: Any, low: int, high: int | None = None) -> int:
    """Return ``value`` as int if it is an integer in ``[low, high]``, else raise."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {value!r} ({type(value).__name__})")
    if value < low or (high is not None and value > high):
        bound = f">= {low}" if high is None else f"in [{low}, {high}]"
        raise ValueError(f"{name} must be {bound}, got {value}")
    return int(value)


def _check_seed(value: Any) -> int:
    """Seeds are non-negative ints so that they can be written to a JSON header."""
    return _check_int("seed", value, 0)


class Transform:
    """Base class of the seeded orthogonal transforms (``dense``, ``block``, ``hadamard``).

    Parameters
    ----------
    dim : int, optional
        Dimension. Can be left out and given to :meth:`fit` instead.
    seed : int
        Seed of ``numpy.random.default_rng`` that draws the transform.

    Notes
    -----
    Subclasses set ``name``, list their extra constructor parameters in ``_param_names``,
    and implement ``_fit(dim)``, ``_apply(X)``, ``_apply_inverse(X)`` (``X`` validated
    float32 C-contiguous 2-D, result a new array), ``_arrays()`` and ``_set_arrays(arrays)``.
    """

    name: ClassVar[str] = ""
    _param_names: ClassVar[tuple[str, ...]] = ()

    def __init__(self, dim: int | None = None, *, seed: int = 0):
        self.dim = dim
        self.seed = seed

    # -- fitting -----------------------------------------------------------------------------

    def fit(self, dim_or_X: int | np.ndarray | None = None) -> Transform:
        """Draw the transform for a dimension.

        Parameters
        ----------
        dim_or_X : int or array of shape (n, d), optional
            The dimension, or data whose width is the dimension (its values are not used).
            Defaults to the ``dim`` given at construction.

        Returns
        -------
        self
        """
        dim = self._resolve_dim(dim_or_X)
        _check_seed(self.seed)
        self._validate_params()
        self.dim_ = dim
        self._fit(dim)
        return self

    def _resolve_dim(self, dim_or_X: Any) -> int:
        if dim_or_X is None:
            if self.dim is None:
                raise ValueError(
                    f"{type(self).__name__}.fit needs a dimension: pass fit(dim) or fit(X), "
                    "or construct with dim=..."
                )
            return _check_int("dim", self.dim, 1)
        if isinstance(dim_or_X, (int, np.integer)) and not isinstance(dim_or_X, bool):
            dim = _check_int("dim", dim_or_X, 1)
        elif np.ndim(dim_or_X) == 0:
            raise TypeError(
                f"fit expects an int dimension (dim) or a 2-D array, got {dim_or_X!r} "
                f"({type(dim_or_X).__name__}); pass int(dim)"
            )
        else:
            shape = np.shape(dim_or_X)
            if len(shape) != 2:
                raise ValueError(
                    f"fit expects an int dimension or a 2-D array (n, d), got shape {shape}"
                )
            dim = _check_int("dim (width of X)", shape[1], 1)
        if self.dim is not None and _check_int("dim", self.dim, 1) != dim:
            raise ValueError(
                f"{type(self).__name__} was constructed with dim={self.dim} but fit got "
                f"dimension {dim}; construct with dim=None or fit the matching dimension"
            )
        return dim

    def _validate_params(self) -> None:
        """Check constructor parameters (subclasses extend)."""

    @property
    def is_fitted(self) -> bool:
        """True once :meth:`fit` (or :meth:`from_state`) has run."""
        return hasattr(self, "dim_")

    # -- applying ----------------------------------------------------------------------------

    def transform(self, X: np.ndarray) -> np.ndarray:
        """Rotate rows: ``X`` (d,) or (n, d) -> float32 C-contiguous array of the same shape."""
        X2, was_1d = self._check_input(X, "transform")
        Y = self._apply(X2)
        return Y[0] if was_1d else Y

    def inverse_transform(self, X: np.ndarray) -> np.ndarray:
        """Undo :meth:`transform`: ``X`` (d,) or (n, d) -> float32 array of the same shape."""
        X2, was_1d = self._check_input(X, "inverse_transform")
        Y = self._apply_inverse(X2)
        return Y[0] if was_1d else Y

    def _check_input(self, X: Any, method: str) -> tuple[np.ndarray, bool]:
        self._require_fitted(method)
        X = np.asarray(X)
        if X.dtype.kind not in "fiu":
            raise TypeError(f"{method} expects a real float array, got dtype {X.dtype}")
        if X.ndim not in (1, 2) or X.shape[-1] != self.dim_:
            raise ValueError(
                f"{method} expects shape ({self.dim_},) or (n, {self.dim_}), got {X.shape}; "
                f"this {type(self).__name__} was fitted for dim={self.dim_}"
            )
        was_1d = X.ndim == 1
        # Copies only when needed; no transform writes into its input.
        X2 = np.ascontiguousarray(X.reshape(1, -1) if was_1d else X, dtype=np.float32)
        return X2, was_1d

    def _apply(self, X: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _apply_inverse(self, X: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    # -- state -------------------------------------------------------------------------------

    def get_params(self) -> dict[str, Any]:
        """Constructor parameters (``dim``, ``seed`` and the subclass's own)."""
        params = {"dim": self.dim, "seed": self.seed}
        params.update({k: getattr(self, k) for k in self._param_names})
        return params

    def get_state(self) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Everything needed to rebuild this fitted transform exactly.

        Returns
        -------
        params : dict
            JSON-serializable: ``name``, ``dim`` (the fitted dimension), ``seed`` and the
            subclass parameters.
        arrays : dict of str to ndarray
            The drawn matrices / signs / permutations.
        """
        self._require_fitted("get_state")
        params = {"name": self.name, **self.get_params(), "dim": int(self.dim_)}
        params = {k: (int(v) if isinstance(v, np.integer) else v) for k, v in params.items()}
        return params, {k: np.ascontiguousarray(v) for k, v in self._arrays().items()}

    @classmethod
    def from_state(cls, params: dict[str, Any], arrays: dict[str, np.ndarray]) -> Transform:
        """Rebuild a fitted transform from :meth:`get_state` output (no random draws)."""
        params = dict(params)
        name = params.pop("name", cls.name)
        if name != cls.name:
            raise ValueError(
                f"{cls.__name__}.from_state got params for name={name!r}, expected "
                f"{cls.name!r}; use bbqlib.transforms.transform_from_state to dispatch"
            )
        unknown = set(params) - {"dim", "seed", *cls._param_names}
        if unknown:
            raise ValueError(
                f"{cls.__name__}.from_state got unknown parameters {sorted(unknown)}; "
                f"expected dim, seed{''.join(', ' + p for p in cls._param_names)}"
            )
        obj = cls(**params)
        obj.dim_ = obj._resolve_dim(None)
        _check_seed(obj.seed)
        obj._validate_params()
        obj._set_arrays(arrays)
        return obj

    def fingerprint(self) -> str:
        """Short stable hash (16 hex digits) of the state, to check a stored transform."""
        params, arrays = self.get_state()
        h = hashlib.sha256(json.dumps(params, sort_keys=True).encode())
        for key in sorted(arrays):
            a = arrays[key]
            h.update(f"{key}:{a.dtype.str}:{a.shape}".encode())
            h.update(a.tobytes())
        return h.hexdigest()[:16]

    def _arrays(self) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def _set_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        raise NotImplementedError

    def _require_fitted(self, method: str) -> None:
        if not self.is_fitted:
            raise ValueError(
                f"{type(self).__name__} is not fitted: call fit(dim) before {method}()"
            )

    @staticmethod
    def _stored_array(
        arrays: dict[str, np.ndarray], key: str, shape: tuple[int, ...], dtype: Any
    ) -> np.ndarray:
        """Fetch ``arrays[key]`` checked against the shape the params imply (corrupt files)."""
        if key not in arrays:
            raise ValueError(f"transform state is missing array {key!r} (got {sorted(arrays)})")
        a = np.asarray(arrays[key])
        if a.shape != shape:
            raise ValueError(f"transform state array {key!r} has shape {a.shape}, expected {shape}")
        return np.ascontiguousarray(a, dtype=dtype).copy()

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({args})"
