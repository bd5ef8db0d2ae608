"""BBQ: Lucene/Elasticsearch optimized scalar quantization at 1, 2, 4 and 7 (and 8) bits."""

from __future__ import annotations

import numpy as np

from ..._params import Integer, Real
from ..._validation import apply_similarity, check_similarity_rules, check_vectors
from ...encoding import padded_dim
from ...layouts.codes import DocCodes, QueryCodes
from ...packing import kernel_codes, pack_codes
from ..base import Quantizer
from ..centre import robust_centre
from ..encoded import EncodedVectors
from ..registry import register_quantizer
from .arithmetic import Arithmetic, arithmetic_codec
from .math import DEFAULT_ITERS, DEFAULT_LAMBDA, quantize_pairs, quantize_rows

__all__ = ["BBQQuantizer", "ENCODE_CHUNK_BYTES", "Float64Arithmetic"]

#: float32 bytes of input encoded at a time (bounds encode's temporaries; 16 MiB).
ENCODE_CHUNK_BYTES = 1 << 24


@register_quantizer
class BBQQuantizer(Quantizer):
    """Optimized scalar quantization (BBQ) with asymmetric quantized queries.

    Parameters
    ----------
    bits : int in 1..8
        Bits per dimension of the stored codes. 1, 2, 4 and 7 are Elasticsearch's; every width
        is a row of the registry (bit planes up to 6 bits, one byte per dimension at 7 and 8).
    query_bits : {4, 7, 8, None, "auto"}
        Bits per dimension of the query. ``"auto"`` takes Elasticsearch's default (4 for docs of
        up to 4 bits, 7 for 5-7-bit docs, 8 for 8-bit docs); ``None`` scores an unquantized
        float query against the dequantized codes (separates doc error from query error).
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
        ``"float64"`` (default): bbqlib's own arithmetic (float64 sums, the mean without far
        outliers as centroid). ``"lucene"``: Lucene 10.5's, bit for bit - its centroid and cosine
        normalization, codes, corrections and float32 scores (1x4, 2x4, 4x4 and 7x7 only,
        no preconditioning; see :mod:`bbqlib.quantizers.osq.lucene` and ``docs/lucene.md``).

    Attributes
    ----------
    centroid_ : float32 [d]
        Mean of the fitted vectors without far outliers (:mod:`bbqlib.quantizers.centre`;
        the plain mean when there is none), normalized first for cosine, not re-normalized, in
        the preconditioned space when a transform is set; with ``arithmetic="lucene"`` the
        centroid Lucene's writer computes.
    encoding_ : Encoding
        Row of the encoding table in use.
    arithmetic_ : Arithmetic
        The codec of ``arithmetic`` (:mod:`bbqlib.quantizers.osq.arithmetic`): every step
        whose numbers depend on the arithmetic goes through it.

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

    family = "osq"
    _param_names = ("bits", "query_bits", "similarity", "precondition", "seed", "iters", "lam",
                    "arithmetic")  # fmt: skip
    _constraints = {"iters": [Integer(0)], "lam": [Real(0.0, 1.0)], "seed": [None, Integer()]}

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
    def fit(self, X, y=None):
        """Validate the parameters, fix the centroid and the transform (as the arithmetic
        does: :class:`Float64Arithmetic` takes the robust centre)."""
        return arithmetic_codec(self.arithmetic).fit(self, X)

    def _set_common(self, encoding, similarity, dim, transform) -> None:
        # Every fit, every restore and the IVF files of format 1 pass here: the arithmetic's
        # codec is fixed with the rest of the fit.
        super()._set_common(encoding, similarity, dim, transform)
        self.arithmetic_ = arithmetic_codec(self.arithmetic)

    @property
    def no_lists_reason(self) -> str:
        return super().no_lists_reason or arithmetic_codec(self.arithmetic).no_lists_reason

    def _codec(self) -> Arithmetic:
        """The fit's arithmetic codec (NotFittedError before a fit)."""
        self._check_fitted()
        return self.arithmetic_

    def _fit_transformed(self, X: np.ndarray) -> None:
        """The centroid: the mean of the prepared (and transformed) rows without far outliers
        (:func:`~bbqlib.quantizers.centre.robust_centre`; the plain mean when there is none)."""
        self._set_centroid(robust_centre(X))

    def _set_centroid(self, centroid) -> None:
        self.centroid_ = np.asarray(centroid, dtype=np.float32)
        self.centroid_.flags.writeable = False
        self.centroid_dot_ = self.arithmetic_.centroid_dot(self.centroid_)

    def _fingerprint_parts(self) -> tuple:
        enc = self.encoding_
        parts = (enc.doc_bits, self.similarity_.value, self.iters, float(self.lam), self.centroid_)
        return parts + self.arithmetic_.fingerprint_tag

    def _state(self) -> tuple[dict, dict]:
        return {"lam": float(self.lam)}, {"centroid": np.asarray(self.centroid_)}

    def _restore(self, params: dict, arrays: dict) -> None:
        self.arithmetic_.check_params(self)
        self._set_centroid(np.array(arrays["centroid"], dtype=np.float32))

    def __getstate__(self):
        # The codec is chosen again from ``arithmetic`` on load: pickles name no codec class
        # and keep the shape they had before codecs.
        state = dict(self.__dict__)
        state.pop("arithmetic_", None)
        return state

    def __setstate__(self, state) -> None:
        self.__dict__.update(state)
        self.__dict__.setdefault("arithmetic", "float64")  # pickled before the parameter
        if self.is_fitted:
            self.arithmetic_ = arithmetic_codec(self.arithmetic)

    # -- codes and scores: the arithmetic's ---------------------------------------------------
    def encode(self, X) -> EncodedVectors:
        """Quantize docs: packed codes and 14 (16 at 7/8 bits) bytes of corrections each."""
        return self._codec().encode(self, X)

    def _doc_codes(self, enc: EncodedVectors) -> DocCodes:
        c = enc.corrections
        levels = float(2**enc.encoding.doc_bits - 1)
        factors = np.empty((len(enc), 4), dtype=np.float32)
        factors[:, 0] = c["lower"]
        factors[:, 1] = (c["upper"].astype(np.float64) - c["lower"]) / levels
        factors[:, 2] = c["component_sum"]
        factors[:, 3] = c["additional"]
        row = enc.encoding
        return DocCodes(
            row,
            kernel_codes(enc.codes, row.layout),
            factors,
            enc.dim,
            enc.centroid_dot,
            self.similarity_.is_distance,
        )

    def _query_codes(self, Q: np.ndarray) -> QueryCodes:
        return self.arithmetic_.query_codes(self, Q)

    def _validated(self, X, name: str, *, allow_1d: bool = False) -> np.ndarray:
        return self._codec().validated(self, X, name, allow_1d)

    def estimate(self, Q, enc: EncodedVectors, *, return_bounds: bool = False, eps0=None):
        if return_bounds:  # no bound in any arithmetic: the base says so
            return super().estimate(Q, enc, return_bounds=True, eps0=eps0)
        return self._codec().estimate(self, Q, enc)

    def similarity_scores(self, Q, enc: EncodedVectors) -> np.ndarray:
        return self._codec().similarity_scores(self, Q, enc)

    def topk_keys(self, Qp, enc: EncodedVectors, k: int, *, allowed=None, id_base: int = 0):
        return self._codec().topk_keys(self, Qp, enc, k, allowed, id_base)

    def scanner(self):
        """The arithmetic's scanner: OSQ-coded queries (float residuals for
        ``query_bits=None``) for bbqlib's own, the batch path for Lucene's."""
        return self._codec().scanner(self)

    estimate.__doc__ = Quantizer.estimate.__doc__
    similarity_scores.__doc__ = Quantizer.similarity_scores.__doc__
    topk_keys.__doc__ = Quantizer.topk_keys.__doc__

    # -- codes against list centres (IVF) -----------------------------------------------------
    def encode_pairs(self, W, rows, centres, lists):
        """OSQ of ``W[rows[p]]`` against ``centres[lists[p]]`` (one fused kernel, no residual
        matrix), bit for bit :func:`~bbqlib.quantizers.osq.quantize_rows` of each pair."""
        enc = self.encoding_
        codes, factors = quantize_pairs(
            W, rows, centres, lists, enc.doc_bits, self.similarity_.is_distance, self.iters,
            self.lam, planes=enc.doc_planes,
        )  # fmt: skip
        return codes, factors.astype(np.float32)

    def query_pairs(self, Qt, centres, pair_query, pair_list, *, lut: bool = False):
        """Queries re-quantized against each pair's centre with one optimizer iteration (as
        DiskBBQ), or float residuals for ``query_bits=None``."""
        enc = self.encoding_
        if enc.query_bits is None:
            return self._float_query_pairs(Qt, centres, pair_query, pair_list)
        planes = enc.query_planes if not lut else 0
        codes, factors = quantize_pairs(
            Qt, pair_query, centres, pair_list, enc.query_bits, self.similarity_.is_distance,
            1, self.lam, planes=planes, width=padded_dim(Qt.shape[1]) if lut else None,
        )  # fmt: skip
        return (codes.view(np.uint64) if planes else codes), factors


