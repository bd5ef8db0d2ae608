"""Write small pickles of fitted indexes, quantizers and encoded vectors, for the pickle tests.

A pickle names every class of its object graph by module path, so moving a module breaks the
pickles written before the move unless the old path still resolves (issue 28: shims). The
tests load the pickles this script wrote with the bbqlib of its day and check that they still
serve the results recorded beside them (``tests/test_pickles.py``)::

    python scripts/make_pickle_fixtures.py tests/fixtures/pickles

Data: seeded Gaussian vectors (synthetic on purpose: the pickles stay between 1 and 80 kB),
custom ids, one or two of them deleted. Every object is pickled after a batch and a one-query
search, as a user's pickle would be (the one-query paths run from the first query here, as
after ``bbqlib.warmup``). The committed fixtures were written before pickles left derived
caches out (issue 28, step 0.4), so they carry ``EncodedVectors._cache``, the one-query and
live-row caches and SAQ's ``_saq_fastscan``: rewriting them would lose that coverage.
``info.json`` lists the cases, the bbqlib version and the module paths each pickle references.
"""

from __future__ import annotations

import argparse
import io
import json
import pickle
from pathlib import Path

import numpy as np

import bbqlib
from bbqlib.index import tiers as single

N, D, K = 64, 16, 5
N_IVF = 256

#: Quantizers by family and bit width; each makes a bare quantizer, a flat index, an IVF.
QUANTIZERS = {
    "bbq1_cosine": lambda: bbqlib.BBQQuantizer(bits=1, similarity="cosine"),
    "rabitq2_euclidean": lambda: bbqlib.RaBitQQuantizer(bits=2, similarity="euclidean", seed=0),
    "int8_osq_cosine": lambda: bbqlib.ScalarQuantizer(bits=8, method="osq", similarity="cosine"),
    "int8_per_dim_euclidean": lambda: bbqlib.ScalarQuantizer(
        bits=8, method="per_dim", similarity="euclidean"
    ),
    "int8_global_cosine": lambda: bbqlib.ScalarQuantizer(
        bits=8, method="global", similarity="cosine"
    ),
    "saq2_euclidean": lambda: bbqlib.SAQQuantizer(bits=2.0, similarity="euclidean", seed=0),
}
IVF_CASES = ("bbq1_cosine", "rabitq2_euclidean", "saq2_euclidean")
#: The IVF searches visit half the lists (several lists, not all of them).
IVF_SEARCH = {"visit_percentage": 50.0}


def data(n: int, seed: int):
    """Seeded vectors, queries and unordered ids (the tests read the queries from the npz)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, D)).astype(np.float32) + 0.3
    Q = rng.normal(size=(6, D)).astype(np.float32) + 0.3
    ids = rng.choice(2**40, size=n, replace=False).astype(np.int64)
    return X, Q, ids


def index_results(index, Q, **kwargs) -> dict:
    """Batch searches with and without rerank, and the one-query search of ``Q[0]``."""
    out = {"queries": Q}
    for rerank in (True, False):
        scores, ids = index.search(Q, k=K, rerank=rerank, scores="raw", **kwargs)
        out[f"scores_rerank{int(rerank)}"] = scores
        out[f"ids_rerank{int(rerank)}"] = ids
    scores, ids = index.search(Q[0], k=K, scores="raw", **kwargs)
    out["scores_one"], out["ids_one"] = scores, ids
    return out


def quantizer_results(quantizer, X, Q) -> tuple:
    """``X`` encoded, and ``quantizer.search`` and ``estimate`` of ``Q`` against it."""
    enc = quantizer.encode(X)
    scores, rows = quantizer.search(Q, enc, K)
    estimate = quantizer.estimate(Q, enc)
    return enc, {"vectors": X, "queries": Q, "scores": scores, "rows": rows, "estimate": estimate}


class _Recorder(pickle.Unpickler):
    """An unpickler that notes every class it is asked for."""

    def __init__(self, file):
        super().__init__(file)
        self.found: set[str] = set()

    def find_class(self, module, name):
        self.found.add(f"{module}.{name}")
        return super().find_class(module, name)


def module_paths(blob: bytes) -> list[str]:
    """The bbqlib ``module.qualname`` a pickle imports (what a later move must keep loading)."""
    recorder = _Recorder(io.BytesIO(blob))
    recorder.load()
    return sorted(p for p in recorder.found if p.startswith("bbqlib"))


def write(out: Path, name: str, obj, results: dict, info: dict) -> None:
    blob = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    (out / f"{name}.pkl").write_bytes(blob)
    np.savez(out / f"{name}.expected.npz", **results)
    info["cases"][name] = module_paths(blob)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("outdir", type=Path)
    args = p.parse_args()
    # The one-query paths from the first query (as after ``bbqlib.warmup``), so the pickles
    # hold their caches too.
    single.COMPILE_SINGLE_AFTER = 0.0
    out = args.outdir
    out.mkdir(parents=True, exist_ok=True)
    info = {"bbqlib_version": bbqlib.__version__, "scores": "raw", "k": K, "cases": {}}

    X, Q, ids = data(N, 0)
    for name, make in QUANTIZERS.items():
        index = bbqlib.FlatIndex(make())
        index.add(X, ids=ids)
        index.delete(ids[[7]])
        results = index_results(index, Q)
        write(out, f"flat_{name}", index, results, info)

        quantizer = make().fit(X)
        enc, results = quantizer_results(quantizer, X, Q)  # the searches fill enc's cache
        write(out, f"quantizer_{name}", quantizer, results, info)
        if name == "bbq1_cosine":  # the quantizer that made it: quantizer_bbq1_cosine.pkl
            assert enc._cache, "a search fills the encoded vectors' cache"
            write(out, "encoded_bbq1_cosine", enc, results, info)

    X, Q, ids = data(N_IVF, 1)
    for name in IVF_CASES:
        index = bbqlib.IVFIndex(QUANTIZERS[name](), cluster_size=64, seed=7)
        index.add(X, ids=ids)
        index.search(Q[0], k=K, **IVF_SEARCH)  # the one-query path runs only without deletes
        index.delete(ids[[3, 5]])
        results = index_results(index, Q, **IVF_SEARCH)
        write(out, f"ivf_{name}", index, results, info)

    (out / "info.json").write_text(json.dumps(info, indent=1) + "\n")


if __name__ == "__main__":
    main()
