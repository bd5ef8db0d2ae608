"""Search: candidate scorers, rerank, top-k merges and the one exit.

One path serves every index and adapter: a quantizer makes :class:`~bbqlib.layouts.DocCodes` /
:class:`~bbqlib.layouts.QueryCodes` (each naming its registry row), :mod:`bbqlib.layouts.kernels`
picks the kernels, :mod:`bbqlib.layouts.scan` ranks by keys (higher is better, everywhere
inside bbqlib), :mod:`.rerank` rescores on float vectors with the one exact kernel,
:mod:`.topk` merges heaps, and :func:`.finish.finish` maps keys to the scores a caller sees.

The package also re-exports the code layouts' names (from :mod:`bbqlib.layouts`), so it holds
every name the old ``bbqlib.scoring`` had (that path is a deprecated shim of this package).
"""

from ..layouts.codes import DocCodes, QueryCodes
from ..layouts.kernels import KERNELS, LUT_MAX_QUERY_PLANES, kernels_for, use_lut
from ..layouts.scan import QUERY_BATCH, estimate_raw, query_tables, topk_keys
from .candidates import (
    CandidateScorer,
    ExactScorer,
    check_ids,
    exact_candidates,
    exact_scorer,
    score_candidates,
)
from .finish import SCORE_KINDS, check_scores, finish, pad_value, result_columns
from .rerank import (
    OVERSAMPLE_LIMIT,
    candidate_count,
    check_oversample,
    exact_mode,
    exact_values,
    rerank_keys,
)
from .topk import EMPTY_ID, dedup_topk, merge_topk

__all__ = [
    "CandidateScorer",
    "DocCodes",
    "EMPTY_ID",
    "ExactScorer",
    "KERNELS",
    "LUT_MAX_QUERY_PLANES",
    "OVERSAMPLE_LIMIT",
    "QUERY_BATCH",
    "QueryCodes",
    "SCORE_KINDS",
    "candidate_count",
    "check_ids",
    "check_oversample",
    "check_scores",
    "dedup_topk",
    "estimate_raw",
    "exact_candidates",
    "exact_mode",
    "exact_scorer",
    "exact_values",
    "finish",
    "kernels_for",
    "merge_topk",
    "pad_value",
    "query_tables",
    "rerank_keys",
    "result_columns",
    "score_candidates",
    "topk_keys",
    "use_lut",
]
