"""Calibration (bbqlib.calibrate, bbqlib.calibration): the choice, its record, sizing, the CLI.

Small data and a small search space keep these tests to seconds; the full space on real
data is benchmarks/calibration/calibrate.py.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from paths import ROOT

import bbqlib
from bbqlib.analysis.ground_truth import exact_knn
from bbqlib.calibration import SPACE, CalibrationReport, Calibrator, Configuration
from bbqlib.calibration.measure import bootstrap_bounds
from bbqlib.calibration.parts import flat_from_parts, ivf_coverage, ivf_recoded, ivf_variant
from bbqlib.calibration.sizing import flat_sizes, ivf_sizes
from bbqlib.calibration.space import SAQ_BUDGETS, code_points

#: BBQ at 1 and 4 bits (no preconditioning) and int8 per_dim: enough to exercise every path.
SMALL = (
    dataclasses.replace(SPACE[0], preconditions=(None,), doc_bits=(1, 4)),
    SPACE[2],
)


def _blobs(n, d, seed, clusters=25):
    g = np.random.default_rng(seed)
    centres = g.standard_normal((clusters, d))
    X = centres[g.integers(0, clusters, n)] + 0.7 * g.standard_normal((n, d))
    return X.astype(np.float32)


@pytest.fixture(scope="module")
def data():
    return _blobs(2500, 24, 0), _blobs(120, 24, 1)


def _recall(ids, gt, k):
    return float(np.mean([len(set(a[:k]) & set(b[:k])) / k for a, b in zip(ids, gt, strict=True)]))


# ----------------------------------------------------------------------------- the choice
@pytest.fixture(scope="module")
def flat_report(data):
    X, Q = data
    return bbqlib.calibrate(X, Q, similarity="euclidean", k=10, target_recall=0.9, space=SMALL)


def test_chosen_meets_the_target_and_nothing_cheaper_does(flat_report):
    r = flat_report
    assert isinstance(r, CalibrationReport) and r.chosen is not None
    assert r.chosen.recall_low >= 0.9
    assert r.chosen.recall_ci[0] <= r.chosen.recall <= r.chosen.recall_ci[1]
    assert r.chosen.recall_low <= r.chosen.recall
    meeting = [c for c in r.candidates if c.recall_low >= 0.9]
    assert min(c.bytes_per_vector for c in meeting) == r.chosen.bytes_per_vector
    same = [c for c in meeting if c.bytes_per_vector == r.chosen.bytes_per_vector]
    assert r.chosen in same
    assert r.seconds > 0 and r.timings["ground_truth"] >= 0


def test_smart_walk_finds_the_grids_cheapest(data):
    X, Q = data
    cal = Calibrator(X, similarity="euclidean", space=SMALL)
    smart = cal.run(Q, k=10, target_recall=0.9)
    grid = cal.run(Q, k=10, target_recall=0.9, search="grid")
    assert grid.search == "grid" and len(grid.candidates) >= len(smart.candidates)
    assert smart.chosen.bytes_per_vector == grid.chosen.bytes_per_vector
    # The grid stops after the first bytes group that meets the target: the same answer as
    # measuring every group (measurements are remembered, so the full grid costs little here).
    full = cal.run(Q, k=10, target_recall=0.9, search="full-grid")
    assert len(full.candidates) > len(grid.candidates)
    assert max(c.bytes_per_vector for c in grid.candidates) <= grid.chosen.bytes_per_vector
    assert full.chosen.bytes_per_vector == grid.chosen.bytes_per_vector


def test_chosen_builds_the_index_it_measured(flat_report, data):
    X, Q = data
    c = flat_report.chosen
    index = flat_report.build()
    assert isinstance(index, bbqlib.FlatIndex)
    assert index.store_vectors == c.store_vectors and index.oversample == c.oversample
    index.add(X)
    _, gt = exact_knn(X, Q, 10, "l2", scores_first=True)
    got = _recall(index.search(Q, 10)[1], gt, 10)  # the defaults are the calibrated ones
    assert abs(got - c.recall) <= 0.02  # the same vectors, queries and seeds
    namespace = {"X": X, "queries": Q}
    exec(c.code(), namespace)  # the snippet runs as printed
    np.testing.assert_array_equal(namespace["ids"], index.search(Q, 10)[1])


def test_report_prints_a_table_and_the_code(flat_report):
    text = repr(flat_report)
    assert "recall@10" in text and "<- chosen" in text and "index.add(X)" in text
    assert flat_report.table("markdown").startswith("| index |")
    assert flat_report.chosen in flat_report.pareto()


def test_constraints_shape_the_choice(data):
    X, Q = data
    r = bbqlib.calibrate(X, Q, similarity="euclidean", target_recall=0.9, space=SMALL,
                         max_bytes_per_vector=20)  # fmt: skip
    assert r.chosen is None and all(c.bytes_per_vector <= 20 for c in r.candidates)
    with pytest.raises(ValueError, match="no configuration met"):
        r.build()
    assert "none meets the target" in repr(r)


def test_screen_on_a_subsample_drops_points_before_their_full_measure(data):
    X, Q = data
    cal = Calibrator(X, similarity="euclidean", space=SMALL, screen=800)
    r = cal.run(Q, k=10, target_recall=0.9)
    assert {c.n_measured for c in r.candidates} == {800, len(X)}
    assert r.chosen.n_measured == len(X) and r.chosen.recall_low >= 0.9
    assert "n measured" in r.table() and r.timings["flat screen"] > 0
    full = [c for c in r.candidates if c.n_measured == len(X)]
    assert len(full) < len(Calibrator(X, similarity="euclidean", space=SMALL).run(Q).candidates)


def test_queries_seen_before_are_not_searched_again(data, flat_report):
    X, Q = data
    cal = Calibrator(X, similarity="euclidean", space=SMALL)
    cal.run(Q[:80], k=10, target_recall=0.9)
    searched = cal.engines["flat"].timings["search"]
    again = cal.run(Q[40:], k=10, target_recall=0.9)  # half of these were searched already
    assert cal.engines["flat"].timings["search"] > searched  # the new half is searched
    cal.run(Q[:80], k=10, target_recall=0.9)
    before = cal.engines["flat"].timings["search"]
    repeat = cal.run(Q, k=10, target_recall=0.9)  # every query seen: nothing is searched
    assert cal.engines["flat"].timings["search"] == before
    by_label = {c.label(): c for c in flat_report.candidates}
    for c in repeat.candidates:  # the same recalls as a fresh calibration on Q
        if c.label() in by_label:
            assert c.recall == pytest.approx(by_label[c.label()].recall, abs=1e-12)
    assert again.chosen is not None


def test_queries_sampled_from_x_are_held_out(data):
    X, _ = data
    r = bbqlib.calibrate(X, similarity="cosine", k=5, target_recall=0.8, space=SMALL[:1],
                         n_queries=50)  # fmt: skip
    assert r.chosen.n_queries == 50 and r.chosen.n_measured == len(X) - 50
    assert r.n == len(X)


def test_bad_arguments_name_the_parameter(data):
    X, Q = data
    with pytest.raises(ValueError, match="index must be one of"):
        bbqlib.calibrate(X, Q, similarity="cosine", index="hnsw")
    with pytest.raises(ValueError, match="target_recall"):
        bbqlib.calibrate(X, Q, similarity="cosine", target_recall=1.5)
    with pytest.raises(ValueError, match="ground_truth"):
        bbqlib.calibrate(X, Q, similarity="cosine", ground_truth=np.zeros((3, 10), np.int64))
    with pytest.raises(ValueError, match="search"):
        bbqlib.calibrate(X, Q, similarity="cosine", search="random")


# ----------------------------------------------------------------------------- IVF
@pytest.fixture(scope="module")
def ivf_data():
    return _blobs(4000, 24, 2), _blobs(100, 24, 3)


def test_ivf_calibration_chooses_a_visit_budget(ivf_data):
    X, Q = ivf_data
    r = bbqlib.calibrate(X, Q, similarity="cosine", k=10, target_recall=0.9, index="ivf",
                         space=SMALL[:1], cluster_size=64)  # fmt: skip
    c = r.chosen
    assert c is not None and c.index == "ivf" and c.visit_percentage is not None
    assert c.recall_low >= 0.9 and c.entries_per_vector >= 1.0 and c.vectors_per_list > 0
    index = r.build()
    assert isinstance(index, bbqlib.IVFIndex) and index.visit_percentage == c.visit_percentage
    index.add(X)
    _, gt = exact_knn(X, Q, 10, "cosine", scores_first=True)
    assert abs(_recall(index.search(Q, 10)[1], gt, 10) - c.recall) <= 0.03


def test_auto_measures_both_indexes(data):
    X, Q = data
    r = bbqlib.calibrate(X[:1500], Q, similarity="euclidean", target_recall=0.85,
                         index="auto", space=SMALL[:1], cluster_size=64)  # fmt: skip
    assert {c.index for c in r.candidates} == {"flat", "ivf"}
    assert r.chosen is not None


# ----------------------------------------------------------------------------- shared parts
def test_recoded_lists_search_as_a_fresh_build(ivf_data):
    X, Q = ivf_data
    ref = bbqlib.IVFIndex(bits=1, similarity="cosine", cluster_size=64, seed=4)
    ref.add(X)

    def make():
        return bbqlib.BBQQuantizer(bits=2, similarity="cosine", precondition="hadamard", seed=1)

    direct = bbqlib.IVFIndex(make(), cluster_size=64, seed=4, store_vectors=False)
    direct.add(X)
    rec = ivf_recoded(ref, make(), X)
    rec = ivf_variant(rec, store_vectors=False)
    kw = {"visit_percentage": 20.0, "oversample": 3.0}
    np.testing.assert_array_equal(rec.search(Q, 10, visit_percentage=20.0)[1],
                                  direct.search(Q, 10, visit_percentage=20.0)[1])  # fmt: skip
    _, gt = exact_knn(X, Q, 10, "cosine", scores_first=True)
    cov = ivf_coverage(rec, Q, gt, 20.0, 30)
    exact = ivf_variant(rec, store_vectors="float32", vectors=ref._segments[0].array)
    per_query = [len(set(a) & set(b)) / 10 for a, b in zip(exact.search(Q, 10, **kw)[1], gt,
                                                           strict=True)]  # fmt: skip
    assert np.all(np.asarray(per_query) <= cov + 1e-12)  # coverage bounds recall, per query


def test_flat_from_parts_is_a_flat_index(data):
    X, Q = data
    q = bbqlib.BBQQuantizer(bits=2, similarity="euclidean").fit(X)
    enc = q.encode(X)
    a = flat_from_parts(q.with_query_bits(None), enc, X, "float32", oversample=2.0)
    b = bbqlib.FlatIndex(bbqlib.BBQQuantizer(bits=2, query_bits=None, similarity="euclidean"))
    b.add(X)
    np.testing.assert_array_equal(a.search(Q, 5)[1], b.search(Q, 5, oversample=2.0)[1])


# ----------------------------------------------------------------------------- sizing
def test_sizing_matches_saved_files(data, tmp_path):
    X, _ = data
    n, d = X.shape
    for bits, store in ((1, "int8"), (7, False), (4, "float16")):
        index = bbqlib.FlatIndex(bits=bits, similarity="euclidean", store_vectors=store)
        index.add(X)
        size = index.save(tmp_path / f"{bits}.bbq").stat().st_size
        disk, ram = flat_sizes(n, d, index.quantizer.encoding_, True, store)
        assert abs(disk - size) <= 0.02 * size + 8192
        assert ram >= disk - 8192
    for store in ("float32", "float16", "int8"):  # IVF format 6 keeps every kind
        ivf = bbqlib.IVFIndex(bits=2, similarity="euclidean", cluster_size=64, store_vectors=store)
        ivf.add(X)
        ivf.save(tmp_path / f"ivf-{store}")
        size = sum(f.stat().st_size for f in (tmp_path / f"ivf-{store}").iterdir())
        per_entry, per_list = len(ivf._postings) / n, n / ivf.n_lists
        disk, _ = ivf_sizes(n, d, ivf.encoding_, store, per_entry, per_list)
        assert abs(disk - size) <= 0.05 * size, store


def test_sizing_scales_a_measured_configuration(flat_report):
    c = flat_report.chosen
    small, big = bbqlib.sizing(10_000, None, c), bbqlib.sizing(1_000_000, None, c)
    assert big.disk_bytes > 90 * small.disk_bytes and big.ram_bytes >= big.disk_bytes - 8192
    assert big.latency_ms == pytest.approx(c.latency_ms * 1_000_000 / c.n_measured)
    assert c.sizing().n == c.n_measured and "RAM" in repr(big)
    with pytest.raises(TypeError, match="Configuration"):
        bbqlib.sizing(10, 4, {"bits": 1})
    with pytest.raises(ValueError, match="n must be"):
        bbqlib.sizing(0, None, c)


def test_configuration_is_frozen(flat_report):
    with pytest.raises(dataclasses.FrozenInstanceError):
        flat_report.chosen.bits = 3
    assert isinstance(flat_report.chosen, Configuration)


# ----------------------------------------------------------------------------- pieces
def test_bootstrap_bounds():
    r = np.random.default_rng(0).binomial(10, 0.9, size=200) / 10
    low, (a, b) = bootstrap_bounds(r)
    assert a <= low <= r.mean() <= b
    se = r.std() / np.sqrt(r.size)  # the normal approximation the bootstrap should match
    assert abs((r.mean() - low) - 1.645 * se) <= 0.3 * 1.645 * se
    assert bootstrap_bounds(np.ones(50)) == (1.0, (1.0, 1.0))


def test_space_rows_come_from_the_registry():
    points = code_points(SPACE, "ivf")
    families = {
        "osq",
        "rabitq",
        "int8_per_dim",
        "int8_global",
        "saq",
        "turboquant",
        "turboquant_prod",
    }
    assert {p.encoding.family for p in points} == families
    assert all(p.encoding in bbqlib.ENCODINGS.rows(p.encoding.family, index="ivf")
               for p in points)  # fmt: skip
    assert {p.bits for p in points if p.encoding.family == "saq"} == set(SAQ_BUDGETS)
    assert {p.store for p in points} == {False, "int8", "float16", "float32"}


def test_plot_draws_the_front(flat_report):
    pytest.importorskip("matplotlib")
    import matplotlib

    matplotlib.use("Agg")
    ax = flat_report.plot()
    assert ax.get_xlabel() == "bytes per vector"


def test_cli_calibrate(tmp_path, capsys, data):
    from bbqlib.cli import main

    X, _ = data
    np.save(tmp_path / "base.npy", X[:800])
    code = main(["calibrate", "--data", str(tmp_path / "base.npy"), "--similarity",
                 "euclidean", "--target-recall", "0.5", "--k", "5", "--quiet"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0 and "chosen:" in out and "bbqlib.FlatIndex(" in out


def test_calibration_loads_on_first_use():
    import subprocess
    import sys

    code = (
        "import sys, bbqlib; a = 'bbqlib.calibration' in sys.modules; f = bbqlib.calibrate; "
        "print(a, 'bbqlib.calibration' in sys.modules, f is bbqlib.calibration.calibrate)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True", "True"]


def test_results_render_keeps_rows_it_did_not_measure():
    """benchmarks/calibration/render.py's carry-over: a re-render replaces the rows it measured,
    keeps the committed rows of other data sets (keyed tables) and the tables it lacks."""
    import importlib.util

    path = ROOT / "benchmarks" / "calibration" / "render.py"
    spec = importlib.util.spec_from_file_location("calibration_render", path)
    render = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(render)
    head = "| data / index | chosen |\n|---|---|\n"
    old = (
        "# t\n\n### Smart walk against the exhaustive grid (x)\n\n" + head
        + "| a flat | old |\n| b ivf (untimed, nice 19) | old |\n\n"
        "### Sizing at 1M (c)\n\n| index | r |\n|---|---|\n| ivf | 1 |\n\n## Notes\n\n- n\n"
    )  # fmt: skip
    new = ["### Smart walk against the exhaustive grid (x)\n\n" + head + "| b ivf | new |",
           "### The 1M calibration's candidates\n\n| n |\n|---|\n| 1 |"]  # fmt: skip
    out = render.carry_over(new, old)
    assert out[0].splitlines()[-2:] == ["| b ivf | new |", "| a flat | old |"]
    assert out[1] == "### Sizing at 1M (c)\n\n| index | r |\n|---|---|\n| ivf | 1 |"
    assert out[2].startswith("### The 1M calibration's candidates")
    assert len(out) == 3
    # a table whose heading names another configuration replaces the committed one in place
    out = render.carry_over(["### Sizing at 1M (d)\n\n| index | r |\n|---|---|\n| ivf | 2 |"], old)
    assert out[1] == "### Sizing at 1M (d)\n\n| index | r |\n|---|---|\n| ivf | 2 |"
    assert len(out) == 2


def test_small_inputs_hold_out_fewer_queries_and_say_why_not():
    X = np.random.default_rng(0).normal(size=(50, 16)).astype(np.float32)
    report = bbqlib.calibrate(X, similarity="euclidean", progress=False)
    assert report.chosen is not None and report.chosen.n_queries == 50 - 2 * 10
    with pytest.raises(ValueError, match=r"n_queries \(X has 50 rows, k=10\)"):
        bbqlib.calibrate(X, similarity="euclidean", progress=False, n_queries=200)
    with pytest.raises(ValueError, match="X has 50 rows: too few"):
        bbqlib.calibrate(X, similarity="euclidean", progress=False, k=30)
