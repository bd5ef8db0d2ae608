"""FlatIndex: every code scanned by the numba kernels, then an exact rerank."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .._validation import (
    cap_k,
    check_source,
    check_vectors,
    owned_rows,
    prepare_for_similarity,
)
from ..io.atomic import clean_orphans
from ..io.container import CorruptFileError, check_format_version, read_container, write_container
from ..quantizers import BBQQuantizer, EncodedVectors, Quantizer, quantizer_from_state
from ..scoring import (
    candidate_count,
    check_oversample,
    check_scores,
    exact_mode,
    exact_values,
    finish,
    rerank_keys,
)
from ._locks import IndexGuard

__all__ = ["FlatIndex"]

_KIND = "flat_index"
#: Version of what a flat index file holds (docs/formats.md). 2: ``format_version`` in the
#: meta; int8 ``per_dim`` / ``global`` codes carry their own registry wire numbers; OSQ at
#: every width 1-8. Version 1 files (no ``format_version``) still open.
FORMAT_VERSION = 2


class FlatIndex:
    """Brute-force search over quantized codes with optional exact rerank.

    Parameters
    ----------
    quantizer : Quantizer, optional
        A quantizer (fitted or not). If not given, a :class:`~bbqlib.BBQQuantizer` is built
        from ``bits``, ``query_bits``, ``similarity``, ``precondition`` and ``seed``. An
        unfitted quantizer is fitted on the first :meth:`add` (its centroid stays fixed).
    bits, query_bits, similarity, precondition, seed
        Passed to :class:`~bbqlib.BBQQuantizer` when ``quantizer`` is None.
    store_vectors : bool
        Keep the float vectors for exact reranking (default True).

    Notes
    -----
    :meth:`search` returns ``(scores, ids)`` like faiss's ``(D, I)``: float32 scores where
    higher is better (Lucene's mappings: ``1 / (1 + d²)`` for euclidean, ``(1 + cos) / 2`` for
    cosine and dot_product, the max-inner-product mapping otherwise), int64 ids, padded with
    ``-inf`` / ``-1``. Ranking uses the raw estimate, ties broken by the lower id.

    Thread safety (``docs/concurrency.md``): any number of threads may :meth:`search` (and
    :meth:`save`) while one thread adds; a search sees the index before or after each
    :meth:`add`, never a mix. Writes are serialized. The index keeps its own copy of every
    batch it is given, so the caller may reuse its buffer.

    Examples
    --------
    >>> import numpy as np, bbqlib
    >>> X = np.random.default_rng(0).normal(size=(2000, 64)).astype(np.float32)
    >>> index = bbqlib.FlatIndex(bits=1, similarity="cosine")
    >>> index.add(X)
    >>> scores, ids = index.search(X[:3], k=5)
    >>> ids[:, 0].tolist()
    [0, 1, 2]
    """

    def __init__(
        self,
        quantizer: Quantizer | None = None,
        *,
        bits: int = 1,
        query_bits="auto",
        similarity: str = "cosine",
        precondition=None,
        seed: int | None = None,
        store_vectors: bool = True,
    ):
        if quantizer is None:
            quantizer = BBQQuantizer(
                bits=bits,
                query_bits=query_bits,
                similarity=similarity,
                precondition=precondition,
                seed=seed,
            )
        elif not isinstance(quantizer, Quantizer):
            raise TypeError(f"quantizer must be a bbqlib Quantizer, got {type(quantizer).__name__}")
        self.quantizer = quantizer
        self.store_vectors = bool(store_vectors)
        self._codes: list[EncodedVectors] = []
        self._vectors: list[np.ndarray] = []
        self._joined: tuple | None = None
        self._guard = IndexGuard()

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_guard", None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._guard = IndexGuard()

    # -- building ---------------------------------------------------------------------------
    def add(self, X) -> None:
        """Encode and append vectors; ids continue from :attr:`ntotal`.

        The first call fits the quantizer if it is not fitted yet. ``X`` is validated as
        every ``add`` of bbqlib validates (:func:`bbqlib._validation.check_source`, then
        the values) and copied: reusing the buffer afterwards does not change the index.
        Thread-safe: searches running meanwhile see the index before or after this batch.
        """
        with self._guard.writing:
            q = self.quantizer
            source = check_source(X, "X", dim=q.dim_ if q.is_fitted else None)
            if not q.is_fitted:
                with self._guard.swapping():  # no search may see a half-fitted quantizer
                    q.fit(source)
            rows = check_vectors(source, "X", dim=q.dim_)
            enc = q.encode(rows)  # validates the similarity's rules before anything is stored
            vectors = None
            if self.store_vectors:
                vectors = owned_rows(prepare_for_similarity(rows, q.similarity_, "X"), X)
            with self._guard.swapping(), self._guard.joining:
                self._codes = [*self._codes, enc]
                if vectors is not None:
                    self._vectors = [*self._vectors, vectors]
                self._joined = None

    def _parts(self) -> tuple[EncodedVectors | None, np.ndarray | None]:
        joined = self._joined
        if joined is not None:
            return joined
        with self._guard.joining:  # one concatenation, shared by the searches that need it
            if self._joined is None:
                codes = EncodedVectors.concatenate(self._codes) if self._codes else None
                vectors = None
                if self._vectors:
                    vectors = (
                        self._vectors[0]
                        if len(self._vectors) == 1
                        else np.concatenate(self._vectors)
                    )
                self._codes = [codes] if codes is not None else []
                self._vectors = [vectors] if vectors is not None else []
                self._joined = (codes, vectors)
            return self._joined

    @property
    def ntotal(self) -> int:
        return sum(len(c) for c in self._codes)

    def __len__(self) -> int:
        return self.ntotal

    @property
    def codes(self) -> EncodedVectors | None:
        """All encoded vectors (None before the first add)."""
        return self._parts()[0]

    @property
    def bytes_per_vector(self) -> int:
        """Code plus correction bytes per vector (float vectors for rerank not counted)."""
        return self.quantizer.bytes_per_vector

    # -- searching --------------------------------------------------------------------------
    def search(
        self,
        queries,
        k: int = 10,
        *,
        oversample=None,
        rerank=True,
        filter=None,
        scores: str = "similarity",
    ):
        """Search: ``(scores, ids)`` [nq, k].

        Parameters
        ----------
        queries : float array [nq, d] or [d]
        k : number of results
        oversample : float >= 1, optional
            The quantized scan keeps ``min(ceil(k · oversample), 10,000, n)`` candidates for the
            exact rerank. ``None`` takes the encoding's default (3.0 at 1 bit, 1.5 at 2, 1.0 above).
        rerank : bool or "bound"
            True: rescore candidates on the float vectors (scores are exact). False: quantized
            top ``k`` with estimated scores. ``"bound"`` (quantizers with error bounds): rescore
            exactly the candidates whose lower bound beats the current k-th exact score.
        filter : boolean mask [ntotal] or array of allowed ids, optional
        scores : {"similarity", "raw"}
            ``"similarity"``: Lucene's mapping (higher is better); ``"raw"``: squared L2
            (ascending) or the inner product / cosine, as faiss returns them.

        Returns ``(scores, ids)`` of ``min(k, ntotal)`` columns (``k`` is capped at the
        index size before anything is allocated), padded with ``-inf`` / ``-1`` where a
        filter leaves fewer vectors. Thread-safe, also during an :meth:`add`.
        """
        with self._guard.reading():
            return self._search(queries, k, oversample, rerank, filter, scores)

    def _search(self, queries, k, oversample, rerank, filter, scores):
        q = self.quantizer
        q._check_fitted()
        check_scores(scores)
        Q = q._validated(queries, "queries", allow_1d=True)
        codes, vectors = self._parts()
        n = 0 if codes is None else len(codes)
        k = cap_k(k, n)
        allowed = self._allowed_mask(filter, n)
        sim = q.similarity_
        if rerank == "bound":
            keys, ids = self._search_bound(Q, k, codes, vectors, allowed)
            return finish(keys, ids, k, sim, scores)
        if rerank not in (True, False):
            raise ValueError(f"rerank must be True, False or 'bound', got {rerank!r}")
        # store_vectors, not `vectors is None`: an empty index has no vectors yet either.
        if rerank and not self.store_vectors:
            raise ValueError(
                "this index keeps no float vectors (store_vectors=False); search with rerank=False"
            )
        oversample = check_oversample(oversample, q.encoding_.default_oversample)
        if n == 0:
            return finish(np.empty((len(Q), 0)), np.empty((len(Q), 0), np.int64), k, sim, scores)
        depth = candidate_count(k, oversample, n) if rerank else min(k, n)
        keys, ids = q.topk_keys(Q, codes, depth, allowed=allowed)
        if rerank:
            raw = exact_values(Q, vectors, ids, exact_mode(sim))
            keys, ids = rerank_keys(raw, ids, k, sim)
        return finish(keys, ids, k, sim, scores)

    def _search_bound(self, Q, k, codes, vectors, allowed):
        q = self.quantizer
        if not q.has_error_bound:
            raise ValueError(
                f"rerank='bound' needs a quantizer with error bounds; {type(q).__name__} has "
                "none (use bbqlib.RaBitQQuantizer, or rerank=True with an oversample)"
            )
        if vectors is None:
            raise ValueError("rerank='bound' needs the float vectors (store_vectors=True)")
        keys, ids, reads = q.search_bound_rerank(Q, codes, vectors, k, allowed=allowed)
        self.last_vectors_read = reads
        return keys, ids

    @staticmethod
    def _allowed_mask(filter, n: int):
        if filter is None:
            return None
        f = np.asarray(filter)
        if f.dtype == bool:
            if f.shape != (n,):
                raise ValueError(f"a boolean filter must have shape ({n},), got {f.shape}")
            return f
        if not np.issubdtype(f.dtype, np.integer):
            raise TypeError("filter must be a boolean mask or an array of integer ids")
        if f.size and (f.min() < 0 or f.max() >= n):
            raise ValueError(f"filter ids must be in [0, {n}), got range [{f.min()}, {f.max()}]")
        mask = np.zeros(n, dtype=bool)
        mask[f] = True
        return mask

    # -- files ------------------------------------------------------------------------------
    def save(self, path) -> Path:
        """Write the index to one checksummed file, atomically (see :mod:`bbqlib.io.container`).

        Holds the path's advisory lock while writing (and removes temporary files that
        killed writers of ``path`` left). Thread-safe: a concurrent :meth:`add` waits.
        """
        with self._guard.reading():
            return self._save(path)

    def _save(self, path) -> Path:
        q = self.quantizer
        q._check_fitted()
        codes, vectors = self._parts()
        params, q_arrays = q.get_state()
        arrays = {f"quantizer.{k}": v for k, v in q_arrays.items()}
        if codes is not None:
            arrays["codes"] = codes.codes
            arrays["corrections"] = codes.corrections
        if vectors is not None and self.store_vectors:
            arrays["vectors"] = vectors
        meta = {
            "format_version": FORMAT_VERSION,
            "quantizer": params,
            "encoding_wire": q.encoding_.wire,
            "similarity": q.similarity_.value,
            "dim": q.dim_,
            "ntotal": self.ntotal,
            "store_vectors": self.store_vectors,
        }
        return write_container(path, _KIND, meta, arrays)

    @classmethod
    def load(cls, path, *, mmap: bool = True, verify: bool = True) -> FlatIndex:
        """Open a saved index; codes and vectors are memory-mapped unless ``mmap=False``.

        Temporary files that killed writers of ``path`` left are removed first (unless a live
        writer holds the path's lock). Every section's CRC32 is checked (``verify=False``
        skips that); a malformed file raises :class:`~bbqlib.CorruptFileError`.
        """
        clean_orphans(path)
        kind, meta, arrays = read_container(path, mmap=mmap, verify=verify)
        if kind != _KIND:
            raise ValueError(f"{path} holds a {kind!r}, not a flat index; use bbqlib.load")
        check_format_version(path, "flat index", meta.get("format_version", 1), FORMAT_VERSION)
        try:
            return cls._from_file(meta, arrays)
        except CorruptFileError:
            raise
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as err:
            raise CorruptFileError(
                f"{path} holds a malformed flat index ({type(err).__name__}: {err})"
            ) from err

    @classmethod
    def _from_file(cls, meta: dict, arrays: dict) -> FlatIndex:
        q_arrays = {
            k.split(".", 1)[1]: np.asarray(v)
            for k, v in arrays.items()
            if k.startswith("quantizer.")
        }
        q = quantizer_from_state(meta["quantizer"], q_arrays)
        index = cls(q, store_vectors=meta["store_vectors"])
        n = int(meta["ntotal"])
        if "codes" in arrays:
            codes, corrections = arrays["codes"], arrays["corrections"]
            if codes.shape != (n, q.encoding_.doc_bytes(q.dim_)) or corrections.shape[:1] != (n,):
                raise ValueError(
                    f"codes {codes.shape} / corrections {corrections.shape}, ntotal {n}"
                )
            index._codes = [
                EncodedVectors(
                    codes, corrections, q.encoding_, q.dim_, q.centroid_dot_, q.fingerprint_
                )
            ]
        elif n:
            raise ValueError(f"no codes for ntotal {n}")
        if "vectors" in arrays:
            if arrays["vectors"].shape != (n, q.dim_):
                raise ValueError(f"vectors {arrays['vectors'].shape}, ntotal {n}, dim {q.dim_}")
            index._vectors = [arrays["vectors"]]
        return index

    def __repr__(self) -> str:
        return f"FlatIndex(ntotal={self.ntotal}, quantizer={self.quantizer!r})"
