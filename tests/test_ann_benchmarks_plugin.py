"""The ann-benchmarks wrappers and the plugin files, without the harness (issue 19).

The same classes run inside the real harness in test_ann_benchmarks_harness.py.
"""

from __future__ import annotations

import inspect
import sys

import numba
import numpy as np
import pytest
from toy_data import clustered as _clustered
from toy_data import recall as _recall
from toy_data import truth as _truth

from bbqlib.integrations import ann_benchmarks as wrappers
from bbqlib.integrations import ann_benchmarks_plugin as plugin
from bbqlib.integrations.ann_benchmarks import (
    BBQIVF,
    FLAT_FLAVOURS,
    BBQFlat,
    BBQUSearch,
    QuantizedFlat,
    process_memory_kb,
    similarity_for_metric,
)


def _needs(name):
    pytest.importorskip(name, reason=f"{name} not installed")


# (class, build arguments after the metric, a query-argument group, engine module it needs)
WRAPPERS = [
    pytest.param(BBQFlat, (1,), (3,), None, id="flat"),
    pytest.param(QuantizedFlat, ("rabitq", 1), (3,), None, id="rabitq-flat"),
    pytest.param(QuantizedFlat, ("saq", 2), (3,), None, id="saq-flat"),
    pytest.param(
        BBQIVF, (1, 128), (50,), None, id="ivf", marks=pytest.mark.slow
    ),  # IVF kernels compile slowly on a cold cache
    pytest.param(BBQUSearch, (1,), (64, 5), "usearch", id="usearch"),
]


# ----------------------------------------------------------------------------- wrappers
def test_flat_wrapper_answers_like_base_ann():
    X, Q = _clustered(800, 24, seed=15)
    algo = BBQFlat("euclidean", 2)
    algo.fit(X)
    algo.set_query_arguments(3)
    assert str(algo) == "BBQFlat(bits=2, query_bits=auto, precondition=None, oversample=3)"
    assert algo.name == str(algo)
    one = algo.query(Q[0], 10)
    assert one.dtype == np.int64 and one.shape == (10,)
    algo.batch_query(Q, 10)
    res = algo.get_batch_results()
    assert len(res) == len(Q) and np.array_equal(res[0], one)
    assert _recall(np.stack(res), _truth(X, Q, "euclidean", 10)) >= 0.9
    extra = algo.get_additional()
    assert extra["index_bytes_per_vector"] == algo.index.bytes_per_vector
    assert extra["index_bytes"] == 800 * algo.index.bytes_per_vector and extra["warm_up_kb"] >= 0
    assert len(algo.query(Q[0], 2000)) == 800  # fewer than n: padding dropped
    algo.done()
    assert algo.index is None
    assert similarity_for_metric("angular") == "cosine"
    with pytest.raises(ValueError, match="metric"):
        BBQFlat("hamming")
    with pytest.raises(ValueError, match="flavour"):
        QuantizedFlat("angular", "saq-not-yet")


@pytest.mark.parametrize("cls, args, query_args, engine", WRAPPERS)
def test_wrappers_recall_and_names(cls, args, query_args, engine):
    if engine:
        _needs(engine)
    X, Q = _clustered(2000, 32, seed=16)
    algo = cls("angular", *args)
    assert "None" in str(algo)  # query parameters named before set_query_arguments too
    algo.fit(X)
    algo.set_query_arguments(*query_args)
    algo.batch_query(Q, 10)
    assert _recall(np.stack(algo.get_batch_results()), _truth(X, Q, "cosine", 10)) >= 0.8
    # __str__ names every build and query parameter with its value.
    skip = ("metric", "quantizer_params")
    names = [p for p in inspect.signature(cls).parameters if p not in skip]
    names += list(inspect.signature(cls.set_query_arguments).parameters)[1:]
    text = str(algo)
    assert text.startswith(f"{cls.__name__}(")
    for name in names:
        assert f"{name}=" in text, (name, text)
    for value in (*args, *query_args):
        assert f"={value}" in text, (value, text)
    algo.done()


def test_memory_is_the_process_resident_set():
    """get_memory_usage is what the harness's BaseANN returns: never None, the RSS in kB."""
    algo = BBQFlat("angular", 1)
    before = algo.get_memory_usage()  # the harness calls it before fit
    assert isinstance(before, float) and before > 1000
    X, _ = _clustered(20000, 128, seed=3)
    algo.fit(X)
    assert algo.get_memory_usage() - before > 0
    psutil = pytest.importorskip("psutil")
    rss = psutil.Process().memory_info().rss / 1024
    assert abs(process_memory_kb() - rss) < 0.05 * rss
    algo.done()


