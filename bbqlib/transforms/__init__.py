"""Seeded random orthogonal transforms applied before quantization.

* ``"dense"`` — :class:`DenseRotation`, a Haar-random orthogonal matrix (O(d²) per vector).
* ``"block"`` — :class:`BlockPreconditioner`, Elasticsearch's ``precondition: true``
  (random orthogonal 32×32 blocks on a random split of the dimensions, O(d·32)).
* ``"hadamard"`` — :class:`HadamardRotation`, RaBitQ-Library's FhtKac rotation (O(d log d)).

All are isometries (norms, dot products and distances are preserved up to float32 rounding),
deterministic from ``(dim, seed)``, and restorable from :meth:`Transform.get_state`.
"""

from __future__ import annotations

from typing import Any

from .base import Transform
from .block import BlockPreconditioner
from .dense import DenseRotation
from .hadamard import HadamardRotation

__all__ = [
    "Transform",
    "DenseRotation",
    "BlockPreconditioner",
    "HadamardRotation",
    "TRANSFORMS",
    "make_transform",
    "transform_from_state",
]

#: Transform classes by their ``name``.
TRANSFORMS: dict[str, type[Transform]] = {
    cls.name: cls for cls in (DenseRotation, BlockPreconditioner, HadamardRotation)
}


def make_transform(
    spec: str | bool | Transform | None, dim: int, seed: int | None = None
) -> Transform | None:
    """Build a fitted transform from a user-facing ``precondition`` / ``rotation`` value.

    Parameters
    ----------
    spec : None, bool, str or Transform
        ``None`` or ``False``: no transform (returns ``None``). ``True``: ``"block"`` (as
        Elasticsearch's ``precondition: true``). ``"dense"``, ``"block"`` or ``"hadamard"``:
        that transform. A :class:`Transform` instance: returned as is, fitted to ``dim``
        if it is not fitted yet (``seed`` is then ignored).
    dim : int
        Dimension of the vectors.
    seed : int, optional
        Seed; defaults to the class default (42 for ``"block"`` as in Elasticsearch, 0 else).

    Returns
    -------
    Transform or None
    """
    if spec is None or spec is False:
        return None
    if spec is True:
        spec = "block"
    if isinstance(spec, Transform):
        if not spec.is_fitted:
            return spec.fit(dim)
        if spec.dim_ != dim:
            raise ValueError(
                f"the {type(spec).__name__} passed was fitted for dim={spec.dim_}, but the "
                f"data have dim={dim}; pass an unfitted transform or one fitted to {dim}"
            )
        return spec
    if isinstance(spec, str):
        cls = TRANSFORMS.get(spec.strip().lower())
        if cls is None:
            raise ValueError(
                f"unknown transform {spec!r}: use one of {sorted(TRANSFORMS)}, True (block), "
                "None, or a Transform instance"
            )
        kwargs = {} if seed is None else {"seed": seed}
        return cls(**kwargs).fit(dim)
    raise TypeError(
        f"transform spec must be None, a bool, a name in {sorted(TRANSFORMS)} or a Transform "
        f"instance, got {type(spec).__name__}"
    )


def transform_from_state(params: dict[str, Any], arrays: dict[str, Any]) -> Transform:
    """Rebuild a fitted transform from ``Transform.get_state()`` output, dispatching on
    ``params["name"]``."""
    name = params.get("name")
    if name not in TRANSFORMS:
        raise ValueError(f"transform state has name={name!r}; expected one of {sorted(TRANSFORMS)}")
    return TRANSFORMS[name].from_state(params, arrays)
