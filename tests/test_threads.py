"""Thread settings (issue 14): the public API, the per-call thread policy, concurrent callers.

Timing is never asserted; the tests check which variant a call would use, that settings are
scoped as documented, and that several Python threads calling parallel kernels at once get
the results of sequential calls (and that the process survives under every threading layer).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading

import numba
import numpy as np
import pytest
from paths import ROOT

import bbqlib
from bbqlib._kernels import policy
from bbqlib._kernels.validation import row_sq_norms


@pytest.fixture(autouse=True)
def _restore_limit():
    yield
    bbqlib.set_num_threads(None)


def test_defaults_follow_numba():
    assert bbqlib.get_num_threads() == min(numba.get_num_threads(), policy.max_threads())
    assert policy.max_threads() == numba.config.NUMBA_NUM_THREADS


def test_set_num_threads_and_reset():
    bbqlib.set_num_threads(1)
    assert bbqlib.get_num_threads() == 1
    bbqlib.set_num_threads(None)
    assert bbqlib.get_num_threads() == min(numba.get_num_threads(), policy.max_threads())


@pytest.mark.parametrize("bad", [0, -1, 10_000])
def test_counts_out_of_range_name_numba_num_threads(bad):
    with pytest.raises(ValueError, match="NUMBA_NUM_THREADS"):
        bbqlib.set_num_threads(bad)
    with pytest.raises(ValueError, match="n must be between 1"):
        with bbqlib.thread_limit(bad):
            pass


@pytest.mark.parametrize("bad", [1.5, "2", True])
def test_counts_must_be_integers(bad):
    with pytest.raises(TypeError, match="integer number of threads"):
        bbqlib.set_num_threads(bad)


def test_thread_limit_nests_and_restores():
    top = bbqlib.get_num_threads()
    with bbqlib.thread_limit(1) as n:
        assert n == 1 == bbqlib.get_num_threads()
        with bbqlib.thread_limit(top) as m:  # the innermost applies
            assert m == top
        assert bbqlib.get_num_threads() == 1
    assert bbqlib.get_num_threads() == top


def test_thread_limit_is_per_thread_and_set_num_threads_is_global():
    seen = {}

    def other(key):
        seen[key] = bbqlib.get_num_threads()

    t = threading.Thread(target=other, args=("fresh",))  # what a new thread gets
    t.start()
    t.join()
    top = seen.pop("fresh")
    with bbqlib.thread_limit(1):
        t = threading.Thread(target=other, args=("limit",))
        t.start()
        t.join()
    bbqlib.set_num_threads(1)
    t = threading.Thread(target=other, args=("global",))
    t.start()
    t.join()
    assert seen == {"limit": top, "global": 1}


def test_numba_mask_of_the_thread_caps_bbqlib(numba_threads):
    numba_threads(1)
    assert bbqlib.get_num_threads() == 1


def test_threads_for():
    top = policy.num_threads()
    assert policy.threads_for(0, 100) == 1
    assert policy.threads_for(99, 100) == 1
    assert policy.threads_for(10**12, 100) == top
    with bbqlib.thread_limit(1):
        assert policy.threads_for(10**12, 100) == 1


def test_limit_threads_and_thread_scope_cap_kernels():
    X = np.ones((10, 8), np.float32)
    out = np.empty(10)
    with policy.limit_threads(1):
        assert row_sq_norms.threads(X, out) == 1
        assert policy.num_threads() == 1

    @policy.thread_scope
    def scoped():
        before = policy.num_threads()
        policy.cap_threads(1)
        return before, policy.num_threads()

    assert scoped() == (policy.num_threads(), 1)
    assert policy.num_threads() == bbqlib.get_num_threads()
    with pytest.raises(RuntimeError, match="thread_scope"):
        policy.cap_threads(1)


def test_small_calls_run_on_the_calling_thread(monkeypatch):
    X = np.ones((10, 8), np.float32)
    out = np.empty(10)
    assert row_sq_norms.threads(X, out) == 1  # far below the measured minimum work
    monkeypatch.setattr(policy, "WORK_SCALE", 0.0)
    assert row_sq_norms.threads(X, out) == policy.num_threads()


def test_serial_twin_and_parallel_kernel_agree(monkeypatch, numba_threads):
    g = np.random.default_rng(3)
    X = g.normal(size=(257, 65)).astype(np.float32)
    one, two = np.empty(257), np.empty(257)
    row_sq_norms.serial(X, one)
    numba_threads(2)
    row_sq_norms(X, two)
    np.testing.assert_array_equal(one, two)
    assert policy.ParallelKernel.__name__ in repr(row_sq_norms)
    assert row_sq_norms.__doc__ and row_sq_norms.__name__ == "row_sq_norms"


def _searches(index, Q, batch):
    return [index.search(Q[i : i + batch], k=5) for i in range(0, len(Q), batch)]


# flat: batches of 7 with multi-threaded kernels forced (minimum work and tiering off), so
# several Python threads launch parallel regions at once; ivf: single queries with the
# default policy (one thread each), the engine's case. (Forcing the multi-threaded IVF
# kernels too would compile them all, about a minute of CI on an empty cache.)
@pytest.mark.parametrize("kind, batch, forced", [("flat", 7, True), ("ivf", 1, False)])
def test_concurrent_callers_get_sequential_results(kind, batch, forced, make_vectors, monkeypatch):
    """Four Python threads search the same index at once."""
    X = make_vectors(1200, 48, kind="clustered", seed=2)
    Q = make_vectors(56, 48, kind="clustered", seed=3)
    if kind == "flat":
        index = bbqlib.FlatIndex(bits=1, similarity="cosine")
    else:
        index = bbqlib.IVFIndex(bits=1, similarity="cosine", cluster_size=128)
    index.add(X)
    if forced:
        monkeypatch.setattr(policy, "WORK_SCALE", 0.0)
        monkeypatch.setattr(policy, "COMPILE_PARALLEL_AFTER", 0.0)
    expected = _searches(index, Q, batch)
    results, errors = {}, []

    def worker(i):
        try:
            for _ in range(3):
                results[i] = _searches(index, Q, batch)
        except Exception as err:  # pragma: no cover - reported below
            errors.append(err)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for got in results.values():
        for (s1, i1), (s2, i2) in zip(got, expected, strict=True):
            np.testing.assert_array_equal(i1, i2)
            np.testing.assert_array_equal(s1, s2)


_CONCURRENT = textwrap.dedent(
    """
    import threading, numpy as np, numba, bbqlib
    from bbqlib._kernels import policy
    from bbqlib._kernels.validation import row_sq_norms
    policy.WORK_SCALE = 0.0
    policy.COMPILE_PARALLEL_AFTER = 0.0
    X = np.random.default_rng(0).normal(size=(4000, 32)).astype(np.float32)
    ref = np.empty(len(X)); row_sq_norms.serial(X, ref)
    bad = []
    def work():
        out = np.empty(len(X))
        for _ in range(200):
            row_sq_norms(X, out)
            if not np.array_equal(out, ref):
                bad.append(1)
    ts = [threading.Thread(target=work) for _ in range(4)]
    [t.start() for t in ts]; [t.join() for t in ts]
    print(numba.threading_layer(), len(bad))
    """
)


@pytest.mark.parametrize("layer", ["workqueue", "omp", "tbb"])
def test_concurrent_parallel_kernels_do_not_abort(layer, tmp_path):
    """numba's workqueue layer aborts the process on concurrent parallel launches; bbqlib
    serializes its kernels there. Each layer that loads here gets four threads at once."""
    env = {
        "PYTHONPATH": str(ROOT),
        "NUMBA_THREADING_LAYER": layer,
        "NUMBA_NUM_THREADS": "2",
        "PATH": "/usr/bin:/bin",
    }
    import os

    for key in ("HOME", "BBQLIB_CACHE_DIR", "XDG_CACHE_HOME", "NUMBA_CACHE_DIR"):
        if key in os.environ:
            env[key] = os.environ[key]
    proc = subprocess.run(
        [sys.executable, "-c", _CONCURRENT], capture_output=True, text=True, env=env, timeout=300
    )
    if proc.returncode != 0 and "No threading layer could be loaded" in proc.stderr:
        pytest.skip(f"numba's {layer} layer does not load here")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == [layer, "0"]


_TIERED = textwrap.dedent(
    """
    import numpy as np
    from bbqlib._kernels import policy
    from bbqlib._kernels.validation import row_sq_norms
    policy.WORK_SCALE = 0.0
    X = np.ones((64, 8), np.float32); out = np.empty(64)
    row_sq_norms(X, out)  # wants two threads; nothing compiled, nothing on disk
    first = (len(row_sq_norms.serial.signatures), len(row_sq_norms.dispatcher.signatures))
    policy.COMPILE_PARALLEL_AFTER = 0.0
    row_sq_norms(X, out)  # now worth compiling: the multi-threaded variant is built
    second = len(row_sq_norms.dispatcher.signatures)
    print(first, second, out[0])
    """
)


def test_tiered_compilation_on_an_empty_cache(tmp_path):
    """A new kernel first runs single-threaded; its multi-threaded variant is compiled when
    the kernel is hot (here: the threshold is lowered), then used."""
    env = {"PYTHONPATH": str(ROOT), "BBQLIB_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [sys.executable, "-c", _TIERED], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "(1, 0) 1 8.0"
