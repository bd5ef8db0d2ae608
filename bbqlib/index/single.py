"""Moved to :mod:`bbqlib.index.tiers` (tiers), :mod:`bbqlib.index.one`,
:mod:`bbqlib.index.flat.one`; this path is removed in bbqlib 0.4."""

from .._deprecated import moved

moved(__name__, "bbqlib.index.tiers")
