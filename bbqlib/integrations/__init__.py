"""Plug bbqlib's codes and scorers into other engines.

* :class:`CandidateScorer` (``quantizer.scorer(query, enc)``) and :func:`exact_scorer`:
  estimates and exact values for candidate ids any engine produces.
* :mod:`bbqlib.integrations.usearch` — an HNSW graph built by usearch over BBQ codes.
* :mod:`bbqlib.integrations.faiss`, :mod:`bbqlib.integrations.hnswlib` — faiss / hnswlib routing
  queries to lists of bbqlib codes.
* :mod:`bbqlib.integrations.ann_benchmarks` — wrappers of bbqlib's indexes with the interface of
  ann-benchmarks' ``BaseANN``; :mod:`bbqlib.integrations.ann_benchmarks_plugin` installs them into
  a harness checkout (``python -m bbqlib ann-benchmarks-plugin HARNESS_DIR``).

The engines are optional: each submodule imports its engine when used and names the pip
extra when it is missing.
"""

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
