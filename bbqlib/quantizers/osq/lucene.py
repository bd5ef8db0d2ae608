"""``BBQQuantizer(arithmetic="lucene")``: Lucene 10.5's OSQ and scorer, bit for bit.

The default arithmetic (``"float64"``) is bbqlib's own: float64 row sums, the mean without far
outliers as centroid (:mod:`bbqlib.quantizers.centre`), cosine vectors normalized in float64.
This mode instead reproduces what Lucene 10.5's ``Lucene104ScalarQuantizedVectorsFormat`` does
with the same vectors in one flushed segment (``docs/lucene.md``), outliers included:

* the centroid as ``Lucene104ScalarQuantizedVectorsWriter`` computes it: float32 sums in doc
  order divided by ``(float) n``; for cosine the docs are divided by the float32 magnitude
  ``(float) sqrt(dotProduct(v, v))`` first and the centroid is re-normalized;
* document levels, packed codes and corrections (``lowerInterval``, ``upperInterval``,
  ``additionalCorrection`` as float32 bits, ``quantizedComponentSum``) of
  ``OptimizedScalarQuantizer.scalarQuantize``; queries at 4 or 7 bits the same way, after
  ``VectorUtil.l2normalize`` for cosine;
* scores of ``Lucene104ScalarQuantizedVectorScorer.quantizedScore`` in float32 (``estimate``
  returns its value before the similarity's mapping, ``similarity_scores`` after), and
  ``search`` ranks by those float32 scores, ties by the lower id.

Reference: Lucene's scalar path with fused multiply-adds off (``-Dlucene.useScalarFMA=false``,
no vector incubator module), as ``tests/test_lucene_oracle.py`` runs the jar. Only Lucene's four
encodings (1x4, 2x4, 4x4, 7x7) exist in this mode, without preconditioning, with Lucene's
``iters=5`` and ``lam=0.1``. Merged segments (Lucene recombines centroids) are not modelled.

:class:`LuceneArithmetic` is the codec a quantizer of this arithmetic holds
(:mod:`bbqlib.quantizers.osq.arithmetic`); its steps are the functions below, which take the
quantizer first. The kernels are :mod:`bbqlib._kernels.osq_lucene`; this module validates,
allocates and wraps.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..._kernels import lucene_scores as lucene_scores_kernels
from ..._kernels import osq_lucene as osq_lucene_kernels
from ..._validation import check_k, check_similarity_rules, check_vectors
from ...encoding import Encoding, get_encoding
from ...layouts.codes import QueryCodes
from ...packing import pack_planes, plane_words
from ...similarity import Similarity, resolve_similarity
from ..encoded import EncodedVectors
from ..scanner import NoScanner
from .arithmetic import ARITHMETICS, Arithmetic, arithmetic_codec
from .math import DEFAULT_ITERS, DEFAULT_LAMBDA

__all__ = [
    "ARITHMETICS",
    "LuceneArithmetic",
    "LUCENE_ENCODINGS",
    "is_lucene",
    "check_params",
    "lucene_centroid",
    "centroid_dot",
    "fit",
    "encode",
    "validated",
    "LuceneCodes",
    "quantize_queries",
    "query_codes",
    "estimate",
    "similarity_scores",
    "search",
    "lucene_doc_bytes",
]

#: (doc bits, query bits) of Lucene 10.5's ``ScalarEncoding`` rows with a bbqlib encoding.
LUCENE_ENCODINGS = {
    (1, 4): "SINGLE_BIT_QUERY_NIBBLE",
    (2, 4): "DIBIT_QUERY_NIBBLE",
    (4, 4): "PACKED_NIBBLE",
    (7, 7): "SEVEN_BIT",
}
#: ``OptimizedScalarQuantizer.DEFAULT_LAMBDA = 0.1f``.
LAMBDA = np.float32(DEFAULT_LAMBDA)
#: float32 bytes of input quantized per kernel call in :func:`encode` (16 MiB).
CHUNK_BYTES = 1 << 24

_SIM_CODE = {
    Similarity.EUCLIDEAN: osq_lucene_kernels.SIM_EUCLIDEAN,
    Similarity.DOT_PRODUCT: osq_lucene_kernels.SIM_DOT,
    Similarity.COSINE: osq_lucene_kernels.SIM_DOT,
    Similarity.MAX_INNER_PRODUCT: osq_lucene_kernels.SIM_MIP,
}


# ------------------------------------------------------------------------------ parameters
def is_lucene(q) -> bool:
    """True when ``q.arithmetic == "lucene"``; a ValueError for an unknown value."""
    return arithmetic_codec(getattr(q, "arithmetic", "float64")) is LUCENE


def check_params(q) -> Encoding:
    """The encoding of a lucene-mode quantizer; a ValueError for what Lucene does not do."""
    enc = get_encoding(q.bits, q.query_bits)
    if (enc.doc_bits, enc.query_bits) not in LUCENE_ENCODINGS:
        raise ValueError(
            f"arithmetic='lucene' covers Lucene's encodings only: bits/query_bits 1/4, 2/4, 4/4 "
            f"and 7/7 (query_bits='auto' picks them); got bits={q.bits!r}, "
            f"query_bits={q.query_bits!r}"
        )
    if q.precondition is not None and q.precondition is not False:
        raise ValueError(
            "arithmetic='lucene' has no preconditioning (Lucene104 quantizes the vectors as "
            f"they are); got precondition={q.precondition!r}, use precondition=None"
        )
    if q.iters != DEFAULT_ITERS or float(q.lam) != DEFAULT_LAMBDA:
        raise ValueError(
            f"arithmetic='lucene' uses Lucene's optimizer settings iters={DEFAULT_ITERS}, "
            f"lam={DEFAULT_LAMBDA}; got iters={q.iters!r}, lam={q.lam!r}"
        )
    return enc


# ------------------------------------------------------------------------------ preparation
def _check_rows(X: np.ndarray, similarity: Similarity, name: str) -> None:
    """bbqlib's rules, plus Lucene's: a cosine row must have a non-zero float32 norm."""
    check_similarity_rules(X, similarity, name)
    if similarity is Similarity.COSINE and X.size:
        sq = np.empty(X.shape[0], dtype=np.float32)
        osq_lucene_kernels.row_dots(X, sq)
        zero = np.flatnonzero(sq == 0)
        if zero.size:
            raise ValueError(
                f"{name} has {zero.size} row(s) whose float32 squared norm underflows to 0 "
                f"(first at row {zero[0]}); Lucene cannot normalize them for cosine similarity "
                "(scale them up, or use arithmetic='float64')"
            )


def _l2normalize(X: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    out = np.empty_like(X)
    zero = np.zeros(X.shape[0], dtype=np.uint8)
    if X.size:
        osq_lucene_kernels.l2normalize_rows(X, out, zero)
    return out, zero.astype(bool)


def _normalized_docs(X: np.ndarray) -> np.ndarray:
    out = np.empty_like(X)
    if X.size:
        osq_lucene_kernels.normalize_docs(X, out)
    return out


def lucene_centroid(X: np.ndarray, cosine: bool) -> np.ndarray:
    """The segment centroid Lucene's writer computes from float32 rows ``X`` (doc order).

    Raises ValueError where Lucene's writer cannot normalize the cosine centroid (zero).
    """
    sums = np.zeros(X.shape[1], dtype=np.float32)
    osq_lucene_kernels.centroid_sums(X, bool(cosine), sums)
    centroid = sums / np.float32(X.shape[0])
    if cosine:
        normalized, zero = _l2normalize(centroid[None, :])
        if zero[0]:
            raise ValueError(
                "the mean of the normalized vectors is zero, which Lucene's writer cannot "
                "normalize for cosine similarity (use arithmetic='float64')"
            )
        centroid = normalized[0]
    return centroid


def centroid_dot(centroid: np.ndarray) -> float:
    """``VectorUtil.dotProduct(c, c)`` (Lucene's ``centroidDP``), a float32 value."""
    return float(osq_lucene_kernels.centroid_dot(np.ascontiguousarray(centroid, dtype=np.float32)))


def validated(q, X, name: str, *, allow_1d: bool = False) -> np.ndarray:
    """Query rows as Lucene's scorer sees them: checked, and ``l2normalize``-d for cosine."""
    q._check_fitted()
    X = check_vectors(X, name, dim=q.dim_, allow_1d=allow_1d, max_sq_norm=None)  # as Lucene
    _check_rows(X, q.similarity_, name)
    if q.similarity_ is Similarity.COSINE:
        return _l2normalize(X)[0]
    return X


# ------------------------------------------------------------------------------ fit / encode
def fit(q, X):
    """Fix the encoding and Lucene's centroid (see :func:`lucene_centroid`); returns ``q``."""
    enc = check_params(q)
    similarity = resolve_similarity(q.similarity)
    X = check_vectors(X, "X", max_sq_norm=None)  # Lucene scores what it gets, overflow included
    if X.shape[1] > enc.max_dim:
        raise ValueError(
            f"{enc.doc_bits}-bit codes support at most {enc.max_dim} dimensions "
            f"(the uint16 component sum would overflow), got {X.shape[1]}; use bits=7"
        )
    _check_rows(X, similarity, "X")
    centroid = lucene_centroid(X, similarity is Similarity.COSINE)
    q._discard_fit()
    q._set_common(enc, similarity, X.shape[1], None)
    q._set_centroid(centroid)
    q._seal()
    return q


def _quantize(q, X: np.ndarray, bits: int, row0: int = 0):
    """Lucene's ``scalarQuantize`` of prepared rows: levels and float32 corrections.

    ``row0``: the caller's number of the first row (for error messages).
    """
    n, d = X.shape
    levels = np.empty((n, d), dtype=np.uint8)
    lower = np.empty(n, dtype=np.float32)
    upper = np.empty(n, dtype=np.float32)
    additional = np.empty(n, dtype=np.float32)
    ksum = np.empty(n, dtype=np.int64)
    if n:
        osq_lucene_kernels.osq_quantize_lucene(
            np.ascontiguousarray(X, dtype=np.float32),
            np.ascontiguousarray(q.centroid_, dtype=np.float32),
            int(bits),
            DEFAULT_ITERS,
            LAMBDA,
            q.similarity_.is_distance,
            levels,
            lower,
            upper,
            additional,
            ksum,
        )
    top = (1 << bits) - 1
    bad = np.flatnonzero((levels > top).any(axis=1) | (ksum < 0) | (ksum > top * d))
    if bad.size:
        raise ValueError(
            f"{bad.size} row(s) (first at row {row0 + bad[0]}) have an interval narrower than "
            f"float32 can step through in {top} steps (subnormal components, below about 1e-38): "
            "Lucene writes codes outside the encoding there; scale the vectors up"
        )
    return levels, lower, upper, additional, ksum


def encode(q, X) -> EncodedVectors:
    """Lucene's doc levels and corrections, stored in bbqlib's layout for the encoding.

    The levels are packed as bbqlib packs every encoding (bit planes for 1/2/4 bits, bytes for
    7): the integer dot products, and so the scores, do not depend on the layout.
    :func:`lucene_doc_bytes` gives the bytes Lucene itself stores.
    """
    q._check_fitted()
    X = check_vectors(X, "X", dim=q.dim_, max_sq_norm=None)
    _check_rows(X, q.similarity_, "X")
    enc = q.encoding_
    n, d = X.shape
    codes = np.empty((n, enc.doc_bytes(d)), dtype=np.uint8)
    corrections = np.empty(n, dtype=enc.corrections_dtype)
    rows = max(1, CHUNK_BYTES // (4 * d))
    for start in range(0, n, rows):
        part = X[start : start + rows]
        if q.similarity_ is Similarity.COSINE:
            part = _normalized_docs(part)
        levels, lower, upper, additional, ksum = _quantize(q, part, enc.doc_bits, start)
        codes[start : start + len(part)] = (
            pack_planes(levels, enc.doc_bits) if enc.layout == "planes" else levels
        )
        c = corrections[start : start + len(part)]
        c["lower"] = lower
        c["upper"] = upper
        c["additional"] = additional
        c["component_sum"] = ksum
    return EncodedVectors(codes, corrections, enc, q.dim_, q.centroid_dot_, q.fingerprint_)


def lucene_doc_bytes(enc: EncodedVectors) -> np.ndarray:
    """The bytes Lucene 10.5 stores for these docs (uint8 [n, Lucene's packed length]).

    ``packAsBinary`` (1 bit, ceil8(d) / 8 bytes), ``transposeDibit`` (2 bits: low plane then
    high plane), ``packNibbles`` (4 bits over ceil2(d) dims: ``level[i] << 4 | level[i + half]``),
    one byte per dimension at 7 bits.
    """
    bits, d = enc.encoding.doc_bits, enc.dim
    codes = np.asarray(enc.codes)
    if bits == 7:
        return codes.copy()
    plane = codes.shape[1] // bits  # bbqlib's plane: ceil64(d) / 8 bytes
    if bits in (1, 2):
        keep = -(-d // 8)
        return np.ascontiguousarray(
            np.concatenate([codes[:, s * plane : s * plane + keep] for s in range(bits)], axis=1)
        )
    levels = np.zeros((codes.shape[0], d + d % 2), dtype=np.uint8)
    for s in range(bits):
        levels[:, :d] |= np.unpackbits(codes[:, s * plane : (s + 1) * plane], axis=1)[:, :d] << s
    half = levels.shape[1] // 2
    return (levels[:, :half] << 4) | levels[:, half:]


# ------------------------------------------------------------------------------ queries
class LuceneCodes(NamedTuple):
    """Levels and corrections of ``OptimizedScalarQuantizer.scalarQuantize``, per row."""

    levels: np.ndarray  # uint8 [n, d]
    lower: np.ndarray  # float32 [n]
    upper: np.ndarray  # float32 [n]
    additional: np.ndarray  # float32 [n]: ||v - c||² (euclidean) or <v, c>
    component_sum: np.ndarray  # int64 [n]


def quantize_queries(q, Q) -> LuceneCodes:
    """Lucene's query quantization (``query_bits`` levels) of rows ``Q``, as its scorer makes it:
    checked, ``l2normalize``-d for cosine, quantized against the segment centroid."""
    Qp = validated(q, Q, "Q", allow_1d=True)
    return LuceneCodes(*_quantize(q, Qp, q.encoding_.query_bits))


def _score_factors(codes: LuceneCodes, bits: int) -> np.ndarray:
    """float32 [n, 4] ``(lower, (upper - lower) * SCALE_LUT[bits - 1], (float) Σk, additional)``:
    the terms ``quantizedScore`` reads, computed as it computes them."""
    factors = np.empty((len(codes.lower), 4), dtype=np.float32)
    factors[:, 0] = codes.lower
    factors[:, 1] = (codes.upper - codes.lower) * osq_lucene_kernels.SCALE_LUT[bits - 1]
    factors[:, 2] = codes.component_sum.astype(np.float32)
    factors[:, 3] = codes.additional
    return factors


def query_codes(q, Q: np.ndarray) -> QueryCodes:
    """Lucene's query levels as bbqlib's kernels take them (factors in float64).

    For consumers of :meth:`BBQQuantizer._query_codes` (candidate scorers, adapters): their
    scores use bbqlib's float64 correction algebra over Lucene's levels; ``estimate``,
    ``similarity_scores`` and ``search`` use Lucene's float32 formula instead.
    """
    enc = q.encoding_
    bits = enc.query_bits
    levels, lower, upper, additional, ksum = _quantize(q, Q, bits)
    factors = np.empty((len(Q), 4), dtype=np.float64)
    factors[:, 0] = lower
    factors[:, 1] = (upper.astype(np.float64) - lower) / (2**bits - 1)
    factors[:, 2] = ksum
    factors[:, 3] = additional
    if enc.layout == "planes":
        return QueryCodes("planes", plane_words(pack_planes(levels, bits)), factors, bits)
    return QueryCodes("bytes", levels, factors)


# ------------------------------------------------------------------------------ scores
def _doc_side(q, enc: EncodedVectors):
    """Docs as the scoring kernels read them: ``(data, factors float32 [n, 4])``, cached."""
    key = ("lucene_docs", q.fingerprint_)
    if key not in enc._cache:
        c = enc.corrections
        codes = LuceneCodes(
            None,
            c["lower"].astype(np.float32),
            c["upper"].astype(np.float32),
            c["additional"].astype(np.float32),
            c["component_sum"].astype(np.int64),
        )
        factors = _score_factors(codes, enc.encoding.doc_bits)
        planes = enc.encoding.layout == "planes"
        data = plane_words(enc.codes) if planes else np.ascontiguousarray(enc.codes)
        enc._cache[key] = (data, factors)
    return enc._cache[key]


def _query_side(q, Q: np.ndarray):
    bits = q.encoding_.query_bits
    codes = LuceneCodes(*_quantize(q, Q, bits))
    factors = _score_factors(codes, bits)
    if q.encoding_.layout == "planes":
        return plane_words(pack_planes(codes.levels, bits)), factors
    return codes.levels, factors


def _common(q, Q, enc: EncodedVectors):
    q._check_encoded(enc)
    Qp = validated(q, Q, "Q", allow_1d=True)
    docs, dfac = _doc_side(q, enc)
    queries, qfac = _query_side(q, Qp)
    fdim = np.float32(enc.dim)
    cdp = np.float32(enc.centroid_dot)
    return queries, qfac, docs, dfac, fdim, cdp, _SIM_CODE[q.similarity_]


def _dense(q, Q, enc: EncodedVectors, mapped: bool) -> np.ndarray:
    queries, qfac, docs, dfac, fdim, cdp, sim = _common(q, Q, enc)
    out = np.empty((len(queries), len(enc)), dtype=np.float32)
    if out.size == 0:
        return out
    if enc.encoding.layout == "planes":
        planes = enc.encoding.doc_planes
        words = docs.shape[1] // planes
        lucene_scores_kernels.lucene_scores_planes(
            queries, qfac, docs, dfac, planes, words, fdim, cdp, sim, mapped, out
        )
    else:
        lucene_scores_kernels.lucene_scores_bytes(
            queries, qfac, docs, dfac, fdim, cdp, sim, mapped, out
        )
    return out


def estimate(q, Q, enc: EncodedVectors) -> np.ndarray:
    """Lucene's raw float32 values [nq, n]: ``quantizedScore`` before the similarity's mapping
    (squared distance for euclidean, inner product otherwise)."""
    return _dense(q, Q, enc, mapped=False)


def similarity_scores(q, Q, enc: EncodedVectors) -> np.ndarray:
    """Lucene's float32 scores [nq, n], bit for bit ``quantizedScore``."""
    return _dense(q, Q, enc, mapped=True)


def search(q, Q, enc: EncodedVectors, k: int, *, allowed=None, id_base: int = 0):
    """Top ``k`` per query by Lucene's float32 score (ties: lower id): ``(raw, ids)``.

    ``raw`` holds Lucene's raw float32 values (squared distance or inner product) of the kept
    docs, ``nan`` / ``-1`` padded, as :meth:`bbqlib.quantizers.base.Quantizer.search` returns.
    """
    q._check_encoded(enc)
    Qp = validated(q, Q, "Q", allow_1d=True)
    return search_prepared(q, Qp, enc, k, allowed=allowed, id_base=id_base)


def search_prepared(q, Qp, enc: EncodedVectors, k: int, *, allowed=None, id_base: int = 0):
    """:func:`search` of queries :func:`validated` already (an index validates once)."""
    k = check_k(k)
    q._check_encoded(enc)
    docs, dfac = _doc_side(q, enc)
    queries, qfac = _query_side(q, Qp)
    fdim, cdp, sim = np.float32(enc.dim), np.float32(enc.centroid_dot), _SIM_CODE[q.similarity_]
    nq, n = len(queries), len(enc)
    width = min(k, n)
    scores = np.empty((nq, width), dtype=np.float32)
    ids = np.empty((nq, width), dtype=np.int64)
    raw = np.empty((nq, width), dtype=np.float32)
    mask = np.empty(0, np.uint8) if allowed is None else np.ascontiguousarray(allowed, np.uint8)
    if nq and width:
        if enc.encoding.layout == "planes":
            planes = enc.encoding.doc_planes
            words = docs.shape[1] // planes
            lucene_scores_kernels.lucene_topk_planes(
                queries, qfac, docs, dfac, planes, words, fdim, cdp, sim, mask, scores, ids, raw
            )
        else:
            lucene_scores_kernels.lucene_topk_bytes(
                queries, qfac, docs, dfac, fdim, cdp, sim, mask, scores, ids, raw
            )
    out_raw = np.full((nq, k), np.nan)
    out_ids = np.full((nq, k), -1, dtype=np.int64)
    found = ids >= 0
    out_raw[:, :width] = np.where(found, raw, np.nan)
    out_ids[:, :width] = np.where(found, ids + id_base, -1)
    return out_raw, out_ids


# ------------------------------------------------------------------------------ the codec
class LuceneArithmetic(Arithmetic):
    """``arithmetic="lucene"``: the steps above as the quantizer's codec. Its scanner has no
    one-query kernel: every search runs the float32 scorer of the batch path."""

    name = "lucene"
    # IVFIndex codes its lists against list centres in bbqlib's arithmetic; Lucene's own IVF
    # format is not this one, so the Lucene mode would not be Lucene's there.
    no_lists_reason = "arithmetic='lucene' is Lucene's flat-format arithmetic, not for lists"
    fingerprint_tag = ("lucene",)

    def fit(self, q, X):
        return fit(q, X)

    def check_params(self, q) -> None:
        check_params(q)

    def centroid_dot(self, centroid) -> float:
        return centroid_dot(centroid)

    def encode(self, q, X) -> EncodedVectors:
        return encode(q, X)

    def validated(self, q, X, name, allow_1d):  # cosine: VectorUtil.l2normalize
        return validated(q, X, name, allow_1d=allow_1d)

    def query_codes(self, q, Qp) -> QueryCodes:
        return query_codes(q, Qp)

    def estimate(self, q, Q, enc):
        return estimate(q, Q, enc)

    def similarity_scores(self, q, Q, enc):
        return similarity_scores(q, Q, enc)

    def topk_keys(self, q, Qp, enc, k, allowed, id_base):
        """Ranked by Lucene's float32 score (ties: lower id), keys from its raw values."""
        raw, ids = search_prepared(q, Qp, enc, k, allowed=allowed, id_base=id_base)
        return np.where(ids >= 0, q.similarity_.key(raw), -np.inf), ids

    def scanner(self, q):
        return NoScanner(q)


#: The codec of ``arithmetic="lucene"``.
LUCENE = LuceneArithmetic()