class Float64Arithmetic(Arithmetic):
    """bbqlib's own arithmetic (``arithmetic="float64"``, the default): float64 row sums and
    corrections, the mean without far outliers as centroid (:mod:`bbqlib.quantizers.centre`),
    cosine rows normalized in float64; scores by the
    layout kernels of :class:`~bbqlib.quantizers.base.Quantizer` over ``_doc_codes`` /
    ``_query_codes``."""

    name = "float64"

    def fit(self, q, X):
        return Quantizer.fit(q, X)  # the base's skeleton; BBQ's _fit_transformed: the centre

    def centroid_dot(self, centroid) -> float:
        return float(np.dot(centroid.astype(np.float64), centroid))

    def encode(self, q, X) -> EncodedVectors:
        """Rows are checked whole (errors name the caller's row numbers, and the norms are
        computed once), then normalized, transformed and quantized ``ENCODE_CHUNK_BYTES`` of
        float32 at a time, so the temporaries stay small whatever the batch size."""
        X = check_vectors(X, "X", dim=q.dim_)
        sq = check_similarity_rules(X, q.similarity_, "X")
        enc = q.encoding_
        n, d = X.shape
        codes = np.empty((n, enc.doc_bytes(d)), dtype=np.uint8)
        corrections = np.empty(n, dtype=enc.corrections_dtype)
        rows = max(1, ENCODE_CHUNK_BYTES // (4 * d))
        for start in range(0, n, rows):
            stop = min(n, start + rows)
            part_sq = None if sq is None else sq[start:stop]
            part = q._rotated(apply_similarity(X[start:stop], q.similarity_, part_sq))
            res = quantize_rows(
                part,
                q.centroid_,
                enc.doc_bits,
                euclidean=q.similarity_.is_distance,
                iters=q.iters,
                lam=q.lam,
            )
            codes[start:stop] = pack_codes(res.codes, enc.layout, enc.doc_bits)
            c = corrections[start:stop]
            c["lower"] = res.lower
            c["upper"] = res.upper
            c["additional"] = res.additional
            c["component_sum"] = res.component_sum
        return EncodedVectors(codes, corrections, enc, q.dim_, q.centroid_dot_, q.fingerprint_)

    def validated(self, q, X, name, allow_1d):
        return Quantizer._validated(q, X, name, allow_1d=allow_1d)

    def query_codes(self, q, Qp) -> QueryCodes:
        Q = q._rotated(Qp)
        enc = q.encoding_
        factors = np.empty((len(Q), 4), dtype=np.float64)
        if enc.query_bits is None:
            y = Q - q.centroid_
            factors[:, 0] = 0.0
            factors[:, 1] = 1.0
            factors[:, 2] = y.sum(axis=1, dtype=np.float64)
            factors[:, 3] = _query_additional(q, Q, y)
            return QueryCodes.of(enc, np.ascontiguousarray(y, np.float32), factors)
        res = quantize_rows(
            Q,
            q.centroid_,
            enc.query_bits,
            euclidean=q.similarity_.is_distance,
            iters=q.iters,
            lam=q.lam,
        )
        factors[:, 0] = res.lower
        factors[:, 1] = (res.upper.astype(np.float64) - res.lower) / (2**enc.query_bits - 1)
        factors[:, 2] = res.component_sum
        factors[:, 3] = res.additional
        packed = pack_codes(res.codes, enc.layout, enc.query_bits)
        return QueryCodes.of(enc, kernel_codes(packed, enc.layout), factors)

    def estimate(self, q, Q, enc):
        return Quantizer.estimate(q, Q, enc)

    def similarity_scores(self, q, Q, enc):
        return Quantizer.similarity_scores(q, Q, enc)

    def topk_keys(self, q, Qp, enc, k, allowed, id_base):
        return Quantizer.topk_keys(q, Qp, enc, k, allowed=allowed, id_base=id_base)

    def scanner(self, q):
        from ..scanner import OSQScanner

        return OSQScanner(q)


def _query_additional(q, Q: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Float query rows' ``||y||²`` (euclidean) or ``<q, c>`` in float64."""
    if q.similarity_.is_distance:
        return np.einsum("ij,ij->i", y, y, dtype=np.float64)
    return Q.astype(np.float64) @ q.centroid_.astype(np.float64)


#: The default codec (``arithmetic="float64"``).
FLOAT64 = Float64Arithmetic()
