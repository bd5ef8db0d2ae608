"""Lucene-arithmetic kernels (``bbqlib._kernels.osq_lucene``) against their NumPy reference, and
the ``BBQQuantizer(arithmetic="lucene")`` API. The comparison with the Lucene jar itself is
``tests/test_lucene_oracle.py``."""

from __future__ import annotations

import pickle

import numba
import numpy as np
import pytest
from reference import osq_lucene as lucene_reference

import bbqlib
from bbqlib._kernels import osq_lucene as osq_lucene_kernels
from bbqlib.quantizers.osq import arithmetic as arithmetic_module
from bbqlib.quantizers.osq import lucene as lucene_osq
from bbqlib.quantizers.osq.arithmetic import ARITHMETICS, arithmetic_codec
from bbqlib.quantizers.osq.quantizer import Float64Arithmetic

SIMILARITIES = ["euclidean", "dot_product", "cosine", "max_inner_product"]
LUCENE_BITS = [1, 2, 4, 7]
DIMS = [1, 2, 3, 7, 8, 9, 31, 32, 33, 35, 63, 64, 65, 127, 300, 384]


def bits_equal(a, b) -> bool:
    """Same float32 bits (any NaN matches any NaN), or equal integers."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return False
    if a.dtype.kind != "f":
        return np.array_equal(a, b)
    a32, b32 = a.astype(np.float32), b.astype(np.float32)
    both_nan = np.isnan(a32) & np.isnan(b32)
    return bool(((a32.view(np.int32) == b32.view(np.int32)) | both_nan).all())


def _rows(kind: str, n: int, d: int, seed: int) -> np.ndarray:
    g = np.random.default_rng(seed)
    if kind == "normal":
        X = g.normal(0.2, 1.0, size=(n, d))
    elif kind == "uniform":
        X = g.uniform(size=(n, d))
    elif kind == "heavy":
        X = g.standard_t(2, size=(n, d))
    elif kind == "sparse":
        X = g.normal(size=(n, d)) * (g.uniform(size=(n, d)) < 0.05)
    elif kind == "ties":  # codes on rounding ties
        X = g.integers(-4, 5, size=(n, d)) / 4.0
    elif kind == "constant":
        X = np.full((n, d), 0.5)
    elif kind == "onehot":
        X = np.eye(n, d)
    elif kind == "wide":  # magnitudes over 16 decades: every summation order shows
        X = g.normal(size=(n, d)) * 10.0 ** g.uniform(-8, 8, size=(n, d))
    elif kind == "tiny":
        X = g.normal(size=(n, d)) * 1e-30
    elif kind == "subnormal":
        X = g.normal(size=(n, d)) * 1e-41
    elif kind == "huge":
        X = g.normal(size=(n, d)) * 1e18
    else:
        raise ValueError(kind)
    return X.astype(np.float32)


KINDS = ["normal", "uniform", "heavy", "sparse", "ties", "constant", "onehot", "wide"]
EXTREME = ["tiny", "subnormal", "huge"]


def _kernel_osq(X, c, bits, euclidean):
    n, d = X.shape
    out = (
        np.empty((n, d), np.uint8),
        np.empty(n, np.float32),
        np.empty(n, np.float32),
        np.empty(n, np.float32),
        np.empty(n, np.int64),
    )
    osq_lucene_kernels.osq_quantize_lucene(X, c, bits, 5, lucene_reference.LAMBDA, euclidean, *out)
    return out


def assert_osq_same(X, c, bits, euclidean):
    with np.errstate(all="ignore"):
        ref = lucene_reference.osq_lucene(X, c, bits, euclidean)
    res = _kernel_osq(np.ascontiguousarray(X), np.ascontiguousarray(c), bits, euclidean)
    for name, a, b in zip(("codes", "lower", "upper", "additional", "sum"), res, ref, strict=True):
        assert bits_equal(a, b), (name, bits, euclidean)


# ----------------------------------------------------------------------------- Java semantics
@numba.njit
def _round_float_all(t, out):
    for i in range(t.shape[0]):
        out[i] = osq_lucene_kernels._jround_float(t[i])


@numba.njit
def _round_double_all(t, out):
    for i in range(t.shape[0]):
        out[i] = osq_lucene_kernels._jround_double(t[i])


@numba.njit
def _minmax_all(a, b, lo, hi):
    for i in range(a.shape[0]):
        lo[i] = osq_lucene_kernels._jmin(a[i], b[i])
        hi[i] = osq_lucene_kernels._jmax(a[i], b[i])


def test_java_round_float():
    """``Math.round(float)``: exact floor(t + 1/2), NaN -> 0, saturating at the int range."""
    below_half = np.nextafter(np.float32(0.5), np.float32(0))  # 0.49999997f: t + 0.5f rounds up
    t = np.array(
        [
            below_half,
            0.5,
            -0.5,
            -2.5,
            2.5,
            -0.25,
            1e-30,
            -1e-30,
            np.nan,
            np.inf,
            -np.inf,
            3e9,
            -3e9,
            8388609.0,
            16777217.0,
        ],
        dtype=np.float32,
    )
    java = [0, 1, 0, -2, 3, 0, 0, 0, 0, 2**31 - 1, -(2**31), 2**31 - 1, -(2**31), 8388609,
            16777216]  # fmt: skip
    out = np.empty(t.size, np.int64)
    _round_float_all(t, out)
    np.testing.assert_array_equal(out, java)
    np.testing.assert_array_equal(lucene_reference.java_round_float(t), java)


def test_java_round_double():
    """``Math.round(double)``: exact below a half and above 2^52, saturating at ±2^63."""
    below_half = np.nextafter(0.5, 0.0)  # 0.49999999999999994 + 0.5 == 1.0 in float64
    t = np.array(
        [below_half, 0.5, -0.5, -2.5, 2**52 + 1.0, -(2**52) - 1.0, np.nan, np.inf, -np.inf, 1e300]
    )
    java = [0, 1, 0, -2, 2**52 + 1, -(2**52) - 1, 0, 2.0**63, -(2.0**63), 2.0**63]
    out = np.empty(t.size)
    _round_double_all(t, out)
    np.testing.assert_array_equal(out, java)
    np.testing.assert_array_equal(lucene_reference.java_round_double(t), java)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_java_min_max(dtype):
    """NaN wins either side; -0.0 is below +0.0 whatever the argument order."""
    a = np.array([-0.0, 0.0, np.nan, 1.0, 2.0, -1.0], dtype=dtype)
    b = np.array([0.0, -0.0, 1.0, np.nan, 1.0, -1.0], dtype=dtype)
    lo, hi = np.empty_like(a), np.empty_like(a)
    _minmax_all(a, b, lo, hi)
    expect_lo = np.array([-0.0, -0.0, np.nan, np.nan, 1.0, -1.0], dtype=dtype)
    expect_hi = np.array([0.0, 0.0, np.nan, np.nan, 2.0, -1.0], dtype=dtype)
    for got in (lo, lucene_reference.java_min(a, b)):
        assert bits_equal(got, expect_lo) and np.array_equal(np.signbit(got), np.signbit(expect_lo))
    for got in (hi, lucene_reference.java_max(a, b)):
        assert bits_equal(got, expect_hi) and np.array_equal(np.signbit(got), np.signbit(expect_hi))


# ----------------------------------------------------------------------------- VectorUtil
@pytest.mark.parametrize("d", DIMS)
@pytest.mark.parametrize("kind", ["normal", "wide", "huge", "subnormal"])
def test_dot_and_normalization_match_reference(d, kind):
    X = _rows(kind, 24, d, seed=d)
    sq = np.empty(len(X), np.float32)
    osq_lucene_kernels.row_dots(X, sq)
    with np.errstate(all="ignore"):
        assert bits_equal(sq, lucene_reference.lucene_dot(X, X))
        out = np.empty_like(X)
        osq_lucene_kernels.normalize_docs(X, out)
        assert bits_equal(out, lucene_reference.lucene_doc_normalize(X)[0])
        out2, zero = np.empty_like(X), np.zeros(len(X), np.uint8)
        osq_lucene_kernels.l2normalize_rows(X, out2, zero)
        ok = sq != 0
        np.testing.assert_array_equal(zero.astype(bool), ~ok)
        assert bits_equal(out2[ok], lucene_reference.lucene_l2normalize(X[ok]))


def test_l2normalize_keeps_near_unit_rows():
    """Within 1e-4f of unit length a row is left as it is (a second call changes nothing)."""
    X = _rows("normal", 50, 384, seed=1)
    once, _ = lucene_osq._l2normalize(X)
    twice, _ = lucene_osq._l2normalize(once)
    assert bits_equal(once, twice)
    near = (X / np.linalg.norm(X, axis=1, keepdims=True) * np.float32(1.00001)).astype(np.float32)
    assert bits_equal(lucene_osq._l2normalize(near)[0], near)


@pytest.mark.parametrize("d", [1, 7, 33, 65, 384])
@pytest.mark.parametrize("cosine", [False, True])
def test_centroid_matches_reference(d, cosine):
    X = _rows("wide", 300, d, seed=d)
    c = lucene_osq.lucene_centroid(X, cosine)
    assert bits_equal(c, lucene_reference.lucene_centroid(X, cosine))
    assert bits_equal(np.float32(lucene_osq.centroid_dot(c)), lucene_reference.lucene_dot(c, c)[0])


# ----------------------------------------------------------------------------- OSQ
@pytest.mark.parametrize("d", [1, 3, 7, 8, 9, 33, 63, 64, 65, 127, 384])
@pytest.mark.parametrize("kind", KINDS)
def test_osq_kernel_matches_reference(d, kind):
    X = _rows(kind, 24, d, seed=d)
    for c in (X.mean(axis=0), np.zeros(d, np.float32)):
        for bits in range(1, 9):
            assert_osq_same(X, c.astype(np.float32), bits, euclidean=bits % 2 == 0)


@pytest.mark.parametrize("kind", EXTREME)
@pytest.mark.parametrize("d", [3, 64, 65, 384])
def test_osq_kernel_matches_reference_extreme_magnitudes(kind, d):
    """Tiny, subnormal and huge components: underflowed / overflowed norms, inf and NaN."""
    X = _rows(kind, 24, d, seed=d)
    for bits in LUCENE_BITS:
        for euclidean in (True, False):
            assert_osq_same(X, X.mean(axis=0), bits, euclidean)


def test_osq_signed_zeros_and_centroid_rows():
    """Rows equal to the centroid, ±0 components against a zero centroid, a zero row."""
    g = np.random.default_rng(3)
    d = 40
    c = g.normal(size=d).astype(np.float32)
    zeros = np.where(g.uniform(size=d) < 0.5, -0.0, 0.0).astype(np.float32)
    zeros[0] = 1.0
    X = np.stack([c, zeros, np.zeros(d, np.float32), c + np.float32(1e-6)])
    for centroid in (c, np.zeros(d, np.float32)):
        for bits in LUCENE_BITS:
            assert_osq_same(X, centroid, bits, euclidean=True)
            ref = lucene_reference.osq_lucene(X, centroid, bits, True)
            res = _kernel_osq(X, centroid, bits, True)
            np.testing.assert_array_equal(np.signbit(res[1]), np.signbit(ref.lower))


# ----------------------------------------------------------------------------- packing
@pytest.mark.parametrize("bits", LUCENE_BITS)
@pytest.mark.parametrize("d", [1, 3, 7, 8, 9, 63, 64, 65, 300])
def test_lucene_doc_bytes(bits, d):
    g = np.random.default_rng(d)
    X = g.normal(size=(30, d)).astype(np.float32)
    q = bbqlib.BBQQuantizer(bits=bits, similarity="euclidean", arithmetic="lucene").fit(X)
    enc = q.encode(X)
    levels = lucene_reference.osq_lucene(X, q.centroid_, bits, True).codes
    expected = lucene_reference.lucene_doc_bytes(levels, bits)
    np.testing.assert_array_equal(lucene_osq.lucene_doc_bytes(enc), expected)
    np.testing.assert_array_equal(
        lucene_reference.unpack_lucene_doc_bytes(expected, bits, d), levels
    )


def test_lucene_byte_layouts_by_hand():
    """transposeDibit and packNibbles on a worked example (spec §3.4)."""
    levels = np.array([[1, 3, 2, 0, 1, 2, 1, 2]])
    np.testing.assert_array_equal(
        lucene_reference.lucene_doc_bytes(levels, 2), [[0b11001010, 0b01100101]]
    )
    nibbles = np.array([[1, 2, 3, 4, 5]])  # padded to 6: bytes (1,4) (2,5) (3,0)
    np.testing.assert_array_equal(
        lucene_reference.lucene_doc_bytes(nibbles, 4), [[0x14, 0x25, 0x30]]
    )
    y = np.array([[8, 15, 10, 7, 4, 0, 9, 9]])
    np.testing.assert_array_equal(
        lucene_reference.lucene_query_bytes(y, 1), [[0x53, 0x70, 0x58, 0xE3]]
    )


# ----------------------------------------------------------------------------- scores
def _reference_scores(q, X, Q, sim, bits, raw=False):
    """Reference levels, corrections and scores for a fitted lucene-mode quantizer."""
    cos = sim == "cosine"
    docs = lucene_reference.lucene_doc_normalize(X)[0] if cos else X
    queries = lucene_reference.lucene_l2normalize(Q) if cos else Q
    eucl = sim == "euclidean"
    qb = 7 if bits == 7 else 4
    d = lucene_reference.osq_lucene(docs, q.centroid_, bits, eucl)
    y = lucene_reference.osq_lucene(queries, q.centroid_, qb, eucl)
    return lucene_reference.lucene_scores(
        y.codes, y.lower, y.upper, y.additional, y.component_sum,
        d.codes, d.lower, d.upper, d.additional, d.component_sum,
        doc_bits=bits, query_bits=qb, centroid_dp=np.float32(q.centroid_dot_),
        similarity=sim, raw=raw,
    )  # fmt: skip


def _unitish(n, d, seed):
    X = _rows("normal", n, d, seed)
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


@pytest.mark.parametrize("sim", SIMILARITIES)
@pytest.mark.parametrize("bits", LUCENE_BITS)
@pytest.mark.parametrize("d", [9, 65, 300])
def test_scores_match_reference(sim, bits, d):
    X = _unitish(200, d, seed=d) if sim == "dot_product" else _rows("heavy", 200, d, seed=d)
    Q = X[:7] + (0 if sim == "dot_product" else np.float32(0.1))
    q = bbqlib.BBQQuantizer(bits=bits, similarity=sim, arithmetic="lucene").fit(X)
    enc = q.encode(X)
    assert bits_equal(q.similarity_scores(Q, enc), _reference_scores(q, X, Q, sim, bits))
    assert bits_equal(q.estimate(Q, enc), _reference_scores(q, X, Q, sim, bits, raw=True))


@pytest.mark.parametrize("sim", SIMILARITIES)
@pytest.mark.parametrize("bits", LUCENE_BITS)
def test_search_ranks_by_lucene_scores(sim, bits):
    """Top k by float32 score, ties by the lower id; raw values are the estimates."""
    X = _unitish(500, 65, seed=2) if sim == "dot_product" else _rows("ties", 500, 65, seed=2)
    Q = X[:9]
    q = bbqlib.BBQQuantizer(bits=bits, similarity=sim, arithmetic="lucene").fit(X)
    enc = q.encode(X)
    scores = q.similarity_scores(Q, enc)
    raw, ids = q.search(Q, enc, 20)
    ids_ref = np.lexsort((np.broadcast_to(np.arange(len(X)), scores.shape), -scores))[:, :20]
    np.testing.assert_array_equal(ids, ids_ref)
    assert bits_equal(raw, np.take_along_axis(q.estimate(Q, enc), ids, axis=1))
    allowed = np.arange(len(X)) % 3 == 0
    _, ids_f = q.search(Q, enc, 5, allowed=allowed)
    masked = np.where(allowed, scores, -np.inf)
    ids_ref = np.lexsort((np.broadcast_to(np.arange(len(X)), scores.shape), -masked))[:, :5]
    np.testing.assert_array_equal(ids_f, ids_ref)
    _, few = q.search(Q, enc[:3], 10)  # fewer docs than k: padded with -1
    assert (few[:, 3:] == -1).all() and (few[:, :3] >= 0).all()


def test_flat_index_ranks_with_lucene_scores():
    X = _rows("heavy", 800, 48, seed=5)
    Q = _rows("heavy", 6, 48, seed=6)
    q = bbqlib.BBQQuantizer(bits=1, similarity="euclidean", arithmetic="lucene")
    index = bbqlib.FlatIndex(q)
    index.add(X)
    _, ids = index.search(Q, k=10, rerank=False)
    np.testing.assert_array_equal(ids, q.search(Q, index.codes, 10)[1])
    _, ids = index.search(Q, k=10)  # 3x oversample + exact rerank still runs
    assert (ids >= 0).all()


# ----------------------------------------------------------------------------- the mode's API
@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(bits=8), "Lucene's encodings"),
        (dict(bits=1, query_bits=7), "Lucene's encodings"),
        (dict(bits=4, query_bits=None), "Lucene's encodings"),
        (dict(bits=1, precondition="dense"), "no preconditioning"),
        (dict(bits=1, iters=3), "optimizer settings"),
        (dict(bits=1, lam=0.2), "optimizer settings"),
    ],
)
def test_unsupported_settings_raise(kwargs, match):
    X = _rows("normal", 20, 16, seed=0)
    with pytest.raises(ValueError, match=match):
        bbqlib.BBQQuantizer(arithmetic="lucene", **kwargs).fit(X)


def test_unknown_arithmetic_raises():
    with pytest.raises(ValueError, match="arithmetic must be"):
        bbqlib.BBQQuantizer(arithmetic="float32").fit(_rows("normal", 20, 16, seed=0))


def test_params_state_and_files(tmp_path):
    X = _rows("normal", 300, 40, seed=1)
    q = bbqlib.BBQQuantizer(bits=2, similarity="cosine", arithmetic="lucene").fit(X)
    assert q.get_params()["arithmetic"] == "lucene"
    assert bbqlib.BBQQuantizer().get_params()["arithmetic"] == "float64"
    index = bbqlib.FlatIndex(q)
    index.add(X)
    index.save(tmp_path / "i.bbq")
    loaded = bbqlib.load(tmp_path / "i.bbq")
    assert loaded.quantizer.arithmetic == "lucene"
    assert bits_equal(
        loaded.quantizer.similarity_scores(X[:5], loaded.codes),
        q.similarity_scores(X[:5], index.codes),
    )
    with pytest.raises(ValueError, match="Lucene's encodings"):
        q.with_query_bits(8)


def test_the_codec_is_chosen_at_fit_and_restore():
    """The quantizer holds its arithmetic's codec from the fit or the file on; ``set_params``
    of another arithmetic discards the fit, codec included."""
    X = _rows("normal", 200, 24, seed=2)
    q = bbqlib.BBQQuantizer(bits=4, similarity="euclidean", arithmetic="lucene")
    assert "arithmetic_" not in vars(q)
    q.fit(X)
    assert q.arithmetic_ is lucene_osq.LUCENE
    assert q.scanner().flat_one(q.encode(X)) is None  # the batch path serves one query
    assert type(q).from_state(*q.get_state()).arithmetic_ is lucene_osq.LUCENE
    assert q.with_query_bits(4).arithmetic_ is lucene_osq.LUCENE
    q.set_params(arithmetic="float64")
    assert not q.is_fitted and "arithmetic_" not in vars(q)
    assert q.fit(X).arithmetic_ is arithmetic_codec("float64")
    assert arithmetic_codec("float64").name == "float64" and ARITHMETICS == ("float64", "lucene")


@pytest.mark.parametrize("arithmetic", ["float64", "lucene"])
def test_pickles_name_no_codec(arithmetic):
    """A pickle holds the parameter, not the codec (the shape of pickles before codecs); the
    codec is chosen again on load."""
    X = _rows("normal", 200, 24, seed=2)
    q = bbqlib.BBQQuantizer(bits=2, arithmetic=arithmetic).fit(X)
    data = pickle.dumps(q)
    assert b"Arithmetic" not in data and b"arithmetic_" not in data
    back = pickle.loads(data)
    assert back.arithmetic_ is q.arithmetic_
    assert bits_equal(back.estimate(X[:3], q.encode(X)), q.estimate(X[:3], q.encode(X)))


class _Float64Again(Float64Arithmetic):
    """A third arithmetic, defined here: the quantizer runs it without knowing its name."""

    name = "float64-again"
    fingerprint_tag = ("again",)


FLOAT64_AGAIN = _Float64Again()


def test_a_codec_defined_elsewhere_runs_through_the_quantizer_and_indexes(monkeypatch):
    monkeypatch.setitem(arithmetic_module._CODECS, "float64-again", (__name__, "FLOAT64_AGAIN"))
    X = _rows("normal", 300, 24, seed=3)
    own = bbqlib.BBQQuantizer(bits=2, similarity="euclidean").fit(X)
    again = bbqlib.BBQQuantizer(bits=2, similarity="euclidean", arithmetic="float64-again")
    again.fit(X)
    assert again.arithmetic_ is FLOAT64_AGAIN and again.fingerprint_ != own.fingerprint_
    index = bbqlib.FlatIndex(again)
    index.add(X)
    reference = bbqlib.FlatIndex(own)
    reference.add(X)
    for Q in (X[:5], X[7]):
        np.testing.assert_array_equal(
            index.search(Q, k=4, rerank=False, scores="raw")[1],
            reference.search(Q, k=4, rerank=False, scores="raw")[1],
        )


def test_modes_do_not_mix():
    """Codes of one arithmetic are refused by a quantizer of the other (fingerprints differ)."""
    X = _rows("ties", 64, 40, seed=1)  # quarter integers: both means are exact
    q64 = bbqlib.BBQQuantizer(bits=1, similarity="euclidean").fit(X)
    ql = bbqlib.BBQQuantizer(bits=1, similarity="euclidean", arithmetic="lucene").fit(X)
    np.testing.assert_array_equal(q64.centroid_, ql.centroid_)  # same centroid here
    assert q64.fingerprint_ != ql.fingerprint_
    with pytest.raises(ValueError, match="different fit"):
        q64.estimate(X[:2], ql.encode(X))


def test_cosine_rows_lucene_cannot_normalize():
    X = _rows("normal", 50, 16, seed=0)
    X[3] *= np.float32(1e-30)  # float32 squared norm underflows to 0
    with pytest.raises(ValueError, match="underflows to 0"):
        bbqlib.BBQQuantizer(similarity="cosine", arithmetic="lucene").fit(X)
    q = bbqlib.BBQQuantizer(similarity="cosine", arithmetic="lucene").fit(X[:3])
    with pytest.raises(ValueError, match="underflows to 0"):
        q.similarity_scores(X[3:4], q.encode(X[:3]))


def test_caller_arrays_untouched_and_chunking(monkeypatch):
    X = _rows("normal", 300, 40, seed=1)
    before = X.copy()
    q = bbqlib.BBQQuantizer(bits=4, similarity="cosine", arithmetic="lucene").fit(X)
    whole = q.encode(X)
    q.similarity_scores(X[:4], whole)
    np.testing.assert_array_equal(X, before)
    monkeypatch.setattr(lucene_osq, "CHUNK_BYTES", 4 * 40 * 7)  # 7 rows per chunk
    parts = q.encode(X)
    np.testing.assert_array_equal(parts.codes, whole.codes)
    assert parts.corrections.tobytes() == whole.corrections.tobytes()


def test_candidate_scorer_uses_lucene_levels():
    """Consumers of the query codes get Lucene's levels, scored with bbqlib's float64 algebra."""
    X = _rows("normal", 300, 40, seed=1)
    q = bbqlib.BBQQuantizer(bits=1, similarity="euclidean", arithmetic="lucene").fit(X)
    enc = q.encode(X)
    est = q.scorer(X[0], enc)(np.arange(len(X)))
    np.testing.assert_allclose(est, q.estimate(X[:1], enc)[0], rtol=1e-5, atol=1e-4)


def test_subnormal_intervals_raise():
    """A float32 step that underflows gives codes outside the encoding (as in Lucene): refused,
    with the caller's row number."""
    X = (np.random.default_rng(5).normal(size=(50, 20)) * 1e-44).astype(np.float32)
    q = bbqlib.BBQQuantizer(bits=7, similarity="euclidean", arithmetic="lucene").fit(X)
    with pytest.raises(ValueError, match="narrower than float32"):
        q.encode(X)


def test_ivf_refuses_lucene_arithmetic():
    # IVFIndex codes its lists in bbqlib's arithmetic: a Lucene mode there would not be Lucene's
    with pytest.raises(ValueError, match="arithmetic='lucene'.*use bbqlib.FlatIndex"):
        bbqlib.IVFIndex(bbqlib.BBQQuantizer(arithmetic="lucene"))
    assert bbqlib.BBQQuantizer().serves_lists
