"""Every family on the one-query path: a query searched alone gets its row of a batch, bit
for bit, on Flat and IVF, for every similarity, with and without the rerank, and the path it
takes is the scanner's (the fused IVF kernel of the family's layout, where it has one).

With a transform (BBQ's ``precondition``, RaBitQ's rotation) the reference is the batch path
of the query alone: a BLAS product of one row may round apart from the same row inside a
larger product, which moves estimates in their last bits (the exact rerank does not move)."""

from __future__ import annotations

import numpy as np
import pytest

import bbqlib
from bbqlib._kernels import fused as KF
from bbqlib._kernels import single as KO
from bbqlib.index.flat.one import _flat_one_of
from bbqlib.index.ivf import one as single_ivf
from bbqlib.quantizers.turboquant import kernels as KT

#: (name, quantizer factory, the fused IVF kernel it runs or None for the batch path).
FAMILIES = [
    ("bbq1", lambda s: bbqlib.BBQQuantizer(bits=1, similarity=s), KF.ivf_lut_fused),
    ("bbq2-precondition",
     lambda s: bbqlib.BBQQuantizer(bits=2, similarity=s, precondition=True, seed=0),
     KF.ivf_lut_fused),
    ("bbq5", lambda s: bbqlib.BBQQuantizer(bits=5, similarity=s), KF.ivf_planes_fused),
    ("bbq7", lambda s: bbqlib.BBQQuantizer(bits=7, similarity=s), KF.ivf_bytes_fused),
    ("bbq2-float", lambda s: bbqlib.BBQQuantizer(bits=2, query_bits=None, similarity=s),
     KF.ivf_float_fused),
    ("rabitq1", lambda s: bbqlib.RaBitQQuantizer(bits=1, similarity=s, seed=0), None),
    ("rabitq2", lambda s: bbqlib.RaBitQQuantizer(bits=2, similarity=s, seed=0),
     KF.ivf_float_fused),
    ("int8-osq", lambda s: bbqlib.ScalarQuantizer(bits=8, method="osq", similarity=s),
     KF.ivf_bytes_fused),
    ("int8-per_dim", lambda s: bbqlib.ScalarQuantizer(bits=8, method="per_dim", similarity=s),
     KF.ivf_float_fused),
    ("int8-global", lambda s: bbqlib.ScalarQuantizer(bits=8, method="global", similarity=s),
     KF.ivf_grid_fused),
    ("saq2", lambda s: bbqlib.SAQQuantizer(bits=2.0, similarity=s, seed=0), KF.ivf_saq_fused),
    ("turboquant4", lambda s: bbqlib.TurboQuantQuantizer(bits=4, similarity=s, seed=0),
     KT.ivf_turboquant_fused),
    ("turboquant1", lambda s: bbqlib.TurboQuantQuantizer(bits=1, similarity=s, seed=0),
     KT.ivf_turboquant_fused),
    ("turboquant-prod3",
     lambda s: bbqlib.TurboQuantQuantizer(bits=3, variant="prod", similarity=s, seed=0),
     KT.ivf_turboquant_fused),
]  # fmt: skip
SIMILARITIES = ["euclidean", "cosine", "max_inner_product"]


def _data(similarity, make_vectors, seed):
    X = make_vectors(700, 32, kind="clustered", seed=seed)
    Q = np.concatenate([X[:4] + 0.01, make_vectors(4, 32, seed=seed + 1)])
    if similarity == "max_inner_product":
        X *= np.exp(np.random.default_rng(seed).uniform(-1, 1, size=(len(X), 1))).astype(np.float32)
    return X, Q


def _same(one, batch_row):
    np.testing.assert_array_equal(one[1][0], batch_row[1])
    np.testing.assert_array_equal(one[0][0], batch_row[0])


