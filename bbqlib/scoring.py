"""Dispatch from quantized queries and docs to the numba kernels (the only caller of them).

Quantizers describe their codes with :class:`DocCodes` / :class:`QueryCodes`, whose factor rows
follow the affine correction algebra documented in :mod:`bbqlib._kernels.scoring`; this module
picks the kernel for the layout, allocates outputs, splits large batches and merges heaps.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ._kernels import scoring as K
from ._kernels.policy import limit_threads, threads_for
from ._kernels.rerank import exact_candidates
from .packing import lut_blocks, unpack_planes

__all__ = ["DocCodes", "QueryCodes", "estimate_raw", "topk_raw", "rerank_exact", "merge_topk"]

#: Queries per kernel call in a scan (bounds heap memory at threads * QUERY_BATCH * k).
QUERY_BATCH = 256
#: Docs unpacked at a time when a float query meets plane-packed docs.
UNPACK_CHUNK = 65536
#: (query, doc) pairs per thread in a scan or estimate: about 1 ms of work each, so single
#: queries and small batches run on the calling thread (``policy.threads_for``).
PAIRS_PER_THREAD = 250_000


@dataclass(frozen=True)
class DocCodes:
    """Docs as the kernels see them.

    kind: "planes" (uint64 words [n, planes * words]) or "bytes" (uint8 [n, dim]).
    factors: float32 [n, 4] rows (a_x, l_x, ΣX, add_x).
    """

    kind: str
    data: np.ndarray
    factors: np.ndarray
    planes: int
    dim: int
    centroid_dot: float
    is_l2: bool
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def lut_layout(self) -> tuple[np.ndarray, np.ndarray]:
        """The lookup-table scan's layout, made once and kept: the plane bytes in blocks of
        32 docs, and the factors as columns (float32 [4, n])."""
        if "lut_layout" not in self._cache:
            self._cache["lut_layout"] = (
                lut_blocks(self.data.view(np.uint8)),
                np.ascontiguousarray(self.factors.T),
            )
        return self._cache["lut_layout"]

    @property
    def words(self) -> int:
        return self.data.shape[1] // max(self.planes, 1) if self.kind == "planes" else 0

    def __len__(self) -> int:
        return self.data.shape[0]

    def unpacked(self, start: int, stop: int) -> np.ndarray:
        """uint8 codes [stop - start, dim] of a range of docs."""
        if self.kind == "bytes":
            return self.data[start:stop]
        packed = self.data[start:stop].view(np.uint8)
        return unpack_planes(packed, self.planes, self.dim)


@dataclass(frozen=True)
class QueryCodes:
    """Queries as the kernels see them.

    kind: "planes" (uint64 [nq, planes * words]), "bytes" (uint8 [nq, dim]) or "float"
    (float32 [nq, dim], already centred / transformed as the quantizer requires).
    factors: float64 [nq, 4] rows (a_y, l_y, ΣY, add_y).
    """

    kind: str
    data: np.ndarray
    factors: np.ndarray
    planes: int = 0

    def __len__(self) -> int:
        return self.data.shape[0]

    def rows(self, start: int, stop: int) -> QueryCodes:
        return QueryCodes(self.kind, self.data[start:stop], self.factors[start:stop], self.planes)


def _check_pair(q: QueryCodes, d: DocCodes) -> None:
    if q.kind == "float":
        return
    if q.kind != d.kind:
        raise ValueError(f"query layout {q.kind!r} does not match doc layout {d.kind!r}")


def estimate_raw(q: QueryCodes, d: DocCodes) -> np.ndarray:
    """Raw estimates [nq, n] (float64): squared L2 for euclidean, inner product otherwise."""
    _check_pair(q, d)
    out = np.empty((len(q), len(d)), dtype=np.float64)
    if len(q) == 0 or len(d) == 0:
        return out
    with limit_threads(threads_for(len(q) * len(d), PAIRS_PER_THREAD)):
        _estimate(q, d, out)
    return out


def _estimate(q: QueryCodes, d: DocCodes, out: np.ndarray) -> None:
    if q.kind == "planes":
        K.estimate_planes(
            q.data,
            q.factors,
            d.data,
            d.factors,
            q.planes,
            d.planes,
            d.words,
            d.dim,
            d.centroid_dot,
            d.is_l2,
            out,
        )
    elif q.kind == "bytes":
        K.estimate_bytes(q.data, q.factors, d.data, d.factors, d.dim, d.centroid_dot, d.is_l2, out)
    else:
        for start in range(0, len(d), UNPACK_CHUNK):
            stop = min(len(d), start + UNPACK_CHUNK)
            K.estimate_float(
                q.data,
                q.factors,
                d.unpacked(start, stop),
                d.factors[start:stop],
                d.dim,
                d.centroid_dot,
                d.is_l2,
                out[:, start:stop],
            )


def merge_topk(keys: np.ndarray, ids: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Merge candidate lists [nq, m] into the best ``k`` by (key desc, id asc)."""
    order = np.lexsort((ids, -keys), axis=-1)[:, :k]
    keys = np.take_along_axis(keys, order, axis=1)
    ids = np.take_along_axis(ids, order, axis=1)
    return keys, ids


