"""SAQQuantizer: the estimator against the NumPy reference, every similarity, FlatIndex (search,
filters, rerank, files), the IVF hooks, search paths, bytes per vector and bad input."""

from __future__ import annotations

import numpy as np
import pytest
from reference import saq as ref

import bbqlib
from bbqlib import FlatIndex, RaBitQQuantizer, SAQQuantizer
from bbqlib.encoding import padded_dim
from bbqlib.quantizers.saq.search import search as saq_search
from bbqlib.quantizers.saq.search import uses_fastscan
from bbqlib.similarity import exact_raw

SIMILARITIES = ("euclidean", "dot_product", "cosine", "max_inner_product")


@pytest.fixture(scope="module", autouse=True)
def _single_blas_thread():
    threadpoolctl = pytest.importorskip("threadpoolctl")
    with threadpoolctl.threadpool_limits(1, user_api="blas"):
        yield


def _aniso(n, d, seed=0, kind="gaussian"):
    """Anisotropic data (a decaying spectrum, a non-zero mean): SAQ plans several segments."""
    g = np.random.default_rng(seed)
    X = g.standard_normal((n, d)) * np.geomspace(3.0, 0.05, d) @ _rot(d, seed) + 0.5
    if kind == "unit":
        X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X.astype(np.float32)


def _rot(d, seed):
    q, _ = np.linalg.qr(np.random.default_rng(seed + 99).standard_normal((d, d)))
    return q


def _data(sim, n=400, d=96, nq=7, seed=0):
    kind = "unit" if sim == "dot_product" else "gaussian"
    X = _aniso(n + nq, d, seed, kind)
    return X[:n], X[n:]


@pytest.mark.parametrize(
    ("sim", "bits"),
    [
        ("euclidean", 0.5),
        ("euclidean", 2.0),
        ("euclidean", 8.0),
        ("dot_product", 1.5),
        ("dot_product", 8.0),
        ("cosine", 0.5),
        ("cosine", 2.0),
        ("max_inner_product", 1.5),
    ],
)
def test_estimate_matches_reference(sim, bits):
    X, Q = _data(sim, n=150, nq=4)
    q = SAQQuantizer(bits=bits, similarity=sim, seed=3).fit(X)
    enc = q.encode(X)
    a = q.plan_.arrays()
    dims, widths = a["dims"].tolist(), a["bits"].tolist()
    Xp, Qp = q._validated(X, "X"), q._validated(Q, "Q")
    Y = (Xp.astype(np.float64) - q.mean_) @ q.frame_[:, : q.plan_.coded_dims]
    codes, scale, norm = ref.encode_rows(Y.astype(np.float32), dims, widths)
    fac = enc.corrections.view(np.float32).reshape(len(enc), -1)
    assert np.mean(codes == enc.codes) > 0.999  # float32 vs float64 projection: rare flips
    Qc, q_add = q._query_parts(Qp)
    want = ref.estimate(
        Qc,
        enc.codes,
        fac[:, 1 : 1 + len(dims)].astype(np.float64),
        fac[:, 0].astype(np.float64),
        q_add,
        dims,
        widths,
        q.similarity_.is_distance,
    )
    est = q.estimate(Q, enc)
    np.testing.assert_allclose(est, want, atol=1e-5 * np.abs(want).max())
    # and the estimates track the truth
    exact = exact_raw(q.similarity_, Qp, Xp.astype(np.float64))
    assert np.corrcoef(est.ravel(), exact.ravel())[0, 1] > 0.8


@pytest.mark.parametrize("sim", SIMILARITIES)
def test_search_paths_agree_with_dense_estimates(sim):
    X, Q = _data(sim, n=700)
    q = SAQQuantizer(bits=2.0, similarity=sim).fit(X)
    enc = q.encode(X)
    est = q.estimate(Q, enc).astype(np.float64)
    key = -est if q.similarity_.is_distance else est
    want = np.argsort(-key, axis=1, kind="stable")[:, :10]
    Qc, q_add = q._query_parts(q._validated(Q, "Q"))
    runs = [("plain", None)]
    if uses_fastscan(q):  # two passes, the first over all planes, the top two, the top one
        runs += [("two-pass", None), ("two-pass", 2), ("two-pass", 1)]
    for mode, planes in runs:
        keys, ids, _ = saq_search(q, Qc, q_add, enc, 10, None, 0, mode=mode, pass1_planes=planes)
        raw = q.similarity_.raw(keys)
        # float32 tables vs the dense kernel: ties within 1e-6 may swap
        np.testing.assert_allclose(np.take_along_axis(est, ids, 1), raw, rtol=1e-4, atol=1e-5)
        assert np.mean(ids == want) > 0.98, mode
    raw, ids = q.search(Q, enc, 10)
    assert np.mean(ids == want) > 0.98


