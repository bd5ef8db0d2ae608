"""BBQQuantizer: API contract, estimate quality per bit width, similarities, bad input."""

from __future__ import annotations

import numpy as np
import pytest
from reference.osq import dequantize, osq_reference
from reference.packing import unpack_planes_reference

import bbqlib
from bbqlib import BBQQuantizer, EncodedVectors, NotFittedError
from bbqlib.quantizers import quantizer_from_state
from bbqlib.similarity import Similarity, scores_from_raw

SIMILARITIES = ["euclidean", "dot_product", "cosine", "max_inner_product"]
ENCODINGS = [(1, 4), (2, 4), (4, 4), (7, 7), (1, 8), (4, 8), (2, None), (7, None), (8, 8),
             (3, 4), (5, 7), (6, 7), (3, None), (6, 8), (5, 4)]  # fmt: skip


def unit(X):
    """Rows over their float64 norms, rounded to float32 (how cosine inputs are prepared)."""
    X = np.asarray(X, np.float32)
    norms = np.sqrt(np.einsum("ij,ij->i", X, X, dtype=np.float64))
    return (X / norms[:, None]).astype(np.float32)


def data_for(similarity, make_vectors, n=300, d=48, seed=0):
    kind = "unit" if similarity == "dot_product" else "wide"
    return make_vectors(n, d, kind, seed=seed), make_vectors(7, d, kind, seed=seed + 1)


def exact_raw(similarity, Q, X):
    Q, X = Q.astype(np.float64), X.astype(np.float64)
    if similarity == "cosine":
        Q = Q / np.linalg.norm(Q, axis=1, keepdims=True)
        X = X / np.linalg.norm(X, axis=1, keepdims=True)
    if similarity == "euclidean":
        return ((Q[:, None, :] - X[None, :, :]) ** 2).sum(axis=2)
    return Q @ X.T


def codes_of(enc):
    """Unpacked integer codes [n, dim] of an encoding (reference unpacker)."""
    if enc.encoding.layout == "planes":
        return unpack_planes_reference(enc.codes, enc.encoding.doc_bits, enc.dim)
    return enc.codes.astype(np.int64)


# ----------------------------------------------------------------------------- API
@pytest.mark.parametrize(("bits", "qbits"), ENCODINGS)
def test_fit_encode_shapes(bits, qbits, make_vectors):
    X = make_vectors(50, 70)
    q = BBQQuantizer(bits=bits, query_bits=qbits, similarity="euclidean")
    assert q.fit(X) is q
    enc = q.encode(X)
    e = bbqlib.get_encoding(bits, qbits)
    assert q.encoding_ is e and q.dim_ == 70
    assert isinstance(enc, EncodedVectors) and len(enc) == 50 and enc.dim == 70
    assert enc.codes.dtype == np.uint8 and enc.codes.shape == (50, e.doc_bytes(70))
    assert enc.corrections.dtype == e.corrections_dtype and enc.corrections.shape == (50,)
    assert enc.bytes_per_vector == e.bytes_per_vector(70)
    est = q.estimate(X[:3], enc)
    assert est.shape == (3, 50) and est.dtype == np.float32
    assert q.estimate(X[0], enc).shape == (1, 50)  # one query as a 1-D array
    assert q.similarity_scores(X[:3], enc).shape == (3, 50)


@pytest.mark.parametrize(
    ("bits", "per_vector"), [(1, 48 + 14), (2, 96 + 14), (4, 192 + 14), (7, 384 + 16)]
)
def test_bytes_per_vector_d384(bits, per_vector, make_vectors):
    X = make_vectors(20, 384, "unit")
    q = BBQQuantizer(bits=bits).fit(X)
    assert q.encode(X).bytes_per_vector == per_vector
    assert q.encode(X).nbytes == 20 * per_vector


def test_encode_matches_the_osq_reference(make_vectors):
    """Codes and corrections are the reference OSQ of the (normalized) rows, packed."""
    X = make_vectors(40, 65, "gaussian")
    for sim, euclidean in [("euclidean", True), ("cosine", False), ("max_inner_product", False)]:
        for bits in range(1, 9):
            q = BBQQuantizer(bits=bits, similarity=sim).fit(X)
            enc = q.encode(X)
            rows = unit(X) if sim == "cosine" else X
            ref = osq_reference(rows, q.centroid_, bits, euclidean=euclidean)
            np.testing.assert_array_equal(codes_of(enc), ref.codes)
            for field in ("lower", "upper", "additional", "component_sum"):
                np.testing.assert_array_equal(enc.corrections[field], getattr(ref, field))


