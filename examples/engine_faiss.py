"""faiss routes, bbqlib scores: a faiss IVF coarse quantizer over lists of 1-bit BBQ codes.

For a faiss user: keep your trained ``IndexIVF*`` (or any faiss index of centroids) for the
routing and hand the lists to bbqlib, which scans them with its asymmetric estimate and
reranks on float vectors. Needs faiss (``pip install faiss-cpu``).
Run: ``python examples/engine_faiss.py``.
"""

import faiss
import numpy as np

from bbqlib.analysis.ground_truth import exact_knn
from bbqlib.analysis.recall import recall_at_k
from bbqlib.cli import load_demo_sample
from bbqlib.integrations.faiss import FaissIVFIndex

sample = load_demo_sample()
X, Q = sample["base"], sample["queries"]  # unit vectors: inner product = cosine
_, gt = exact_knn(X, Q, 10, metric="cosine", scores_first=True)

# Your existing faiss index (here: IVF-Flat, 32 lists, trained on the data)...
ivf = faiss.IndexIVFFlat(faiss.IndexFlatIP(X.shape[1]), X.shape[1], 32, faiss.METRIC_INNER_PRODUCT)
ivf.train(X)

# ...routes queries to bbqlib's lists of 1-bit codes (48 B + 14 B per vector instead of 1536 B).
index = FaissIVFIndex(coarse=ivf, nprobe=8, bits=1, similarity="cosine")
index.add(X)
for nprobe in (2, 8, 32):
    scores, ids = index.search(Q, k=10, nprobe=nprobe)
    print(f"nprobe {nprobe:2d}: recall@10 {recall_at_k(ids, gt, 10):.3f}")

# Or let bbqlib train the coarse quantizer with faiss k-means.
own = FaissIVFIndex(nlist=32, nprobe=8, bits=1, similarity="cosine")
own.add(X)
print(f"faiss k-means coarse, nprobe 8: recall@10 {recall_at_k(own.search(Q, 10)[1], gt, 10):.3f}")
print(f"codes + ids per vector: {own.memory_usage / len(X):.0f} B")
assert np.all(own.list_sizes >= 0)
