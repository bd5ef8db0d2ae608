"""The quantizer an :class:`~bbqlib.IVFIndex` is built with, from its constructor arguments.

Either a quantizer (any family that serves lists, ``Quantizer.serves_lists``) or the options of the
default :class:`~bbqlib.BBQQuantizer` (``bits``, ``query_bits``, ``similarity``,
``precondition``), never both; ``IVFIndex(bits, similarity, cluster_size)`` (bbqlib 0.1)
still works with a ``FutureWarning`` until 0.4.
"""

from __future__ import annotations

import warnings

import numpy as np

from ...quantizers import Quantizer
from ..base import DEFAULT_OPTIONS, default_quantizer

__all__ = ["UNSET", "resolve_quantizer"]

#: Marks an option the caller did not pass.
UNSET = object()


def resolve_quantizer(quantizer, legacy: tuple, options: dict, seed, cluster_size):
    """``(quantizer, cluster_size)`` from ``IVFIndex.__init__``'s arguments.

    ``options`` maps ``bits``, ``query_bits``, ``similarity`` and ``precondition`` to the
    values passed, :data:`UNSET` where none was.
    """
    options = dict(options)
    if isinstance(quantizer, (int, np.integer)) and not isinstance(quantizer, bool):
        warnings.warn(
            "IVFIndex(bits, similarity, cluster_size) is deprecated and stops working in "
            "bbqlib 0.4 (the first parameter becomes the quantizer); pass "
            "IVFIndex(bits=..., similarity=..., cluster_size=...) or a quantizer",
            FutureWarning,
            stacklevel=3,
        )
        if options["bits"] is not UNSET:
            raise TypeError("IVFIndex got bits both positionally and by keyword")
        options["bits"], quantizer = quantizer, None
        if len(legacy) > 2:
            raise TypeError("IVFIndex takes at most three positional arguments")
        if legacy:
            options["similarity"] = legacy[0]
        if len(legacy) > 1:
            cluster_size = legacy[1]
    elif legacy:
        raise TypeError("IVFIndex takes the quantizer as its only positional argument")
    given = sorted(k for k, v in options.items() if v is not UNSET)
    if quantizer is None:
        opts = {k: (DEFAULT_OPTIONS[k] if v is UNSET else v) for k, v in options.items()}
        quantizer = default_quantizer(seed=seed, **opts)  # checked now, not after add()
    elif not isinstance(quantizer, Quantizer):
        raise TypeError(f"quantizer must be a bbqlib Quantizer, got {type(quantizer).__name__}")
    elif not quantizer.serves_lists:
        raise ValueError(
            f"{type(quantizer).__name__} codes are served by FlatIndex only "
            f"({quantizer.no_lists_reason}); use bbqlib.FlatIndex"
        )
    elif given:
        raise ValueError(
            f"pass either a quantizer or {', '.join(given)}, not both: the quantizer "
            "already sets them"
        )
    return quantizer, cluster_size
