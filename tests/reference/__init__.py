"""Slow, readable NumPy twins of bbqlib's fast paths; tests compare the two on the same inputs.

* :mod:`reference.osq` — optimized scalar quantization (spec §1), vectorized over rows.
* :mod:`reference.packing` — packAsBinary, bit planes, transposeHalfByte, dibit (spec §3).
* :mod:`reference.scoring` — integer dot products, the correction algebra, top-k by full sort.
* :mod:`reference.rerank` — exact rescoring of candidates in the kernels' 8-lane order.
* :mod:`reference.transforms`, :mod:`reference.clustering` — rotations and k-means.
"""
