"""Indexes: flat (brute-force scan + rerank) and IVF (DiskBBQ-style)."""

from .flat.index import FlatIndex
from .ivf import IVFIndex

__all__ = ["FlatIndex", "IVFIndex"]
