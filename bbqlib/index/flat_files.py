"""Moved to :mod:`bbqlib.index.flat.files`; this path is removed in bbqlib 0.4."""

from .._deprecated import moved

moved(__name__, "bbqlib.index.flat.files")