def test_quantized_queries_fastscan_matches_plain():
    X, Q = _data("euclidean", n=500)
    q = SAQQuantizer(bits=3.0, query_bits=4, similarity="euclidean").fit(X)
    enc = q.encode(X)
    Qc, q_add = q._query_parts(q._validated(Q, "Q"))
    _, plain, _ = saq_search(q, Qc, q_add, enc, 5, None, 0, mode="plain")
    if uses_fastscan(q):
        _, fast, _ = saq_search(q, Qc, q_add, enc, 5, None, 0, mode="fastscan")
        assert np.mean(plain == fast) > 0.98
    # a finer query grid approaches the float query
    exact = exact_raw(q.similarity_, q._validated(Q, "Q"), q._validated(X, "X").astype(float))
    sd = {qb: np.std(q.with_query_bits(qb).estimate(Q, enc) - exact) for qb in (4, 8, None)}
    assert sd[8] < sd[4] and sd[None] <= sd[8] * 1.05


def test_cosine_equals_dot_product_on_unit_vectors():
    X, Q = _data("dot_product")
    a = SAQQuantizer(bits=2, similarity="cosine").fit(X)
    b = SAQQuantizer(bits=2, similarity="dot_product").fit(X)
    np.testing.assert_allclose(a.estimate(Q, a.encode(X)), b.estimate(Q, b.encode(X)), atol=1e-6)


def test_encode_rotated_is_the_residual_hook():
    """``encode_rotated(rotate(X), rotate(c))`` codes ``X - c``: with c the mean it is encode."""
    for sim in ("euclidean", "max_inner_product"):
        X, Q = _data(sim)
        q = SAQQuantizer(bits=2.5, similarity=sim).fit(X)
        enc = q.encode(X)
        enc2 = q.encode_rotated(q.rotate(X), q.rotate(q.mean_[None])[0])
        assert np.mean(enc.codes == enc2.codes) > 0.999
        np.testing.assert_allclose(q.estimate(Q, enc2), q.estimate(Q, enc), rtol=1e-4, atol=1e-4)
        # another centre: estimates stay estimates of the same values
        c = X[0].astype(np.float64)
        enc3 = q.encode_rotated(q.rotate(X), q.rotate(c[None])[0])
        Qc, q_add = q.query_parts_rotated(q.rotate(Q), q.rotate(c[None])[0])
        est = q.scanner().estimate_parts(Qc, q_add, enc3)
        exact = exact_raw(q.similarity_, Q, X.astype(np.float64))
        assert np.corrcoef(est.ravel(), exact.ravel())[0, 1] > 0.8


@pytest.mark.parametrize("sim", ["cosine", "euclidean"])
def test_flat_index_search_filter_rerank_and_files(tmp_path, sim):
    X, Q = _data(sim, n=600)
    index = FlatIndex(SAQQuantizer(bits=1.5, similarity=sim))
    index.add(X[:300])
    index.add(X[300:])
    s_exact, i_exact = index.search(Q, 5, oversample=50)
    qz = index.quantizer
    ex = exact_raw(qz.similarity_, qz._validated(Q, "Q"), qz._validated(X, "X"))
    best = np.argsort(ex if sim == "euclidean" else -ex, axis=1)[:, :5]
    np.testing.assert_array_equal(np.sort(i_exact, 1), np.sort(best, 1))
    s_raw, i_raw = index.search(Q, 5, rerank=False)
    _, i_bound = index.search(Q, 5, rerank="bound")  # the model sd's optimistic bound
    hits = [len(set(a) & set(b)) for a, b in zip(i_bound, best, strict=True)]
    assert np.mean(hits) / 5 > 0.8  # a z-score, not a guarantee
    assert np.all(index.last_vectors_read >= 5)
    keep = np.arange(600) % 2 == 1
    _, i_f = index.search(Q, 5, filter=keep, rerank=False)
    assert np.all(i_f % 2 == 1)
    path = index.save(tmp_path / "saq.bbq")
    loaded = bbqlib.load(path)
    assert isinstance(loaded.quantizer, SAQQuantizer)
    assert loaded.quantizer.plan_ == index.quantizer.plan_
    s2, i2 = loaded.search(Q, 5, rerank=False)
    np.testing.assert_array_equal(i2, i_raw)
    np.testing.assert_array_equal(s2, s_raw)
    path2 = loaded.save(tmp_path / "saq2.bbq")
    assert path.read_bytes() == path2.read_bytes()
    assert loaded.bytes_per_vector == index.codes.bytes_per_vector


