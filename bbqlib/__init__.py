"""bbqlib: BBQ / OSQ, RaBitQ and int8 vector quantization with numba kernels.

Quantizers (``fit`` / ``encode`` / ``estimate`` / ``similarity_scores``) produce
:class:`EncodedVectors`; indexes (:class:`FlatIndex`) scan them with numba kernels and rerank
on float vectors. See the README for a tour. :func:`calibrate` finds the cheapest configuration
that meets a recall target on your vectors (imported on first use, like :func:`sizing`).
"""

from . import threads as _threads_path  # noqa: F401  (keeps bbqlib.threads, a shim, bound)
from . import warmup as _warmup_path  # noqa: F401  (the shim; bound first, then the function)
from ._validation import DataWarning, NotFittedError
from ._version import __version__
from .encoding import ENCODINGS, Encoding, encoding_from_wire, get_encoding
from .index import FlatIndex, IVFIndex
from .index.lifecycle import RepairReport, load, repair
from .quantizers import (
    BBQQuantizer,
    EncodedVectors,
    Quantizer,
    RaBitQQuantizer,
    SAQQuantizer,
    ScalarQuantizer,
    TurboQuantQuantizer,
)
from .runtime.threads import get_num_threads, set_num_threads, thread_limit
from .runtime.warmup import start_numba as _start_numba
from .runtime.warmup import warmup
from .similarity import Similarity
from .storage.container import CorruptFileError, UnsupportedFormatError
from .storage.locks import LockError, LockTimeoutError, get_lock_timeout, set_lock_timeout

__all__ = [
    "BBQQuantizer",
    "CorruptFileError",
    "DataWarning",
    "ENCODINGS",
    "EncodedVectors",
    "Encoding",
    "FlatIndex",
    "IVFIndex",
    "LockError",
    "LockTimeoutError",
    "NotFittedError",
    "Quantizer",
    "RaBitQQuantizer",
    "RepairReport",
    "SAQQuantizer",
    "ScalarQuantizer",
    "Similarity",
    "TurboQuantQuantizer",
    "UnsupportedFormatError",
    "calibrate",
    "diagnose",
    "encoding_from_wire",
    "get_encoding",
    "get_lock_timeout",
    "get_num_threads",
    "load",
    "repair",
    "set_lock_timeout",
    "set_num_threads",
    "sizing",
    "thread_limit",
    "warmup",
    "__version__",
]

_start_numba()  # numba's once-per-process start, here rather than in the first query

#: Public names whose modules load on first use (they are not needed to serve an index).
_LAZY = {"calibrate": "calibration", "sizing": "calibration", "diagnose": "analysis.diagnose"}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
