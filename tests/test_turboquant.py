"""TurboQuant (``bbqlib.TurboQuantQuantizer``): the codebook against the paper's distortion,
the packed codes, the compiled scans against their NumPy twins (``tests/reference``), the
prod variant's unbiased inner products, recall, indexes, files and sizes."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from reference import turboquant as ref

import bbqlib
from bbqlib.calibration.record import Configuration
from bbqlib.encoding import ENCODINGS
from bbqlib.quantizers.turboquant import kernels as K
from bbqlib.quantizers.turboquant.codebook import (
    QJL_VALUES,
    lloyd_max_codebook,
    lut_tables,
    lut_width,
    pack_codes,
    unpack_codes,
)
from bbqlib.quantizers.turboquant.encoding import groups_of

WIDTHS = [("mse", b) for b in range(1, 9)] + [("prod", b) for b in range(2, 9)]
SIMILARITIES = ["euclidean", "cosine", "max_inner_product"]


def _unit(n, d, seed):
    X = np.random.default_rng(seed).normal(size=(n, d))
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


# -- the codebook ----------------------------------------------------------------------------


@pytest.mark.parametrize("bits, paper", [(1, 0.36), (2, 0.117), (3, 0.03), (4, 0.009)])
def test_mse_distortion_is_the_papers(bits, paper):
    """``E‖x - x̂‖²`` of unit vectors (the paper's Table/Theorem 1 figures at b = 1..4)."""
    X = _unit(2000, 384, seed=bits)
    q = bbqlib.TurboQuantQuantizer(bits=bits, similarity="dot_product", seed=0).fit(X)
    enc = q.encode(X)
    codes = unpack_codes(enc.codes, bits, 384)
    xhat = q.codebook_[codes] * enc.corrections["norm"][:, None]
    mse = np.mean(np.sum((q._rotated(X) - xhat) ** 2, axis=1))
    assert abs(mse - paper) <= 0.15 * paper


@pytest.mark.parametrize("bits", range(1, 9))
def test_codebook_is_symmetric_sorted_and_lloyd_stable(bits):
    c = lloyd_max_codebook(384, bits)
    assert c.shape == (2**bits,) and np.all(np.diff(c) > 0)
    np.testing.assert_allclose(c, -c[::-1], atol=1e-12)
    # a Lloyd fixed point: each centroid is the mean of its cell (Monte Carlo, loosely)
    x = _unit(4000, 384, seed=bits).ravel().astype(np.float64)
    cell = np.searchsorted(0.5 * (c[:-1] + c[1:]), x, side="right")
    for k in np.unique(cell[np.bincount(cell)[cell] > 2000]):
        assert abs(x[cell == k].mean() - c[k]) < 0.05 * (c[1] - c[0]) + 1e-3


def test_distortion_falls_four_fold_per_bit():
    """The paper's ``≈ 4^-b`` law holds from 4 to 8 bits (within a factor of 1.5)."""
    x = _unit(3000, 256, seed=1).ravel().astype(np.float64)
    errs = []
    for bits in (4, 5, 6, 7, 8):
        c = lloyd_max_codebook(256, bits)
        k = np.searchsorted(0.5 * (c[:-1] + c[1:]), x, side="right")
        errs.append(np.mean((x - c[k]) ** 2) * 256)
    ratios = np.array(errs[:-1]) / np.array(errs[1:])
    assert np.all((ratios > 4 / 1.5) & (ratios < 4 * 1.5)), ratios


# -- packing and the scans against the reference ----------------------------------------------


@pytest.mark.parametrize("bits", range(1, 9))
@pytest.mark.parametrize("dim", [1, 7, 8, 13, 64])
def test_pack_round_trip(bits, dim):
    codes = np.random.default_rng(dim).integers(0, 2**bits, size=(9, dim)).astype(np.uint8)
    packed = pack_codes(codes, bits, groups_of(dim))
    assert packed.shape == (9, bits * groups_of(dim))
    np.testing.assert_array_equal(unpack_codes(packed, bits, dim), codes)
    for i in range(3):
        np.testing.assert_array_equal(ref.unpack_row(packed[i], 0, bits, dim), codes[i])


def _case(bits, prod, dim, n, seed, kind="random"):
    """Codes, factor rows, queries and tables of one kernel check."""
    rng = np.random.default_rng(seed)
    groups = groups_of(dim)
    values = np.sort(rng.normal(size=2**bits)) / np.sqrt(dim)
    if kind == "random":
        k = rng.integers(0, 2**bits, size=(n, dim))
        z = rng.integers(0, 2, size=(n, dim))
    elif kind == "zeros":
        k, z = np.zeros((n, dim), int), np.zeros((n, dim), int)
    else:  # every code at its largest value, every sign +
        k, z = np.full((n, dim), 2**bits - 1), np.ones((n, dim), int)
    parts = [pack_codes(k.astype(np.uint8), bits, groups)]
    if prod:
        parts.append(pack_codes(z.astype(np.uint8), 1, groups))
    codes = np.ascontiguousarray(np.concatenate(parts, axis=1))
    f = rng.uniform(0.1, 3.0, size=(n, 4)).astype(np.float32)
    f[:, 3] = 0
    if kind == "zeros":
        f[: n // 2, :3] = 0  # zero vectors among them
    Y = rng.normal(size=(3, dim))
    if kind != "random":
        Y[0] = 1e3  # large, same-sign queries
    SY = rng.normal(size=(3, dim))
    tm = lut_tables(Y, values, bits, groups)
    tq = lut_tables(SY, QJL_VALUES, 1, groups) if prod else np.zeros((3, 1, 1), np.float32)
    # the reference reads the tables' float32 rounding of y c[k] through exact sums
    return codes, f, Y, SY, values, tm, tq, (bits, lut_width(bits), groups, prod)


@pytest.mark.parametrize("kind", ["random", "zeros", "top"])
@pytest.mark.parametrize("variant, bits", WIDTHS)
@pytest.mark.parametrize("dim", [5, 24, 67])
def test_estimate_kernel_matches_reference(variant, bits, dim, kind):
    prod = variant == "prod"
    mse_bits = bits - prod
    codes, f, Y, SY, values, tm, tq, args = _case(mse_bits, prod, dim, 40, bits * dim, kind)
    add = np.array([0.5, 1.0, 2.0])
    for is_l2 in (False, True):
        out = np.empty((3, len(codes)))
        K.estimate_rows(tm, tq, add, codes, f, *args, is_l2, out)
        key = ref.keys(ref.dots(Y, SY, codes, f, values, mse_bits, prod), f, add, is_l2)
        want = -key if is_l2 else key
        scale = np.abs(Y).sum(1)[:, None] * np.abs(values).max() * 3 + np.abs(SY).sum(1)[:, None]
        assert np.all(np.abs(out - want) <= 2e-6 * scale * 3 + 1e-9)


@pytest.mark.parametrize("variant, bits", [("mse", 1), ("mse", 3), ("mse", 8), ("prod", 2),
                                           ("prod", 5)])  # fmt: skip
def test_flat_and_list_scans_match_reference(variant, bits):
    prod = variant == "prod"
    mse_bits = bits - prod
    n = 700
    codes, f, Y, SY, values, tm, tq, args = _case(mse_bits, prod, 29, n, bits)
    add = np.array([0.0, 1.0, -2.0])
    allowed = (np.random.default_rng(3).random(n) < 0.7).astype(np.uint8)
    for is_l2 in (False, True):
        key = ref.keys(ref.dots(Y, SY, codes, f, values, mse_bits, prod), f, add, is_l2)
        for chunks in (1, 3):
            keys = np.full((chunks, 3, 10), -np.inf)
            ids = np.full((chunks, 3, 10), np.iinfo(np.int64).max, dtype=np.int64)
            K.scan_flat(tm, tq, add, codes, f, *args, is_l2, allowed, np.int64(5), keys, ids)
            flat_k = keys.transpose(1, 0, 2).reshape(3, -1)
            flat_i = ids.transpose(1, 0, 2).reshape(3, -1)
            order = np.argsort(-flat_k, axis=1, kind="stable")[:, :10]
            got = np.take_along_axis(flat_k, order, axis=1)
            want_k, _ = ref.topk(key, 10, allowed.astype(bool), id_base=5)
            # float32 table entries against exact sums: agreement to float32 rounding
            np.testing.assert_allclose(got, want_k, rtol=1e-6)
            got_i = np.take_along_axis(flat_i, order, axis=1) - 5
            assert allowed[got_i].all()
            np.testing.assert_allclose(np.take_along_axis(key, got_i, axis=1), got, rtol=1e-6)
        # lists: entries 0..349 and 350..699 with ids reversed, each query visits both
        list_start = np.array([0, 350, n], dtype=np.int64)
        entry_ids = np.arange(n)[::-1].copy()
        pair_list = np.array([0, 1, 1, 0, 1], dtype=np.int64)
        pair_start = np.array([0, 2, 3, 5], dtype=np.int64)
        pair_add = np.array([0.5, 0.5, -1.0, 2.0, 2.0])
        keys = np.full((3, 10), -np.inf)
        ids = np.full((3, 10), np.iinfo(np.int64).max, dtype=np.int64)
        K.scan_lists(tm, tq, pair_add, pair_list, pair_start, list_start, codes, f, entry_ids,
                     *args, is_l2, np.empty(0, np.uint8), keys, ids)  # fmt: skip
        for q in range(3):
            full = []
            for p in range(pair_start[q], pair_start[q + 1]):
                lst = pair_list[p]
                rows = np.arange(list_start[lst], list_start[lst + 1])
                dot = ref.dots(Y[q : q + 1], SY[q : q + 1], codes[rows], f[rows], values,
                               mse_bits, prod)  # fmt: skip
                full += list(ref.keys(dot, f[rows], [pair_add[p]], is_l2)[0])
            want = np.sort(full)[::-1][:10]
            np.testing.assert_allclose(np.sort(keys[q])[::-1], want, rtol=1e-6)


# -- the estimator ----------------------------------------------------------------------------


def _clustered_unit(n, d, seed):
    """Unit vectors around 40 random directions: near pairs (inner product above 0.5), where
    a biased estimator (the MSE codes' shrinkage toward 0) shows, in many directions (so the
    errors of one fit are not all the error along one direction)."""
    rng = np.random.default_rng(seed)
    C = rng.normal(size=(40, d))
    C /= np.linalg.norm(C, axis=1, keepdims=True)
    X = C[rng.integers(0, 40, size=n)] + 0.6 * rng.normal(size=(n, d)) / np.sqrt(d)
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


def _mean_errors(variant, bits, seeds):
    """Mean error (estimate - truth) over 100 queries x 2,000 vectors (all pairs, and the
    near ones) for one fit per seed: ``(all [fits], near [fits])``."""
    X = _clustered_unit(2100, 128, seed=11)
    Q, X = X[:100], X[100:]
    truth = Q.astype(np.float64) @ X.T.astype(np.float64)
    near = truth > 0.5
    out = []
    for seed in seeds:
        q = bbqlib.TurboQuantQuantizer(bits=bits, variant=variant, similarity="dot_product",
                                       seed=seed).fit(X)  # fmt: skip
        err = q.estimate(Q, q.encode(X)).astype(np.float64) - truth
        out.append((err.mean(), err[near].mean()))
    return np.array(out).T


#: Two-sided 99.9% t quantile at 11 degrees of freedom (12 fits).
T_999_11 = 4.437


@pytest.mark.parametrize("bits", [2, 3, 5])
def test_prod_inner_products_are_unbiased(bits):
    """The prod estimator is unbiased over the rotation and the QJL matrix: over 12 fits
    (seeds 0-11) the mean error's 99.9% confidence interval (t, from the fits' sample std)
    covers 0, over all pairs and over the near pairs; the MSE code at the same bits lies far
    outside that interval on the near pairs (shrinkage toward 0)."""
    seeds = range(12)
    half = {}
    for name, means in zip(("all", "near"), _mean_errors("prod", bits, seeds), strict=True):
        half[name] = T_999_11 * means.std(ddof=1) / np.sqrt(len(means))
        assert abs(means.mean()) <= half[name], (name, means.mean(), half[name])
    if bits <= 3:
        _, mse_near = _mean_errors("mse", bits, seeds[:3])
        assert mse_near.mean() < -5 * half["near"], (mse_near.mean(), half["near"])


# -- indexes, files, sizes --------------------------------------------------------------------


@pytest.mark.parametrize("variant, bits, floor", [("mse", 1, 0.63), ("mse", 2, 0.76),
                                                  ("mse", 4, 0.9), ("prod", 3, 0.73),
                                                  ("prod", 5, 0.9)])  # fmt: skip
def test_recall_on_the_bundled_sample(variant, bits, floor):
    """recall@10 of 100 sample queries, without rerank (measured 0.683, 0.812, 0.935, 0.783,
    0.940 with seed 0) and with a 3x rerank (0.93 and above)."""
    from bbqlib.analysis import recall_at_k
    from bbqlib.datasets import load_demo_sample

    s = load_demo_sample()
    X, Q = s["base"], s["queries"][:100]
    truth = np.argsort(-(Q @ X.T), axis=1, kind="stable")[:, :10]
    index = bbqlib.FlatIndex(bbqlib.TurboQuantQuantizer(bits=bits, variant=variant, seed=0))
    index.add(X)
    assert recall_at_k(index.search(Q, 10, rerank=False)[1], truth, 10) >= floor
    assert recall_at_k(index.search(Q, 10, oversample=3)[1], truth, 10) >= 0.9


@pytest.mark.parametrize("variant, bits", [("mse", 3), ("prod", 4)])
@pytest.mark.parametrize("similarity", SIMILARITIES)
def test_indexes_files_and_pickles(variant, bits, similarity, make_vectors, tmp_path):
    X = make_vectors(800, 40, kind="wide" if similarity != "cosine" else "clustered", seed=2)
    Q = np.concatenate([X[:5] * 1.01, make_vectors(5, 40, seed=3)])
    make = lambda: bbqlib.TurboQuantQuantizer(bits=bits, variant=variant,  # noqa: E731
                                              similarity=similarity, seed=1)  # fmt: skip
    flat = bbqlib.FlatIndex(make())
    flat.add(X)
    ivf = bbqlib.IVFIndex(make(), cluster_size=64, visit_percentage=100.0)
    ivf.add(X)
    X64, Q64 = X.astype(np.float64), Q.astype(np.float64)
    if similarity == "euclidean":
        key = -((Q64[:, None, :] - X64[None]) ** 2).sum(-1)
    elif similarity == "cosine":
        key = (Q64 / np.linalg.norm(Q64, axis=1, keepdims=True)) @ X64.T
        key /= np.linalg.norm(X64, axis=1)
    else:
        key = Q64 @ X64.T
    truth = np.argsort(-key, axis=1, kind="stable")[:, :10]
    for index in (flat, ivf):  # every list visited: the IVF finds what the flat index finds
        ids = index.search(Q, 10, oversample=3)[1]
        assert np.mean([len(set(a) & set(b)) for a, b in zip(ids, truth, strict=True)]) >= 9
    flat.save(tmp_path / "flat.bbq")
    ivf.save(tmp_path / "ivf")
    for index, path in ((flat, tmp_path / "flat.bbq"), (ivf, tmp_path / "ivf")):
        loaded = bbqlib.load(path)
        for other in (loaded, pickle.loads(pickle.dumps(index))):
            for rerank in (True, False):
                a, b = index.search(Q, 10, rerank=rerank), other.search(Q, 10, rerank=rerank)
                np.testing.assert_array_equal(a[1], b[1])
                np.testing.assert_array_equal(a[0], b[0])
    q = flat.quantizer
    params, arrays = q.get_state()
    assert params["variant"] == variant and ("qjl" in arrays) == (variant == "prod")


@pytest.mark.parametrize("variant, bits", WIDTHS)
def test_bytes_per_vector_and_sizing(variant, bits):
    X = _unit(50, 384, seed=0)
    q = bbqlib.TurboQuantQuantizer(bits=bits, variant=variant, seed=0).fit(X)
    enc = q.encode(X)
    want = bits * 48 + (8 if variant == "prod" else 4)
    assert q.bytes_per_vector == enc.bytes_per_vector == want
    assert q.encoding_ is ENCODINGS.from_wire(q.encoding_.wire)
    config = Configuration(index="flat", family=q.encoding_.family, bits=bits, query_bits=None,
                           precondition=None, store_vectors=None, oversample=None,
                           visit_percentage=None, similarity="cosine", k=10, seed=0,
                           dim=384)  # fmt: skip
    assert bbqlib.sizing(100_000, 384, config).bytes_per_vector == pytest.approx(want, abs=1)


def test_scorer_and_estimate_agree(make_vectors):
    X = make_vectors(300, 24, kind="wide", seed=4)
    q = bbqlib.TurboQuantQuantizer(bits=3, variant="prod", similarity="euclidean",
                                   seed=2).fit(X)  # fmt: skip
    enc = q.encode(X)
    est = q.estimate(X[:2], enc)
    ids = np.array([5, 0, 299, 5])
    np.testing.assert_array_equal(q.scorer(X[1], enc)(ids), est[1, ids])
    raw, top = q.search(X[:2], enc, 5)
    np.testing.assert_allclose(raw, np.take_along_axis(est, top, axis=1), rtol=1e-6)


@pytest.mark.parametrize("kwargs, match", [
    ({"bits": 9}, "bits must be one of"),
    ({"bits": 1, "variant": "prod"}, "bits must be one of"),
    ({"variant": "ip"}, "variant must be"),
    ({"seed": "x"}, "seed"),
])  # fmt: skip
def test_bad_parameters(kwargs, match):
    with pytest.raises(ValueError, match=match):
        bbqlib.TurboQuantQuantizer(**kwargs).fit(_unit(20, 16, seed=0))