@pytest.mark.parametrize("d", [1, 7, 64, 65, 300])
@pytest.mark.parametrize("bits", [0.5, 1, 2, 3, 4, 7, 8])
def test_bytes_never_exceed_extended_rabitq(d, bits):
    X = _aniso(300, d, seed=d)
    q = SAQQuantizer(bits=bits, similarity="euclidean").fit(X)
    saq_bytes = q.encode(X[:3]).bytes_per_vector
    assert saq_bytes == q.encoding_.bytes_per_vector(d)
    assert saq_bytes <= bits * padded_dim(d) / 8 + 12
    if bits == int(bits):
        r = RaBitQQuantizer(bits=int(bits), similarity="euclidean").fit(X)
        assert saq_bytes <= r.encode(X[:3]).bytes_per_vector


def test_degenerate_data():
    X = np.ones((50, 20), dtype=np.float32)  # zero variance: every residual is zero
    q = SAQQuantizer(bits=2, similarity="euclidean").fit(X)
    enc = q.encode(X)
    np.testing.assert_allclose(q.estimate(X[:3], enc), 0.0, atol=1e-5)
    Z = np.zeros((5, 20), dtype=np.float32)
    Z[0, 0] = 1.0
    est = q.estimate(Z, enc)
    assert np.all(np.isfinite(est))
    one = np.random.default_rng(0).standard_normal((200, 1)).astype(np.float32)
    q1 = SAQQuantizer(bits=1, similarity="euclidean").fit(one)
    e1 = q1.estimate(one[:5], q1.encode(one))
    ex = (one[:5] - one.T) ** 2
    assert np.abs(e1 - ex).max() < 0.5 * ex.max()


def test_inputs_are_not_modified():
    X, Q = _data("cosine")
    Xc, Qc = X.copy(), Q.copy()
    q = SAQQuantizer(bits=2).fit(X)
    enc = q.encode(X)
    q.estimate(Q, enc, return_bounds=True)
    q.search(Q, enc, 3)
    np.testing.assert_array_equal(X, Xc)
    np.testing.assert_array_equal(Q, Qc)
    assert not enc.codes.flags.writeable


def test_bounds_and_error_sd():
    X, Q = _data("euclidean", n=500)
    q = SAQQuantizer(bits=2, similarity="euclidean").fit(X)
    enc = q.encode(X)
    est, lo, hi = q.estimate(Q, enc, return_bounds=True, eps0=1.9)
    sd = q.error_sd(Q, enc)
    np.testing.assert_allclose((hi - lo) / 2, 1.9 * sd, rtol=1e-5)
    exact = exact_raw(q.similarity_, Q, X.astype(np.float64))
    assert 0.8 < np.mean((lo <= exact) & (exact <= hi)) <= 1.0


def test_get_params_repr_and_state():
    q = SAQQuantizer(bits=1.5, similarity="euclidean", seed=4, block=64)
    assert q.get_params()["bits"] == 1.5 and "SAQQuantizer(bits=1.5" in repr(q)
    X, _ = _data("euclidean")
    q.fit(X)
    params, arrays = q.get_state()
    assert params["plan"]["segments"] and set(arrays) == {"mean", "frame", "rotations", "variances"}
    q2 = SAQQuantizer.from_state(params, arrays)
    assert q2.fingerprint_ == q.fingerprint_
    params["fingerprint"] = "0"
    with pytest.raises(ValueError, match="fingerprint"):
        SAQQuantizer.from_state(params, arrays)
    assert "SAQEncoding(1.5 bits/dim" in repr(q.encoding_)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"bits": 0.25}, "bits"),
        ({"bits": 9}, "bits"),
        ({"bits": "2"}, "bits"),
        ({"bits": True}, "bits"),
        ({"query_bits": 1}, "query_bits"),
        ({"query_bits": 4.0}, "query_bits"),
        ({"block": 48}, "block"),
        ({"rounds": -1}, "rounds"),
        ({"seed": -3}, "seed"),
        ({"max_segments": 0}, "max_segments"),
        ({"error_model": "mse"}, "error_model"),
        ({"similarity": "hamming"}, "similarity"),
    ],
)
def test_bad_parameters(kwargs, match):
    X, _ = _data("euclidean", n=50)
    with pytest.raises(ValueError, match=match):
        SAQQuantizer(**{"similarity": "euclidean", **kwargs}).fit(X)


