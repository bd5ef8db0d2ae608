"""The SAQ family (segmented CAQ codes over a PCA basis).

``quantizer`` holds :class:`SAQQuantizer`; ``plan`` the segments and their bit plan,
``encoding`` the registry row a fitted plan specialises, ``bounds`` the error bounds,
``search`` the flat scans, ``lists`` the IVF lists (residual codes, the list scan),
``scanner`` :class:`~bbqlib.quantizers.saq.scanner.SAQScanner` (estimates, scans and
scorers: what the indexes ask of a fitted quantizer). The package re-exports what the module
``bbqlib.quantizers.saq`` had before it became this package.
"""

from .quantizer import (
    DEFAULT_EPS0,
    SAQ_MAX_BITS,
    SAQ_MIN_BITS,
    SAQ_QUERY_BITS,
    SAQEncoding,
    SAQQuantizer,
    saq_corrections_dtype,
)

__all__ = [
    "SAQQuantizer",
    "SAQEncoding",
    "SAQ_QUERY_BITS",
    "SAQ_MIN_BITS",
    "SAQ_MAX_BITS",
    "DEFAULT_EPS0",
    "saq_corrections_dtype",
]
