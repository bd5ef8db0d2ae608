"""Clustering for the DiskBBQ-style IVF index: hierarchical k-means, SOAR, parent level.

Follows Elasticsearch's ``HierarchicalKMeans`` / ``KMeansLocal`` (spec
``bbq-osq-diskbbq.md`` §6.2-6.4):

1. ``n <= target``: one centroid, the mean.
2. Split: ``k = clamp(floor((n + target/2) / target), 2, 128)``; Lloyd (squared L2) on a
   random sample of ``min(64 k, n)`` vectors for at most 6 iterations, stopping when no
   assignment changes; if sampled, one assign-and-update pass over all ``n``. Clusters with
   more than ``round(1.34 target)`` members are split again the same way (the first
   sub-centroid takes the parent's slot, the others are appended); empty clusters are dropped.
3. Refinement: at most 6 Lloyd iterations on a sample of ``min(32 #c, n)`` vectors where,
   when there are more than 128 centroids, a vector only looks at its current centroid and
   that centroid's 128 nearest centroids; then one full pass if sampled.
4. SOAR: a second list per vector (:func:`soar_assign`).

The numeric work runs in numba kernels (:mod:`bbqlib._kernels.kmeans`); this package
validates, samples, groups and drives. Neither scikit-learn nor scipy is imported: the
kernels are faster than ``sklearn.metrics.pairwise_distances_argmin`` and a float32 BLAS
matmul per block (``benchmarks/results/clustering.md``).

Determinism: for a given ``seed`` the results are identical run to run and for any numba
thread count (threads split whole clusters or whole dimensions, never a sum).
"""

from .assign import NEIGHBOURHOOD_SIZE, centroid_neighbourhoods, nearest_centroid
from .kmeans import (
    MAX_ITERATIONS,
    MAX_K,
    SAMPLES_PER_CLUSTER,
    TARGET_SIZE_RANGE,
    hierarchical_kmeans,
)
from .kmeans import SPLIT_FACTOR as SPLIT_FACTOR
from .parents import CENTROIDS_PER_PARENT_RANGE as CENTROIDS_PER_PARENT_RANGE
from .parents import ParentLevel, parent_level
from .soar import SOAR_LAMBDA, soar_assign

__all__ = [
    "MAX_K",
    "MAX_ITERATIONS",
    "SAMPLES_PER_CLUSTER",
    "NEIGHBOURHOOD_SIZE",
    "SOAR_LAMBDA",
    "TARGET_SIZE_RANGE",
    "ParentLevel",
    "hierarchical_kmeans",
    "nearest_centroid",
    "centroid_neighbourhoods",
    "soar_assign",
    "parent_level",
]