def test_bad_calls():
    X, Q = _data("euclidean", n=100)
    q = SAQQuantizer(bits=2, similarity="euclidean")
    with pytest.raises(bbqlib.NotFittedError):
        q.encode(X)
    with pytest.raises(ValueError, match="at least 2"):
        q.fit(X[:1])
    q.fit(X)
    enc = q.encode(X)
    with pytest.raises(ValueError, match="dimension|shape|columns"):
        q.estimate(Q[:, :5], enc)
    with pytest.raises(ValueError, match="fingerprint"):
        SAQQuantizer(bits=3, similarity="euclidean").fit(X).estimate(Q, enc)
    with pytest.raises(TypeError):
        q.estimate(Q, enc.codes)
    with pytest.raises(ValueError, match="eps0"):
        q.estimate(Q, enc, return_bounds=True, eps0=-1)
    with pytest.raises(ValueError, match="k"):
        q.search(Q, enc, 0)
    bad = X.copy()
    bad[3, 2] = np.nan
    with pytest.raises(ValueError, match="X"):
        q.encode(bad)


def test_scorer_matches_estimate():
    X, Q = _data("euclidean")
    q = SAQQuantizer(bits=2, similarity="euclidean").fit(X)
    enc = q.encode(X)
    ids = np.array([5, 0, 399, 5], dtype=np.uint32)
    np.testing.assert_array_equal(q.scorer(Q[0], enc)(ids), q.estimate(Q[:1], enc)[0, ids])
    assert q.scorer(Q[0], enc)([]).shape == (0,)
    with pytest.raises(ValueError, match="one vector"):
        q.scorer(Q[:2], enc)
    with pytest.raises(ValueError, match="ids"):
        q.scorer(Q[0], enc)([400])


def test_scoring_is_the_base_routed_to_the_scanner():
    """One class, no mixins: ``estimate``, ``search``, ``topk_keys`` and ``scorer`` are the
    base quantizer's, which hand the work (and ``scan=``) to :class:`SAQScanner`; a family
    without scan options refuses ``scan=``."""
    from bbqlib.quantizers.base import Quantizer
    from bbqlib.quantizers.saq.scanner import SAQScanner

    assert SAQQuantizer.__bases__ == (Quantizer,)
    for name in ("estimate", "search", "topk_keys", "scorer"):
        assert name not in vars(SAQQuantizer)
    X, Q = _data("euclidean", n=300)
    q = SAQQuantizer(bits=2, similarity="euclidean").fit(X)
    enc = q.encode(X)
    scanner = q.scanner()
    assert isinstance(scanner, SAQScanner)
    np.testing.assert_array_equal(q.estimate(Q, enc), scanner.estimate(Q, enc))
    for scan in ("auto", "plain"):
        raw, ids = q.search(Q, enc, 7, scan=scan)
        keys, want = scanner.topk_keys(q._validated(Q, "Q"), enc, 7, scan=scan)
        np.testing.assert_array_equal(ids, want)
        np.testing.assert_array_equal(raw, -keys)
    with pytest.raises(ValueError, match="scan must be one of"):
        q.search(Q, enc, 3, scan="fast")
    bbq = bbqlib.BBQQuantizer(bits=1, similarity="euclidean").fit(X)
    with pytest.raises(TypeError):
        bbq.search(Q, bbq.encode(X), 3, scan="plain")


def test_public_api():
    assert "SAQQuantizer" in bbqlib.__all__ and bbqlib.SAQQuantizer is SAQQuantizer
