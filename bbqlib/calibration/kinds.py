"""Index kinds of calibration: what differs between measuring a flat index and an IVF.

One :class:`IndexKind` object per kind, looked up once by name (:data:`INDEX_KINDS`): the
stored vectors it keeps, how a quantizer is fitted and encoded on the shared parts, how a
configuration's index is assembled, its bytes, the visit budgets its search takes, the
record fields it adds, how a :class:`~.record.Configuration` of it is built, printed and
sized. The engine, the walks, the record and the sizing ask the kind; none of them names
one. A new index kind is one more object in :data:`INDEX_KINDS` (its rows in the encoding
registry say which codes it serves).
"""

from __future__ import annotations

import math

import numpy as np

from .parts import flat_from_parts, ivf_fit, ivf_recoded, ivf_variant
from .sizing import CONTAINER_BYTES, entries_per_vector_at, flat_sizes, ivf_sizes
from .space import IVF_STORES, VISITS

__all__ = ["IndexKind", "FlatKind", "IVFKind", "INDEX_KINDS", "index_kind"]


class IndexKind:
    """What calibration does differently for one index kind (subclasses fill it in).

    Attributes
    ----------
    name : str
        The registry's index name (``Encoding.indexes``), ``Configuration.index``.
    lists : bool
        Searches visit lists: the walk tunes visit budgets, pruned by coverage.
    visits : tuple
        The visit budgets of its search (``(None,)``: it takes none).
    """

    name: str = ""
    lists: bool = False
    visits: tuple = (None,)

    # -- what is measured -----------------------------------------------------------------
    def stores(self, stores: tuple) -> tuple:
        """The kinds of stored rerank vectors (of ``stores``) this index keeps."""
        return tuple(stores)

    def float_rows(self, engine) -> np.ndarray:
        """Every base vector as the float32 rows the index stores (prepared)."""
        raise NotImplementedError

    def fit(self, engine, quantizer) -> None:
        """Fit ``quantizer`` as a build of this index fits it."""
        raise NotImplementedError

    def encode(self, engine, quantizer, fitted: bool):
        """``(encoded, codes or None, fitted quantizer)``: the base coded for this index
        (``fitted``: ``quantizer`` was fitted by :meth:`fit`)."""
        raise NotImplementedError

    def encoded_bytes(self, engine, encoded, codes, row) -> int:
        """Bytes an encode keeps in the engine's cache (what the cache is bounded by)."""
        raise NotImplementedError

    def index(self, engine, encoded, codes, point, oversample, visit):
        """The searchable index of ``point`` from its encode and the shared stored vectors,
        with search defaults ``oversample`` / ``visit``."""
        raise NotImplementedError

    def bytes_per_vector(self, engine, encoding, store) -> float:
        """Bytes each vector adds to the index (fixed costs such as a transform excluded)."""
        raise NotImplementedError

    def record_fields(self, engine) -> tuple[dict, float]:
        """``(fields, seconds)``: the configuration fields of this kind, and build seconds
        every configuration shares (the IVF's lists)."""
        return {}, 0.0

    # -- what a configuration does --------------------------------------------------------
    def build(self, config, quantizer, path):
        """A new empty index of ``config`` (its search parameters as defaults)."""
        raise NotImplementedError

    def code(self, config, quantizer: str, args: list) -> str:
        """The snippet's constructor call up to its last argument (``quantizer``: the
        quantizer's expression, ``args``: the common keyword arguments)."""
        raise NotImplementedError

    def sizes(self, config, n: int, d: int, encoding, store, is_l2: bool):
        """``(disk, ram)`` bytes at ``n`` vectors (:mod:`.sizing`)."""
        raise NotImplementedError

    def build_scale(self, config, n: int, m: int) -> float:
        """Build time at ``n`` vectors over build time at ``m``, beyond ``n / m``."""
        return 1.0


