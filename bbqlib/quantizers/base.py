"""What every quantizer shares: validation, the estimate/score/search API, fingerprints.

A quantizer subclass implements ``fit``, ``encode``, ``_doc_codes`` and ``_query_codes``; the
affine correction algebra and the kernels (:mod:`bbqlib.scoring`) do the rest.
"""

from __future__ import annotations

import hashlib

import numpy as np

from .. import scoring
from .._validation import NotFittedError, check_k, check_vectors, prepare_for_similarity
from ..similarity import Similarity, resolve_similarity, scores_from_raw
from .encoded import EncodedVectors

__all__ = ["Quantizer"]


class Quantizer:
    """Base class: fit on data, encode docs, score queries against encoded docs.

    Subclasses set ``similarity_`` (a :class:`Similarity`), ``dim_``, ``encoding_``,
    ``fingerprint_`` in ``fit``.
    """

    #: Default oversample for reranking, from the encoding table.
    @property
    def default_oversample(self) -> float:
        self._check_fitted()
        return self.encoding_.default_oversample

    @property
    def similarity_kind(self) -> Similarity:
        return resolve_similarity(self.similarity)

    # -- to implement ---------------------------------------------------------------------
    def fit(self, X):  # pragma: no cover - abstract
        raise NotImplementedError

    def encode(self, X) -> EncodedVectors:  # pragma: no cover - abstract
        raise NotImplementedError

    def _doc_codes(self, enc: EncodedVectors) -> scoring.DocCodes:  # pragma: no cover
        raise NotImplementedError

    def _query_codes(self, Q: np.ndarray) -> scoring.QueryCodes:  # pragma: no cover
        raise NotImplementedError

    # -- shared ---------------------------------------------------------------------------
    @property
    def is_fitted(self) -> bool:
        return hasattr(self, "fingerprint_")

    def _check_fitted(self) -> None:
        if not self.is_fitted:
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet; call fit(X) first")

    def _check_encoded(self, enc) -> None:
        self._check_fitted()
        if not isinstance(enc, EncodedVectors):
            raise TypeError(f"expected EncodedVectors from encode(), got {type(enc).__name__}")
        if enc.fingerprint != self.fingerprint_:
            raise ValueError(
                "these codes were encoded by a different fit (fingerprint "
                f"{enc.fingerprint} != {self.fingerprint_}); encode them with this quantizer"
            )

    def _validated(self, X, name: str, *, allow_1d: bool = False) -> np.ndarray:
        """Validated float32 rows with the similarity's rules applied (normalized for cosine)."""
        self._check_fitted()
        X = check_vectors(X, name, dim=self.dim_, allow_1d=allow_1d)
        return prepare_for_similarity(X, self.similarity_, name)

    def _cached_doc_codes(self, enc: EncodedVectors) -> scoring.DocCodes:
        key = ("doc_codes", self.fingerprint_)
        if key not in enc._cache:
            enc._cache[key] = self._doc_codes(enc)
        return enc._cache[key]

    def query_codes(self, Q) -> scoring.QueryCodes:
        """Quantize queries (1-D or 2-D) as the kernels take them."""
        return self._query_codes(self._validated(Q, "Q", allow_1d=True))

    def estimate(self, Q, enc: EncodedVectors, *, return_bounds: bool = False, eps0=None):
        """Raw estimates [nq, n]: squared L2 (euclidean) or inner product (the others).

        ``return_bounds=True`` is only available on quantizers with an error bound
        (:class:`~bbqlib.RaBitQQuantizer`).
        """
        if return_bounds:
            raise ValueError(
                f"{type(self).__name__} has no error bound (its estimator is biased and carries "
                "no confidence interval); use bbqlib.RaBitQQuantizer for return_bounds=True"
            )
        self._check_encoded(enc)
        q = self.query_codes(Q)
        return scoring.estimate_raw(q, self._cached_doc_codes(enc)).astype(np.float32)

    def similarity_scores(self, Q, enc: EncodedVectors) -> np.ndarray:
        """Lucene-mapped scores [nq, n], higher is better (see :mod:`bbqlib.similarity`)."""
        return scores_from_raw(self.similarity_, self.estimate(Q, enc))

    def search(self, Q, enc: EncodedVectors, k: int, *, allowed=None, id_base: int = 0):
        """Top ``k`` per query by estimate: ``(raw, ids)`` [nq, k], best first.

        ``raw`` holds estimated d² (euclidean) or inner products; padding is ``nan`` / ``-1``.
        """
        self._check_encoded(enc)
        k = check_k(k)
        q = self.query_codes(Q)
        keys, ids = scoring.topk_raw(
            q, self._cached_doc_codes(enc), k, allowed=allowed, id_base=id_base
        )
        raw = -keys if self.similarity_.is_distance else keys
        raw[ids < 0] = np.nan
        return raw, ids

    # -- candidate scorer (bbqlib.adapters, issue 6) ---------------------------------------
    def scorer(self, query, enc: EncodedVectors):
        """A callable ``score_ids(ids) -> float32`` of one query's estimates for chosen docs.

        For engines that bring their own candidates (graphs, IVF lists): the query is quantized
        once, here; each call scores only ``ids`` in one numba kernel. The values equal
        ``self.estimate(query, enc)[0, ids]`` exactly (raw: squared L2 or inner product).

        Parameters
        ----------
        query : float array [d] (or [1, d])
        enc : EncodedVectors from :meth:`encode`

        Returns
        -------
        bbqlib.adapters.CandidateScorer
            ``score_ids(ids)`` takes integer ids in ``[0, len(enc))`` (any integer dtype).
        """
        from ..adapters.scorer import CandidateScorer

        self._check_encoded(enc)
        qc = self.query_codes(query)
        if len(qc) != 1:
            raise ValueError(
                f"query must be one vector [d], got {len(qc)} rows; make one scorer per query"
            )
        return CandidateScorer(qc, self._cached_doc_codes(enc))

    # -- end of candidate scorer ------------------------------------------------------------

    def _state_with_transform(self, params: dict) -> tuple[dict, dict]:
        """``(params, arrays)`` for files: the centroid, plus the transform's state if any."""
        arrays = {"centroid": np.asarray(self.centroid_)}
        params = {**params, "transform": None}
        if self.transform_ is not None:
            t_params, t_arrays = self.transform_.get_state()
            params["transform"] = t_params
            arrays.update({f"transform.{k}": v for k, v in t_arrays.items()})
        return params, arrays

    @staticmethod
    def _transform_from_state(params: dict, arrays: dict):
        """The transform stored by :meth:`_state_with_transform` (None if there is none)."""
        if not params.get("transform"):
            return None
        from ..transforms import transform_from_state

        t_arrays = {k.split(".", 1)[1]: v for k, v in arrays.items() if k.startswith("transform.")}
        return transform_from_state(params["transform"], t_arrays)

    def _fingerprint(self, *parts) -> str:
        h = hashlib.blake2b(digest_size=8)
        h.update(type(self).__name__.encode())
        for p in parts:
            if isinstance(p, np.ndarray):
                h.update(np.ascontiguousarray(p).tobytes())
            else:
                h.update(repr(p).encode())
        return h.hexdigest()

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({params})"

    def get_params(self) -> dict:
        """Constructor parameters (scikit-learn style)."""
        return {k: getattr(self, k) for k in self._param_names}