def test_centroid_is_the_plain_mean(make_vectors):
    X = make_vectors(100, 16, "wide")
    q = BBQQuantizer(similarity="euclidean").fit(X)
    np.testing.assert_allclose(q.centroid_, X.astype(np.float64).mean(axis=0), rtol=1e-6)
    # cosine: mean of the normalized vectors, not re-normalized
    qc = BBQQuantizer(similarity="cosine").fit(X)
    mean = unit(X).astype(np.float64).mean(axis=0)
    np.testing.assert_allclose(qc.centroid_, mean, rtol=1e-5, atol=1e-7)
    assert np.linalg.norm(qc.centroid_) < 0.9


def test_encoding_is_batch_independent(make_vectors):
    X = make_vectors(90, 33)
    q = BBQQuantizer(bits=2, similarity="euclidean").fit(X)
    whole = q.encode(X)
    parts = EncodedVectors.concatenate([q.encode(X[:31]), q.encode(X[31:])])
    np.testing.assert_array_equal(whole.codes, parts.codes)
    np.testing.assert_array_equal(whole.corrections, parts.corrections)


def test_encoded_vectors_slicing(make_vectors):
    X = make_vectors(60, 20)
    q = BBQQuantizer(bits=1, similarity="euclidean").fit(X)
    enc = q.encode(X)
    est = q.estimate(X[:4], enc)
    np.testing.assert_array_equal(q.estimate(X[:4], enc[10:25]), est[:, 10:25])
    np.testing.assert_array_equal(q.estimate(X[:4], enc[7]), est[:, 7:8])
    np.testing.assert_array_equal(q.estimate(X[:4], enc[-1]), est[:, -1:])
    assert not enc.codes.flags.writeable and not enc.corrections.flags.writeable
    with pytest.raises(ValueError):
        enc.codes[0, 0] = 1


# ----------------------------------------------------------------------------- estimates
# Spec §2.3: D = 384 random unit vectors, centroid = mean.
SPEC_MEAN_ABS_ERROR = {(1, 4): 0.030, (2, 4): 0.016, (4, 4): 0.006, (7, 7): 0.0008}


def test_estimate_error_falls_with_bits():
    g = np.random.default_rng(0)
    X = unit(g.normal(size=(2000, 384)))
    Q = unit(g.normal(size=(40, 384)))
    ip = exact_raw("dot_product", Q, X)
    errors = {}
    for (bits, qbits), spec in SPEC_MEAN_ABS_ERROR.items():
        q = BBQQuantizer(bits=bits, query_bits=qbits, similarity="dot_product").fit(X)
        est = q.estimate(Q, q.encode(X))
        errors[bits] = np.abs(est - ip).mean()
        # the spec quotes two significant figures; 15% covers them and the seed
        assert abs(errors[bits] - spec) <= 0.15 * spec, (bits, errors[bits])
        # and the estimator is nearly unbiased on this symmetric data (|bias| << error)
        assert abs((est - ip).mean()) < 0.05 * errors[bits]
    assert errors[1] > errors[2] > errors[4] > errors[7]


