"""How good is a quantizer's estimator? Bias, spread, rank agreement and bound coverage.

Every bbqlib quantizer estimates a *raw* value per (query, vector) pair: the squared L2
distance (euclidean) or the inner product (cosine, dot_product, max_inner_product).
:func:`estimation_error` compares those estimates with the exact float64 values and
summarizes the per-pair error ``est - exact``; :func:`unbiasedness_test` repeats the
measurement over random rotations to test the claim "the estimator is unbiased".

What is measured (per band of true neighbours, see :func:`estimation_error`):

``bias``
    Pooled mean error with a confidence interval. Errors of one query are correlated (one
    query vector, one quantized query), and so are errors of one stored vector across queries
    (one code), so the pairs are not independent: the interval is **two-way cluster-robust**
    (Cameron, Gelbach & Miller 2011), clustered on queries and on vectors.
``sd``, ``rmse``, ``mean_abs``
    Spread of the error.
``rel_error``
    Mean of ``|est - exact| / |exact|`` over pairs with ``exact != 0``. It is the usual figure
    for distances; inner products near 0 make it large, so for them read it in the top bands.
``spearman``, ``kendall``
    Rank correlation (ties averaged; Kendall's tau-b) between estimates and exact values,
    within each query's band, averaged over queries. Large bands are subsampled (see
    ``rank_sample``).
``coverage``, ``mean_half_width``
    Share of pairs with ``lower <= exact <= upper`` and the mean half-width of the bound, for
    quantizers that return error bounds (:class:`~bbqlib.RaBitQQuantizer`).
"""

from .estimation import DEFAULT_BANDS as DEFAULT_BANDS
from .estimation import estimation_error
from .reports import BandStats, ErrorReport, PairSample, UnbiasednessResult, compare_table
from .unbiasedness import unbiasedness_test

__all__ = [
    "BandStats",
    "ErrorReport",
    "PairSample",
    "UnbiasednessResult",
    "compare_table",
    "estimation_error",
    "unbiasedness_test",
]
