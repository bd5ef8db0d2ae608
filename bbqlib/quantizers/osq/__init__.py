"""The OSQ family: BBQ's optimized scalar quantization.

``quantizer`` holds :class:`BBQQuantizer`, ``math`` the batch OSQ (:func:`quantize_rows`,
:func:`quantize_pairs`), ``lucene`` Lucene's arithmetic. The package re-exports what the module
``bbqlib.quantizers.osq`` had before it became this package.
"""

from .math import DEFAULT_ITERS, DEFAULT_LAMBDA, OSQResult, quantize_pairs, quantize_rows

__all__ = ["OSQResult", "quantize_rows", "quantize_pairs", "DEFAULT_LAMBDA", "DEFAULT_ITERS"]