def test_float_query_path(make_vectors):
    """query_bits=None: estimates are the float query against the dequantized docs, exactly."""
    X, Q = make_vectors(200, 40, "wide"), make_vectors(5, 40, "wide", seed=3)
    for sim in ("euclidean", "max_inner_product"):
        for bits in (1, 3, 4, 5, 6, 7):
            q = BBQQuantizer(bits=bits, query_bits=None, similarity=sim).fit(X)
            enc = q.encode(X)
            c = q.centroid_.astype(np.float64)
            xh = dequantize(codes_of(enc), enc.corrections["lower"], enc.corrections["upper"], bits)
            v_hat = xh + c
            expected = exact_raw(sim, Q, v_hat.astype(np.float64))
            if sim == "euclidean":  # the estimate uses the stored ||v - c||², not ||x̂||²
                y = Q.astype(np.float64) - c
                expected = (
                    (y * y).sum(1)[:, None]
                    + enc.corrections["additional"][None, :]
                    - 2 * (y @ xh.T)
                )
            else:  # <x̂, y> + <v, c> + <u, c> - <c, c>
                expected = (
                    (Q.astype(np.float64) - c) @ xh.T
                    + enc.corrections["additional"][None, :]
                    + (Q.astype(np.float64) @ c)[:, None]
                    - c @ c
                )
            est = q.estimate(Q, enc)
            scale = np.abs(expected).max()
            np.testing.assert_allclose(est, expected, rtol=0, atol=4e-6 * scale)


def test_more_query_bits_lower_the_error():
    g = np.random.default_rng(1)
    X = unit(g.normal(size=(1000, 128)))
    Q = unit(g.normal(size=(30, 128)))
    ip = exact_raw("dot_product", Q, X)
    base = BBQQuantizer(bits=4, query_bits=4, similarity="dot_product").fit(X)
    enc = base.encode(X)
    err = {}
    for qbits in (4, 7, 8, None):
        q = base.with_query_bits(qbits)
        err[qbits] = np.abs(q.estimate(Q, enc) - ip).mean()
    assert err[4] > err[7] > err[None] * 0.98
    assert err[8] < err[4]


@pytest.mark.parametrize("similarity", SIMILARITIES)
def test_every_similarity_error_falls_with_bits(similarity, make_vectors):
    """Mean |est - exact| (relative to the spread of exact values) per bit width.

    The grid step is 2·g_B·σ/(2^B - 1): from 1 to 4-bit docs (4-bit queries both) it shrinks
    by (2·0.798/1)/(2·2.514/15) ≈ 4.8, from 4/4 to 7/7 bits by (2.514/15)/(3.611/127) ≈ 5.9
    on both sides. The error must fall by at least 3.5x and 5x.
    """
    X, Q = data_for(similarity, make_vectors, n=400, d=64)
    exact = exact_raw(similarity, Q, X)
    rel, corr = {}, {}
    for bits in (1, 4, 7):
        q = BBQQuantizer(bits=bits, similarity=similarity).fit(X)
        est = q.estimate(Q, q.encode(X)).astype(np.float64)
        rel[bits] = np.abs(est - exact).mean() / exact.std()
        corr[bits] = np.corrcoef(est.ravel(), exact.ravel())[0, 1]
    assert rel[4] < rel[1] / 3.5 and rel[7] < rel[4] / 5, rel
    assert corr[1] > 0.75 and corr[4] > 0.98 and corr[7] > 0.999, corr


def test_cosine_is_scale_invariant(make_vectors):
    X, Q = make_vectors(100, 30, "wide"), make_vectors(4, 30, "wide", seed=1)
    q = BBQQuantizer(bits=1, similarity="cosine").fit(X)
    enc = q.encode(X)
    # a power of two scales exactly, so normalization gives identical rows
    np.testing.assert_array_equal(q.encode(4 * X).codes, enc.codes)
    np.testing.assert_array_equal(q.estimate(0.25 * Q, enc), q.estimate(Q, enc))
    assert q.estimate(Q, enc).max() < 1.5


@pytest.mark.parametrize("similarity", SIMILARITIES)
def test_similarity_scores_mappings(similarity, make_vectors):
    X, Q = data_for(similarity, make_vectors)
    q = BBQQuantizer(bits=1, similarity=similarity).fit(X)
    enc = q.encode(X)
    raw = q.estimate(Q, enc).astype(np.float64)
    s = q.similarity_scores(Q, enc)
    assert s.dtype == np.float32
    if similarity == "euclidean":
        expected = 1 / (1 + np.maximum(raw, 0))
    elif similarity == "max_inner_product":
        expected = np.where(raw < 0, 1 / (1 - raw), raw + 1)
    else:
        expected = (1 + np.clip(raw, -1, 1)) / 2
    np.testing.assert_allclose(s, expected, rtol=1e-6)
    if similarity != "max_inner_product":
        assert (s >= 0).all() and (s <= 1).all()
    else:
        assert (s > 0).all()


