"""Property tests (hypothesis): over encodings, similarities, shapes, dtypes and magnitudes,
encode / score / rerank agree with the NumPy references, and the indexes never crash.

Bounded for CI: a fixed number of examples each, derandomized (the same inputs every run;
``HYPOTHESIS_PROFILE=long`` explores more, with random seeds).
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from reference.osq import dequantize, osq_reference
from reference.packing import unpack_planes_reference
from reference.rerank import exact_candidates

import bbqlib
from bbqlib._validation import MAX_SQ_NORM
from bbqlib.search.rerank import exact_mode, exact_values
from bbqlib.similarity import Similarity

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

settings.register_profile(
    "ci",
    max_examples=15,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile("long", max_examples=500, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")

OSQ_ROWS = sorted(
    {(e.doc_bits, e.query_bits) for e in bbqlib.ENCODINGS.rows() if e.family == "osq"},
    key=lambda t: (t[0], t[1] or 0),
)
DIMS = [1, 2, 3, 7, 8, 9, 31, 63, 64, 65, 127, 130]
FLOATS = [np.float16, np.float32, np.float64]
SIMILARITIES = ["euclidean", "dot_product", "cosine", "max_inner_product"]


@st.composite
def matrices(draw, *, min_rows=1, max_rows=24, dims=DIMS, unit=False):
    """A float matrix of a drawn shape, dtype and magnitude (zero / constant rows too)."""
    n = draw(st.integers(min_rows, max_rows))
    d = draw(st.sampled_from(dims))
    dtype = draw(st.sampled_from(FLOATS[1:] if unit else FLOATS))  # float16 breaks unit norm
    seed = draw(st.integers(0, 2**32 - 1))
    g = np.random.default_rng(seed)
    X = g.standard_normal((n, d)) + draw(st.sampled_from([0.0, 0.3, 5.0]))
    if draw(st.booleans()) and n > 1:  # constant and repeated rows
        X[0] = X[0, 0]
        X[-1] = X[0]
    if unit:
        X /= np.linalg.norm(X, axis=1, keepdims=True)
    else:
        top = 4.0 if dtype == np.float16 else np.log10(np.sqrt(MAX_SQ_NORM / d)) - 0.5
        X *= 10.0 ** draw(st.floats(-4.0, top))
    return X.astype(dtype)


def _prepared(X, similarity):
    X32 = np.asarray(X, dtype=np.float32)
    if similarity != "cosine":
        return X32
    norms = np.sqrt(np.einsum("ij,ij->i", X32, X32, dtype=np.float64))
    return (X32 / norms[:, None]).astype(np.float32)


def _codes(enc):
    if enc.encoding.layout == "planes":
        return unpack_planes_reference(enc.codes, enc.encoding.doc_bits, enc.dim)
    return enc.codes.astype(np.int64)


@settings.get_profile(PROFILE)
@given(
    data=st.data(),
    bits=st.integers(1, 8),
    similarity=st.sampled_from(["euclidean", "cosine", "max_inner_product"]),
)
def test_encode_agrees_with_the_osq_reference(data, bits, similarity):
    X = data.draw(matrices(min_rows=2))
    if similarity == "cosine" and not np.all(np.abs(X.astype(np.float64)).sum(axis=1) > 0):
        return  # zero rows have no direction (rejected, tested below)
    q = bbqlib.BBQQuantizer(bits=bits, similarity=similarity).fit(X)
    enc = q.encode(X)
    ref = osq_reference(_prepared(X, similarity), q.centroid_, bits,
                        euclidean=similarity == "euclidean")  # fmt: skip
    np.testing.assert_array_equal(_codes(enc), ref.codes)
    for field in ("lower", "upper", "additional", "component_sum"):
        np.testing.assert_array_equal(enc.corrections[field], getattr(ref, field))


@settings.get_profile(PROFILE)
@given(data=st.data(), bits=st.integers(1, 8),
       similarity=st.sampled_from(["euclidean", "max_inner_product"]))  # fmt: skip
def test_float_query_scores_agree_with_the_dequantized_reference(data, bits, similarity):
    X = data.draw(matrices(min_rows=2))
    Q = data.draw(matrices(max_rows=4, dims=[X.shape[1]]))
    q = bbqlib.BBQQuantizer(bits=bits, query_bits=None, similarity=similarity).fit(X)
    enc = q.encode(X)
    c = q.centroid_.astype(np.float64)
    xh = dequantize(_codes(enc), enc.corrections["lower"], enc.corrections["upper"], bits)
    Qd = np.asarray(Q, dtype=np.float32).astype(np.float64)
    add = enc.corrections["additional"].astype(np.float64)[None, :]
    if similarity == "euclidean":
        y = Qd - c
        expected = (y * y).sum(1)[:, None] + add - 2 * (y @ xh.T)
    else:
        expected = (Qd - c) @ xh.T + add + (Qd @ c)[:, None] - c @ c
    est = q.estimate(Q, enc)
    # float32 factors and float32 query: a tolerance relative to the magnitudes involved
    scale = np.abs(expected).max() + (np.abs(Qd).max() + np.abs(c).max()) ** 2 * X.shape[1]
    np.testing.assert_allclose(est, expected, rtol=0, atol=2e-5 * scale)


@settings.get_profile(PROFILE)
@given(data=st.data(), is_l2=st.booleans(), m=st.integers(1, 12))
def test_exact_rerank_agrees_with_the_reference_bit_for_bit(data, is_l2, m):
    V = data.draw(matrices(max_rows=40))
    Q = data.draw(matrices(max_rows=5, dims=[V.shape[1]]))
    g = np.random.default_rng(data.draw(st.integers(0, 2**31)))
    cand = g.integers(-1, V.shape[0], (Q.shape[0], m))
    sim = Similarity.EUCLIDEAN if is_l2 else Similarity.MAX_INNER_PRODUCT
    got = exact_values(Q, V, cand, exact_mode(sim))
    V32 = np.asarray(V, dtype=np.float32) if V.dtype == np.float16 else V
    want = exact_candidates(np.asarray(Q, np.float32), V32, cand, is_l2)
    np.testing.assert_array_equal(got, want)


@st.composite
def index_cases(draw):
    bits, qbits = draw(st.sampled_from(OSQ_ROWS))
    similarity = draw(st.sampled_from(SIMILARITIES))
    X = draw(matrices(min_rows=1, max_rows=200, unit=similarity == "dot_product"))
    if similarity == "cosine":
        X[np.abs(X.astype(np.float64)).sum(axis=1) == 0] = 1.0
    return bits, qbits, similarity, X


@settings.get_profile(PROFILE)
@given(case=index_cases(), k=st.sampled_from([1, 5, 10**9]), kind=st.sampled_from(["flat", "ivf"]))
def test_indexes_never_crash_and_return_valid_ids(case, k, kind):
    bits, qbits, similarity, X = case
    if kind == "ivf" and qbits is None:
        return  # float queries: a flat-index feature (docs/ivf-format.md, Limits)
    if kind == "flat":
        index = bbqlib.FlatIndex(bits=bits, query_bits=qbits, similarity=similarity)
    else:
        index = bbqlib.IVFIndex(bits=bits, query_bits=qbits, similarity=similarity,
                                cluster_size=64)  # fmt: skip
    index.add(X)
    for rerank in (True, False):
        scores, ids = index.search(X[:3], k, rerank=rerank, pad_to_k=False)
        n = X.shape[0]
        assert ids.shape == scores.shape == (min(3, n), min(k, n))
        assert ids.dtype == np.int64 and scores.dtype == np.float32
        valid = ids >= 0
        assert (ids[valid] < n).all() and not np.isnan(scores[valid]).any()
        if rerank:  # exact scores: a row is as close to itself as anything
            if similarity in ("euclidean", "cosine", "dot_product"):
                assert valid[:, 0].all()
        if k < 10**9:  # exactly k columns: the same results, then id -1
            padded, padded_ids = index.search(X[:3], k, rerank=rerank, pad_to_k=True)
            assert padded_ids.shape == (min(3, n), k)
            np.testing.assert_array_equal(padded_ids[:, : min(k, n)], ids)
            np.testing.assert_array_equal(padded[:, : min(k, n)], scores)
            assert (padded_ids[:, n:] == -1).all() and np.isinf(padded[:, n:]).all()


@settings.get_profile(PROFILE)
@given(
    dtype=st.sampled_from([np.int8, np.int64, np.uint16, np.bool_, np.complex64, object]),
    kind=st.sampled_from(["flat", "ivf"]),
)
def test_non_float_input_is_a_type_error_everywhere(dtype, kind):
    X = np.ones((80, 5)).astype(dtype)
    index = bbqlib.FlatIndex(bits=1) if kind == "flat" else bbqlib.IVFIndex(cluster_size=64)
    with pytest.raises(TypeError, match="must be a float array"):
        index.add(X)
