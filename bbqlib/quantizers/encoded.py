"""The encoded-vectors record: codes, corrections and what they were made with."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..encoding import Encoding

__all__ = ["EncodedVectors"]


@dataclass(frozen=True, eq=False)
class EncodedVectors:
    """Immutable batch of quantized vectors.

    Attributes
    ----------
    codes : uint8 [n, encoding.doc_bytes(dim)]
        Packed codes (bit planes for 1/2/4-bit docs, one byte per dimension for 7/8).
    corrections : structured [n]
        Per-vector corrections, ``(lower, upper, additional, component_sum)`` for BBQ.
    encoding : Encoding
        The row of the encoding table the codes follow.
    dim : int
        True (unpadded) dimension.
    centroid_dot : float
        ``<c, c>`` of the centroid the codes were made against.
    fingerprint : str
        Identifies the fitted quantizer; scoring against another fit raises an error.
    """

    codes: np.ndarray
    corrections: np.ndarray
    encoding: Encoding
    dim: int
    centroid_dot: float
    fingerprint: str
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self):
        if self.codes.shape[0] != self.corrections.shape[0]:
            raise ValueError(
                f"codes ({self.codes.shape[0]} rows) and corrections "
                f"({self.corrections.shape[0]}) differ in length"
            )
        for arr in (self.codes, self.corrections):
            if arr.flags.writeable and not isinstance(arr, np.memmap):
                arr.flags.writeable = False

    def __getstate__(self):
        # The cache holds what quantizers derive from the codes (kernel layouts, norms); it is
        # rebuilt on first use, and pickling it would tie pickles to the modules of its classes.
        state = dict(self.__dict__)
        state.pop("_cache", None)
        return state

    def __setstate__(self, state):
        state.setdefault("_cache", {})  # older pickles carry theirs: still valid for these codes
        self.__dict__.update(state)  # frozen: no __setattr__

    def __len__(self) -> int:
        return self.codes.shape[0]

    def __getitem__(self, index) -> EncodedVectors:
        if isinstance(index, (int, np.integer)):
            index = slice(int(index), int(index) + 1 if int(index) != -1 else None)
        return EncodedVectors(
            np.ascontiguousarray(self.codes[index]),
            np.ascontiguousarray(self.corrections[index]),
            self.encoding,
            self.dim,
            self.centroid_dot,
            self.fingerprint,
        )

    @property
    def bytes_per_vector(self) -> int:
        """Packed code bytes plus correction bytes per vector."""
        return self.codes.shape[1] + self.corrections.dtype.itemsize

    @property
    def nbytes(self) -> int:
        return self.codes.nbytes + self.corrections.nbytes

    @staticmethod
    def concatenate(parts: list[EncodedVectors]) -> EncodedVectors:
        """Join batches made by the same fit."""
        if not parts:
            raise ValueError("nothing to concatenate")
        first = parts[0]
        for p in parts[1:]:
            if p.fingerprint != first.fingerprint:
                raise ValueError("cannot concatenate encodings made by different fits")
        return EncodedVectors(
            np.concatenate([p.codes for p in parts]),
            np.concatenate([p.corrections for p in parts]),
            first.encoding,
            first.dim,
            first.centroid_dot,
            first.fingerprint,
        )

    def __repr__(self) -> str:
        return (
            f"EncodedVectors(n={len(self)}, dim={self.dim}, {self.encoding!r}, "
            f"{self.bytes_per_vector} B/vector)"
        )