def test_scores_clamp_like_lucene():
    """ES #155630: negative estimated d² scores at most 1; ip is clamped to [-1, 1]."""
    raw = np.array([-0.5, 0.0, 1.0, 3.0])
    np.testing.assert_allclose(
        scores_from_raw(Similarity.EUCLIDEAN, raw), [1.0, 1.0, 0.5, 0.25], rtol=1e-7
    )
    raw = np.array([-1.7, -1.0, 0.0, 0.5, 1.3])
    np.testing.assert_allclose(
        scores_from_raw(Similarity.DOT_PRODUCT, raw), [0.0, 0.0, 0.5, 0.75, 1.0], rtol=1e-7
    )
    np.testing.assert_allclose(
        scores_from_raw(Similarity.COSINE, raw), [0.0, 0.0, 0.5, 0.75, 1.0], rtol=1e-7
    )
    np.testing.assert_allclose(
        scores_from_raw(Similarity.MAX_INNER_PRODUCT, raw),
        [1 / 2.7, 0.5, 1.0, 1.5, 2.3],
        rtol=1e-6,
    )


def test_negative_squared_distance_scores_one(make_vectors):
    """ES #155630: hand-crafted corrections give estimated d² < 0; the score is 1, not above."""
    X = make_vectors(50, 16, "gaussian")
    q = BBQQuantizer(bits=1, similarity="euclidean").fit(X)
    enc = q.encode(X)
    corr = enc.corrections.copy()
    corr["additional"] = 0.0  # pretend every doc sits on the centroid
    crafted = EncodedVectors(
        enc.codes, corr, enc.encoding, enc.dim, enc.centroid_dot, enc.fingerprint
    )
    raw = q.estimate(X, crafted)
    assert (raw < 0).any() and (raw > 0).any()
    s = q.similarity_scores(X, crafted)
    assert (s[raw <= 0] == 1.0).all() and (s[raw > 0] < 1.0).all()


def test_search_matches_estimate(make_vectors):
    X, Q = make_vectors(300, 24), make_vectors(5, 24, seed=2)
    for sim in ("euclidean", "cosine"):
        q = BBQQuantizer(bits=2, similarity=sim).fit(X)
        enc = q.encode(X)
        est = q.estimate(Q, enc).astype(np.float64)
        raw, ids = q.search(Q, enc, 7)
        key = -est if sim == "euclidean" else est
        for r in range(5):
            order = np.lexsort((np.arange(300), -key[r]))[:7]
            np.testing.assert_array_equal(ids[r], order)
            np.testing.assert_allclose(raw[r], est[r, order], rtol=1e-6)


# ----------------------------------------------------------------------------- state
def test_fingerprint_mismatch(make_vectors):
    X = make_vectors(50, 12)
    q1 = BBQQuantizer(similarity="euclidean").fit(X)
    q2 = BBQQuantizer(similarity="euclidean").fit(X[:25])  # another centroid
    enc2 = q2.encode(X)
    with pytest.raises(ValueError, match="different fit"):
        q1.estimate(X[:2], enc2)
    with pytest.raises(ValueError, match="different fit"):
        q1.similarity_scores(X[:2], enc2)
    with pytest.raises(ValueError, match="different fit"):
        q1.search(X[:2], enc2, 3)
    with pytest.raises(TypeError, match="EncodedVectors"):
        q1.estimate(X[:2], enc2.codes)
    # the same fit repeated gives the same fingerprint: codes stay valid
    q3 = BBQQuantizer(similarity="euclidean").fit(X)
    assert q3.estimate(X[:2], q1.encode(X)).shape == (2, 50)


def test_state_round_trip(make_vectors):
    X = make_vectors(80, 19, "wide")
    q = BBQQuantizer(bits=4, query_bits=8, similarity="max_inner_product", iters=3).fit(X)
    enc = q.encode(X)
    params, arrays = q.get_state()
    for restored in (BBQQuantizer.from_state(params, arrays), quantizer_from_state(params, arrays)):
        assert restored.fingerprint_ == q.fingerprint_
        assert restored.get_params() == q.get_params()
        np.testing.assert_array_equal(restored.encode(X).codes, enc.codes)
        np.testing.assert_array_equal(restored.estimate(X[:3], enc), q.estimate(X[:3], enc))
    arrays["centroid"] = arrays["centroid"] + 1
    with pytest.raises(ValueError, match="fingerprint"):
        BBQQuantizer.from_state(params, arrays)


