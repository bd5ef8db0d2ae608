"""Evaluation tools: recall with ties, exact ground truth, estimator error analysis."""

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
