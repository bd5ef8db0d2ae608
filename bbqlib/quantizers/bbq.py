"""Moved to :mod:`bbqlib.quantizers.osq.quantizer`; this path is removed in bbqlib 0.4."""

from .._deprecated import moved

moved(__name__, "bbqlib.quantizers.osq.quantizer")