def topk_raw(
    q: QueryCodes,
    d: DocCodes,
    k: int,
    *,
    allowed: np.ndarray | None = None,
    id_base: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Best ``k`` docs per query by estimated similarity.

    Returns ``(keys, ids)`` float64 / int64 [nq, k]: keys are ``-d²`` (euclidean) or the
    inner product, best first, ties by lower id; missing entries are ``-inf`` / ``-1``.
    ``allowed`` is an optional boolean mask over docs.
    """
    _check_pair(q, d)
    nq = len(q)
    mask = np.empty(0, np.uint8) if allowed is None else np.ascontiguousarray(allowed, np.uint8)
    threads = threads_for(nq * len(d), PAIRS_PER_THREAD)
    chunks = max(1, min(threads, -(-len(d) // K.BLOCK)))
    all_keys = np.full((nq, k), -np.inf)
    all_ids = np.full((nq, k), -1, dtype=np.int64)
    for q0 in range(0, nq, QUERY_BATCH):
        qb = q.rows(q0, min(nq, q0 + QUERY_BATCH))
        with limit_threads(threads):
            keys, ids = _scan(qb, d, k, mask, id_base, chunks)
        keys = keys.transpose(1, 0, 2).reshape(len(qb), -1)
        ids = ids.transpose(1, 0, 2).reshape(len(qb), -1)
        keys, ids = merge_topk(keys, ids, k)
        ids[ids == K.EMPTY_ID] = -1
        all_keys[q0 : q0 + len(qb)] = keys
        all_ids[q0 : q0 + len(qb)] = ids
    return all_keys, all_ids


def _scan(q, d, k, mask, id_base, chunks):
    keys = np.full((chunks, len(q), k), -np.inf)
    ids = np.full((chunks, len(q), k), K.EMPTY_ID, dtype=np.int64)
    if len(d) == 0:
        return keys, ids
    if q.kind == "planes" and _use_lut(q):
        _scan_lut(q, d, mask, id_base, keys, ids)
    elif q.kind == "planes":
        K.scan_planes(
            q.data,
            q.factors,
            d.data,
            d.factors,
            q.planes,
            d.planes,
            d.words,
            d.dim,
            d.centroid_dot,
            d.is_l2,
            mask,
            id_base,
            keys,
            ids,
        )
    elif q.kind == "bytes":
        K.scan_bytes(
            q.data,
            q.factors,
            d.data,
            d.factors,
            d.dim,
            d.centroid_dot,
            d.is_l2,
            mask,
            id_base,
            keys,
            ids,
        )
    else:
        parts_k, parts_i = [], []
        for start in range(0, len(d), UNPACK_CHUNK):
            stop = min(len(d), start + UNPACK_CHUNK)
            kk = np.full((chunks, len(q), k), -np.inf)
            ii = np.full((chunks, len(q), k), K.EMPTY_ID, dtype=np.int64)
            K.scan_float(
                q.data,
                q.factors,
                d.unpacked(start, stop),
                d.factors[start:stop],
                d.dim,
                d.centroid_dot,
                d.is_l2,
                mask[start:stop] if mask.size else mask,
                id_base + start,
                kk,
                ii,
            )
            parts_k.append(kk)
            parts_i.append(ii)
        keys = np.concatenate(parts_k, axis=0)
        ids = np.concatenate(parts_i, axis=0)
    return keys, ids


#: Widest query the lookup-table scan takes (a table entry, four codes, must fit a byte
#: four times over: 4 · 4 · 15 = 240).
LUT_MAX_QUERY_PLANES = 4


def _use_lut(q: QueryCodes) -> bool:
    from ._kernels.lut import avx2_available

    return q.planes <= LUT_MAX_QUERY_PLANES and avx2_available()


def query_tables(q: QueryCodes) -> np.ndarray:
    """Lookup tables uint8 [nq, 2 · P · 32] of plane-packed queries (``bbqlib._kernels.lut``)."""
    from ._kernels.lut import LANES, build_tables

    dim64 = q.data.shape[1] // q.planes * 64
    pairs = dim64 // 8
    codes = unpack_planes(q.data.view(np.uint8), q.planes, dim64)
    tables = np.empty((len(q), 2 * pairs * LANES), dtype=np.uint8)
    build_tables(codes, pairs, tables)
    return tables


def _scan_lut(q: QueryCodes, d: DocCodes, mask, id_base, keys, ids) -> None:
    from ._kernels.lut import scan_lut

    blocks, cols = d.lut_layout()
    scan_lut(
        query_tables(q),
        q.factors,
        blocks,
        cols,
        d.planes,
        d.words * 8,
        len(d),
        d.dim,
        d.centroid_dot,
        d.is_l2,
        mask,
        id_base,
        keys,
        ids,
    )


def rerank_exact(
    queries: np.ndarray, vectors: np.ndarray, candidates: np.ndarray, is_l2: bool
) -> np.ndarray:
    """Exact raw values [nq, m] of each query with its candidate rows (``-1``: nan)."""
    out = np.empty(candidates.shape, dtype=np.float64)
    if candidates.size:
        exact_candidates(
            np.ascontiguousarray(queries, np.float32),
            np.asarray(vectors),
            np.ascontiguousarray(candidates, np.int64),
            is_l2,
            out,
        )
    return out
