"""The command line (issue 13): version, plain-text help, argument checks before any data is
read, the table's columns, and the demo printing cosines."""

from __future__ import annotations

import re

import numpy as np
import pytest

import bbqlib
from bbqlib import cli


def _run(argv, capsys):
    """``main(argv)`` -> (exit code, stdout, stderr); argparse exits are caught."""
    try:
        code = cli.main(argv)
    except SystemExit as stop:
        code = stop.code
    out = capsys.readouterr()
    return code, out.out, out.err


def test_version(capsys):
    code, out, _ = _run(["--version"], capsys)
    assert code == 0 and out.strip() == f"bbqlib {bbqlib.__version__}"


@pytest.mark.parametrize(
    "argv", [["--help"], ["demo", "--help"], ["eval", "--help"], ["warmup", "--help"]]
)
def test_help_is_plain_text(argv, capsys):
    code, out, _ = _run(argv, capsys)
    assert code == 0 and "usage: bbqlib" in out
    assert "``" not in out and ":class:" not in out and ":func:" not in out, out


@pytest.fixture
def vector_file(tmp_path):
    path = tmp_path / "v.npy"
    np.save(path, np.random.default_rng(0).normal(size=(50, 8)).astype(np.float32))
    return str(path)


@pytest.fixture
def no_loading(monkeypatch):
    """Fail the test if the command reads any vector file."""

    def refuse(*args, **kwargs):
        raise AssertionError("data were loaded before the arguments were checked")

    monkeypatch.setattr(cli, "read_vectors", refuse)


@pytest.mark.parametrize(
    "extra, match",
    [
        (["--bits", "9"], "--bits"),
        (["--bits", "1,x"], "--bits"),
        (["--similarity", "cosin"], "--similarity"),
        (["--k", "0"], "--k"),
        (["--repeats", "0"], "--repeats"),
        (["--max-queries", "-1"], "--max-queries"),
    ],
)
def test_eval_checks_arguments_before_loading(extra, match, vector_file, no_loading, capsys):
    code, _, err = _run(["eval", "--data", vector_file, "--queries", vector_file, *extra], capsys)
    assert code == 2 and match in err, err


def test_eval_missing_file_is_reported_before_loading(vector_file, no_loading, capsys):
    code, _, err = _run(["eval", "--data", vector_file, "--queries", "nope.npy"], capsys)
    assert code == 2 and "no such file: nope.npy" in err


def test_eval_accepts_aliases(tmp_path, capsys):
    g = np.random.default_rng(1)
    np.save(tmp_path / "b.npy", g.normal(size=(300, 16)).astype(np.float32))
    np.save(tmp_path / "q.npy", g.normal(size=(7, 16)).astype(np.float32))
    argv = ["eval", "--data", str(tmp_path / "b.npy"), "--queries", str(tmp_path / "q.npy")]
    code, out, _ = _run([*argv, "--similarity", "l2", "--bits", "1,7", "--repeats", "2"], capsys)
    assert code == 0, out
    assert "euclidean" in out and "1-bit docs" in out and "7-bit docs" in out
    assert "median of 2 timed runs" in out


def test_evaluate_rows_say_what_is_stored():
    g = np.random.default_rng(2)
    X = g.normal(size=(400, 24)).astype(np.float32)
    Q = g.normal(size=(9, 24)).astype(np.float32)
    rows, indexes = cli.evaluate(X, Q, bits=(1, 4), k=5, progress=False, repeats=2)
    assert [r["encoding"] for r in rows] == [
        "float32, exact (NumPy)",
        "1-bit docs x 4-bit queries",
        "4-bit docs x 4-bit queries",
    ]
    exact = rows[0]
    assert exact["B/vec held"] == exact["B/vec codes"] == 4 * 24
    assert exact["recall@5 raw"] == "1.000" and exact["held / float32"] == "100%"
    for row, b in zip(rows[1:], (1, 4), strict=True):
        codes = indexes[b].bytes_per_vector
        assert row["B/vec codes"] == codes
        assert row["B/vec held"] == codes + 4 * 24  # the float32 vectors kept for rerank
        assert row["held / float32"] == f"{(codes + 4 * 24) / (4 * 24):.0%}"
        assert row["compression"] == f"{4 * 24 / codes:.1f}x"
        for col in ("QPS raw", "QPS rerank", "one query µs"):
            assert float(row[col].replace(",", "")) > 0
        assert 0.0 <= float(row["recall@5 raw"]) <= 1.0
    with pytest.raises(ValueError, match="repeats"):
        cli.evaluate(X, Q, bits=(1,), progress=False, repeats=0)


@pytest.mark.parametrize("sim", ["euclidean", "max_inner_product"])
def test_the_exact_row_is_exact_for_every_similarity(sim):
    g = np.random.default_rng(3)
    X = g.normal(size=(300, 16)).astype(np.float32) * g.uniform(0.5, 2, size=(300, 1))
    Q = g.normal(size=(7, 16)).astype(np.float32)
    rows, _ = cli.evaluate(X, Q, similarity=sim, bits=(1,), k=5, progress=False, repeats=1)
    assert rows[0]["recall@5 raw"] == "1.000"


def test_median_seconds_takes_the_median(monkeypatch):
    ticks = iter([0.0, 5.0, 10.0, 11.0, 20.0, 22.0])  # durations 5, 1, 2
    monkeypatch.setattr(cli.time, "perf_counter", lambda: next(ticks))
    assert cli._median_seconds(lambda: None, 3) == 2.0


@pytest.mark.slow
def test_demo_prints_cosines(capsys):
    code, out, _ = _run(["demo", "--quiet", "--repeats", "1"], capsys)
    assert code == 0
    assert "B/vec held" in out and "median of 1 timed runs" in out
    assert "float32, exact (NumPy)" in out
    sample = bbqlib.datasets.load_demo_sample()
    index = bbqlib.FlatIndex(bits=1, similarity="cosine")
    index.add(sample["base"])
    blocks = out.split("  query: ")[1:]
    assert len(blocks) == 3
    for qi, block in zip((0, 2, 7), blocks, strict=True):
        printed = [float(c) for c in re.findall(r"^    cos (-?\d\.\d{3})  ", block, re.M)]
        _, ids = index.search(sample["queries"][qi], k=3)
        x = sample["base"][ids[0]].astype(np.float64)
        q = sample["queries"][qi].astype(np.float64)
        exact = x @ q / (np.linalg.norm(x, axis=1) * np.linalg.norm(q))
        np.testing.assert_allclose(printed, np.round(exact, 3), atol=1.5e-3)
        assert printed == sorted(printed, reverse=True)


def test_warmup_command_covers_the_chosen_cases(capsys):
    # kernels of the default index, from the test session's cache: loads, compiles little
    rc = cli.main(["warmup", "--index", "flat", "--family", "bbq1", "--similarity", "l2",
                   "--quiet"])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0
    assert re.search(r"^bbq1\s+flat\s+\d", out, re.M)
    assert "kernel cache" in out and "MB after" in out


def test_warmup_command_names_unknown_families(capsys):
    rc = cli.main(["warmup", "--family", "bbq3", "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "unknown family ['bbq3']" in err and "int8_per_dim" in err


def test_precompile_report_lists_each_case():
    from bbqlib.runtime.precompile import precompile

    report = precompile("ivf", "bbq1", "cosine", mapped=True)
    assert set(report.seconds) == {("bbq1", "ivf")}
    assert report.total_seconds >= report.seconds[("bbq1", "ivf")] > 0
    assert report.cache_bytes_after >= report.cache_bytes_before >= 0
