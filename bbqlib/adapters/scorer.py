"""Candidate scorers for other engines; they live in :mod:`bbqlib.scoring.candidates`."""

from ..scoring.candidates import (
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
