"""Codes as the kernels see them: docs and queries, each carrying its registry row."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..encoding import Encoding
from ..packing import lut_blocks, unpack_planes

__all__ = ["DocCodes", "QueryCodes"]


@dataclass(frozen=True)
class DocCodes:
    """Docs as the kernels see them.

    Attributes
    ----------
    encoding : Encoding
        The registry row; its ``layout`` says how ``data`` is laid out.
    data : ndarray
        ``planes``: uint64 words [n, planes * words]; ``bytes``: uint8 [n, dim].
    factors : float32 [n, 4]
        Rows ``(a_x, l_x, ΣX, add_x)`` of the correction algebra (:mod:`bbqlib._kernels.scoring`).
    dim : int
        True (unpadded) dimension.
    centroid_dot : float
        ``<c, c>`` of the centre the docs were coded against.
    is_l2 : bool
        Raw values are squared distances (euclidean).
    """

    encoding: Encoding
    data: np.ndarray
    factors: np.ndarray
    dim: int
    centroid_dot: float
    is_l2: bool
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def kind(self) -> str:
        return self.encoding.layout

    @property
    def planes(self) -> int:
        return self.encoding.doc_planes

    @property
    def words(self) -> int:
        return self.data.shape[1] // self.planes if self.kind == "planes" else 0

    def __len__(self) -> int:
        return self.data.shape[0]

    def lut_layout(self) -> tuple[np.ndarray, np.ndarray]:
        """The lookup-table scan's layout, made once and kept: the plane bytes in blocks of
        32 docs, and the factors as columns (float32 [4, n])."""
        if "lut_layout" not in self._cache:
            self._cache["lut_layout"] = (
                lut_blocks(self.data.view(np.uint8)),
                np.ascontiguousarray(self.factors.T),
            )
        return self._cache["lut_layout"]

    def unpacked(self, start: int, stop: int) -> np.ndarray:
        """uint8 codes [stop - start, dim] of a range of docs."""
        if self.kind == "bytes":
            return self.data[start:stop]
        return unpack_planes(self.data[start:stop].view(np.uint8), self.planes, self.dim)


@dataclass(frozen=True)
class QueryCodes:
    """Queries as the kernels see them.

    ``kind``: ``"planes"`` (uint64 [nq, planes * words]), ``"bytes"`` (uint8 [nq, dim]) or
    ``"float"`` (float32 [nq, dim], centred and transformed as the quantizer requires);
    ``factors`` float64 [nq, 4] rows ``(a_y, l_y, ΣY, add_y)``. :meth:`of` builds them from a
    registry row.
    """

    kind: str
    data: np.ndarray
    factors: np.ndarray
    planes: int = 0

    @classmethod
    def of(cls, encoding: Encoding, data: np.ndarray, factors: np.ndarray) -> QueryCodes:
        """Queries of a registry row: the row's query kind and planes."""
        return cls(encoding.query_kind, data, factors, encoding.query_planes)

    def __len__(self) -> int:
        return self.data.shape[0]

    def rows(self, start: int, stop: int) -> QueryCodes:
        return QueryCodes(self.kind, self.data[start:stop], self.factors[start:stop], self.planes)
