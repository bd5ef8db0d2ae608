"""Moved to :mod:`bbqlib.quantizers.int8`; this path is removed in bbqlib 0.4."""

from ..._deprecated import moved

moved(__name__, "bbqlib.quantizers.int8")
