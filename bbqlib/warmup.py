"""Moved to :mod:`bbqlib.runtime.warmup`; this path is removed in bbqlib 0.4."""

from ._deprecated import moved

moved(__name__, "bbqlib.runtime.warmup")