def test_memory_without_psutil(monkeypatch):
    monkeypatch.setitem(sys.modules, "psutil", None)  # import psutil raises ImportError
    kb = process_memory_kb()
    assert isinstance(kb, float) and kb > 1000


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.float64, np.uint8])
def test_any_numeric_input_is_converted(dtype):
    """MNIST-style integer sets and float64 arrays work as in the harness's faiss wrapper."""
    X, Q = _clustered(500, 16, seed=4)
    Xi = np.clip(np.rint(X * 20 + 100), 0, 255).astype(dtype)
    Qi = np.clip(np.rint(Q * 20 + 100), 0, 255).astype(dtype)
    X_copy = Xi.copy()
    got, want = BBQFlat("euclidean", 1), BBQFlat("euclidean", 1)
    got.fit(Xi)
    want.fit(Xi.astype(np.float32))
    for a in (got, want):
        a.set_query_arguments(3)
    assert np.array_equal(got.query(Qi[0], 10), want.query(Qi[0].astype(np.float32), 10))
    got.batch_query(Qi, 10)
    want.batch_query(Qi.astype(np.float32), 10)
    assert all(
        np.array_equal(a, b)
        for a, b in zip(got.get_batch_results(), want.get_batch_results(), strict=True)
    )
    assert np.array_equal(Xi, X_copy)  # the caller's array is not written
    with pytest.raises(TypeError, match="X must be a numeric array"):
        BBQFlat("euclidean").fit(np.array([["a", "b"]]))


def test_integer_input_usearch():
    _needs("usearch")
    X, Q = _clustered(500, 16, seed=5)
    algo = BBQUSearch("euclidean", 1)
    algo.fit(np.rint(X * 20).astype(np.int32))
    assert len(algo.query(np.rint(Q[0] * 20).astype(np.int64), 10)) == 10


def test_one_thread_for_queries_all_for_batches(numba_threads, monkeypatch):
    """Pinned to one numba thread from fit to done; batch_query uses every thread."""
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("numba has a single thread here")
    numba_threads(2)
    X, Q = _clustered(600, 16, seed=6)
    algo = BBQFlat("angular", 1)
    algo.fit(X)
    assert numba.get_num_threads() == 1
    seen = []
    search = algo._search

    def spy(*args):
        seen.append(numba.get_num_threads())
        return search(*args)

    monkeypatch.setattr(algo, "_search", spy)
    algo.query(Q[0], 10)
    algo.batch_query(Q, 10)
    assert seen == [1, numba.config.NUMBA_NUM_THREADS]
    assert numba.get_num_threads() == 1
    algo.batch_threads = 1  # a caller that measures batches on one thread
    algo.batch_query(Q, 10)
    assert seen[-1] == 1 and numba.get_num_threads() == 1
    algo.done()
    assert numba.get_num_threads() == 2


def _kernel_overloads() -> dict:
    """Compiled (or cache-loaded) signatures of every numba dispatcher in bbqlib's modules."""
    from numba.core.dispatcher import Dispatcher

    counts = {}
    for name, module in list(sys.modules.items()):
        if not name.startswith("bbqlib") or module is None:
            continue
        for attr, value in vars(module).items():
            if isinstance(value, Dispatcher):
                counts[f"{value.py_func.__module__}.{attr}"] = len(value.overloads)
    return counts


@pytest.mark.parametrize("cls, args, query_args, engine", WRAPPERS)
def test_no_query_compiles_a_kernel(cls, args, query_args, engine):
    """After fit, queries (single and batch, any query argument) find every kernel loaded."""
    if engine:
        _needs(engine)
    X, Q = _clustered(3000, 40, seed=7)
    algo = cls("euclidean", *args)
    algo.fit(X)
    after_fit = _kernel_overloads()
    sweeps = {
        BBQFlat: [(1,), (20,)],
        QuantizedFlat: [(1,), (20,)],
        BBQIVF: [(0.5,), (100,), (None,)],
        BBQUSearch: [(16,), (512, 10)],
    }[cls]
    for qa in [query_args, *sweeps]:
        algo.set_query_arguments(*qa)
        algo.query(Q[0], 10)
        algo.query(Q[1], 100)
        algo.batch_query(Q, 10)
    assert _kernel_overloads() == after_fit
    algo.done()