def test_with_query_bits(make_vectors):
    X = make_vectors(60, 20)
    q = BBQQuantizer(bits=1, similarity="euclidean").fit(X)
    enc = q.encode(X)
    q8 = q.with_query_bits(8)
    assert q8 is not q and q8.encoding_.query_bits == 8 and q.encoding_.query_bits == 4
    assert q8.estimate(X[:2], enc).shape == (2, 60)  # the doc codes stay valid
    qf = q.with_query_bits(None)
    assert qf.encoding_.query_bits is None and qf.estimate(X[:2], enc).shape == (2, 60)
    with pytest.raises(ValueError, match="query_bits"):
        q.with_query_bits(5)
    with pytest.raises(NotFittedError):
        BBQQuantizer().with_query_bits(8)


# ----------------------------------------------------------------------------- bad input
def test_unfitted(make_vectors):
    X = make_vectors(5, 8)
    q = BBQQuantizer()
    for call in (lambda: q.encode(X), lambda: q.query_codes(X), lambda: q.get_state()):
        with pytest.raises(NotFittedError, match="fit"):
            call()
    fitted = BBQQuantizer().fit(X)
    with pytest.raises(NotFittedError):
        q.estimate(X, fitted.encode(X))
    assert issubclass(NotFittedError, ValueError)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"bits": 9}, "bits"),
        ({"query_bits": 5}, "query_bits"),
        ({"similarity": "hamming"}, "similarity"),
        ({"iters": -1}, "iters"),
        ({"lam": 2.0}, "lam"),
    ],
)
def test_bad_parameters(kwargs, match, make_vectors):
    with pytest.raises(ValueError, match=match):
        BBQQuantizer(**kwargs).fit(make_vectors(5, 8))


def test_bad_vectors(make_vectors):
    X = make_vectors(20, 8)
    q = BBQQuantizer(similarity="euclidean").fit(X)
    enc = q.encode(X)
    with pytest.raises(ValueError, match="dimension 9"):
        q.encode(make_vectors(3, 9))
    with pytest.raises(ValueError, match="dimension"):
        q.estimate(make_vectors(3, 9), enc)
    for bad in (np.nan, np.inf, -np.inf):
        Y = X.copy()
        Y[3, 2] = bad
        with pytest.raises(ValueError, match="NaN or inf"):
            q.encode(Y)
        with pytest.raises(ValueError, match="NaN or inf"):
            q.estimate(Y, enc)
        with pytest.raises(ValueError, match="NaN or inf"):
            BBQQuantizer().fit(Y)
    with pytest.raises(ValueError, match="NaN or inf"):  # finite float64 beyond float32
        q.encode(np.full((1, 8), 1e300))
    with pytest.raises(TypeError, match="float"):
        q.encode(np.ones((2, 8), dtype=np.int64))
    with pytest.raises(TypeError, match="float"):
        BBQQuantizer().fit(np.ones((2, 8), dtype=np.int32))
    with pytest.raises(ValueError, match="empty"):
        q.encode(np.empty((0, 8), np.float32))
    with pytest.raises(ValueError, match="empty"):
        BBQQuantizer().fit(np.empty((0, 8), np.float32))
    with pytest.raises(ValueError, match="2-D"):
        q.encode(np.ones((2, 2, 8), np.float32))
    # float16 and float64 are accepted
    assert len(q.encode(X.astype(np.float16))) == 20
    assert len(q.encode(X.astype(np.float64))) == 20


def test_zero_vector_under_cosine(make_vectors):
    X = make_vectors(10, 8)
    Y = X.copy()
    Y[4] = 0
    with pytest.raises(ValueError, match="zero vector"):
        BBQQuantizer(similarity="cosine").fit(Y)
    q = BBQQuantizer(similarity="cosine").fit(X)
    with pytest.raises(ValueError, match="zero vector"):
        q.encode(Y)
    with pytest.raises(ValueError, match="zero vector"):
        q.estimate(Y, q.encode(X))
    # zero vectors are fine under euclidean
    BBQQuantizer(similarity="euclidean").fit(Y).encode(Y)


