"""Moved to :mod:`bbqlib.layouts.codes`; this path is removed in bbqlib 0.4."""

from .._deprecated import moved

moved(__name__, "bbqlib.layouts.codes")
