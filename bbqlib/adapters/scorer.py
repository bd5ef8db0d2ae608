"""Moved to :mod:`bbqlib.search.candidates`; this path is removed in bbqlib 0.4."""

from .._deprecated import moved

moved(__name__, "bbqlib.search.candidates")
