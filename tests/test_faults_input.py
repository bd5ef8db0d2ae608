"""Bad input (issue 12): one validation path for every add, magnitudes whose squares would
overflow float32, k larger than the index."""

from __future__ import annotations

import numpy as np
import pytest
from fault_harness import unit_rows

import bbqlib
from bbqlib._validation import MAX_SQ_NORM

KINDS = ["flat", "ivf"]


def _index(kind, similarity="euclidean", **kwargs):
    if kind == "flat":
        return bbqlib.FlatIndex(bits=kwargs.get("bits", 1), similarity=similarity)
    return bbqlib.IVFIndex(bits=kwargs.get("bits", 1), similarity=similarity, cluster_size=64)


BAD_DTYPES = [np.complex64, np.bool_, np.int32, np.uint8, object]


@pytest.mark.parametrize("dtype", BAD_DTYPES, ids=lambda t: np.dtype(t).name)
def test_every_add_rejects_non_float_arrays_alike(dtype):
    X = unit_rows(300, 8, 0)
    messages = []
    for kind in KINDS:
        for first in (True, False):
            index = _index(kind)
            if not first:
                index.add(X)
            with pytest.raises(TypeError, match="X must be a float array") as err:
                index.add(X.astype(dtype))
            messages.append(str(err.value))
            assert index.ntotal == (0 if first else 300)
    assert len(set(messages)) == 1  # the same check, the same words


@pytest.mark.parametrize("kind", KINDS)
def test_every_add_rejects_bad_shapes_alike(kind):
    index = _index(kind)
    for bad, match in ((np.zeros(8, np.float32), "2-D"), (np.zeros((0, 8), np.float32), "empty"),
                       (np.zeros((5, 0), np.float32), "zero dimensions")):  # fmt: skip
        with pytest.raises(ValueError, match=match):
            index.add(bad)
    index.add(unit_rows(200, 8, 1))
    with pytest.raises(ValueError, match="dimension 9 but"):
        index.add(unit_rows(3, 9, 1))


@pytest.mark.parametrize("kind", KINDS)
def test_lists_and_memmaps_are_accepted(kind, tmp_path):
    X = unit_rows(300, 8, 2)
    index = _index(kind)
    index.add(X.tolist())
    np.save(tmp_path / "x.npy", X)
    index.add(np.load(tmp_path / "x.npy", mmap_mode="r"))
    assert index.ntotal == 600


@pytest.mark.parametrize("similarity", ["euclidean", "max_inner_product"])
@pytest.mark.parametrize("kind", KINDS)
def test_squares_beyond_float32_are_rejected_not_silently_wrong(kind, similarity):
    X = unit_rows(300, 32, 3).astype(np.float64) * 1e19  # finite, squares overflow float32
    index = _index(kind, similarity)
    with pytest.raises(ValueError, match="squared norm exceeds"):
        index.add(X)
    assert index.ntotal == 0
    index.add(unit_rows(300, 32, 3))
    with pytest.raises(ValueError, match=r"queries has 1 row\(s\) whose squared norm"):
        index.search(X[:1], 3)


@pytest.mark.parametrize("kind", KINDS)
def test_magnitudes_up_to_the_bound_search_correctly(kind):
    """Norms just inside the bound: euclidean self-search still finds every row."""
    X = unit_rows(400, 16, 4) * np.float32(np.sqrt(MAX_SQ_NORM) * 0.99)
    X[::2] *= np.float32(0.5)  # and mixed magnitudes
    index = _index(kind, "euclidean", bits=4)
    index.add(X)
    kwargs = {"visit_percentage": 100.0} if kind == "ivf" else {}
    scores, ids = index.search(X[:50], 1, oversample=5.0, scores="raw", **kwargs)
    np.testing.assert_array_equal(ids[:, 0], np.arange(50))
    assert np.isfinite(scores).all()


@pytest.mark.parametrize("kind", KINDS)
def test_huge_k_is_capped_or_refused_before_allocating(kind):
    X = unit_rows(300, 8, 5)
    index = _index(kind, "cosine")
    index.add(X)
    for k in (10**9, 2**62, 301):
        scores, ids = index.search(X[:2], k, pad_to_k=False)
        assert ids.shape == scores.shape == (2, 300)
    for k in (10**9, 2**62):  # padded to k: more than the machine can hold
        with pytest.raises(ValueError, match=f"k={k} asks for 2 x {k} results"):
            index.search(X[:2], k, pad_to_k=True)
    assert index.search(X[:2], 301, pad_to_k=True)[1].shape == (2, 301)
    if kind == "ivf":
        index.delete(np.arange(290))
        _, ids = index.search(X[:2], 50, visit_percentage=100.0)
        assert ids.shape == (2, 50) and (ids[:, 10:] == -1).all()  # padding past live rows
    with pytest.raises(ValueError, match="k"):
        index.search(X[:2], 0)
    with pytest.raises(TypeError, match="k"):
        index.search(X[:2], 2.5)


def test_files_of_the_wrong_kind_name_the_kind_and_bbqlib_load(tmp_path, make_vectors):
    X = make_vectors(300, 16, seed=1)
    flat, ivf = bbqlib.FlatIndex(), bbqlib.IVFIndex()
    flat.add(X)
    ivf.add(X)
    (tmp_path / "adir").mkdir()
    (tmp_path / "afile").write_bytes(b"")
    with pytest.raises(IsADirectoryError, match="is a directory, and a flat index is one file"):
        flat.save(tmp_path / "adir")
    with pytest.raises(FileExistsError, match="an IVF index is a directory"):
        ivf.save(tmp_path / "afile")
    flat_file = flat.save(tmp_path / "flat.bbq")
    with pytest.raises(NotADirectoryError, match="bbqlib.load"):
        bbqlib.IVFIndex.open(flat_file)
    with pytest.raises(IsADirectoryError, match="bbqlib.load"):
        bbqlib.FlatIndex.load(tmp_path / "adir")
    assert not any(p.name.endswith(".tmp") for p in tmp_path.iterdir())  # nothing left behind
