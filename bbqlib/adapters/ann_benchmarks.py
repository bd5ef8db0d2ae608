"""Moved to :mod:`bbqlib.integrations.ann_benchmarks`; this path is removed in bbqlib 0.4."""

from .._deprecated import moved

moved(__name__, "bbqlib.integrations.ann_benchmarks")
