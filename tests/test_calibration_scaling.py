"""Calibration: SAQ's bit budgets in the search space, and the list density rule of sizing.

Small data keeps these to seconds; the measurements at 1M are benchmarks/calibration/calibrate.py.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import bbqlib
from bbqlib.calibration import SPACE, Calibrator
from bbqlib.calibration.density import MIN_LIST, entries_at
from bbqlib.calibration.sizing import entries_per_vector_at, flat_sizes, ivf_sizes
from bbqlib.calibration.space import FULL_SPACE, code_points

#: SAQ at three budgets and BBQ at 1 and 4 bits (no preconditioning).
SAQ_SMALL = (
    dataclasses.replace(SPACE[-1], budgets=(1.0, 2.0, 4.0)),
    dataclasses.replace(SPACE[0], preconditions=(None,), doc_bits=(1, 4)),
)


def _blobs(n, d, seed, clusters=25, spread=0.7):
    g = np.random.default_rng(seed)
    centres = g.standard_normal((clusters, d))
    X = centres[g.integers(0, clusters, n)] + spread * g.standard_normal((n, d))
    return X.astype(np.float32)


@pytest.fixture(scope="module")
def data():
    return _blobs(2500, 32, 0), _blobs(120, 32, 1)


# ----------------------------------------------------------------------------- SAQ
def test_saq_points_carry_their_budget():
    points = [p for p in code_points(SPACE, "flat") if p.encoding.family == "saq"]
    assert points and all(p.encoding.doc_bits == 0 and p.bits is not None for p in points)
    assert len({p.code_key for p in points}) == len({p.bits for p in points})
    with pytest.raises(ValueError, match="fitted plan"):
        points[0].code_bytes(64, False)
    full = [p for p in code_points(FULL_SPACE, "ivf") if p.encoding.family == "saq"]
    assert {p.encoding.query_bits for p in full} == {None, 4, 8}


@pytest.fixture(scope="module")
def saq_flat(data):
    X, Q = data
    cal = Calibrator(X, similarity="euclidean", space=SAQ_SMALL)
    return cal, cal.run(Q, k=10, target_recall=0.9)


def test_saq_bytes_are_the_fitted_plans(saq_flat, data, tmp_path):
    cal, rep = saq_flat
    X, _ = data
    saq = [c for c in rep.candidates if c.family == "saq"]
    assert saq, "the walk measured no SAQ point"
    for c in saq:
        q = bbqlib.SAQQuantizer(bits=c.bits, similarity="euclidean").fit(X)
        assert c.code_bytes == q.encoding_.doc_bytes(X.shape[1])
        assert c.segments == len(q.plan_.segments)
        assert c.encoding.bytes_per_vector(X.shape[1]) == q.encoding_.bytes_per_vector(32)
    c = saq[-1]
    index = c.build()
    index.add(X)
    size = index.save(tmp_path / "saq.bbq").stat().st_size
    disk, ram = flat_sizes(len(X), X.shape[1], c.encoding, True, c.store_vectors)
    assert abs(disk - size) <= 0.02 * size + 8192 and ram >= disk - 8192


def test_walk_with_saq_finds_the_grids_cheapest(saq_flat, data):
    cal, smart = saq_flat
    X, Q = data
    grid = cal.run(Q, k=10, target_recall=0.9, search="grid")
    assert smart.chosen is not None and grid.chosen is not None
    assert smart.chosen.bytes_per_vector == grid.chosen.bytes_per_vector
    # Budgets between the registry widths give SAQ byte counts the other families lack.
    assert len({c.bytes_per_vector for c in grid.candidates if c.family == "saq"}) >= 2


def test_saq_ivf_calibration_builds_what_it_measured(tmp_path):
    X, Q = _blobs(3000, 32, 2), _blobs(80, 32, 3)
    space = (dataclasses.replace(SPACE[-1], budgets=(2.0, 4.0)),)
    rep = bbqlib.calibrate(X, Q, similarity="cosine", k=10, target_recall=0.85, index="ivf",
                           space=space, cluster_size=64)  # fmt: skip
    c = rep.chosen
    assert c is not None and c.family == "saq" and c.index == "ivf"
    index = c.build(path=tmp_path / "ivf")
    index.add(X)
    assert index.quantizer.encoding_.doc_bytes(32) == c.code_bytes
    size = sum(f.stat().st_size for f in (tmp_path / "ivf").iterdir())
    disk, _ = ivf_sizes(len(X), 32, c.encoding, c.store_vectors, len(index._postings) / len(X),
                        len(X) / index.n_lists, is_l2=False)  # fmt: skip
    assert abs(disk - size) <= 0.05 * size
    assert "SAQQuantizer(bits=" in c.code()


# ----------------------------------------------------------------------------- density rule
def test_entries_per_vector_at_interpolates_in_log_n():
    c = bbqlib.calibration.Configuration(
        index="ivf", family="osq", bits=1, query_bits=4, precondition=None,
        store_vectors=False, oversample=None, visit_percentage=1.0, similarity="cosine",
        k=10, seed=0, cluster_size=384, dim=8, n_measured=1000, entries_per_vector=1.2,
        vectors_per_list=300.0, entries_at=((100_000, 1.6),),
    )  # fmt: skip
    assert entries_per_vector_at(c, 500) == 1.2
    assert entries_per_vector_at(c, 1000) == 1.2
    assert entries_per_vector_at(c, 10_000) == pytest.approx(1.4)  # half way in log n
    assert entries_per_vector_at(c, 100_000) == 1.6
    assert entries_per_vector_at(c, 10**7) == 1.6  # held, not extrapolated
    plain = dataclasses.replace(c, entries_at=())
    big, small = bbqlib.sizing(100_000, None, c), bbqlib.sizing(100_000, None, plain)
    assert big.disk_bytes > small.disk_bytes and big.ram_bytes > small.ram_bytes


def test_density_rule_predicts_the_spills_of_a_larger_build():
    X = _blobs(24_000, 16, 5, clusters=60, spread=0.5)
    cs = 64
    full = bbqlib.IVFIndex(bits=1, similarity="euclidean", cluster_size=cs, seed=0)
    full.add(X)
    truth = len(full._postings) / len(X)
    sub = X[np.random.default_rng(0).choice(len(X), 6000, replace=False)]
    small = bbqlib.IVFIndex(bits=1, similarity="euclidean", cluster_size=cs, seed=0)
    small.add(sub)
    plain = len(small._postings) / len(sub)
    n_eq, ruled = entries_at(sub, len(X), cs)
    assert n_eq == len(X)  # a per-list target of 16 = MIN_LIST
    assert abs(ruled - truth) < abs(plain - truth)
    assert abs(ruled - truth) <= 0.05 * truth
    far, _ = entries_at(sub, 10 * len(X), cs)  # below MIN_LIST: measured at MIN_LIST
    assert far == round(len(sub) * cs / MIN_LIST)
    assert entries_at(sub, len(X), cs, soar=False) == (len(X), 1.0)
    with pytest.raises(ValueError, match="n must exceed"):
        entries_at(sub, 100, cs)


def test_calibrating_for_a_larger_n_measures_its_list_density():
    X, Q = _blobs(3000, 16, 6), _blobs(60, 16, 7)
    space = (dataclasses.replace(SPACE[0], preconditions=(None,), doc_bits=(4,)),)
    rep = bbqlib.calibrate(X, Q, similarity="euclidean", k=10, target_recall=0.8, index="ivf",
                           space=space, cluster_size=64, n=12_000)  # fmt: skip
    c = rep.chosen
    assert c is not None and len(c.entries_at) == 1 and c.entries_at[0][0] == 12_000
    assert 1.0 <= c.entries_at[0][1] <= 2.0
    size = c.sizing(12_000)
    plain = dataclasses.replace(c, entries_at=()).sizing(12_000)
    ratio = (c.entries_at[0][1] + 0.0) / c.entries_per_vector
    assert (size.disk_bytes > plain.disk_bytes) == (ratio > 1.0)
    assert rep.sizes[rep.candidates.index(c)] == size