class FlatKind(IndexKind):
    """The flat index: every quantizer fits and encodes the whole base."""

    name = "flat"

    def float_rows(self, engine) -> np.ndarray:
        return engine.prepared()

    def fit(self, engine, quantizer) -> None:
        quantizer.fit(engine.base)

    def encode(self, engine, quantizer, fitted: bool):
        if not fitted:
            quantizer = quantizer.fit(engine.base)
        return quantizer, quantizer.encode(engine.base), quantizer

    def encoded_bytes(self, engine, encoded, codes, row) -> int:
        return (codes.codes.nbytes + codes.corrections.nbytes
                + len(codes) * (16 + row.doc_bytes(engine.dim)))  # fmt: skip

    def index(self, engine, encoded, codes, point, oversample, visit):
        qb = point.encoding.query_bits
        q = encoded if encoded.encoding_.query_bits == qb else encoded.with_query_bits(qb)
        return flat_from_parts(q, codes, engine.stored(point.store), point.store,
                               oversample=oversample)  # fmt: skip

    def bytes_per_vector(self, engine, encoding, store) -> float:
        disk, _ = flat_sizes(engine.n, engine.dim, encoding, engine.similarity.is_distance, store)
        return (disk - CONTAINER_BYTES) / engine.n

    def build(self, config, quantizer, path):
        from ..index import FlatIndex

        if path is not None:
            raise ValueError("path is for IVF configurations; save a FlatIndex with save()")
        return FlatIndex(quantizer, store_vectors=config.store_vectors,
                         oversample=config.oversample)  # fmt: skip

    def code(self, config, quantizer: str, args: list) -> str:
        return "index = bbqlib.FlatIndex(\n    " + quantizer + ",\n    " + ", ".join(args)

    def sizes(self, config, n: int, d: int, encoding, store, is_l2: bool):
        return flat_sizes(n, d, encoding, is_l2, store, config.state_bytes)


def _log_ratio(n: int, cluster_size: int) -> float:
    return max(1.0, math.log(max(2.0, n / max(1, cluster_size))))


class IVFKind(IndexKind):
    """The IVF: every quantizer re-codes the lists of one shared 1-bit reference build."""

    name = "ivf"
    lists = True
    visits = VISITS

    def stores(self, stores: tuple) -> tuple:
        return tuple(s for s in stores if s in IVF_STORES)

    def float_rows(self, engine) -> np.ndarray:
        return engine.reference()._segments[0].array

    def fit(self, engine, quantizer) -> None:
        ivf_fit(engine.reference(), quantizer, engine.base)

    def encode(self, engine, quantizer, fitted: bool):
        recoded = ivf_recoded(engine.reference(), quantizer, engine.base, fitted=fitted)
        return recoded, None, recoded.quantizer

    def encoded_bytes(self, engine, encoded, codes, row) -> int:
        post = encoded._postings
        return 2 * np.asarray(post.codes).nbytes + post.factors.nbytes + post.ids.nbytes

    def index(self, engine, encoded, codes, point, oversample, visit):
        qb = point.encoding.query_bits
        store = point.store
        return ivf_variant(
            encoded, query_bits=qb if encoded.encoding_.query_bits != qb else "keep",
            store_vectors=store, vectors=engine.stored(store), visit_percentage=visit,
            oversample=oversample,
        )  # fmt: skip

    def bytes_per_vector(self, engine, encoding, store) -> float:
        epv, vpl = engine.list_shape()
        disk, _ = ivf_sizes(engine.n, engine.dim, encoding, store, epv, vpl,
                            is_l2=engine.similarity.is_distance)  # fmt: skip
        return (disk - 2 * CONTAINER_BYTES) / engine.n

    def record_fields(self, engine) -> tuple[dict, float]:
        epv, vpl = engine.list_shape()
        fields = {"cluster_size": engine.cluster_size, "entries_per_vector": epv,
                  "vectors_per_list": vpl}  # fmt: skip
        return fields, engine.reference_seconds

    def build(self, config, quantizer, path):
        from ..index import IVFIndex

        return IVFIndex(
            quantizer,
            cluster_size=config.cluster_size,
            seed=config.seed,
            path=path,
            store_vectors=config.store_vectors,
            visit_percentage=config.visit_percentage,
            oversample=config.oversample,
        )

    def code(self, config, quantizer: str, args: list) -> str:
        args = [f"cluster_size={config.cluster_size}", f"seed={config.seed}", *args]
        args.append(f"visit_percentage={config.visit_percentage:g}")
        return "index = bbqlib.IVFIndex(\n    " + quantizer + ",\n    " + ", ".join(args)

    def sizes(self, config, n: int, d: int, encoding, store, is_l2: bool):
        return ivf_sizes(
            n, d, encoding, store, entries_per_vector_at(config, n), config.vectors_per_list,
            config.state_bytes, is_l2,
        )  # fmt: skip

    def build_scale(self, config, n: int, m: int) -> float:
        # hierarchical k-means levels: build time grows as n · log(n / cluster_size)
        cs = config.cluster_size or 384
        return _log_ratio(n, cs) / _log_ratio(m, cs)


#: The index kinds calibration measures, by name.
INDEX_KINDS: dict[str, IndexKind] = {kind.name: kind for kind in (FlatKind(), IVFKind())}


def index_kind(name: str) -> IndexKind:
    """The :class:`IndexKind` named ``name`` (raises naming the known kinds)."""
    try:
        return INDEX_KINDS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown index kind {name!r}; known: {sorted(INDEX_KINDS)}") from None