def test_adding_a_flavour_is_a_table_entry(monkeypatch, tmp_path):
    """A new quantizer flavour: one FLAT_FLAVOURS entry and one DEFINITIONS row."""
    monkeypatch.setitem(FLAT_FLAVOURS, "toy", FLAT_FLAVOURS["rabitq"])
    X, Q = _clustered(300, 16, seed=8)
    algo = QuantizedFlat("angular", "toy", 1)
    algo.fit(X)
    assert str(algo) == "QuantizedFlat(flavour=toy, bits=1, oversample=None)"
    assert len(algo.query(Q[0], 5)) == 5
    row = plugin.flat_definition("bbqlib-toy-flat", "QuantizedFlat", bits=(1,), base_args=["toy"])
    assert '- base_args: ["@metric", "toy"]' in plugin.render_config([*plugin.DEFINITIONS, row])


# ----------------------------------------------------------------------------- plugin files
def _fake_harness(tmp_path):
    (tmp_path / "ann_benchmarks" / "algorithms" / "base").mkdir(parents=True)
    (tmp_path / "ann_benchmarks" / "algorithms" / "base" / "module.py").write_text("")
    (tmp_path / "run_algorithm.py").write_text("")
    return tmp_path


def test_config_is_the_harness_format():
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load(plugin.render_config())
    assert list(config) == ["float"] and list(config["float"]) == ["angular", "euclidean"]
    for algorithms in config["float"].values():
        assert [a["name"] for a in algorithms] == [d.name for d in plugin.DEFINITIONS]
        for entry, d in zip(algorithms, plugin.DEFINITIONS, strict=True):
            assert entry["docker_tag"] == "ann-benchmarks-bbqlib"
            assert entry["module"] == "ann_benchmarks.algorithms.bbqlib"
            assert entry["constructor"] == d.constructor and hasattr(wrappers, d.constructor)
            assert entry["base_args"] == ["@metric", *d.base_args]
            assert entry["disabled"] is False
            for group in entry["run_groups"].values():
                assert set(group) == {"args", "query_args"}
                assert all(isinstance(q, list) for q in group["query_args"])
    flat = config["float"]["angular"][0]["run_groups"]
    assert {g["args"][0] for g in flat.values()} == {1, 2, 4}
    ivf = next(a for a in config["float"]["angular"] if a["constructor"] == "BBQIVF")
    assert {g["args"][0] for g in ivf["run_groups"].values()} == {1, 2}


def test_module_and_dockerfile():
    source = plugin.render_module()
    compile(source, "module.py", "exec")
    for d in plugin.DEFINITIONS:
        assert f"class {d.constructor}(_bbqlib.{d.constructor}, BaseANN):" in source
    docker = plugin.render_dockerfile()
    assert docker.startswith("FROM ann-benchmarks\n")
    assert "pip install" in docker and "import bbqlib" in docker and "warm_up()" in docker


def test_install_plugin_and_cli(tmp_path, capsys):
    from bbqlib.cli import main

    root = _fake_harness(tmp_path)
    assert main(["ann-benchmarks-plugin", str(root)]) == 0
    folder = root / "ann_benchmarks" / "algorithms" / "bbqlib"
    assert sorted(p.name for p in folder.iterdir()) == ["Dockerfile", "config.yml", "module.py"]
    assert (folder / "config.yml").read_text() == plugin.render_config()
    assert "bbqlib-flat" in capsys.readouterr().out
    wheel = tmp_path / "bbqlib-0.1.0-py3-none-any.whl"
    wheel.write_bytes(b"PK")
    written = plugin.install_plugin(root, wheel=wheel)
    assert (folder / wheel.name).is_file() and len(written) == 4
    with pytest.raises(ValueError, match="wheel"):
        plugin.install_plugin(root, wheel=tmp_path / "nope.whl")
    assert main(["ann-benchmarks-plugin", str(tmp_path / "missing")]) == 2
    assert "harness_dir" in capsys.readouterr().err


def test_register_dataset_checks_its_arguments(tmp_path):
    root = _fake_harness(tmp_path)
    X = np.zeros((10, 4), np.float32)
    with pytest.raises(ValueError, match="distance"):
        plugin.register_dataset(root, "x-4-dot", X, X, "dot")
    with pytest.raises(ValueError, match="same d"):
        plugin.register_dataset(root, "x-4-angular", X, X[:, :3], "angular")
    with pytest.raises(ValueError, match="count"):
        plugin.register_dataset(root, "x-4-angular", X, X, "angular", count=11)
    with pytest.raises(ValueError, match="name"):
        plugin.register_dataset(root, "a/b", X, X, "angular")
    with pytest.raises(ValueError, match="harness_dir"):
        plugin.register_dataset(tmp_path / "missing", "x", X, X, "angular")


def test_warm_up_builds_every_definition_it_is_given():
    row = plugin.flat_definition("bbqlib-flat", "BBQFlat", bits=(1,))
    plugin.warm_up([row], metrics=("angular",))
