"""Quantizers: BBQ (OSQ), RaBitQ, int8 scalar quantization."""

from .base import Quantizer
from .bbq import BBQQuantizer
from .encoded import EncodedVectors
from .rabitq import RaBitQQuantizer
from .registry import quantizer_from_state, register_quantizer
from .scalar import ScalarQuantizer

__all__ = [
    "Quantizer",
    "BBQQuantizer",
    "RaBitQQuantizer",
    "ScalarQuantizer",
    "EncodedVectors",
    "quantizer_from_state",
    "register_quantizer",
]
