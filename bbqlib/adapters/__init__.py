"""Plug bbqlib's codes and scorers into other engines.

* :class:`CandidateScorer` (``quantizer.scorer(query, enc)``) and :func:`exact_scorer`:
  estimates and exact values for candidate ids any engine produces.
* :mod:`bbqlib.adapters.usearch` — an HNSW graph built by usearch over BBQ codes.
* :mod:`bbqlib.adapters.faiss`, :mod:`bbqlib.adapters.hnswlib` — faiss / hnswlib routing
  queries to lists of bbqlib codes.
* :mod:`bbqlib.adapters.ann_benchmarks` — BaseANN-shaped wrappers of bbqlib's indexes.

The engines are optional: each submodule imports its engine when used and names the pip
extra when it is missing.
"""

from .scorer import (
    CandidateScorer,
    ExactScorer,
    check_ids,
    exact_candidates,
    exact_scorer,
    score_candidates,
)

__all__ = [
    "CandidateScorer",
    "ExactScorer",
    "check_ids",
    "exact_candidates",
    "exact_scorer",
    "score_candidates",
]
