"""Quantizers: BBQ (OSQ), RaBitQ, int8 scalar quantization."""

from .base import Quantizer
from .bbq import BBQQuantizer
from .encoded import EncodedVectors
from .registry import quantizer_from_state, register_quantizer

__all__ = [
    "Quantizer",
    "BBQQuantizer",
    "EncodedVectors",
    "quantizer_from_state",
    "register_quantizer",
]
