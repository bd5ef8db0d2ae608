"""The RaBitQ family.

``quantizer`` holds :class:`RaBitQQuantizer` and its registry rows, ``codes`` the code math
(grid codes, the fast rescale factor). The package re-exports what the module
``bbqlib.quantizers.rabitq`` had before it became this package.
"""

from .quantizer import (
    DEFAULT_EPS0,
    RABITQ_BITS,
    RABITQ_CORRECTIONS_I32,
    RABITQ_CORRECTIONS_U16,
    RABITQ_QUERY_BITS,
    RaBitQQuantizer,
    rabitq_encoding,
)

__all__ = [
    "RaBitQQuantizer",
    "RABITQ_BITS",
    "RABITQ_QUERY_BITS",
    "RABITQ_CORRECTIONS_U16",
    "RABITQ_CORRECTIONS_I32",
    "DEFAULT_EPS0",
    "rabitq_encoding",
]
