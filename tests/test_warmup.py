"""bbqlib.warmup and IVFIndex.open(preload=True) (issue 14's cold start)."""

from __future__ import annotations

import numpy as np
import pytest

import bbqlib
from bbqlib._kernels import fused as KF
from bbqlib._kernels import policy
from bbqlib._kernels import single as KO
from bbqlib.storage.preload import preload_arrays


def test_warmup_without_index_starts_the_runtime():
    assert bbqlib.warmup() >= 0.0
    assert policy.threading_layer() in ("tbb", "omp", "workqueue")


_IMPORT_ONLY = "import sys, bbqlib; print('numba.np.arraymath' in sys.modules)"


@pytest.mark.parametrize("lazy", ["", "1"])
def test_import_starts_numbas_target_unless_lazy(lazy):
    """``import bbqlib`` loads numba's implementation registries (the once-per-process start
    numba would otherwise run inside the first kernel call); ``BBQLIB_LAZY_START=1`` leaves
    them for that call."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "BBQLIB_LAZY_START": lazy}
    out = subprocess.run(
        [sys.executable, "-c", _IMPORT_ONLY], capture_output=True, text=True, env=env,
        check=True, timeout=300,
    )  # fmt: skip
    assert out.stdout.strip() == ("False" if lazy else "True"), out.stderr


_FRESH_PROCESS = """
import sys
import numpy as np, bbqlib
from bbqlib._kernels import fused as KF
from bbqlib._kernels import single as KO
bbqlib.warmup()
kernels = [getattr(KO, name) for name in KO.__all__] + [getattr(KF, n) for n in KF.__all__]
before = [len(k.signatures) for k in kernels]
for path in sys.argv[1:]:
    index = bbqlib.load(path)
    index.search(np.ones(index.dim_ if hasattr(index, "dim_") else 24, np.float32), k=10)
print([len(k.signatures) for k in kernels] == before)
"""


def test_warmup_without_index_loads_what_a_saved_index_queries_with(make_vectors, tmp_path):
    """In a fresh process whose kernel cache holds them, ``bbqlib.warmup()`` loads what the
    first single query of a saved default index (any similarity, bits 1-4, opened from its
    files) uses: that query then compiles or loads no kernel."""
    import subprocess
    import sys

    X = make_vectors(900, 24, kind="clustered", seed=8)
    paths = []
    for similarity in ("cosine", "euclidean", "max_inner_product"):
        for bits in (1, 4):
            flat = bbqlib.FlatIndex(bits=bits, similarity=similarity)
            flat.add(X)
            paths.append(flat.save(tmp_path / f"flat-{similarity}{bits}.bbq"))
            ivf = bbqlib.IVFIndex(bits=bits, similarity=similarity, cluster_size=64)
            ivf.add(X)
            paths.append(ivf.save(tmp_path / f"ivf-{similarity}{bits}"))
    for path in paths:  # this process fills the disk cache
        bbqlib.load(path).search(X[0], k=10)
    out = subprocess.run(
        [sys.executable, "-c", _FRESH_PROCESS, *map(str, paths)],
        capture_output=True, text=True, check=True, timeout=600,
    )  # fmt: skip
    assert out.stdout.strip() == "True", out.stdout + out.stderr


# The IVF case prepares the single-threaded kernels only: compiling every multi-threaded IVF
# kernel on an empty cache costs about a minute of CI (the flat case covers batch=True).
@pytest.mark.parametrize("kind, batch", [("flat", True), ("ivf", False)])
def test_warmup_prepares_every_kernel_a_search_uses(kind, batch, make_vectors):
    X = make_vectors(700, 24, kind="clustered", seed=4)
    if kind == "flat":
        index = bbqlib.FlatIndex(bits=1, similarity="euclidean")
    else:
        index = bbqlib.IVFIndex(bits=1, similarity="euclidean", cluster_size=64)
    index.add(X)
    before = index.search(X[:3], k=4)
    assert bbqlib.warmup(index, batch=batch) >= 0.0
    with policy.recording() as used:
        index.search(X[5:7], k=4)  # a batch (one query takes the single-query kernels)
    assert used
    for kern, signatures in used.items():
        if batch:
            assert signatures <= set(kern.dispatcher.signatures), kern
        if hasattr(kern.serial, "signatures"):  # a compiled twin, not a Python function
            assert signatures <= set(kern.serial.signatures), kern
    after = index.search(X[:3], k=4)
    np.testing.assert_array_equal(before[1], after[1])
    # the single-query path's kernels are compiled (or loaded) too
    if kind == "flat":
        assert KO.prepare_one.signatures and KO.flat_lut_one.signatures
    else:
        assert KF.ivf_lut_fused.signatures


def test_warmup_of_an_index_without_vectors(make_vectors):
    index = bbqlib.FlatIndex(bits=2, similarity="cosine", store_vectors=False)
    index.add(make_vectors(100, 16))
    bbqlib.warmup(index, batch=False)


def test_warmup_rejects_empty_and_foreign_indexes():
    with pytest.raises(ValueError, match="empty"):
        bbqlib.warmup(bbqlib.FlatIndex(bits=1))
    with pytest.raises(TypeError, match="bbqlib index"):
        bbqlib.warmup(object())


def test_preload_gives_the_same_results(make_vectors, tmp_path):
    X = make_vectors(900, 20, kind="clustered", seed=6)
    index = bbqlib.IVFIndex(bits=1, similarity="cosine", cluster_size=64)
    index.add(X)
    index.save(tmp_path / "ivf")
    plain = bbqlib.IVFIndex.open(tmp_path / "ivf")
    warm = bbqlib.load(tmp_path / "ivf", preload=True)
    a, b = plain.search(X[:9], k=5), warm.search(X[:9], k=5)
    np.testing.assert_array_equal(a[1], b[1])
    np.testing.assert_array_equal(a[0], b[0])


def test_preload_arrays_touches_maps_only(tmp_path):
    path = tmp_path / "a.npy"
    np.save(path, np.arange(100_000, dtype=np.int64))
    mapped = np.load(path, mmap_mode="r")
    assert preload_arrays([mapped, np.ones(10), None]) == mapped.nbytes
    assert preload_arrays([mapped[:0]]) == 0
