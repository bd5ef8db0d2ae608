"""The arithmetic a BBQ quantizer computes with: a codec object, chosen by name.

``BBQQuantizer(arithmetic=...)`` names one. The quantizer picks its codec when it is fitted or
restored (``arithmetic_``) and hands it every step whose numbers depend on the arithmetic: the
fit, the centroid's ``<c, c>``, doc and query codes, query validation, dense scores, the top-k
scan and the scanner the indexes get. The quantizer's methods call the codec and never ask which
arithmetic it is.

* ``"float64"`` (the default): bbqlib's own,
  :class:`~bbqlib.quantizers.osq.quantizer.Float64Arithmetic`.
* ``"lucene"``: Lucene 10.5's, bit for bit, :class:`~bbqlib.quantizers.osq.lucene.LuceneArithmetic`.

A codec's module is imported on first use, so ``import bbqlib`` does not pay for Lucene's
float32 kernels (``benchmarks/serving/serving.py --sections startup`` times the import).
"""

from __future__ import annotations

import importlib
from typing import ClassVar

__all__ = ["ARITHMETICS", "Arithmetic", "arithmetic_codec"]

#: ``BBQQuantizer(arithmetic=...)`` values -> (module, codec object), imported on first use.
_CODECS = {"float64": (".quantizer", "FLOAT64"), "lucene": (".lucene", "LUCENE")}
#: Values of ``BBQQuantizer(arithmetic=...)``.
ARITHMETICS = tuple(_CODECS)


class Arithmetic:
    """The steps of a BBQ quantizer whose numbers depend on the arithmetic.

    A codec holds no state: one object serves every quantizer of its arithmetic. Each method
    takes the quantizer ``q`` first; the ones after ``fit`` are called on a fitted ``q``.
    """

    #: The ``arithmetic`` parameter value that names this codec.
    name: ClassVar[str] = ""
    #: Appended to the quantizer's fingerprint parts (codes of two arithmetics never mix).
    fingerprint_tag: ClassVar[tuple] = ()
    #: Why an IVF cannot post these codes to its lists (empty: it can).
    no_lists_reason: ClassVar[str] = ""

    def fit(self, q, X):  # pragma: no cover - abstract
        """Fit ``q`` on rows ``X`` (validate, fix the encoding and the centroid); returns ``q``."""
        raise NotImplementedError

    def check_params(self, q) -> None:
        """Refuse, when a quantizer is restored from a file, parameters the arithmetic cannot
        compute with (a ValueError); ``fit`` checks them itself."""

    def centroid_dot(self, centroid) -> float:  # pragma: no cover - abstract
        """``<c, c>`` of the fitted centroid float32 [d], as the scores use it."""
        raise NotImplementedError

    def encode(self, q, X):  # pragma: no cover - abstract
        """Doc codes and corrections of rows ``X`` (an :class:`EncodedVectors`)."""
        raise NotImplementedError

    def validated(self, q, X, name: str, allow_1d: bool):  # pragma: no cover - abstract
        """Query rows checked and prepared for the similarity (normalized for cosine)."""
        raise NotImplementedError

    def query_codes(self, q, Qp):  # pragma: no cover - abstract
        """:class:`~bbqlib.layouts.codes.QueryCodes` of prepared rows ``Qp`` (bbqlib's
        kernels: candidate scorers, adapters)."""
        raise NotImplementedError

    def estimate(self, q, Q, enc):  # pragma: no cover - abstract
        """Raw estimates float32 [nq, n] (squared L2 or inner product)."""
        raise NotImplementedError

    def similarity_scores(self, q, Q, enc):  # pragma: no cover - abstract
        """Scores [nq, n] mapped by the similarity, higher is better."""
        raise NotImplementedError

    def topk_keys(self, q, Qp, enc, k: int, allowed, id_base: int):  # pragma: no cover
        """Top ``k`` per prepared query: ``(keys, ids)``, higher keys better, ``-inf`` / ``-1``
        padding (:meth:`bbqlib.quantizers.base.Quantizer.topk_keys`)."""
        raise NotImplementedError

    def scanner(self, q):  # pragma: no cover - abstract
        """The scanner the indexes get (:mod:`bbqlib.quantizers.scanner`)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<{type(self).__name__} arithmetic={self.name!r}>"


def arithmetic_codec(name) -> Arithmetic:
    """The codec of ``BBQQuantizer(arithmetic=name)``; a ValueError for an unknown name."""
    try:
        module, attr = _CODECS[name]
    except (KeyError, TypeError):  # TypeError: an unhashable value
        raise ValueError(
            f"arithmetic must be 'float64' (bbqlib's own, the default) or 'lucene' (bit for bit "
            f"with Lucene 10.5), got {name!r}"
        ) from None
    return getattr(importlib.import_module(module, __package__), attr)
