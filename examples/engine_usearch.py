"""usearch's HNSW graph over 1-bit BBQ codes, on the sample bundled with bbqlib.

usearch walks its graph with bbqlib's compiled doc x doc estimate over 72-byte records; bbqlib
rescores the candidates with its 4-bit-query estimate and reranks on the float vectors.
Needs usearch (``pip install usearch``). Run: ``python examples/engine_usearch.py``.
"""

import numpy as np

from bbqlib.analysis.ground_truth import exact_knn
from bbqlib.analysis.recall import recall_at_k
from bbqlib.cli import load_demo_sample
from bbqlib.integrations import exact_scorer
from bbqlib.integrations.usearch import USearchIndex

sample = load_demo_sample()  # 4,000 Debian package descriptions (MiniLM, d=384), 200 queries
X, Q = sample["base"], sample["queries"]

index = USearchIndex(bits=1, similarity="cosine", connectivity=16, expansion_search=64)
index.add(X)
scores, ids = index.search(Q, k=10)

_, gt = exact_knn(X, Q, 10, metric="cosine", scores_first=True)
print(f"recall@10 {recall_at_k(ids, gt, 10):.3f} over {len(Q)} queries")
per_vector = index.serialized_bytes / len(X)
print(f"index bytes per vector: {per_vector:.0f} (graph + codes; the float32 vector is 1536)")
print(f"query: {sample['query_texts'][0][:70]!r}")
for score, i in zip(scores[0, :3], ids[0, :3], strict=True):
    print(f"  {score:.3f}  {sample['base_texts'][i][:70]!r}")

# The same pieces for an engine of your own: estimates and exact values of chosen ids.
q = index.quantizer
score_ids = q.scorer(Q[0], q.encode(X))  # the query is quantized once, here
candidates = np.array([5, 17, 42, int(ids[0, 0])])
print("estimates:", np.round(score_ids(candidates), 4))
print("exact:    ", np.round(exact_scorer(Q[0], X, "cosine")(candidates), 4))
