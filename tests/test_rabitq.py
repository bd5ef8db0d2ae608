"""RaBitQQuantizer: kernels against the NumPy reference, the estimator's algebra, bounds,
rerank="bound", files and bad input. Statistical properties: test_rabitq_statistics.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
from reference import rabitq as ref

import bbqlib
from bbqlib import BBQQuantizer, FlatIndex
from bbqlib._kernels.rabitq import bound_rerank, sweep_levels
from bbqlib._kernels.scoring import EMPTY_ID
from bbqlib.encoding import ENCODINGS, padded_dim
from bbqlib.packing import unpack_planes
from bbqlib.quantizers.rabitq.quantizer import (
    RABITQ_CORRECTIONS_I32,
    RABITQ_CORRECTIONS_U16,
    RaBitQQuantizer,
    fast_rescale_factor,
    rabitq_encoding,
)
from bbqlib.transforms import DenseRotation

SIMILARITIES = ("euclidean", "dot_product", "cosine", "max_inner_product")


@pytest.fixture(scope="module", autouse=True)
def _single_blas_thread():
    """A busy shared machine makes multi-threaded OpenBLAS QR 100x slower; one thread."""
    threadpoolctl = pytest.importorskip("threadpoolctl")
    with threadpoolctl.threadpool_limits(1, user_api="blas"):
        yield


def _f(a, m):
    y = np.asarray(m, np.float64) + 0.5
    return float(y @ a / math.sqrt(y @ y))


def _sweep(A, bits):
    A = np.ascontiguousarray(A, dtype=np.float64)
    levels = np.empty(A.shape, dtype=np.uint8)
    t = np.empty(len(A))
    sweep_levels(A, 2 ** (bits - 1) - 1, levels, t)
    return levels, t


# ------------------------------------------------------------------------- code search kernel
# (384, 8) is left out: the Python reference walks 49k events per row; 8 bits is covered
# at d <= 127 and d = 384 at 2-4 bits.
SWEEP_CASES = [
    (d, bits)
    for d in (1, 3, 7, 8, 9, 63, 64, 65, 127, 384)
    for bits in (2, 3, 4, 8)
    if (d, bits) != (384, 8)
]


@pytest.mark.parametrize(("d", "bits"), SWEEP_CASES)
def test_sweep_matches_reference_on_random_rows(d, bits):
    A = np.abs(np.random.default_rng(d * 10 + bits).standard_normal((3, d)))
    levels, t = _sweep(A, bits)
    for r in range(len(A)):
        m, _, _ = ref.best_levels(A[r], bits)
        np.testing.assert_array_equal(levels[r], m)
        # the returned scale reproduces the code (it may be another t of the same state)
        np.testing.assert_array_equal(ref.levels_at(A[r], t[r], 2 ** (bits - 1) - 1), m)


def _adversarial(d, rng):
    zeros = np.abs(rng.standard_normal(d))
    zeros[::3] = 0.0
    tiny = np.abs(rng.standard_normal(d))
    tiny[::2] *= 1e-12
    onehot = np.zeros(d)
    onehot[0] = 1.0
    return {
        "constant": np.ones(d),
        "two levels (ties)": np.where(rng.random(d) < 0.5, 1.0, 2.0),
        "small integers (ties)": rng.integers(0, 5, d).astype(np.float64),
        "zeros": zeros,
        "tiny": tiny,
        "one-hot": onehot,
        "huge": np.abs(rng.standard_normal(d)) * 1e30,
        "all zero": np.zeros(d),
    }


@pytest.mark.parametrize("d", [1, 3, 9, 65])
@pytest.mark.parametrize("bits", [2, 4, 5])
def test_sweep_adversarial_rows_reach_the_reference_optimum(d, bits):
    rng = np.random.default_rng(d + bits)
    for name, a in _adversarial(d, rng).items():
        levels, _ = _sweep(a[None, :], bits)
        m, _, f_ref = ref.best_levels(a, bits)
        M = 2 ** (bits - 1) - 1
        assert levels.max() <= M
        if not a.any():
            assert not levels.any(), name
            continue
        # ties between codes may resolve either way; the objective may not differ
        assert _f(a, levels[0]) == pytest.approx(f_ref, rel=1e-12), name
        assert _f(a, m) == pytest.approx(f_ref, rel=1e-12), name


def test_sweep_is_scale_invariant_and_beats_any_fixed_factor():
    rng = np.random.default_rng(5)
    A = np.abs(rng.standard_normal((20, 100)))
    lv, t = _sweep(A, 4)
    lv2, t2 = _sweep(A * 7.5, 4)
    np.testing.assert_array_equal(lv, lv2)
    unit = A / np.linalg.norm(A, axis=1, keepdims=True)
    for factor in (2.0, 5.0, fast_rescale_factor(100, 4), 12.0):
        fixed = ref.fixed_levels(unit, factor, 4)
        for r in range(len(A)):
            assert _f(A[r], lv[r]) >= _f(A[r], fixed[r]) - 1e-12


def test_fast_factor_is_deterministic_and_in_the_window():
    t = fast_rescale_factor(128, 4)
    assert t == fast_rescale_factor(128, 4) > 0
    assert fast_rescale_factor(128, 1) == 0.0
    # unit Gaussian coordinates peak near 3/sqrt(d): the optimum scales the peak to ~M levels
    peak = 3.0 / math.sqrt(128)
    assert 0.5 * 7 < t * peak < 2.0 * 7


# ------------------------------------------------------------------------- encode / estimate
def _prepared(X, sim):
    X = np.asarray(X, np.float32)
    if sim == "cosine":
        return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)
    return X


def _reference_for(q, X, Q, query_bits):
    sim = q.similarity_.value
    Xr = q.rotate(_prepared(X, sim)).astype(np.float64)
    Qr = q.rotate(_prepared(Q, sim)).astype(np.float64)
    c = q.centroid_.astype(np.float64)
    quant = ref.quantize(Xr - c, q.encoding_.doc_bits, t_fixed=q.rescale_factor_ or None)
    Y = (Qr - c).astype(np.float32).astype(np.float64)
    if query_bits is not None:
        _, Y = ref.quantize_query(Y, query_bits)
    raw = ref.raw_estimate(quant, Xr, c, Qr, Y, sim == "euclidean")
    return quant, raw, np.linalg.norm(Qr - c, axis=1)


def _unit(n, d, seed):
    X = np.random.default_rng(seed).normal(0.2, 1.0, size=(n, d))
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("sim", SIMILARITIES)
@pytest.mark.parametrize("bits", [1, 2, 3, 5, 8])
@pytest.mark.parametrize("query_bits", [None, 4, 8])
def test_encode_and_estimate_match_reference(make_vectors, sim, bits, query_bits):
    d = 65
    n = 200 if bits <= 3 else 30  # the Python sweep walks ~d * 2^(bits-1) events per row
    if sim == "dot_product":
        X, Q = _unit(n, d, 1), _unit(6, d, 2)
    else:
        X, Q = make_vectors(n, d, "wide", seed=1), make_vectors(6, d, "wide", seed=2)
    q = RaBitQQuantizer(bits=bits, query_bits=query_bits, similarity=sim, seed=3).fit(X)
    enc = q.encode(X)
    quant, raw, r_q = _reference_for(q, X, Q, query_bits)
    np.testing.assert_array_equal(unpack_planes(enc.codes, bits, d), quant["x_u"])
    c = enc.corrections
    live = quant["r_o"] > 0
    np.testing.assert_allclose(
        c["delta_over_a"][live], (quant["delta"] / quant["a_o"])[live], rtol=1e-6
    )
    np.testing.assert_allclose(c["error"], ref.error_factor(quant, d), rtol=1e-5, atol=1e-12)
    np.testing.assert_array_equal(c["component_sum"], quant["x_u"].sum(axis=1))
    est, lower, upper = q.estimate(Q, enc, return_bounds=True, eps0=1.9)
    # float32 factors and a float32 query: relative error ~1e-7 of the largest term, times a
    # sqrt(d) growth of the rounding in the dot products
    scale = np.abs(raw).max() + (r_q.max() * quant["r_o"].max())
    np.testing.assert_allclose(est, raw, atol=2e-7 * math.sqrt(d) * scale)
    assert np.all(lower <= est) and np.all(est <= upper)
    if query_bits is None:
        half = 1.9 * r_q[:, None] * ref.error_factor(quant, d)[None, :]
        half *= 2.0 if sim == "euclidean" else 1.0
        np.testing.assert_allclose(upper - est, half, rtol=1e-4, atol=1e-6 * scale)


def test_fast_variant_matches_reference(make_vectors):
    X = make_vectors(150, 48, seed=7)
    q = RaBitQQuantizer(bits=4, similarity="euclidean", fast=True, seed=1).fit(X)
    enc = q.encode(X)
    quant, raw, _ = _reference_for(q, X, X[:5], None)
    np.testing.assert_array_equal(unpack_planes(enc.codes, 4, 48), quant["x_u"])
    np.testing.assert_allclose(q.estimate(X[:5], enc), raw, rtol=1e-4, atol=1e-4)
    exact = RaBitQQuantizer(bits=4, similarity="euclidean", seed=1).fit(X).encode(X)
    # the exact sweep maximizes <ō, o>: its error factor is never larger
    assert np.all(exact.corrections["error"] <= enc.corrections["error"] * (1 + 1e-5))


@pytest.mark.parametrize("d", [1, 3, 7, 63, 127])
def test_odd_dimensions_and_rotations(d, make_vectors):
    X = make_vectors(80, d, seed=d)
    for rotation in ("dense", "hadamard", "block", None):
        q = RaBitQQuantizer(bits=2, similarity="euclidean", rotation=rotation, seed=2).fit(X)
        enc = q.encode(X)
        assert enc.codes.shape == (80, 2 * padded_dim(d) // 8)
        quant, raw, _ = _reference_for(q, X, X[:4], None)
        np.testing.assert_array_equal(unpack_planes(enc.codes, 2, d), quant["x_u"])
        np.testing.assert_allclose(q.estimate(X[:4], enc), raw, rtol=1e-4, atol=1e-4)


def test_degenerate_data_zero_residuals_and_d1():
    X = np.tile(np.arange(5, dtype=np.float32), (10, 1))  # every row is the centroid
    q = RaBitQQuantizer(bits=3, similarity="euclidean").fit(X)
    enc = q.encode(X)
    assert np.all(enc.corrections["delta_over_a"] == 0) and np.all(enc.corrections["error"] == 0)
    est, lo, hi = q.estimate(X[:2] + 1, enc, return_bounds=True)
    np.testing.assert_allclose(est, 5.0, rtol=1e-6)  # exact: the residual part is zero
    np.testing.assert_array_equal(lo, est)
    X1 = np.random.default_rng(0).normal(size=(30, 1)).astype(np.float32)
    for bits in (1, 4):
        q1 = RaBitQQuantizer(bits=bits, similarity="euclidean").fit(X1)
        e1 = q1.encode(X1)
        exact = (X1[:3] - X1.T) ** 2
        # in one dimension the codeword is the direction itself: a_o = 1, no error
        np.testing.assert_allclose(q1.estimate(X1[:3], e1), exact, rtol=1e-4, atol=1e-4)
        assert np.all(e1.corrections["error"] == 0)


def test_cosine_equals_dot_product_on_unit_vectors():
    X, Q = _unit(120, 32, 3), _unit(5, 32, 4)
    a = RaBitQQuantizer(bits=2, similarity="cosine", seed=9).fit(X)
    b = RaBitQQuantizer(bits=2, similarity="dot_product", seed=9).fit(X)
    np.testing.assert_allclose(a.estimate(Q, a.encode(X)), b.estimate(Q, b.encode(X)), atol=1e-5)
    scores = a.similarity_scores(Q, a.encode(X))
    assert scores.dtype == np.float32 and np.all((scores >= 0) & (scores <= 1))


def test_query_codes_affine_dequantization():
    X = _unit(50, 40, 1)
    q = RaBitQQuantizer(bits=1, similarity="dot_product", seed=0).fit(X)
    assert q.encoding_.query_bits == 4
    qc, r_q, e_norm = q.query_codes_rotated(q.rotate(X[:3]), q.centroid_)
    codes = unpack_planes(qc.data.view(np.uint8), 4, 40).astype(np.float64)
    y = q.rotate(X[:3]).astype(np.float64) - q.centroid_
    deq = qc.factors[:, :1] + qc.factors[:, 1:2] * codes
    # nearest rounding on a 15-step grid over [min, max]: error at most half a step
    assert np.all(np.abs(deq - y) <= qc.factors[:, 1:2] / 2 + 1e-6)
    np.testing.assert_allclose(e_norm, np.linalg.norm(deq - y, axis=1), rtol=1e-5)
    np.testing.assert_allclose(r_q, np.linalg.norm(y, axis=1), rtol=1e-6)
    np.testing.assert_array_equal(qc.factors[:, 2], codes.sum(axis=1))


# ------------------------------------------------------------------------- encoding records
def test_encoding_records_and_bytes_per_vector():
    wires = {e.wire for e in ENCODINGS.rows("osq")}
    for bits in range(1, 9):
        for qb in (4, 7, 8, None):
            e = rabitq_encoding(bits, qb)
            assert e.layout == "planes" and e.doc_planes == bits and e.wire not in wires
            assert e.corrections_dtype == (
                RABITQ_CORRECTIONS_U16 if bits <= 4 else RABITQ_CORRECTIONS_I32
            )
        assert rabitq_encoding(bits).query_bits == (4 if bits == 1 else None)
    assert RABITQ_CORRECTIONS_U16.itemsize == 14 and RABITQ_CORRECTIONS_I32.itemsize == 16
    assert [rabitq_encoding(b).default_oversample for b in (1, 2, 4, 7, 8)] == [
        3.0,
        1.5,
        1.0,
        1.0,
        1.0,
    ]
    X = _unit(20, 384, 0)
    for bits, expected in [(1, 62), (2, 110), (4, 206), (7, 352), (8, 400)]:
        q = RaBitQQuantizer(bits=bits).fit(X)
        assert q.encode(X).bytes_per_vector == expected
        index = FlatIndex(q)
        index.add(X)
        assert index.bytes_per_vector == expected


# ------------------------------------------------------------------------- bound rerank
def test_bound_rerank_kernel_matches_reference():
    rng = np.random.default_rng(3)
    n, d, nq, k = 300, 16, 6, 7
    vectors = rng.standard_normal((n, d)).astype(np.float32)
    queries = rng.standard_normal((nq, d)).astype(np.float32)
    for is_l2 in (True, False):
        exact = (
            -((queries[:, None, :] - vectors[None]) ** 2).sum(-1)
            if is_l2
            else queries.astype(np.float64) @ vectors.T.astype(np.float64)
        )
        keys = exact + rng.normal(0, 0.3 * exact.std(), exact.shape)
        keys[:, 10:20] = keys[:, 10:11]  # ties in the estimate order
        opt = keys + np.abs(rng.normal(0, exact.std(), exact.shape))
        for allowed, cap in [(None, 10_000), (rng.random(n) < 0.6, 10_000), (None, 9)]:
            mask = np.empty(0, np.uint8) if allowed is None else allowed.astype(np.uint8)
            hk = np.full((nq, k), -np.inf)
            hi = np.full((nq, k), EMPTY_ID, dtype=np.int64)
            reads = np.zeros(nq, dtype=np.int64)
            bound_rerank(keys, opt, queries, vectors, mask, max(cap, k), is_l2, hk, hi, reads)
            for i in range(nq):
                # exact keys from the same float64 arithmetic as the kernel
                ek = np.array(
                    [
                        -float(((queries[i].astype(np.float64) - vectors[j]) ** 2).sum())
                        if is_l2
                        else float(queries[i].astype(np.float64) @ vectors[j])
                        for j in range(n)
                    ]
                )
                ids_ref, reads_ref = ref.bound_rerank(keys[i], opt[i], ek, k, cap, allowed)
                order = np.lexsort((hi[i], -hk[i]))
                assert hi[i][order].tolist() == ids_ref
                assert reads[i] == reads_ref


@pytest.mark.parametrize("sim", ["euclidean", "cosine", "max_inner_product"])
def test_flat_index_bound_rerank(make_vectors, sim):
    X = make_vectors(3000, 48, "clustered", seed=4)
    Q = make_vectors(25, 48, "clustered", seed=5)
    index = FlatIndex(RaBitQQuantizer(bits=2, similarity=sim, seed=0))
    index.add(X)
    exact_scores, exact_ids = index.search(Q, 10, oversample=300.0)  # all 3000 rescored
    scores, ids = index.search(Q, 10, rerank="bound")
    reads = index.last_vectors_read
    assert reads.shape == (25,) and np.all(reads >= 10) and np.all(reads < 3000)
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(ids, exact_ids, strict=True)])
    assert recall >= 0.95
    # returned scores are exact for the returned ids
    same = ids == exact_ids
    np.testing.assert_allclose(scores[same], exact_scores[same], rtol=1e-6)
    # a huge eps0 reads everything and is exact
    raw, ids_all, reads_all = index.quantizer.search_bound_rerank(
        Q, index.codes, index._parts()[1], 10, eps0=1e6
    )
    np.testing.assert_array_equal(ids_all, exact_ids)
    assert np.all(reads_all == 3000)
    # filters and small caps
    mask = np.zeros(3000, dtype=bool)
    mask[::3] = True
    _, fids = index.search(Q, 10, rerank="bound", filter=mask)
    assert np.all(fids % 3 == 0)
    _, _, capped = index.quantizer.search_bound_rerank(
        Q, index.codes, index._parts()[1], 10, cap=12
    )
    assert np.all(capped <= 12)


def test_bound_rerank_edge_cases(make_vectors):
    X = make_vectors(5, 8, seed=1)
    index = FlatIndex(RaBitQQuantizer(bits=1, similarity="euclidean"))
    index.add(X)
    scores, ids = index.search(X[:2], 10, rerank="bound", pad_to_k=True)  # k > n
    assert ids.shape == (2, 10) and (ids[:, :5] >= 0).all() and (ids[:, 5:] == -1).all()
    assert np.isposinf(scores[:, 5:]).all()  # raw squared L2 pads with +inf
    assert ids[0, 0] == 0 and ids[1, 0] == 1
    with pytest.raises(ValueError, match="shape"):
        index.quantizer.search_bound_rerank(X[:1], index.codes, X[:3], 2)
    with pytest.raises(ValueError, match="eps0"):
        index.quantizer.search_bound_rerank(X[:1], index.codes, X, 2, eps0=-1)
    bbq = FlatIndex(bits=1, similarity="euclidean")
    bbq.add(X)
    with pytest.raises(ValueError, match="error bounds"):
        bbq.search(X[:1], 2, rerank="bound")


# ------------------------------------------------------------------------- files and API
def test_save_load_roundtrip(tmp_path, make_vectors):
    X = make_vectors(400, 33, seed=2)
    for kwargs in (
        dict(bits=1),
        dict(bits=5, query_bits=8, rotation="hadamard", fast=True, similarity="mip"),
        dict(bits=3, rotation=DenseRotation(seed=4), similarity="euclidean"),
        dict(bits=2, rotation=None, similarity="euclidean"),
    ):
        index = FlatIndex(RaBitQQuantizer(seed=1, **kwargs))
        index.add(X)
        before = index.search(X[:5], 7, rerank=False)
        bounds = index.search(X[:5], 7, rerank="bound")
        path = index.save(tmp_path / "rabitq.bbq")
        loaded = FlatIndex.load(path)
        assert isinstance(loaded.quantizer, RaBitQQuantizer)
        for a, b in zip(before, loaded.search(X[:5], 7, rerank=False), strict=True):
            np.testing.assert_array_equal(a, b)
        for a, b in zip(bounds, loaded.search(X[:5], 7, rerank="bound"), strict=True):
            np.testing.assert_array_equal(a, b)
        # the loaded quantizer accepts codes encoded by the original (same fingerprint);
        # BLAS may round a 9-row rotation differently from a 400-row one, hence rtol
        assert loaded.quantizer.fingerprint_ == index.quantizer.fingerprint_
        est = loaded.quantizer.estimate(X[:2], index.quantizer.encode(X[:9]))
        np.testing.assert_allclose(
            est, index.quantizer.estimate(X[:2], index.codes[:9]), rtol=1e-5, atol=1e-5
        )


def test_with_query_bits_keeps_doc_codes_valid(make_vectors):
    X = make_vectors(100, 20, seed=3)
    q = RaBitQQuantizer(bits=2, similarity="euclidean", seed=1).fit(X)
    enc = q.encode(X)
    q4 = q.with_query_bits(4)
    assert q4.encoding_.query_bits == 4 and q4.fingerprint_ == q.fingerprint_
    a, b = q.estimate(X[:3], enc), q4.estimate(X[:3], enc)
    assert np.abs(a - b).max() < 0.2 * np.abs(a).max()


def test_public_api():
    assert bbqlib.quantizers.RaBitQQuantizer is RaBitQQuantizer
    q = RaBitQQuantizer(bits=3, fast=True)
    assert q.get_params() == dict(
        bits=3, query_bits="auto", similarity="cosine", rotation="dense", seed=None, fast=True
    )
    assert "RaBitQQuantizer(bits=3" in repr(q)


# ------------------------------------------------------------------------- bad input
def test_bad_parameters(make_vectors):
    X = make_vectors(20, 8)
    for bad, match in [
        (dict(bits=0), "bits"),
        (dict(bits=9), "bits"),
        (dict(bits=True), "bits"),
        (dict(bits="4"), "bits"),
        (dict(query_bits=5), "query_bits"),
        (dict(query_bits="fast"), "query_bits"),
        (dict(similarity="hamming"), "similarity"),
        (dict(fast="yes"), "fast"),
        (dict(rotation="nope"), "transform"),
    ]:
        with pytest.raises(ValueError, match=match):
            RaBitQQuantizer(**bad).fit(X)
    with pytest.raises(ValueError, match="at most 4369 dimensions"):
        RaBitQQuantizer(bits=4).fit(np.ones((2, 4370), np.float32))


def test_bad_calls(make_vectors):
    X = make_vectors(30, 8)
    q = RaBitQQuantizer(bits=2, similarity="euclidean")
    with pytest.raises(bbqlib.NotFittedError):
        q.encode(X)
    q.fit(X)
    enc = q.encode(X)
    other = RaBitQQuantizer(bits=2, similarity="euclidean", seed=5).fit(X)
    with pytest.raises(ValueError, match="fingerprint"):
        other.estimate(X, enc)
    with pytest.raises(TypeError, match="EncodedVectors"):
        q.estimate(X, X)
    with pytest.raises(ValueError, match="dimension"):
        q.estimate(X[:, :5], enc)
    with pytest.raises(TypeError, match="float"):
        q.estimate(X.astype(np.int32), enc)
    for eps0 in (0, -1.0, float("nan"), True, "1.9"):
        with pytest.raises(ValueError, match="eps0"):
            q.estimate(X, enc, return_bounds=True, eps0=eps0)
    with pytest.raises(ValueError, match="unit-length"):
        RaBitQQuantizer(similarity="dot_product").fit(X)
    X0 = X.copy()
    q.estimate(X, enc, return_bounds=True)
    np.testing.assert_array_equal(X, X0)  # caller arrays untouched


def test_return_bounds_on_bbq_raises(make_vectors):
    X = make_vectors(30, 8)
    q = BBQQuantizer(bits=1, similarity="euclidean").fit(X)
    with pytest.raises(ValueError, match="no error bound"):
        q.estimate(X, q.encode(X), return_bounds=True)
