"""Shared fixtures: seeded generators, small data sets, the shared real data, numba threads."""

from __future__ import annotations

from pathlib import Path

import numba
import numpy as np
import pytest
from paths import SHARED, shared_or_skip

#: ``../shared/data`` beside the checkout (real embeddings with ground truth).
SHARED_DATA = SHARED / "data"


@pytest.fixture(autouse=True, scope="session")
def _single_query_paths_from_the_first_query():
    """The single-query paths run from the first query: their tiering on an empty kernel
    cache (``COMPILE_SINGLE_AFTER``) and its compiling child are tested on their own
    (tests/test_single_query.py, tests/test_background_compile.py); no other test starts a
    child process that outlives it."""
    import os

    from bbqlib.index import background
    from bbqlib.index import tiers as single

    before = single.COMPILE_SINGLE_AFTER, os.environ.get(background.BACKGROUND_ENV)
    single.COMPILE_SINGLE_AFTER = 0.0
    os.environ[background.BACKGROUND_ENV] = "0"
    yield
    single.COMPILE_SINGLE_AFTER = before[0]
    if before[1] is None:
        os.environ.pop(background.BACKGROUND_ENV, None)
    else:
        os.environ[background.BACKGROUND_ENV] = before[1]


@pytest.fixture
def rng() -> np.random.Generator:
    """A fresh generator with a fixed seed for every test."""
    return np.random.default_rng(20240611)


@pytest.fixture
def make_vectors():
    """Factory ``make_vectors(n, d, kind="gaussian", seed=0)`` -> float32 [n, d].

    kinds: ``gaussian`` (N(0.3, 1): not centred, so the centroid matters), ``unit`` (the same,
    normalized), ``uniform`` ([0, 1)), ``clustered`` (20 Gaussian blobs), ``wide`` (norms spread
    over two decades, for euclidean and max_inner_product).
    """

    def make(n: int, d: int, kind: str = "gaussian", seed: int = 0) -> np.ndarray:
        g = np.random.default_rng(seed)
        if kind in ("gaussian", "unit"):
            X = g.normal(0.3, 1.0, size=(n, d))
            if kind == "unit":
                X /= np.linalg.norm(X, axis=1, keepdims=True)
        elif kind == "uniform":
            X = g.uniform(size=(n, d))
        elif kind == "clustered":
            centres = g.normal(size=(20, d)) * 3.0
            X = centres[g.integers(0, 20, size=n)] + g.normal(size=(n, d))
        elif kind == "wide":
            X = g.normal(size=(n, d)) * np.exp(g.uniform(-2.3, 2.3, size=(n, 1)))
        else:
            raise ValueError(f"unknown kind {kind!r}")
        return X.astype(np.float32)

    return make


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """Path of ``../shared/data``; skips the test when it is absent."""
    shared_or_skip("data", "debian-minilm-384", "base.npy", what="real-data tests' shared data")
    return SHARED_DATA


@pytest.fixture
def numba_threads(monkeypatch):
    """``numba_threads(n)`` sets numba's thread count; restored after the test.

    The kernels' minimum work per thread is switched off meanwhile, and multi-threaded
    variants are compiled at their first call, so that the small inputs of a test really run
    on ``n`` threads (``bbqlib._kernels.policy.WORK_SCALE``, ``COMPILE_PARALLEL_AFTER``).
    """
    from bbqlib._kernels import policy

    before = numba.get_num_threads()
    monkeypatch.setattr(policy, "WORK_SCALE", 0.0)
    monkeypatch.setattr(policy, "COMPILE_PARALLEL_AFTER", 0.0)

    def set_threads(n: int) -> int:
        n = min(n, numba.config.NUMBA_NUM_THREADS)
        numba.set_num_threads(n)
        return n

    yield set_threads
    numba.set_num_threads(before)
