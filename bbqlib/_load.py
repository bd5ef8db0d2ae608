"""``bbqlib.load``: open any bbqlib file by what its header says it holds."""

from __future__ import annotations

from pathlib import Path

from .storage.container import read_kind

__all__ = ["load"]


def load(path, **kwargs):
    """Open a saved index (flat file or IVF directory), dispatching on its header."""
    path = Path(path)
    if path.is_dir():
        from .index.ivf import IVFIndex

        return IVFIndex.open(path, **kwargs)
    kind = read_kind(path)
    if kind == "flat_index":
        from .index.flat import FlatIndex

        return FlatIndex.load(path, **kwargs)
    raise ValueError(f"{path} holds a {kind!r}, which bbqlib.load cannot open")
