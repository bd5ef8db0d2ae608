"""Evaluation tools: recall with ties, exact ground truth, estimator error analysis, and a
comparison of the quantizer families at equal bytes per vector."""

from .compare import Comparison, compare
from .estimators import (
    BandStats,
    ErrorReport,
    UnbiasednessResult,
    compare_table,
    estimation_error,
    unbiasedness_test,
)
from .ground_truth import exact_knn
from .recall import recall_at_k, recall_per_query

__all__ = [
    "compare",
    "Comparison",
    "exact_knn",
    "recall_at_k",
    "recall_per_query",
    "BandStats",
    "ErrorReport",
    "UnbiasednessResult",
    "compare_table",
    "estimation_error",
    "unbiasedness_test",
]
