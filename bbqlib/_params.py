"""Declarative parameter checks with one error template (scikit-learn's ``_param_validation``).

A class lists its constraints once, as data::

    _constraints = {"iters": [Integer(0)], "lam": [Real(0.0, 1.0)], "seed": [None, Integer()]}

and :func:`validate_params` raises ``ValueError("iters must be an integer >= 0, got -1")``
for any value no constraint accepts. ``None`` in a list accepts ``None``; a plain value
accepts itself; a string list is a set of options.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from numbers import Integral
from numbers import Real as RealNumber

__all__ = [
    "InvalidParameterError",
    "Integer",
    "Real",
    "Boolean",
    "Options",
    "check_param",
    "check_int",
    "validate_params",
]


class InvalidParameterError(ValueError, TypeError):
    """A parameter's value or type is not accepted (a ``ValueError`` and a ``TypeError``)."""


@dataclass(frozen=True)
class Integer:
    """An integer (not a bool) in ``[low, high]``; either end may be None."""

    low: int | None = None
    high: int | None = None

    def accepts(self, v) -> bool:
        if isinstance(v, bool) or not isinstance(v, Integral):
            return False
        return (self.low is None or v >= self.low) and (self.high is None or v <= self.high)

    def describe(self) -> str:
        if self.low is not None and self.high is not None:
            return f"an integer in [{self.low}, {self.high}]"
        if self.low == 1:
            return "a positive integer"
        if self.low is not None:
            return f"an integer >= {self.low}"
        if self.high is not None:
            return f"an integer <= {self.high}"
        return "an integer"


@dataclass(frozen=True)
class Real:
    """A finite real number (not a bool) in ``[low, high]`` (``low_open``: ``(low, high]``)."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False

    def accepts(self, v) -> bool:
        if isinstance(v, bool) or not isinstance(v, RealNumber) or not math.isfinite(v):
            return False
        if self.low is not None and (v <= self.low if self.low_open else v < self.low):
            return False
        return self.high is None or v <= self.high

    def describe(self) -> str:
        left = "(" if self.low_open else "["
        lo = "-inf" if self.low is None else f"{self.low:g}"
        hi = "inf" if self.high is None else f"{self.high:g}"
        return f"a finite number in {left}{lo}, {hi}]"


@dataclass(frozen=True)
class Boolean:
    def accepts(self, v) -> bool:
        return isinstance(v, bool) or type(v).__name__ == "bool_"

    def describe(self) -> str:
        return "True or False"


@dataclass(frozen=True)
class Options:
    """One of a fixed set of values."""

    values: tuple

    def accepts(self, v) -> bool:
        return any(v is o or (type(v) is type(o) and v == o) for o in self.values)

    def describe(self) -> str:
        return "one of " + ", ".join(repr(o) for o in self.values)


def _as_constraint(c):
    if c is None:
        return Options((None,))
    if isinstance(c, (Integer, Real, Boolean, Options)):
        return c
    return Options((c,))


def check_param(value, name: str, constraints) -> object:
    """Return ``value`` if one of ``constraints`` accepts it, else raise
    :class:`InvalidParameterError`."""
    cs = [_as_constraint(c) for c in constraints]
    if any(c.accepts(value) for c in cs):
        return value
    what = " or ".join(c.describe() for c in cs)
    raise InvalidParameterError(f"{name} must be {what}, got {value!r}")


def check_int(value, name: str, low: int | None = None, high: int | None = None) -> int:
    """An integer in ``[low, high]`` as a Python int (one template for every integer check)."""
    return int(check_param(value, name, [Integer(low, high)]))


def validate_params(obj, constraints: dict) -> None:
    """Check every attribute named in ``constraints`` on ``obj``."""
    for name, cs in constraints.items():
        check_param(getattr(obj, name), name, cs)
