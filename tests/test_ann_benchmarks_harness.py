"""bbqlib in the real ann-benchmarks harness, unmodified (issue 19).

A copy of ``../shared/peers/ann-benchmarks`` (erikbern/ann-benchmarks at f402b2c) gets the
plugin from ``python -m bbqlib ann-benchmarks-plugin``, a data set made from the bundled
sample (registered in ``ann_benchmarks/datasets.py`` as a contributor adds one), runs of
``run_algorithm.py`` (what the harness's Docker image runs) for a few definitions taken from
the plugin's ``config.yml`` through the harness's own loader, and its ``data_export.py``
scores them. Every step is the harness's code in a subprocess, as a user runs it. Skipped
where ``../shared/peers`` (or ``$BBQLIB_PEERS``) is absent.
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from paths import ROOT, SHARED

from bbqlib.cli import load_demo_sample
from bbqlib.integrations.ann_benchmarks_plugin import DEFINITIONS, MODULE, register_dataset

REPO = ROOT
#: ``../shared/peers`` beside the checkout; BBQLIB_PEERS points elsewhere (e.g. from a worktree).
PEERS = Path(os.environ.get("BBQLIB_PEERS", SHARED / "peers"))
HARNESS = PEERS / "ann-benchmarks"

#: What the harness's run_algorithm.py and data_export.py import beyond bbqlib's own needs.
HARNESS_MODULES = ("h5py", "yaml", "psutil", "colors", "docker", "sklearn")

#: (metric, algorithm, build arguments after the metric, query argument groups, recall floor by
#: the query argument as the run's name shows it) on the bundled sample (4,000 x 384, the first
#: 100 held-out queries, k = 10). Floors: the recall measured when this test was written,
#: minus about 0.05.
RUNS = [
    ("angular", "bbqlib-flat", [1], [[1], [3]], {"oversample=1)": 0.66, "oversample=3)": 0.90}),
    ("angular", "bbqlib-rabitq-flat", ["rabitq", 1], [[3]], {"oversample=3)": 0.90}),
    ("angular", "bbqlib-ivf", [1, 384], [[16]], {"visit_percentage=16,": 0.78}),
    ("angular", "bbqlib-usearch", [1, 16, 128], [[64]], {"expansion_search=64,": 0.87}),
    ("euclidean", "bbqlib-flat", [1], [[3]], {"oversample=3)": 0.90}),
]
N_QUERIES = 100


def _env() -> dict:
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": str(REPO) + (os.pathsep + path if path else "")}


def _run(args, cwd) -> str:
    done = subprocess.run(
        [sys.executable, *args], cwd=cwd, env=_env(), capture_output=True, text=True
    )
    if done.returncode:
        raise AssertionError(
            f"{' '.join(map(str, args))} failed ({done.returncode}):\n"
            f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return done.stdout


_DEFINITIONS = """
import json, sys
from ann_benchmarks.definitions import InstantiationStatus, algorithm_status, get_definitions
out = {}
for metric in ("angular", "euclidean"):
    out[metric] = [
        dict(algorithm=d.algorithm, module=d.module, constructor=d.constructor,
             arguments=d.arguments, query_args=d.query_argument_groups,
             available=algorithm_status(d) == InstantiationStatus.AVAILABLE)
        for d in get_definitions(int(sys.argv[1]), "float", metric, 10)
        if d.module == sys.argv[2]
    ]
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def harness(tmp_path_factory):
    """The harness copy after the plugin, data sets, runs and export: (dir, definitions, rows)."""
    if not (HARNESS / "run_algorithm.py").is_file():
        pytest.skip(f"ann-benchmarks source not found at {HARNESS} (../shared/peers)")
    for name in HARNESS_MODULES:
        pytest.importorskip(name, reason=f"the ann-benchmarks harness needs {name}")
    root = tmp_path_factory.mktemp("harness") / "ann-benchmarks"
    shutil.copytree(HARNESS, root, ignore=shutil.ignore_patterns(".git", "data", "results"))

    out = _run(["-m", "bbqlib", "ann-benchmarks-plugin", str(root)], cwd=REPO)
    assert "config.yml" in out

    sample = load_demo_sample()
    base, queries = sample["base"], sample["queries"][:N_QUERIES]
    for metric in ("angular", "euclidean"):
        register_dataset(root, f"bbqlib-demo-384-{metric}", base, queries, metric, count=10)

    definitions = json.loads(_run(["-c", _DEFINITIONS, "384", MODULE], cwd=root))
    commands = []
    for metric, algorithm, args, query_args, _ in RUNS:
        (d,) = [
            d
            for d in definitions[metric]
            if d["algorithm"] == algorithm and d["arguments"] == [metric, *args]
        ]
        assert all(q in d["query_args"] for q in query_args)
        commands.append(
            [
                "run_algorithm.py",
                *("--dataset", f"bbqlib-demo-384-{metric}", "--algorithm", algorithm),
                *("--module", d["module"], "--constructor", d["constructor"]),
                *("--runs", "1", "--count", "10"),
                json.dumps(d["arguments"]),
                *map(json.dumps, query_args),
            ]
        )
    # Two at a time, as run.py --parallelism 2 would: on a cold numba cache most of the time
    # is compilation, on one core per process.
    with ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(lambda command: _run(command, cwd=root), commands))
    _run(["data_export.py", "--output", "export.csv"], cwd=root)
    with open(root / "export.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return root, definitions, rows


def test_config_loads_in_the_harness(harness):
    """Every definition of the plugin is found and importable by the harness's own loader."""
    _, definitions, _ = harness
    for metric in ("angular", "euclidean"):
        found = {d["algorithm"] for d in definitions[metric]}
        assert found == {d.name for d in DEFINITIONS}
        assert all(d["available"] for d in definitions[metric])
        flat = [d["arguments"] for d in definitions[metric] if d["algorithm"] == "bbqlib-flat"]
        assert flat == [[metric, 1], [metric, 2], [metric, 4]]


def test_harness_scores_recall(harness):
    """data_export.py's recall, QPS and index size for every run."""
    _, _, rows = harness
    by_run = {}
    for row in rows:
        by_run[(row["dataset"], row["algorithm"], row["parameters"])] = row
    assert len(by_run) == sum(len(r[3]) for r in RUNS)
    for metric, algorithm, _, query_args, floors in RUNS:
        runs = [
            row
            for (dataset, algo, _), row in by_run.items()
            if dataset == f"bbqlib-demo-384-{metric}" and algo == algorithm
        ]
        assert len(runs) == len(query_args)
        for row in runs:
            (shown,) = [key for key in floors if key in row["parameters"]]
            assert float(row["k-nn"]) >= floors[shown], row
            assert float(row["qps"]) > 0
            assert float(row["indexsize"]) > 0  # resident-set growth over fit, in kB


def test_results_carry_the_code_size(harness):
    """get_additional's attributes are stored in the harness's result files."""
    h5py = pytest.importorskip("h5py")
    root, _, _ = harness
    files = sorted((root / "results" / "bbqlib-demo-384-angular" / "10").glob("*/*.hdf5"))
    assert len(files) == sum(len(r[3]) for r in RUNS if r[0] == "angular")
    for path in files:
        with h5py.File(path, "r") as f:
            assert f.attrs["index_bytes_per_vector"] > 0
            assert f.attrs["index_size"] > 0
            assert f.attrs["count"] == 10 and f.attrs["batch_mode"] == False  # noqa: E712


def test_bbqlib_reads_the_harness_files(harness):
    """The data set file the harness's write_output made reads back with bbqlib.formats."""
    pytest.importorskip("h5py")
    from bbqlib.formats.ann_benchmarks import read_ann_benchmarks, read_ann_benchmarks_metric

    root, _, _ = harness
    path = root / "data" / "bbqlib-demo-384-angular.hdf5"
    train, test, neighbors, distances = read_ann_benchmarks(path)
    assert neighbors.dtype == np.int64 and distances.dtype == np.float64  # not int32/float32
    assert train.dtype == np.float32 and neighbors.shape == (N_QUERIES, 10)
    assert read_ann_benchmarks_metric(path) == "angular"
    sample = load_demo_sample()
    np.testing.assert_array_equal(train, sample["base"])
    unit = sample["base"] / np.linalg.norm(sample["base"], axis=1, keepdims=True)
    q = test / np.linalg.norm(test, axis=1, keepdims=True)
    best = np.argmax(q @ unit.T, axis=1)
    assert np.mean(best == neighbors[:, 0]) > 0.99
