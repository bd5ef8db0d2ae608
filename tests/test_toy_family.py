"""A quantizer family defined entirely in this module runs through Flat and IVF, batch and
one-query paths, and through files: what adding a family takes (``docs/architecture.md``).

The toy family codes each vector (or IVF residual) on its own min/max grid, one byte per
dimension, and scores float queries. It registers one :class:`~bbqlib.encoding.Family` (its
rows and wire numbers) and one quantizer class; its scanner is the shared residual scanner
(float queries against byte docs). No bbqlib module names it.
"""

from __future__ import annotations

import numpy as np
import pytest

import bbqlib
from bbqlib.analysis import recall_at_k
from bbqlib.encoding import ENCODINGS, Family
from bbqlib.index.ivf import one as single_ivf
from bbqlib.layouts.codes import DocCodes, QueryCodes
from bbqlib.quantizers.base import Quantizer
from bbqlib.quantizers.encoded import EncodedVectors
from bbqlib.quantizers.registry import register_quantizer
from bbqlib.quantizers.scanner import ResidualScanner

#: Per vector: the grid's lower end and step (float32).
TOY_CORRECTIONS = np.dtype([("lower", "<f4"), ("step", "<f4")])
TOY = Family(
    "toy_minmax", 0x7000, (8,), (None,), {8: None}, planes_up_to=0,
    corrections_small=TOY_CORRECTIONS, corrections_large=TOY_CORRECTIONS,
)  # fmt: skip


def _grid(R: np.ndarray):
    """Codes of rows ``R`` on their own min/max grids: ``(codes, lower, step, x̂)``."""
    lower = R.min(axis=1).astype(np.float32)
    step = ((R.max(axis=1) - lower) / np.float32(255)).astype(np.float32)
    div = np.where(step > 0, step, np.float32(1))
    codes = np.clip(np.floor((R - lower[:, None]) / div[:, None] + 0.5), 0, 255).astype(np.uint8)
    xhat = lower[:, None].astype(np.float64) + step[:, None].astype(np.float64) * codes
    return codes, lower, step, xhat


@register_quantizer
class ToyQuantizer(Quantizer):
    """Min/max codes per vector, float queries (the toy family)."""

    family = "toy_minmax"
    _param_names = ("bits", "query_bits", "similarity", "precondition", "seed")

    def __init__(self, bits=8, query_bits=None, similarity="cosine", precondition=None, seed=0):
        self.bits = bits
        self.query_bits = query_bits
        self.similarity = similarity
        self.precondition = precondition
        self.seed = seed

    def _fit_transformed(self, X):
        self.centroid_dot_ = 0.0

    def _fingerprint_parts(self):
        return ("toy", self.similarity_.value)

    def _restore(self, params, arrays):
        self.centroid_dot_ = 0.0

    def scanner(self):
        self._check_fitted()
        return ResidualScanner(self)

    def encode(self, X) -> EncodedVectors:
        self._check_fitted()
        codes, lower, step, _ = _grid(self._rotated(self._validated(X, "X")))
        corrections = np.empty(len(codes), dtype=TOY_CORRECTIONS)
        corrections["lower"], corrections["step"] = lower, step
        return EncodedVectors(codes, corrections, self.encoding_, self.dim_, 0.0, self.fingerprint_)

    def _doc_codes(self, enc: EncodedVectors) -> DocCodes:
        codes = np.ascontiguousarray(enc.codes)
        l2 = self.similarity_.is_distance
        factors = np.zeros((len(enc), 4), dtype=np.float32)
        factors[:, 0] = enc.corrections["lower"]
        factors[:, 1] = enc.corrections["step"]
        factors[:, 2] = codes.sum(axis=1, dtype=np.int64)
        if l2:
            lo = enc.corrections["lower"].astype(np.float64)[:, None]
            xhat = lo + enc.corrections["step"].astype(np.float64)[:, None] * codes
            factors[:, 3] = np.einsum("ij,ij->i", xhat, xhat)
        return DocCodes(enc.encoding, codes, factors, enc.dim, 0.0, l2)

    def _query_codes(self, Q) -> QueryCodes:
        y = np.ascontiguousarray(self._rotated(Q), dtype=np.float32)
        factors = np.zeros((len(y), 4))
        factors[:, 1] = 1.0
        factors[:, 2] = y.sum(axis=1, dtype=np.float64)
        if self.similarity_.is_distance:
            factors[:, 3] = np.einsum("ij,ij->i", y, y, dtype=np.float64)
        return QueryCodes.of(self.encoding_, y, factors)

    def encode_pairs(self, W, rows, centres, lists):
        C = centres[lists].astype(np.float64)
        codes, lower, step, rhat = _grid((W[rows].astype(np.float64) - C).astype(np.float32))
        factors = np.empty((len(rows), 4), dtype=np.float32)
        factors[:, 0], factors[:, 1] = lower, step
        factors[:, 2] = codes.sum(axis=1, dtype=np.int64)
        if self.similarity_.is_distance:
            factors[:, 3] = np.einsum("ij,ij->i", rhat, rhat)
        else:  # the scan adds <q, c> and subtracts <c, c>: <q, c + r̂> in all
            factors[:, 3] = np.einsum("ij,ij->i", C, C + rhat)
        return codes, factors

    def query_pairs(self, Qt, centres, pair_query, pair_list, *, lut=False):
        return self._float_query_pairs(Qt, centres, pair_query, pair_list)


@pytest.fixture(scope="module", autouse=True)
def _toy_family():
    ENCODINGS.register(TOY)
    yield
    ENCODINGS.unregister(TOY.name)


@pytest.mark.parametrize("similarity", ["euclidean", "cosine", "max_inner_product"])
def test_a_family_of_a_test_module_runs_everywhere(similarity, make_vectors, tmp_path):
    X = make_vectors(900, 32, kind="clustered", seed=5)
    Q = np.concatenate([X[:6] + 0.01, make_vectors(6, 32, seed=6)])
    exact = bbqlib.FlatIndex(
        bbqlib.ScalarQuantizer(bits=8, method="per_dim", similarity=similarity)
    )
    exact.add(X)
    truth = exact.search(Q, 10)[1]
    flat = bbqlib.FlatIndex(ToyQuantizer(similarity=similarity))
    flat.add(X)
    ivf = bbqlib.IVFIndex(ToyQuantizer(similarity=similarity), cluster_size=64,
                          visit_percentage=100.0)  # fmt: skip
    ivf.add(X)
    assert single_ivf._state(ivf)["kernel"].py_func.__name__ == "ivf_float_fused"
    flat.save(tmp_path / "toy.bbq")
    loaded = bbqlib.load(tmp_path / "toy.bbq")
    for index in (flat, ivf, loaded):
        for rerank in (True, False):
            batch = index.search(Q, 10, rerank=rerank)
            for i in range(len(Q)):  # one query: the scanner's path, its row of the batch
                one = index.search(Q[i], 10, rerank=rerank)
                np.testing.assert_array_equal(one[1][0], batch[1][i])
                np.testing.assert_array_equal(one[0][0], batch[0][i])
            assert recall_at_k(batch[1], truth, 10) >= 0.9  # a toy grid, no oversampling
    np.testing.assert_array_equal(loaded.search(Q, 10)[1], flat.search(Q, 10)[1])
