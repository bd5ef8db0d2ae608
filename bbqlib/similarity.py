"""Similarities, exact values and Lucene's score mappings.

Raw values ("estimates") are squared L2 distances for euclidean and inner products otherwise;
ranking always uses the raw value (smaller distance or larger inner product first). Scores are
Lucene's mappings of raw values into "higher is better" numbers:

==================  ===============================================
euclidean           ``1 / (1 + max(d2, 0))``
dot_product/cosine  ``(1 + clamp(ip, -1, 1)) / 2``
max_inner_product   ``1 / (1 - ip)`` if ``ip < 0`` else ``ip + 1``
==================  ===============================================
"""

from __future__ import annotations

import enum

import numpy as np

__all__ = ["Similarity", "resolve_similarity", "scores_from_raw", "exact_raw", "rank_key"]


class Similarity(enum.Enum):
    EUCLIDEAN = "euclidean"
    DOT_PRODUCT = "dot_product"
    COSINE = "cosine"
    MAX_INNER_PRODUCT = "max_inner_product"

    @property
    def code(self) -> int:
        """Stable number for files."""
        return _CODES[self]

    @property
    def is_distance(self) -> bool:
        """True when the raw value is a distance (smaller is better)."""
        return self is Similarity.EUCLIDEAN

    def key(self, raw):
        """The ranking key of raw values (higher is better): ``-d²`` or the inner product.

        Every scan, heap and merge inside bbqlib ranks by keys; :meth:`raw` inverts it.
        """
        return -raw if self is Similarity.EUCLIDEAN else raw

    def raw(self, key):
        """Raw values (``d²`` or the inner product) of ranking keys."""
        return -key if self is Similarity.EUCLIDEAN else key


_CODES = {
    Similarity.EUCLIDEAN: 0,
    Similarity.DOT_PRODUCT: 1,
    Similarity.COSINE: 2,
    Similarity.MAX_INNER_PRODUCT: 3,
}
_ALIASES = {
    "euclidean": Similarity.EUCLIDEAN,
    "l2": Similarity.EUCLIDEAN,
    "l2_norm": Similarity.EUCLIDEAN,
    "dot_product": Similarity.DOT_PRODUCT,
    "dot": Similarity.DOT_PRODUCT,
    "ip": Similarity.DOT_PRODUCT,
    "cosine": Similarity.COSINE,
    "cos": Similarity.COSINE,
    "max_inner_product": Similarity.MAX_INNER_PRODUCT,
    "mip": Similarity.MAX_INNER_PRODUCT,
}


def resolve_similarity(similarity: str | Similarity) -> Similarity:
    """Resolve a name or alias (``l2``, ``ip``, ``mip``...) to a :class:`Similarity`."""
    if isinstance(similarity, Similarity):
        return similarity
    if isinstance(similarity, str) and similarity.lower() in _ALIASES:
        return _ALIASES[similarity.lower()]
    if isinstance(similarity, (int, np.integer)) and int(similarity) in _CODES.values():
        return next(s for s, c in _CODES.items() if c == int(similarity))
    raise ValueError(f"similarity must be one of {sorted(_ALIASES)}, got {similarity!r}")


def scores_from_raw(similarity: Similarity, raw: np.ndarray) -> np.ndarray:
    """Map raw values (d² or inner product) to Lucene scores, higher is better (float32)."""
    raw = np.asarray(raw, dtype=np.float64)
    if similarity is Similarity.EUCLIDEAN:
        out = 1.0 / (1.0 + np.maximum(raw, 0.0))
    elif similarity is Similarity.MAX_INNER_PRODUCT:
        out = np.where(raw < 0, 1.0 / (1.0 - np.minimum(raw, 0.0)), raw + 1.0)
    else:
        out = (1.0 + np.clip(raw, -1.0, 1.0)) / 2.0
    return out.astype(np.float32)


def rank_key(similarity: Similarity, raw: np.ndarray) -> np.ndarray:
    """A key whose larger values rank first: ``-d2`` for euclidean, ``ip`` otherwise."""
    return similarity.key(raw)


def exact_raw(similarity: Similarity, queries: np.ndarray, vectors: np.ndarray) -> np.ndarray:
    """Exact raw values [nq, n] in float64: squared L2 or inner product.

    For cosine both sides must already be normalized (the quantizers and indexes do that).
    """
    q = np.asarray(queries, dtype=np.float64)
    x = np.asarray(vectors, dtype=np.float64)
    ip = q @ x.T
    if similarity.is_distance:
        return np.maximum((q * q).sum(1)[:, None] + (x * x).sum(1)[None, :] - 2.0 * ip, 0.0)
    return ip
