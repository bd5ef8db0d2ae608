"""The measuring engine: builds each configuration from shared parts and measures it.

What does not change between configurations is computed once: the prepared vectors and
their float16 / int8 copies, one encode per (family, preconditioning, doc bits) (every query
width and every kind of stored vectors reuse it), and for the IVF one clustering (a 1-bit
reference build) whose lists every quantizer re-codes (:mod:`bbqlib.calibration.parts`).
Encodes are kept in a cache bounded in bytes (least recently used first out).

Measurements are remembered per query: a query (identified by its bytes) already searched
with a configuration and setting at the same ``k`` is not searched again when it comes back
in a later query set (splits of one query pool); its recall is reused and the latency is the
mean over every query searched.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict

import numpy as np

from .._validation import check_vectors, prepare_for_similarity
from ..index import IVFIndex
from ..quantizers import BBQQuantizer
from ..search.stored import to_stored
from ..similarity import Similarity
from .kinds import index_kind
from .measure import Measurement, bootstrap_bounds, measure
from .parts import ivf_coverage
from .record import Configuration

__all__ = ["Engine"]

_BLOCK = 65_536


def _state_bytes(quantizer) -> int:
    _, arrays = quantizer.get_state()
    return int(sum(np.asarray(a).nbytes for a in arrays.values()))


class Engine:
    """Builds and measures configurations of one index kind over one base.

    Parameters
    ----------
    base : float array [n, d]
        The vectors to index (may be memory-mapped; never written).
    similarity : Similarity
    index : {"flat", "ivf"}
        The index kind (:data:`~.kinds.INDEX_KINDS`): ``kind`` names it, ``index_kind`` is
        the object that says what it does differently.
    seed : int
    cluster_size : int
        IVF lists' target size.
    cache_bytes : int
        Bound of the encode cache.
    log : callable
        ``log(message)`` for progress lines.
    """

    def __init__(self, base, similarity: Similarity, index: str, *, seed: int,
                 cluster_size: int, cache_bytes: int, log):  # fmt: skip
        self.base = base
        self.similarity = similarity
        self.kind = index
        self.index_kind = index_kind(index)
        self.seed = int(seed)
        self.cluster_size = int(cluster_size)
        self.cache_bytes = int(cache_bytes)
        self.log = log
        self.n, self.dim = base.shape
        self.timings = {"prepare": 0.0, "reference": 0.0, "encode": 0.0, "search": 0.0}
        self._stored: dict = {}
        self._codes: OrderedDict = OrderedDict()
        self._fits: dict = {}
        self._entries_at: dict = {}
        self._reference: IVFIndex | None = None
        self.reference_seconds = 0.0
        self._warm: set = set()
        self._per_query: dict = {}
        self.queries = None

    # ------------------------------------------------------------------ queries
    def set_queries(self, queries, gt_ids, gt_scores, k: int) -> None:
        """The held-out queries and their exact neighbours (measurements are per set)."""
        self.queries = np.ascontiguousarray(queries, dtype=np.float32)
        self.gt_ids, self.gt_scores, self.k = gt_ids, gt_scores, int(k)
        self._qkeys = [hashlib.blake2b(q.tobytes(), digest_size=16).digest() for q in self.queries]
        self._measured: dict = {}
        self._coverage: dict = {}

    # ------------------------------------------------------------------ shared parts
    def stored(self, kind):
        """Every base vector as ``kind`` (prepared: normalized for cosine)."""
        if not kind:
            return None
        if kind not in self._stored:
            t0 = time.perf_counter()
            if kind == "float32":
                self._stored[kind] = self.index_kind.float_rows(self)
            else:
                src = self.stored("float32")
                parts = [to_stored(src[i : i + _BLOCK], kind) for i in range(0, self.n, _BLOCK)]
                self._stored[kind] = np.concatenate(parts)
            self.timings["prepare"] += time.perf_counter() - t0
        return self._stored[kind]

    def prepared(self) -> np.ndarray:
        """The base as float32 rows prepared for the similarity (a new array)."""
        out = np.empty((self.n, self.dim), dtype=np.float32)
        for i in range(0, self.n, _BLOCK):
            block = check_vectors(self.base[i : i + _BLOCK], "X", dim=self.dim)
            out[i : i + _BLOCK] = prepare_for_similarity(block, self.similarity, "X")
        return out

    def reference(self) -> IVFIndex:
        """The IVF whose lists every configuration shares (1-bit BBQ, no transform)."""
        if self._reference is None:
            t0 = time.perf_counter()
            q = BBQQuantizer(bits=1, similarity=self.similarity.value, seed=self.seed)
            ref = IVFIndex(q, cluster_size=self.cluster_size, seed=self.seed)
            ref.add(self.base, progress=False)
            self._reference = ref
            self.reference_seconds = time.perf_counter() - t0
            self.timings["reference"] += self.reference_seconds
            self.log(f"IVF lists: {ref.n_lists} ({self.reference_seconds:.1f} s)")
        return self._reference

    def _fitted(self, point):
        """``(quantizer, seconds)``: a budget point's quantizer fitted as its build fits it
        (its plan fixes the bytes before anything is encoded); kept."""
        key = point.code_key
        if key not in self._fits:
            q = point.space.make(
                point.make_bits, "auto", self.similarity.value, point.precondition, self.seed
            )
            t0 = time.perf_counter()
            self.index_kind.fit(self, q)
            self._fits[key] = (q, time.perf_counter() - t0)
            self.timings["encode"] += self._fits[key][1]
        return self._fits[key]

    def encoding_of(self, point):
        """The encoding whose bytes a point stores (a budget point's: its fitted plan's)."""
        return point.encoding if point.bits is None else self._fitted(point)[0].encoding_

    def _encoded(self, point):
        """``(quantizer or recoded IVF, codes or None, seconds, state bytes)`` of a point."""
        key = point.code_key
        if key in self._codes:
            self._codes.move_to_end(key)
            return self._codes[key][:4]
        entry = point.space
        row = point.encoding
        fitted = point.bits is not None
        if fitted:
            default_qb, fit_seconds = self._fitted(point)
        else:
            default_qb, fit_seconds = (
                point.space.make(
                    row.doc_bits, "auto", self.similarity.value, point.precondition, self.seed
                ),
                0.0,
            )
        t0 = time.perf_counter()
        encoded, codes, q = self.index_kind.encode(self, default_qb, fitted)
        item = (encoded, codes, fit_seconds + time.perf_counter() - t0, _state_bytes(q))
        size = self.index_kind.encoded_bytes(self, encoded, codes, row)
        self.timings["encode"] += item[2] - fit_seconds
        self.log(f"encoded {entry.family} {point.make_bits:g}-bit {point.precondition} "
                 f"({item[2]:.1f} s)")  # fmt: skip
        self._codes[key] = item + (size,)
        while sum(v[-1] for v in self._codes.values()) > self.cache_bytes and len(self._codes) > 1:
            self._codes.popitem(last=False)
        return item

    def index_of(self, point, oversample=None, visit=None):
        """The index of a point (parts shared), with search defaults ``oversample`` / ``visit``."""
        encoded, codes, _, _ = self._encoded(point)
        return self.index_kind.index(self, encoded, codes, point, oversample, visit)

    # ------------------------------------------------------------------ measuring
    def measure(self, point, oversample=None, visit=None) -> Measurement:
        """Recall and single-thread latency of ``point`` searched with these settings."""
        oversample = oversample if point.store else None
        key = (point, oversample, visit)
        if key not in self._measured:
            # per query: recall; per setting: [recalls by query, total ms, queries searched]
            memo = self._per_query.setdefault((*key, self.k), [{}, 0.0, 0])
            todo = np.array([i for i, h in enumerate(self._qkeys) if h not in memo[0]], np.int64)
            if todo.size:
                index = self.index_of(point, oversample, visit)
                warm = (point.code_key, point.encoding.query_bits, str(point.store))
                if warm not in self._warm:  # kernels load from numba's cache on first use
                    index.search(self.queries[:2], self.k)
                    self._warm.add(warm)
                t0 = time.perf_counter()
                gs = None if self.gt_scores is None else self.gt_scores[todo]
                m = measure(index, self.queries[todo], self.gt_ids[todo], gs, self.k)
                self.timings["search"] += time.perf_counter() - t0
                for i, r in zip(todo, m.per_query, strict=True):
                    memo[0][self._qkeys[i]] = float(r)
                memo[1] += m.latency_ms * todo.size
                memo[2] += todo.size
            per_query = np.array([memo[0][h] for h in self._qkeys])
            low, ci = bootstrap_bounds(per_query)
            latency = memo[1] / memo[2]
            self._measured[key] = Measurement(float(per_query.mean()), low, ci, latency, per_query)
        return self._measured[key]

    def retime(self, point, oversample, visit, repeats: int) -> list[float]:
        """Single-thread latencies (ms per query) of ``repeats`` more searches (of at most
        :data:`~.search.RETIME_QUERIES` queries)."""
        from .measure import timed_search
        from .search import RETIME_QUERIES

        index = self.index_of(point, oversample if point.store else None, visit)
        queries = self.queries[:RETIME_QUERIES]
        out = []
        for _ in range(repeats):
            _, seconds = timed_search(index, queries, self.k)
            out.append(1000.0 * seconds / len(queries))
        return out

    def coverage(self, visit: float, depth: int) -> np.ndarray:
        """Per query: share of the true top-k in the lists a search visits (IVF)."""
        key = (visit, depth)
        if key not in self._coverage:
            self._coverage[key] = ivf_coverage(
                self.reference(), self.queries, self.gt_ids[:, : self.k], visit, depth
            )
        return self._coverage[key]

    # ------------------------------------------------------------------ sizes
    def list_shape(self) -> tuple[float, float]:
        """``(entries_per_vector, vectors_per_list)`` of the shared IVF lists."""
        ref = self.reference()
        return len(ref._postings) / self.n, self.n / ref.n_lists

    def entries_at(self, n: int) -> tuple:
        """``((n', entries_per_vector),)`` measured at the list density of ``n`` vectors
        (:func:`~.density.entries_at` on the shared lists' vectors); ``()`` when ``n`` is not
        above the base or the index has no lists."""
        if not self.index_kind.lists or n <= self.n:
            return ()
        if n not in self._entries_at:
            from .density import entries_at

            t0 = time.perf_counter()
            ref = self.reference()
            point = entries_at(ref._segments[0].array, n, self.cluster_size, seed=self.seed,
                               soar=ref.soar)  # fmt: skip
            self._entries_at[n] = (point,)
            self.timings["reference"] += time.perf_counter() - t0
            self.log(f"list density of {n:,} vectors: {point[1]:.3f} entries per vector "
                     f"({time.perf_counter() - t0:.1f} s)")  # fmt: skip
        return self._entries_at[n]

    def bytes_per_vector(self, point) -> float:
        """Bytes each vector adds to the index (fixed costs such as a transform excluded)."""
        return self.index_kind.bytes_per_vector(self, self.encoding_of(point), point.store)

    def configuration(self, point, oversample, visit, m: Measurement | None, *,
                      entries_at: tuple = ()) -> Configuration:  # fmt: skip
        """The frozen record of a point with its settings and measurement (``entries_at``:
        list shapes measured at other vector counts, see :meth:`entries_at`)."""
        row = point.encoding
        _, _, seconds, state = self._encoded(point)
        fields, shared_seconds = self.index_kind.record_fields(self)
        seconds += shared_seconds
        planned = {}  # a budget family: its fitted plan's code length and coded segments
        if point.bits is not None:
            enc = self.encoding_of(point)
            planned = dict(code_bytes=enc.doc_bytes(self.dim),
                       segments=(enc.corrections_dtype.itemsize - 4) // 8)  # fmt: skip
        return Configuration(
            index=self.kind, family=row.family, bits=point.make_bits, query_bits=row.query_bits,
            precondition=point.precondition, store_vectors=point.store,
            oversample=float(oversample) if point.store and oversample else None,
            visit_percentage=None if visit is None else float(visit),
            similarity=self.similarity.value, k=self.k, seed=self.seed, dim=self.dim,
            recall=None if m is None else m.recall,
            recall_low=None if m is None else m.recall_low,
            recall_ci=None if m is None else m.recall_ci,
            latency_ms=None if m is None else m.latency_ms,
            bytes_per_vector=self.bytes_per_vector(point), build_seconds=seconds,
            n_measured=self.n, n_queries=len(self.queries), state_bytes=state,
            entries_at=tuple(entries_at), **fields, **planned,
        )  # fmt: skip
