"""Elasticsearch's current int8: per-vector OSQ at 8 (or 7) bits, i.e. BBQ at that width."""

from __future__ import annotations

from typing import ClassVar

import numpy as np

from ..._params import Integer, Options, validate_params
from ...layouts.codes import DocCodes, QueryCodes
from ..encoded import EncodedVectors
from ..osq.quantizer import BBQQuantizer
from ..registry import register_quantizer
from . import METHODS, ScalarQuantizer

__all__ = ["OSQScalarQuantizer"]


@register_quantizer
class OSQScalarQuantizer(ScalarQuantizer, method="osq"):
    """``ScalarQuantizer(method="osq")``: :class:`~bbqlib.BBQQuantizer` at 7 or 8 bits.

    Every call is delegated to the fitted BBQ quantizer ``bbq_``; the codes are
    interchangeable with it (same fingerprint).
    """

    family = "osq"
    _constraints: ClassVar[dict] = {
        "method": [Options(METHODS)],
        "seed": [None, Integer()],
        "quantile": [None],  # OSQ picks an interval per vector
    }

    def fit(self, X, y=None):
        """Fit the BBQ quantizer this one delegates to."""
        if self.quantile is not None:
            raise ValueError(
                f"quantile={self.quantile!r} does not apply to method='osq' (it picks an "
                "interval per vector); leave it None or use method='per_dim' or 'global'"
            )
        validate_params(self, self._constraints)
        if isinstance(self.bits, bool) or self.bits not in (7, 8):
            raise ValueError(
                f"bits must be 8 (int8) or 7 (Lucene int7), got {self.bits!r}; for 1 to 6 "
                "bits use bbqlib.BBQQuantizer"
            )
        bbq = BBQQuantizer(
            bits=self.bits,
            query_bits=self.query_bits,
            similarity=self.similarity,
            precondition=self.precondition,
            seed=self.seed,
        ).fit(X)
        self._discard_fit()
        self._adopt(bbq)
        return self

    def _adopt(self, bbq: BBQQuantizer) -> None:
        self.bbq_ = bbq
        self.encoding_ = bbq.encoding_
        self.similarity_ = bbq.similarity_
        self.dim_ = bbq.dim_
        self.transform_ = bbq.transform_
        self.centroid_ = bbq.centroid_
        self.centroid_dot_ = bbq.centroid_dot_
        self.fingerprint_ = bbq.fingerprint_  # codes are interchangeable with BBQQuantizer(8)

    def encode(self, X) -> EncodedVectors:
        self._check_fitted()
        return self.bbq_.encode(X)

    def _doc_codes(self, enc: EncodedVectors) -> DocCodes:
        return self.bbq_._doc_codes(enc)

    def _query_codes(self, Q: np.ndarray) -> QueryCodes:
        return self.bbq_._query_codes(Q)

    def transform_rows(self, X: np.ndarray) -> np.ndarray:
        return self.bbq_.transform_rows(X)

    def encode_pairs(self, W, rows, centres, lists):
        return self.bbq_.encode_pairs(W, rows, centres, lists)

    def scanner(self):
        self._check_fitted()
        return self.bbq_.scanner()

    def query_pairs(self, Qt, centres, pair_query, pair_list, *, lut: bool = False):
        return self.bbq_.query_pairs(Qt, centres, pair_query, pair_list, lut=lut)

    def get_state(self) -> tuple[dict, dict]:
        """The BBQ quantizer's state, nested under ``"bbq"``."""
        self._check_fitted()
        bbq_params, arrays = self.bbq_.get_state()
        params = {
            "class": type(self).__name__,
            **{k: getattr(self, k) for k in self._param_names if k != "precondition"},
            "bits": self.encoding_.doc_bits,
            "query_bits": self.encoding_.query_bits,
            "similarity": self.similarity_.value,
            "dim": self.dim_,
            "fingerprint": self.fingerprint_,
            "transform": None,
            "bbq": bbq_params,
        }
        return params, arrays

    def with_query_bits(self, query_bits) -> OSQScalarQuantizer:
        """A copy scoring queries at another bit width (the doc codes stay valid)."""
        self._check_fitted()
        params, arrays = self.get_state()
        params["bbq"]["query_bits"] = params["query_bits"] = query_bits
        return type(self).from_state(params, arrays)

    @classmethod
    def from_state(cls, params: dict, arrays: dict):
        bbq = BBQQuantizer.from_state(params["bbq"], arrays)
        q = cls(
            bits=params["bits"],
            method="osq",
            similarity=params["similarity"],
            query_bits=params["query_bits"],
            precondition=bbq.transform_,
            seed=params["seed"],
        )
        q._adopt(bbq)
        return q
