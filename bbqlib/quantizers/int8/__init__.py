"""int8 (and int7) scalar quantization: one class per method behind :class:`ScalarQuantizer`.

``ScalarQuantizer(method=...)`` builds the method's class, each a subclass of it:

``"osq"`` → :class:`OSQScalarQuantizer`
    Per-vector optimized scalar quantization at 8 bits with 8-bit queries (Lucene 10.4's
    ``UNSIGNED_BYTE`` encoding, Elasticsearch's current ``int8``): exactly
    :class:`~bbqlib.BBQQuantizer` with ``bits=8``.
``"per_dim"`` → :class:`PerDimScalarQuantizer`
    One ``[min, max]`` (or quantile) interval per dimension fitted on the data, as faiss
    ``SQ8``; float queries are scored against the uint8 codes.
``"global"`` → :class:`GlobalScalarQuantizer`
    Lucene 9.9's ``ScalarQuantizer`` (Elasticsearch ``int8_hnsw`` before BBQ): one interval
    for every value, from averaged quantiles, and a per-vector offset correction.
"""

from __future__ import annotations

from typing import ClassVar

from ..._params import Integer, Options, Real
from ..base import Quantizer
from ..registry import register_quantizer

__all__ = [
    "ScalarQuantizer",
    "OSQScalarQuantizer",
    "PerDimScalarQuantizer",
    "GlobalScalarQuantizer",
    "METHODS",
    "NO_CORRECTIONS",
    "OFFSET_CORRECTIONS",
    "lucene_confidence_interval",
]

#: Quantization methods of :class:`ScalarQuantizer`.
METHODS = ("osq", "per_dim", "global")


@register_quantizer
class ScalarQuantizer(Quantizer):
    """int8 (or int7) scalar quantization: per-vector OSQ, per-dimension or global scales.

    Calling ``ScalarQuantizer(method=m, ...)`` returns an instance of the method's class
    (a subclass of this one), so ``isinstance(q, ScalarQuantizer)`` always holds and
    ``sklearn.base.clone`` rebuilds the same class.

    Parameters
    ----------
    bits : {8, 7}
        Bits per stored dimension; 7 reproduces Lucene/Elasticsearch ``int7``.
    method : {"osq", "per_dim", "global"}
        ``"osq"`` (default): Lucene's per-vector optimized interval around the data mean,
        16 bytes of corrections, byte queries. ``"per_dim"``: faiss ``SQ8``-style per-dimension
        interval, no corrections, float queries. ``"global"``: Lucene 9.9's one interval from
        quantiles plus a 4-byte score offset per vector (none for euclidean), byte queries.
    similarity : {"cosine", "dot_product", "euclidean", "max_inner_product"} or an alias
    query_bits : {"auto", None, 4, 7, 8}
        ``"auto"``: ``bits`` for ``osq`` and ``global``, float queries (None) for ``per_dim``.
        ``osq`` takes any query width of the registry; ``per_dim`` also takes 4, 7 or 8 (the
        scaled query ``s ∘ u`` is min/max-quantized, so the integer kernel runs); ``global``
        quantizes queries on its own grid, so only ``bits`` is accepted.
    precondition : {None, "dense", "block", "hadamard", True} or a Transform
        Random orthogonal transform applied to docs and queries first (any method).
    seed : int, optional
        Seed of the preconditioner and of ``global``'s row sample (default 42, as Lucene).
    quantile : float in (0, 1], optional
        Central fraction of values the interval keeps (``per_dim``: per dimension, default
        1.0 = min/max as faiss ``SQ8``; ``global``: Lucene's ``confidence_interval``, default
        ``max(0.9, 1 - 1/(d+1))``). Not used by ``osq``.

    Examples
    --------
    >>> import numpy as np, bbqlib
    >>> X = np.random.default_rng(0).normal(size=(1000, 64)).astype(np.float32)
    >>> q = bbqlib.ScalarQuantizer(method="per_dim", similarity="euclidean").fit(X)
    >>> type(q).__name__, q.encode(X).bytes_per_vector
    ('PerDimScalarQuantizer', 64)
    """

    _param_names = ("bits", "method", "similarity", "query_bits", "precondition", "seed",
                    "quantile")  # fmt: skip
    _constraints: ClassVar[dict] = {
        "method": [Options(METHODS)],
        "seed": [None, Integer()],
        "quantile": [None, Real(0.0, 1.0, low_open=True)],
    }
    # Fingerprints (stored in files) hash this name, whatever the method's class is called.
    _fingerprint_name = "ScalarQuantizer"
    #: Method name -> class, filled by the subclasses.
    _methods: ClassVar[dict[str, type]] = {}

    def __new__(cls, bits: int = 8, method: str = "osq", *args, **kwargs):
        if cls is ScalarQuantizer and method in cls._methods:
            cls = cls._methods[method]
        return super().__new__(cls)

    def __init_subclass__(cls, method: str | None = None, **kwargs):
        super().__init_subclass__(**kwargs)
        if method is not None:
            cls.method_name = method
            ScalarQuantizer._methods[method] = cls

    def __init__(
        self,
        bits: int = 8,
        method: str = "osq",
        similarity: str = "cosine",
        query_bits: int | None | str = "auto",
        *,
        precondition=None,
        seed: int | None = None,
        quantile: float | None = None,
    ):
        self.bits = bits
        self.method = method
        self.similarity = similarity
        self.query_bits = query_bits
        self.precondition = precondition
        self.seed = seed
        self.quantile = quantile

    def fit(self, X, y=None):
        """Validate the parameters and learn the method's grid (or the OSQ centroid)."""
        if self.method != getattr(type(self), "method_name", None):
            raise ValueError(
                f"method must be one of {list(METHODS)}, got {self.method!r}"
                if self.method not in METHODS
                else f"method={self.method!r} on a {type(self).__name__}; build a new "
                f"ScalarQuantizer(method={self.method!r}) instead of changing the method"
            )
        return super().fit(X, y)

    def __repr__(self) -> str:
        # The factory's name: ``ScalarQuantizer(method=...)`` rebuilds any method's class.
        return "ScalarQuantizer" + super().__repr__()[len(type(self).__name__) :]

    @classmethod
    def from_state(cls, params: dict, arrays: dict):
        """Rebuild a fitted quantizer of any method (files name the method)."""
        target = cls._methods[params["method"]]
        if cls is not target:
            return target.from_state(params, arrays)
        return super().from_state(params, arrays)


def lucene_confidence_interval(dim: int) -> float:
    """Lucene's default confidence interval, ``max(0.9, 1 - 1 / (dim + 1))``."""
    return max(0.9, 1.0 - 1.0 / (int(dim) + 1))


# The method classes register themselves on import (after ScalarQuantizer exists).
from ...encoding import NO_CORRECTIONS, OFFSET_CORRECTIONS  # noqa: E402
from .global_interval import GlobalScalarQuantizer  # noqa: E402
from .per_dim import PerDimScalarQuantizer  # noqa: E402
from .per_vector import OSQScalarQuantizer  # noqa: E402
