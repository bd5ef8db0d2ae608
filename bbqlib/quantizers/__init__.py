"""Quantizers: BBQ (OSQ), RaBitQ, int8 scalar quantization, SAQ, TurboQuant."""

from .base import Quantizer
from .encoded import EncodedVectors
from .int8 import GlobalScalarQuantizer, OSQScalarQuantizer, PerDimScalarQuantizer, ScalarQuantizer
from .osq.quantizer import BBQQuantizer
from .rabitq.quantizer import RaBitQQuantizer
from .registry import quantizer_from_state, register_quantizer
from .saq.quantizer import SAQQuantizer
from .turboquant.quantizer import TurboQuantQuantizer

__all__ = [
    "Quantizer",
    "BBQQuantizer",
    "RaBitQQuantizer",
    "SAQQuantizer",
    "TurboQuantQuantizer",
    "ScalarQuantizer",
    "OSQScalarQuantizer",
    "PerDimScalarQuantizer",
    "GlobalScalarQuantizer",
    "EncodedVectors",
    "quantizer_from_state",
    "register_quantizer",
]
