"""Scatter-gather search over several IVF directories (shards), on Dask workers or locally."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..search.finish import check_scores, pad_value, result_columns
from ._dask import require, resolve_client

__all__ = ["ShardedIndex"]


def _open(path: str):
    from ..index.ivf import IVFIndex

    return IVFIndex.open(path)


def _search(index, queries, k, scores, kwargs):
    # min(k, ntotal) columns per shard: the driver pads the merged results
    values, ids = index.search(queries, k, scores=scores, pad_to_k=False, **kwargs)
    return values, ids, dict(index.last_search_stats)


def _merge(parts, offsets, k: int, similarity, scores: str):
    """Best ``k`` of the shards' results (their values returned as they are, so that a
    shard's score is bit-identical to the union's): by key, ties to the lower global id;
    ``k`` columns, padded as :func:`bbqlib.search.finish` pads."""
    values = np.concatenate([p[0] for p in parts], axis=1)
    ids = np.concatenate(
        [np.where(p[1] >= 0, p[1] + off, -1) for p, off in zip(parts, offsets, strict=True)],
        axis=1,
    )
    valid = ids >= 0
    keys = values.astype(np.float64)
    if scores == "raw":
        keys = similarity.key(keys)
    keys = np.where(valid, keys, -np.inf)
    order = np.lexsort((np.where(valid, ids, np.iinfo(np.int64).max), -keys), axis=1)[:, :k]
    out_values = np.full((len(values), k), pad_value(similarity, scores), dtype=np.float32)
    out_ids = np.full((len(values), k), -1, dtype=np.int64)
    m = order.shape[1]
    out_values[:, :m] = np.take_along_axis(values, order, axis=1)
    out_ids[:, :m] = np.take_along_axis(np.where(valid, ids, -1), order, axis=1)
    return out_values, out_ids


def _default_scores() -> str:
    """The ``scores`` default of :meth:`bbqlib.IVFIndex.search` (one default everywhere)."""
    import inspect

    from ..index.ivf import IVFIndex

    return inspect.signature(IVFIndex.search).parameters["scores"].default


def _meta(index):
    return (index.quantizer.similarity_, index.dim_, *_sizes(index))


def _sizes(index) -> tuple[int, int, bool]:
    row_ids = getattr(index, "_row_ids", None)  # custom ids (IVF format 4), if any
    return index.ntotal, len(index), row_ids is None or row_ids.is_identity


class ShardedIndex:
    """Several IVF index directories searched as one (faiss ``IndexShards`` in spirit).

    Each query batch goes to every shard (on the worker that opened it, with a client), each
    shard returns its top ``k`` with global ids, and the driver merges them by score (ties:
    lower id first). With every shard visiting the lists the union would visit and reranking
    all candidates (e.g. ``visit_percentage=100`` and a large ``oversample``) the result is
    identical to one index over the union built with the same centroids.

    Use :meth:`open`; ``id_offsets[s]`` is added to shard ``s``'s ids (default: the shards'
    ``ntotal`` summed in order, i.e. the shards hold consecutive rows of one data set).
    """

    def __init__(self, shards, client, id_offsets, similarity, dim, ntotal, live, workers=None):
        self._shards = shards  # IVFIndex objects (local) or futures (on workers)
        self._client = client
        self._workers = workers  # the worker holding each shard (its files are mapped there)
        self.id_offsets = id_offsets
        self.similarity_ = similarity
        self.dim_ = dim
        self.ntotal = ntotal
        self._live = live
        self.last_search_stats: list[dict] = []

    @classmethod
    def open(cls, paths, client=None, *, id_offsets=None) -> ShardedIndex:
        """Open one IVF directory per shard (on the workers when a client is given/current).

        Parameters
        ----------
        paths : list of str or Path
            The shards' directories (visible to the workers that open them).
        client : distributed.Client, optional
            Default: the current client; without one the shards are opened in this process.
        id_offsets : list of int, optional
            Added to each shard's ids; default: cumulative ``ntotal`` of the earlier shards
            when the shards' ids are their row numbers, 0 when any shard holds custom ids.
        """
        paths = [str(Path(p)) for p in paths]
        if not paths:
            raise ValueError("paths is empty; pass at least one IVF index directory")
        client = resolve_client(client)
        placed = None
        if client is None:
            shards = [_open(p) for p in paths]
            meta = [_meta(s) for s in shards]
        else:
            require()
            workers = sorted(client.scheduler_info()["workers"])
            placed = [workers[i % len(workers)] for i in range(len(paths))]
            shards = [
                client.submit(_open, p, workers=[w], allow_other_workers=False, pure=False)
                for p, w in zip(paths, placed, strict=True)
            ]
            meta = client.gather(
                [
                    client.submit(_meta, f, workers=[w], allow_other_workers=False, pure=False)
                    for f, w in zip(shards, placed, strict=True)
                ]
            )
        sims = {m[0] for m in meta}
        dims = {m[1] for m in meta}
        if len(sims) != 1 or len(dims) != 1:
            raise ValueError(
                f"shards differ in similarity {sorted(s.value for s in sims)} or dimension "
                f"{sorted(dims)}; every shard must index the same kind of vectors"
            )
        totals = np.array([m[2] for m in meta], dtype=np.int64)
        if id_offsets is None:  # consecutive row ranges, unless the shards carry their ids
            rows = all(m[4] for m in meta)
            id_offsets = np.concatenate([[0], np.cumsum(totals)[:-1]]) if rows else 0 * totals
        id_offsets = np.asarray(id_offsets, dtype=np.int64)
        if id_offsets.shape != (len(paths),):
            raise ValueError(f"id_offsets must hold {len(paths)} integers, got {id_offsets.shape}")
        live = int(sum(m[3] for m in meta))
        return cls(shards, client, id_offsets, sims.pop(), dims.pop(), int(totals.sum()), live,
                   placed)  # fmt: skip

    @property
    def n_shards(self) -> int:
        return len(self._shards)

    def __len__(self) -> int:
        return self._live

    def search(
        self, queries, k: int = 10, *, scores: str | None = None, pad_to_k: bool | None = None,
        **kwargs,
    ):  # fmt: skip
        """Top ``k`` over all shards: ``(scores float32 [nq, k], ids int64 [nq, k])``.

        Keyword arguments (``visit_percentage``, ``oversample``, ``rerank``) go to every
        shard's :meth:`~bbqlib.IVFIndex.search`; ``scores`` as there (default: its default).
        ``pad_to_k`` as there, against :attr:`ntotal` (all shards): ``True`` gives exactly
        ``k`` columns, ``False`` ``min(k, ntotal)``, ``None`` (until bbqlib 0.4, where it
        becomes ``True``) ``min(k, ntotal)`` with a :class:`FutureWarning` when
        ``k > ntotal``. Missing results: id ``-1``, score ``+inf`` (raw squared L2) or
        ``-inf`` (otherwise). A ``k`` whose results would exceed half the memory of this
        machine raises ``ValueError`` before any shard searches.
        """
        if scores is None:
            scores = _default_scores()
        check_scores(scores)
        if "filter" in kwargs:
            raise ValueError("ShardedIndex.search takes no filter (filter each shard's ids)")
        Q = np.asarray(queries, dtype=np.float32)
        nq = len(Q) if Q.ndim == 2 else 1
        k = result_columns(k, self.ntotal, nq, pad_to_k)
        if self._client is None:
            parts = [_search(s, Q, k, scores, kwargs) for s in self._shards]
        else:
            Qf = self._client.scatter(Q, broadcast=True, hash=False)
            futures = [  # where the shard lives: an opened index never travels
                self._client.submit(
                    _search,
                    s,
                    Qf,
                    k,
                    scores,
                    kwargs,
                    pure=False,
                    workers=[w],
                    allow_other_workers=False,
                )  # fmt: skip
                for s, w in zip(self._shards, self._workers, strict=True)
            ]
            parts = self._client.gather(futures)
        self.last_search_stats = [p[2] for p in parts]
        return _merge(parts, self.id_offsets, k, self.similarity_, scores)

    def close(self) -> None:
        """Release the shards (on the workers: their futures)."""
        if self._client is not None:
            self._client.cancel(self._shards)
        self._shards = []

    def __repr__(self) -> str:
        where = "local" if self._client is None else "on Dask workers"
        return f"ShardedIndex({self.n_shards} shards {where}, ntotal={self.ntotal})"
