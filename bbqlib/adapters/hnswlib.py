"""Moved to :mod:`bbqlib.integrations.hnswlib`; this path is removed in bbqlib 0.4."""

from .._deprecated import moved

moved(__name__, "bbqlib.integrations.hnswlib")
