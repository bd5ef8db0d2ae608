"""A configuration: what to build and how to search it, with what calibration measured."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..encoding import ENCODINGS, Encoding

__all__ = ["Configuration"]


@dataclass(frozen=True)
class Configuration:
    """One configuration of an index, as calibration measured it (frozen).

    Build parameters: ``index`` (``"flat"`` / ``"ivf"``), ``family`` and ``bits`` /
    ``query_bits`` (a registry row), ``precondition`` (the family's transform parameter),
    ``store_vectors``, ``cluster_size`` (IVF), ``similarity``, ``seed``. Search parameters:
    ``k``, ``oversample`` (None: no rerank), ``visit_percentage`` (IVF).

    Measured on ``n_queries`` held-out queries against ``n_measured`` vectors of dimension
    ``dim``: ``recall`` (mean recall@k), ``recall_low`` (one-sided 95% bootstrap lower
    bound), ``recall_ci`` (two-sided 95%), ``latency_ms`` (single thread, per query),
    ``bytes_per_vector`` (the index's stored bytes per vector at ``n_measured``),
    ``build_seconds``; for the IVF ``entries_per_vector`` and ``vectors_per_list``, and
    ``entries_at``: ``(n, entries_per_vector)`` pairs measured at the list density of other
    vector counts (the sizing's list density rule, :mod:`bbqlib.calibration.sizing`).
    ``state_bytes``: the fitted quantizer's state (its transform). A budget family (SAQ):
    ``bits`` is the average budget, ``code_bytes`` and ``segments`` the fitted plan's code
    length and coded segments.
    """

    index: str
    family: str
    bits: int
    query_bits: int | None
    precondition: object
    store_vectors: object
    oversample: float | None
    visit_percentage: float | None
    similarity: str
    k: int
    seed: int
    cluster_size: int | None = None
    dim: int = 0
    recall: float | None = None
    recall_low: float | None = None
    recall_ci: tuple[float, float] | None = None
    latency_ms: float | None = None
    bytes_per_vector: float | None = None
    build_seconds: float | None = None
    n_measured: int = 0
    n_queries: int = 0
    entries_per_vector: float | None = None
    vectors_per_list: float | None = None
    state_bytes: int = 0
    entries_at: tuple = ()
    code_bytes: int | None = None
    segments: int | None = None
    extra: dict = field(default_factory=dict, compare=False, repr=False)

    # ------------------------------------------------------------------ derived
    @property
    def encoding(self) -> Encoding:
        """The encoding the bytes follow from: the registry row, or the family's own for a
        fitted plan (``FamilySpace.encoding_for_record``)."""
        entry = self._space_entry(required=False)
        make = None if entry is None else entry.encoding_for_record
        if make is not None:
            return make(self.bits, self.query_bits, code_bytes=self.code_bytes,
                        segments=self.segments)  # fmt: skip
        return ENCODINGS.lookup(self.family, self.bits, self.query_bits)

    @property
    def qps(self) -> float | None:
        """Queries per second on one core (``1000 / latency_ms``)."""
        if self.latency_ms is None:
            return None
        return 1000.0 / self.latency_ms if self.latency_ms > 0 else math.inf

    @property
    def rerank(self) -> bool:
        return bool(self.store_vectors)

    def label(self) -> str:
        q = "float" if self.query_bits is None else str(self.query_bits)
        bits = f"{self.bits:g}" if isinstance(self.bits, float) else str(self.bits)
        pre = "" if self.precondition is None else f", {self.precondition}"
        store = f", {self.store_vectors} rerank x{self.oversample:g}" if self.rerank else ""
        visit = "" if self.visit_percentage is None else f", visit {self.visit_percentage:g}%"
        return f"{self.index} {self.family} {bits}x{q}{pre}{store}{visit}"

    # ------------------------------------------------------------------ building
    def _space_entry(self, required: bool = True):
        from .space import FULL_SPACE

        for entry in FULL_SPACE:
            if entry.family == self.family:
                return entry
        if not required:
            return None
        raise ValueError(f"no search-space entry makes family {self.family!r}")

    def quantizer(self):
        """A new (unfitted) quantizer of this configuration."""
        make = self._space_entry().make
        return make(self.bits, self.query_bits, self.similarity, self.precondition, self.seed)

    def build(self, path=None):
        """A new empty index of this configuration, its search parameters as defaults.

        ``add(X)`` fits and fills it; ``search(Q)`` then uses the calibrated ``k``-free
        defaults (``oversample``, ``visit_percentage``, rerank when vectors are stored).
        ``path`` (IVF only): the directory the index lives in.
        """
        from .kinds import index_kind

        return index_kind(self.index).build(self, self.quantizer(), path)

    def code(self) -> str:
        """Python that builds and searches this configuration (to paste)."""
        entry = self._space_entry()
        quantizer = entry.code.format(
            bits=self.bits,
            query_bits=repr(self.query_bits),
            similarity=repr(self.similarity),
            precondition=repr(self.precondition),
            seed=self.seed,
        )
        args = [f"store_vectors={self.store_vectors!r}"]
        if self.oversample is not None:
            args.append(f"oversample={self.oversample:g}")
        from .kinds import index_kind

        return (
            "import bbqlib\n\n" + index_kind(self.index).code(self, quantizer, args) + ",\n)\n"
            "index.add(X)\n"
            f"scores, ids = index.search(queries, k={self.k})\n"
        )

    def sizing(self, n: int | None = None):
        """:func:`bbqlib.sizing` of this configuration (default ``n``: as measured)."""
        from .sizing import sizing

        return sizing(self.n_measured if n is None else n, self.dim, self)
