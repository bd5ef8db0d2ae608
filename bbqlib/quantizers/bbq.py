"""BBQ: Lucene/Elasticsearch optimized scalar quantization at 1, 2, 4 and 7 (and 8) bits."""

from __future__ import annotations

import numpy as np

from .. import scoring
from .._validation import (
    apply_similarity,
    check_similarity_rules,
    check_vectors,
    prepare_for_similarity,
)
from ..encoding import Encoding, get_encoding
from ..packing import pack_planes, plane_words
from ..similarity import resolve_similarity
from . import lucene_osq
from .base import Quantizer
from .encoded import EncodedVectors
from .osq import DEFAULT_ITERS, DEFAULT_LAMBDA, quantize_rows
from .registry import register_quantizer

__all__ = ["BBQQuantizer", "ENCODE_CHUNK_BYTES"]

#: float32 bytes of input encoded at a time (bounds encode's temporaries; 16 MiB).
ENCODE_CHUNK_BYTES = 1 << 24


@register_quantizer
class BBQQuantizer(Quantizer):
    """Optimized scalar quantization (BBQ) with asymmetric quantized queries.

    Parameters
    ----------
    bits : {1, 2, 4, 7, 8}
        Bits per dimension of the stored codes.
    query_bits : {4, 7, 8, None, "auto"}
        Bits per dimension of the query. ``"auto"`` takes Elasticsearch's default (4 for 1, 2
        and 4-bit docs, 7 for 7-bit, 8 for 8-bit); ``None`` scores an unquantized float query
        against the dequantized codes (separates doc error from query error).
    similarity : {"cosine", "dot_product", "euclidean", "max_inner_product"} or an alias
        ``dot_product`` requires unit vectors; ``cosine`` normalizes for you.
    precondition : {None, "dense", "block", "hadamard", True} or a Transform
        Optional random orthogonal transform applied to docs and queries before quantization
        (Elasticsearch 9.4's ``precondition``; ``True`` means the block preconditioner).
    seed : int, optional
        Seed of the preconditioner.
    iters, lam : int, float
        Optimizer steps and anisotropic weight (5 and 0.1, as Lucene).
    arithmetic : {"float64", "lucene"}
        ``"float64"`` (default): bbqlib's own arithmetic (float64 sums, the plain mean as
        centroid). ``"lucene"``: Lucene 10.5's, bit for bit - its centroid and cosine
        normalization, codes, corrections and float32 scores (1x4, 2x4, 4x4 and 7x7 only,
        no preconditioning; see :mod:`bbqlib.quantizers.lucene_osq` and ``docs/lucene.md``).

    Attributes
    ----------
    centroid_ : float32 [d]
        Plain mean of the fitted vectors (normalized first for cosine, not re-normalized), in
        the preconditioned space when a transform is set; with ``arithmetic="lucene"`` the
        centroid Lucene's writer computes.
    encoding_ : Encoding
        Row of the encoding table in use.

    Notes
    -----
    Each vector ``v`` is centred, ``x = v - c``, and quantized to ``k_i`` in ``[0, 2^B - 1]``
    on an interval ``[a, b]`` chosen to minimise an anisotropic loss (spec §1). Corrections
    ``(a, b, ||x||² or <v, c>, Σk)`` make the dot product of two affine dequantizations exact
    in integer arithmetic (spec §2). The estimator is biased (the codebook is not randomized);
    see :class:`bbqlib.RaBitQQuantizer` for an unbiased one.

    Examples
    --------
    >>> import numpy as np, bbqlib
    >>> X = np.random.default_rng(0).normal(size=(1000, 64)).astype(np.float32)
    >>> q = bbqlib.BBQQuantizer(bits=1, similarity="euclidean").fit(X)
    >>> enc = q.encode(X)
    >>> enc.bytes_per_vector
    22
    >>> q.estimate(X[:2], enc).shape
    (2, 1000)
    """

    _param_names = (
        "bits",
        "query_bits",
        "similarity",
        "precondition",
        "seed",
        "iters",
        "lam",
        "arithmetic",
    )

    def __init__(
        self,
        bits: int = 1,
        query_bits: int | None | str = "auto",
        similarity: str = "cosine",
        *,
        precondition=None,
        seed: int | None = None,
        iters: int = DEFAULT_ITERS,
        lam: float = DEFAULT_LAMBDA,
        arithmetic: str = "float64",
    ):
        self.bits = bits
        self.query_bits = query_bits
        self.similarity = similarity
        self.precondition = precondition
        self.seed = seed
        self.iters = iters
        self.lam = lam
        self.arithmetic = arithmetic

    # -- fitting ----------------------------------------------------------------------------
    def fit(self, X) -> BBQQuantizer:
        """Validate the parameters, fix the centroid (the plain mean) and the transform."""
        if lucene_osq.is_lucene(self):
            return lucene_osq.fit(self, X)
        encoding = get_encoding(self.bits, self.query_bits)
        similarity = resolve_similarity(self.similarity)
        if isinstance(self.iters, bool) or not isinstance(self.iters, int) or self.iters < 0:
            raise ValueError(f"iters must be a non-negative integer, got {self.iters!r}")
        if not 0.0 <= float(self.lam) <= 1.0:
            raise ValueError(f"lam must be in [0, 1], got {self.lam!r}")
        X = check_vectors(X, "X")
        if X.shape[1] > encoding.max_dim:
            raise ValueError(
                f"{encoding.doc_bits}-bit codes support at most {encoding.max_dim} dimensions "
                f"(the uint16 component sum would overflow), got {X.shape[1]}; use bits=7"
            )
        X = prepare_for_similarity(X, similarity, "X")
        transform = _make_transform(self.precondition, X.shape[1], self.seed)
        if transform is not None:
            X = transform.transform(X)
        centroid = X.mean(axis=0, dtype=np.float64).astype(np.float32)
        self._set_fitted(encoding, similarity, X.shape[1], centroid, transform)
        return self

    def _set_fitted(self, encoding: Encoding, similarity, dim, centroid, transform) -> None:
        lucene = lucene_osq.is_lucene(self)
        if lucene:
            lucene_osq.check_params(self)
        self.encoding_ = encoding
        self.similarity_ = similarity
        self.dim_ = int(dim)
        self.centroid_ = np.asarray(centroid, dtype=np.float32)
        self.centroid_.flags.writeable = False
        self.centroid_dot_ = float(np.dot(self.centroid_.astype(np.float64), self.centroid_))
        if lucene:
            self.centroid_dot_ = lucene_osq.centroid_dot(self.centroid_)
        self.transform_ = transform
        self.fingerprint_ = self._fingerprint(
            encoding.doc_bits,
            similarity.value,
            self.iters,
            float(self.lam),
            self.centroid_,
            None if transform is None else transform.fingerprint(),
            *(("lucene",) if lucene else ()),
        )

    # -- encoding ---------------------------------------------------------------------------
    def _rotated(self, X: np.ndarray) -> np.ndarray:
        return X if self.transform_ is None else self.transform_.transform(X)

    def encode(self, X) -> EncodedVectors:
        """Quantize docs: packed codes and 14 (16 at 7/8 bits) bytes of corrections each.

        Rows are checked whole (errors name the caller's row numbers, and the norms are
        computed once), then normalized, transformed and quantized ``ENCODE_CHUNK_BYTES`` of
        float32 at a time, so the temporaries stay small whatever the batch size.
        """
        self._check_fitted()
        if lucene_osq.is_lucene(self):
            return lucene_osq.encode(self, X)
        X = check_vectors(X, "X", dim=self.dim_)
        sq = check_similarity_rules(X, self.similarity_, "X")
        enc = self.encoding_
        n, d = X.shape
        codes = np.empty((n, enc.doc_bytes(d)), dtype=np.uint8)
        corrections = np.empty(n, dtype=enc.corrections_dtype)
        rows = max(1, ENCODE_CHUNK_BYTES // (4 * d))
        for start in range(0, n, rows):
            stop = min(n, start + rows)
            part_sq = None if sq is None else sq[start:stop]
            part = self._rotated(apply_similarity(X[start:stop], self.similarity_, part_sq))
            res = quantize_rows(
                part,
                self.centroid_,
                enc.doc_bits,
                euclidean=self.similarity_.is_distance,
                iters=self.iters,
                lam=self.lam,
            )
            codes[start:stop] = (
                pack_planes(res.codes, enc.doc_bits) if enc.layout == "planes" else res.codes
            )
            c = corrections[start:stop]
            c["lower"] = res.lower
            c["upper"] = res.upper
            c["additional"] = res.additional
            c["component_sum"] = res.component_sum
        return EncodedVectors(
            codes, corrections, enc, self.dim_, self.centroid_dot_, self.fingerprint_
        )

    def _doc_codes(self, enc: EncodedVectors) -> scoring.DocCodes:
        c = enc.corrections
        levels = float(2**enc.encoding.doc_bits - 1)
        factors = np.empty((len(enc), 4), dtype=np.float32)
        factors[:, 0] = c["lower"]
        factors[:, 1] = (c["upper"].astype(np.float64) - c["lower"]) / levels
        factors[:, 2] = c["component_sum"]
        factors[:, 3] = c["additional"]
        planes = enc.encoding.doc_planes
        data = plane_words(enc.codes) if planes else np.ascontiguousarray(enc.codes)
        return scoring.DocCodes(
            "planes" if planes else "bytes",
            data,
            factors,
            planes,
            enc.dim,
            enc.centroid_dot,
            self.similarity_.is_distance,
        )

    def _query_codes(self, Q: np.ndarray) -> scoring.QueryCodes:
        if lucene_osq.is_lucene(self):
            return lucene_osq.query_codes(self, Q)
        Q = self._rotated(Q)
        enc = self.encoding_
        factors = np.empty((len(Q), 4), dtype=np.float64)
        if enc.query_bits is None:
            y = Q - self.centroid_
            factors[:, 0] = 0.0
            factors[:, 1] = 1.0
            factors[:, 2] = y.sum(axis=1, dtype=np.float64)
            factors[:, 3] = self._query_additional(Q, y)
            return scoring.QueryCodes("float", np.ascontiguousarray(y, np.float32), factors)
        res = quantize_rows(
            Q,
            self.centroid_,
            enc.query_bits,
            euclidean=self.similarity_.is_distance,
            iters=self.iters,
            lam=self.lam,
        )
        factors[:, 0] = res.lower
        factors[:, 1] = (res.upper.astype(np.float64) - res.lower) / (2**enc.query_bits - 1)
        factors[:, 2] = res.component_sum
        factors[:, 3] = res.additional
        if enc.layout == "planes":
            words = plane_words(pack_planes(res.codes, enc.query_bits))
            return scoring.QueryCodes("planes", words, factors, enc.query_bits)
        return scoring.QueryCodes("bytes", res.codes, factors)

    def _query_additional(self, Q: np.ndarray, y: np.ndarray) -> np.ndarray:
        if self.similarity_.is_distance:
            return np.einsum("ij,ij->i", y, y, dtype=np.float64)
        return Q.astype(np.float64) @ self.centroid_.astype(np.float64)

    # -- arithmetic="lucene": Lucene's float32 scorer (bbqlib.quantizers.lucene_osq) -----------
    def _validated(self, X, name: str, *, allow_1d: bool = False) -> np.ndarray:
        if lucene_osq.is_lucene(self):  # cosine: VectorUtil.l2normalize, as Lucene's scorer
            return lucene_osq.validated(self, X, name, allow_1d=allow_1d)
        return super()._validated(X, name, allow_1d=allow_1d)

    def estimate(self, Q, enc: EncodedVectors, *, return_bounds: bool = False, eps0=None):
        if lucene_osq.is_lucene(self) and not return_bounds:
            return lucene_osq.estimate(self, Q, enc)
        return super().estimate(Q, enc, return_bounds=return_bounds, eps0=eps0)

    def similarity_scores(self, Q, enc: EncodedVectors) -> np.ndarray:
        if lucene_osq.is_lucene(self):
            return lucene_osq.similarity_scores(self, Q, enc)
        return super().similarity_scores(Q, enc)

    def search(self, Q, enc: EncodedVectors, k: int, *, allowed=None, id_base: int = 0):
        if lucene_osq.is_lucene(self):
            return lucene_osq.search(self, Q, enc, k, allowed=allowed, id_base=id_base)
        return super().search(Q, enc, k, allowed=allowed, id_base=id_base)

    estimate.__doc__ = Quantizer.estimate.__doc__
    similarity_scores.__doc__ = Quantizer.similarity_scores.__doc__
    search.__doc__ = Quantizer.search.__doc__

    # -- state for files ----------------------------------------------------------------------
    def get_state(self) -> tuple[dict, dict]:
        """``(params, arrays)`` that :meth:`from_state` turns back into this fitted quantizer."""
        self._check_fitted()
        params = {
            "class": type(self).__name__,
            "bits": self.encoding_.doc_bits,
            "query_bits": self.encoding_.query_bits,
            "similarity": self.similarity_.value,
            "seed": self.seed,
            "iters": self.iters,
            "lam": float(self.lam),
            "dim": self.dim_,
            "fingerprint": self.fingerprint_,
        }
        if lucene_osq.is_lucene(self):  # default-mode files stay as they were
            params["arithmetic"] = self.arithmetic
        return self._state_with_transform(params)

    @classmethod
    def from_state(cls, params: dict, arrays: dict) -> BBQQuantizer:
        transform = cls._transform_from_state(params, arrays)
        q = cls(
            bits=params["bits"],
            query_bits=params["query_bits"],
            similarity=params["similarity"],
            precondition=None if transform is None else transform,
            seed=params["seed"],
            iters=params["iters"],
            lam=params["lam"],
            arithmetic=params.get("arithmetic", "float64"),
        )
        q._set_fitted(
            get_encoding(params["bits"], params["query_bits"]),
            resolve_similarity(params["similarity"]),
            params["dim"],
            np.array(arrays["centroid"], dtype=np.float32),
            transform,
        )
        if q.fingerprint_ != params["fingerprint"]:
            raise ValueError("quantizer state is inconsistent (fingerprint mismatch)")
        return q

    def with_query_bits(self, query_bits) -> BBQQuantizer:
        """A copy of this fitted quantizer scoring queries at another bit width.

        The doc codes stay valid (the fingerprint does not depend on the query bits).
        """
        self._check_fitted()
        params, arrays = self.get_state()
        params["query_bits"] = query_bits
        return type(self).from_state(params, arrays)


def _make_transform(spec, dim: int, seed):
    if spec is None or spec is False:
        return None
    from ..transforms import make_transform

    return make_transform(spec, dim, seed=seed)
