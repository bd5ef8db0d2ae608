"""Indexes: flat (brute-force scan + rerank) and IVF (DiskBBQ-style)."""

from .flat import FlatIndex

__all__ = ["FlatIndex"]
