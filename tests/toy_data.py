"""Small clustered data sets with exact answers, shared by the adapter and plugin tests."""

from __future__ import annotations

import numpy as np

from bbqlib.similarity import Similarity, exact_raw


def clustered(n, d, seed=0, nq=20):
    """Vectors near a 6-dimensional subspace (like embeddings: low intrinsic dimension)."""
    g = np.random.default_rng(seed)
    basis = g.normal(size=(6, d))
    Z = g.normal(size=(n + nq, 6)) @ basis + 0.3 + 0.1 * g.normal(size=(n + nq, d))
    Z = Z.astype(np.float32)
    return Z[:n], Z[n:]


def truth(X, Q, sim, k):
    s = Similarity(sim)
    if s is Similarity.COSINE:
        X = X / np.linalg.norm(X, axis=1, keepdims=True)
        Q = Q / np.linalg.norm(Q, axis=1, keepdims=True)
    raw = exact_raw(s, Q, X)
    key = -raw if s.is_distance else raw
    return np.argsort(-key, axis=1, kind="stable")[:, :k]


def recall(ids, truth):
    return np.mean([len(set(a) & set(b)) / len(b) for a, b in zip(ids, truth, strict=True)])
