"""Code layouts: codes as the kernels see them, the layout → kernel table, the scans.

:mod:`.codes` holds :class:`DocCodes` / :class:`QueryCodes` (each naming its registry row),
:mod:`.kernels` the table of kernels per query kind and layout, :mod:`.scan` the scans that
rank by keys (higher is better, everywhere inside bbqlib). The rest of the search path
(rerank, top-k merges, the exit) is :mod:`bbqlib.search`.
"""

# bbqlib.search first: its modules import layouts' and layouts.scan imports search.topk, so
# loading search completely before this package's modules makes every import order work.
from .. import search as _search  # noqa: F401
from .codes import DocCodes, QueryCodes
from .kernels import KERNELS, LUT_MAX_QUERY_PLANES, kernels_for, use_lut
from .scan import QUERY_BATCH, estimate_raw, query_tables, topk_keys

__all__ = [
    "DocCodes",
    "QueryCodes",
    "KERNELS",
    "LUT_MAX_QUERY_PLANES",
    "kernels_for",
    "use_lut",
    "QUERY_BATCH",
    "estimate_raw",
    "query_tables",
    "topk_keys",
]
