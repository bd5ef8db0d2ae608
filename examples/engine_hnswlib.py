"""hnswlib routes, bbqlib scores: an HNSW graph over k-means centroids, lists of BBQ codes.

For an hnswlib user: the graph holds only the centroids (float32 is cheap there); bbqlib keeps
every vector as a 1-bit code and scans the lists the graph picks. Needs hnswlib
(``pip install hnswlib``). Run: ``python examples/engine_hnswlib.py``.
"""

from bbqlib.analysis.ground_truth import exact_knn
from bbqlib.analysis.recall import recall_at_k
from bbqlib.cli import load_demo_sample
from bbqlib.integrations.hnswlib import HnswlibIVFIndex

sample = load_demo_sample()
X, Q = sample["base"], sample["queries"]
_, gt = exact_knn(X, Q, 10, metric="cosine", scores_first=True)

index = HnswlibIVFIndex(cluster_size=128, nprobe=8, bits=1, similarity="cosine", M=16)
index.add(X)  # bbqlib's hierarchical k-means, centroids into an hnswlib graph
print(f"{index.nlist} lists of about {int(index.list_sizes.mean())} vectors")
for nprobe in (2, 8, 16):
    scores, ids = index.search(Q, k=10, nprobe=nprobe)
    print(f"nprobe {nprobe:2d}: recall@10 {recall_at_k(ids, gt, 10):.3f}")
print(
    f"the graph: {index.graph.get_current_count()} centroids; "
    f"codes + ids per vector: {index.memory_usage / len(X):.0f} B"
)
