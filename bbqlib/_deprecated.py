"""Old module paths that keep working after a module moves (the deprecation policy).

A moved module leaves a shim at its old path, three lines::

    \"\"\"Moved to :mod:`bbqlib.new.place`; this path is removed in bbqlib 0.4.\"\"\"
    from .._deprecated import moved
    moved(__name__, "bbqlib.new.place")

:func:`moved` turns the shim into a module whose attributes are the new module's: reading one
(``from old import X``, ``old.X``, ``from old import *``, a pickle naming a class by its old
module) returns the new module's object, with a ``FutureWarning`` naming the new path and the
release that removes the old one; assigning one (``old.SETTING = value``, for the documented
module-level settings) sets it in the new module, with the same warning, so code that tunes a
setting through the old path keeps changing what the library reads. ``import old`` alone does
not warn: only a use does. Names of the import machinery (dunders) and submodules bound on a
shim package stay the shim's own.
"""

from __future__ import annotations

import importlib
import sys
import types
import warnings

__all__ = ["REMOVED_IN", "moved"]

#: The release that removes the old paths announced now (two minor releases after 0.2).
REMOVED_IN = "0.4"


def _warn(module: types.ModuleType, name: str, what: str) -> None:
    new = module.__dict__["_moved_to"]
    warnings.warn(
        f"{module.__name__} is deprecated and removed in bbqlib {REMOVED_IN}: {what} {name} "
        f"from {new} instead",
        FutureWarning,
        stacklevel=3,
    )


class _MovedModule(types.ModuleType):
    """A module whose public attributes live in another module (:func:`moved`)."""

    def _target(self) -> types.ModuleType:
        return importlib.import_module(self.__dict__["_moved_to"])

    def __getattr__(self, name: str):
        if name.startswith("__") and name != "__all__":
            raise AttributeError(name)
        target = self._target()
        try:
            value = getattr(target, name)
        except AttributeError:
            raise AttributeError(
                f"module {self.__name__!r} (moved to {target.__name__}) has no attribute {name!r}"
            ) from None
        _warn(self, name, "import")
        return value

    def __setattr__(self, name: str, value) -> None:
        if name.startswith("__") or isinstance(value, types.ModuleType):
            super().__setattr__(name, value)  # the import machinery's, a shim package's own
            return
        _warn(self, name, "set")
        setattr(self._target(), name, value)

    def __dir__(self) -> list[str]:
        return sorted(set(super().__dir__()) | set(dir(self._target())))


def moved(old: str, new: str) -> None:
    """Make the module named ``old`` (being imported: pass ``__name__``) a shim of ``new``.

    Parameters
    ----------
    old : the shim module's name (``__name__`` of the calling module).
    new : the module that holds its contents now.
    """
    module = sys.modules[old]
    module.__dict__["_moved_to"] = new
    module.__class__ = _MovedModule