@pytest.mark.parametrize("similarity", SIMILARITIES)
@pytest.mark.parametrize("name, make, fused", FAMILIES, ids=[f[0] for f in FAMILIES])
def test_one_query_is_its_row_of_a_batch(name, make, fused, similarity, make_vectors):
    X, Q = _data(similarity, make_vectors, seed=len(name))
    flat = bbqlib.FlatIndex(make(similarity))
    flat.add(X)
    ivf = bbqlib.IVFIndex(make(similarity), cluster_size=64)
    ivf.add(X)
    assert _flat_one_of(flat) is not None  # every family has a one-query flat scan
    state = single_ivf._state(ivf)
    assert (state is False and fused is None) or state["kernel"] is fused
    for index in (flat, ivf):
        for kwargs in ({}, {"rerank": False}, {"k": 3, "scores": "similarity"}):
            k = kwargs.pop("k", 10)
            batch = index.search(Q, k, **kwargs)
            for i in range(len(Q)):
                row = (batch[0][i], batch[1][i])
                if index.quantizer.transform_ is not None:
                    # a BLAS product of one row may round apart from the same row in a batch:
                    # the reference is the batch path of this query alone (float64: no fast path)
                    alone = index.search(Q[i : i + 1].astype(np.float64), k, **kwargs)
                    row = (alone[0][0], alone[1][0])
                _same(index.search(Q[i], k, **kwargs), row)
                if index is ivf and fused is not None:
                    stats = index.last_search_stats
                    index.search(Q[i : i + 1].astype(np.float64), k, **kwargs)  # batch path
                    assert index.last_search_stats == stats


def test_the_fused_call_is_the_one_that_runs(make_vectors, monkeypatch):
    """A family's fused kernel answers each one-query IVF search in one call (here int8
    ``per_dim``'s float kernel), and the flat path does not run the batch search."""
    X, Q = _data("cosine", make_vectors, seed=9)
    calls = []
    real = KF.ivf_float_fused
    monkeypatch.setattr(KF, "ivf_float_fused", lambda *a: calls.append(1) or real(*a))
    ivf = bbqlib.IVFIndex(bbqlib.ScalarQuantizer(bits=8, method="per_dim"), cluster_size=64)
    ivf.add(X)
    for i in range(len(Q)):
        ivf.search(Q[i], 10)
    assert len(calls) == len(Q)
    flat = bbqlib.FlatIndex(bbqlib.ScalarQuantizer(bits=8, method="global"))
    flat.add(X)
    monkeypatch.setattr(type(flat), "_search_batch", None)  # the batch path must not run
    flat.search(Q[0], 10)
    assert KO.prepare_one.signatures


@pytest.mark.parametrize("name", ["int8-per_dim", "saq2"])
def test_one_query_searches_racing_adds(name, make_vectors):
    """Threads searching one query at a time through a family's fused kernel while another
    thread adds (and reuses its batch buffer): every search sees the index before or after an
    add, its ids are rows that existed, and once the adds end a search equals its batch row."""
    import threading

    make = dict((f[0], f[1]) for f in FAMILIES)[name]
    X = make_vectors(2400, 32, kind="clustered", seed=21)
    index = bbqlib.IVFIndex(make("euclidean"), cluster_size=64)
    index.add(X[:800])
    Q = X[:6] + 0.01
    errors, stop = [], threading.Event()

    def searcher():
        while not stop.is_set():
            for i in range(len(Q)):
                try:
                    _, ids = index.search(Q[i], 10)
                    assert ((ids >= -1) & (ids < 2400)).all()
                except Exception as exc:  # noqa: BLE001 - reported below
                    errors.append(exc)

    threads = [threading.Thread(target=searcher) for _ in range(2)]
    for t in threads:
        t.start()
    buf = np.empty((400, 32), np.float32)
    for start in range(800, 2400, 400):
        buf[:] = X[start : start + 400]  # the caller reuses one buffer for every batch
        index.add(buf)
    stop.set()
    for t in threads:
        t.join()
    assert not errors, errors[:1]
    batch = index.search(Q, 10)
    for i in range(len(Q)):
        _same(index.search(Q[i], 10), (batch[0][i], batch[1][i]))
