"""What every index does the same way when it is made: the quantizer it is built with.

Either a fitted or unfitted :class:`~bbqlib.Quantizer` of any family, or the options of the
default :class:`~bbqlib.BBQQuantizer` (``bits``, ``query_bits``, ``similarity``,
``precondition``, ``seed``), checked at construction (a wrong ``bits`` fails before a long
``add``, not after it). Options that differ from their defaults next to a quantizer are
ignored with a ``FutureWarning`` (they raise from bbqlib 0.4, as ``IVFIndex`` raises now).
"""

from __future__ import annotations

import warnings

from ..quantizers import BBQQuantizer, Quantizer

__all__ = ["DEFAULT_OPTIONS", "default_quantizer", "index_quantizer"]

#: The default quantizer's options (``BBQQuantizer``'s own defaults, as the indexes document).
DEFAULT_OPTIONS = {"bits": 1, "query_bits": "auto", "similarity": "cosine", "precondition": None,
                   "seed": None}  # fmt: skip


def default_quantizer(**options) -> BBQQuantizer:
    """The default :class:`~bbqlib.BBQQuantizer` of ``options``, its bits, query bits and
    similarity checked now (``ValueError`` naming the accepted values)."""
    q = BBQQuantizer(**{**DEFAULT_OPTIONS, **options})
    q._encoding_for_params()
    q.similarity_kind  # noqa: B018
    return q


def index_quantizer(quantizer, owner: str, **options) -> Quantizer:
    """The quantizer an index named ``owner`` is made with: ``quantizer``, else the default
    quantizer of ``options`` (:func:`default_quantizer`).

    ``TypeError`` when ``quantizer`` is not a bbqlib quantizer; a ``FutureWarning`` naming
    the options that differ from :data:`DEFAULT_OPTIONS` when a quantizer is given too.
    """
    if quantizer is None:
        return default_quantizer(**options)
    if not isinstance(quantizer, Quantizer):
        raise TypeError(f"quantizer must be a bbqlib Quantizer, got {type(quantizer).__name__}")
    ignored = sorted(
        k for k, v in options.items() if v is not DEFAULT_OPTIONS[k] and v != DEFAULT_OPTIONS[k]
    )
    if ignored:
        warnings.warn(
            f"{owner}: {', '.join(ignored)} ignored, the quantizer given sets them; passing "
            "both raises from bbqlib 0.4 (as IVFIndex does): pass the quantizer alone",
            FutureWarning,
            stacklevel=3,
        )
    return quantizer
