"""Moved to :mod:`bbqlib.quantizers.rabitq.codes`; this path is removed in bbqlib 0.4."""

from .._deprecated import moved

moved(__name__, "bbqlib.quantizers.rabitq.codes")