def test_non_unit_under_dot_product(make_vectors):
    X = make_vectors(10, 8, "unit")
    with pytest.raises(ValueError, match="unit-length"):
        BBQQuantizer(similarity="dot_product").fit(2 * X)
    q = BBQQuantizer(similarity="dot_product").fit(X)
    with pytest.raises(ValueError, match="unit-length"):
        q.encode(1.01 * X)
    with pytest.raises(ValueError, match="unit-length"):
        q.estimate(1.5 * X[:2], q.encode(X))
    q.encode(X * (1 + 1e-6))  # within the tolerance
    # max_inner_product takes any length
    BBQQuantizer(similarity="mip").fit(3 * X).encode(3 * X)


def test_four_bit_dimension_limit():
    X = np.random.default_rng(0).normal(size=(2, 4370)).astype(np.float32)
    with pytest.raises(ValueError, match="4369"):
        BBQQuantizer(bits=4).fit(X)
    BBQQuantizer(bits=4).fit(X[:, :4369])
    BBQQuantizer(bits=7).fit(X)


def test_caller_arrays_are_never_modified(make_vectors):
    for sim in SIMILARITIES:
        X = make_vectors(40, 16, "unit" if sim == "dot_product" else "wide")
        Q = X[:3] * (1.0 if sim == "dot_product" else 2.5)
        X_copy, Q_copy = X.copy(), Q.copy()
        q = BBQQuantizer(bits=1, similarity=sim).fit(X)
        enc = q.encode(X)
        q.estimate(Q, enc)
        q.similarity_scores(Q, enc)
        q.search(Q, enc, 3)
        np.testing.assert_array_equal(X, X_copy)
        np.testing.assert_array_equal(Q, Q_copy)
        assert not np.shares_memory(q.centroid_, X)
        assert not np.shares_memory(enc.codes, X)
    # float64 input goes through a conversion; still untouched
    X64 = make_vectors(20, 16, "wide").astype(np.float64)
    before = X64.copy()
    q = BBQQuantizer(similarity="cosine").fit(X64)
    q.estimate(X64, q.encode(X64))
    np.testing.assert_array_equal(X64, before)


def test_repr_and_params():
    q = BBQQuantizer(bits=2, similarity="l2")
    assert "bits=2" in repr(q)
    assert q.get_params()["similarity"] == "l2"
    assert q.fit(np.ones((3, 4), np.float32)).similarity_ is Similarity.EUCLIDEAN


@pytest.mark.parametrize("precondition", [None, "dense", "block", "hadamard"])
@pytest.mark.parametrize("similarity", ["cosine", "euclidean"])
def test_encode_in_chunks_equals_one_pass(monkeypatch, make_vectors, precondition, similarity):
    """encode works ENCODE_CHUNK_BYTES of input at a time; rows are independent, so the
    codes and corrections do not depend on the chunking."""
    import bbqlib.quantizers.osq.quantizer as bbq_module

    X = make_vectors(1000, 72, "gaussian", seed=3)
    q = bbqlib.BBQQuantizer(bits=2, similarity=similarity, precondition=precondition, seed=1)
    q.fit(X)
    whole = q.encode(X)
    monkeypatch.setattr(bbq_module, "ENCODE_CHUNK_BYTES", 4 * 72 * 37)  # 37 rows a chunk
    parts = q.encode(X)
    if precondition in (None, "hadamard"):  # numba kernels: every row computed alike
        np.testing.assert_array_equal(parts.codes, whole.codes)
        np.testing.assert_array_equal(parts.corrections, whole.corrections)
        return
    # dense / block rotate through BLAS, whose float32 sums may round a row differently for
    # another batch shape (as they already do between queries and docs): last-bit changes.
    for field in ("lower", "upper", "additional"):
        np.testing.assert_allclose(parts.corrections[field], whole.corrections[field], rtol=1e-5)
    differ = (parts.codes != whole.codes).any(axis=1).mean()
    assert differ <= 0.01, f"{differ:.1%} of rows changed codes"
