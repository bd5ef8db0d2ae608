"""A single-query path compiled by a child process while the batch path answers
(``bbqlib.index.background``, ``bbqlib.index.tiers``)."""

from __future__ import annotations

import numpy as np
import pytest

import bbqlib
from bbqlib._kernels import single as KO
from bbqlib.index import background, tiers


@pytest.fixture
def flat(make_vectors):
    index = bbqlib.FlatIndex(bits=1, similarity="cosine")
    index.add(make_vectors(400, 32, seed=3))
    return index


def _one_query(tier, index, q):
    args = (10, None, None, None, "raw", None)  # k, oversample, rerank, filter, scores, pad
    return tier.on_batch_path(index._search_batch, q, index.quantizer.dim_, *args, index=index)


def test_a_child_compiles_the_path_while_the_batch_path_answers(flat, monkeypatch):
    monkeypatch.setattr(tiers, "COMPILE_SINGLE_AFTER", 1e9)  # never in-process
    monkeypatch.delenv(background.BACKGROUND_ENV, raising=False)
    tier = tiers.SingleQueryTier(KO.flat_lut_one)
    q = np.random.default_rng(0).normal(size=32).astype(np.float32)
    expected = flat.search(q[None, :], 10)
    got = _one_query(tier, flat, q)  # answered by the batch path; the child starts after it
    np.testing.assert_array_equal(got[1], expected[1])
    assert tier.wait_for_child(timeout=300), "the child failed"
    assert tier.ready()


def test_no_child_when_turned_off_or_the_cache_is_read_only(flat, monkeypatch):
    monkeypatch.setattr(tiers, "COMPILE_SINGLE_AFTER", 1e9)
    q = np.ones(32, np.float32)
    monkeypatch.setenv(background.BACKGROUND_ENV, "0")
    tier = tiers.SingleQueryTier(KO.flat_lut_one)
    tier._ready = False
    _one_query(tier, flat, q)
    assert tier._child is tiers._NO_CHILD and not tier.wait_for_child(0)
    monkeypatch.delenv(background.BACKGROUND_ENV)
    monkeypatch.setattr(background, "_cache_writable", lambda: None)
    assert background.start(flat) is None


def test_the_child_sees_whether_the_index_is_mapped(flat, make_vectors, tmp_path):
    memory = bbqlib.IVFIndex(bits=1)
    memory.add(make_vectors(300, 16, seed=1))
    assert not background._is_mapped(memory)
    opened = bbqlib.FlatIndex.load(flat.save(tmp_path / "f.bbq"))
    assert background._is_mapped(opened)
    ivf = bbqlib.IVFIndex(bits=1, path=tmp_path / "ivf")
    assert background._is_mapped(ivf)
