"""The TurboQuant family (Zandieh et al., arXiv 2504.19874): rotation, Lloyd-Max codebook,
optional QJL sketch of the residual.

``encoding`` registers the family's rows (``turboquant``, ``turboquant_prod``), ``codebook``
holds the NumPy code math, ``kernels`` the compiled scans, ``quantizer``
:class:`TurboQuantQuantizer`, ``scan`` the flat scans and ``scanner`` the one-query paths.
"""

from .encoding import TURBOQUANT_MSE, TURBOQUANT_PROD, TurboQuantEncoding
from .quantizer import TurboQuantQuantizer

__all__ = ["TurboQuantQuantizer", "TurboQuantEncoding", "TURBOQUANT_MSE", "TURBOQUANT_PROD"]
