"""Candidate scorers for other engines; they live in :mod:`bbqlib.search.candidates`."""

from ..search.candidates import (
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
