"""Quantizer classes by name, for files: ``quantizer_from_state`` inverts ``get_state``."""

from __future__ import annotations

__all__ = ["register_quantizer", "quantizer_from_state"]

_REGISTRY: dict[str, type] = {}


def register_quantizer(cls: type) -> type:
    """Class decorator: make ``cls`` loadable from its ``get_state()``."""
    _REGISTRY[cls.__name__] = cls
    return cls


def quantizer_from_state(params: dict, arrays: dict):
    """Rebuild a fitted quantizer from ``(params, arrays)`` written by its ``get_state``."""
    name = params.get("class")
    if name not in _REGISTRY:
        raise ValueError(f"unknown quantizer class {name!r} in file; known: {sorted(_REGISTRY)}")
    return _REGISTRY[name].from_state(params, arrays)
