"""Write small index files of the running bbqlib's formats, for the format-policy tests.

Every format version a bbqlib release could write stays readable (``docs/formats.md``); the
tests open the files this script wrote with the bbqlib of its day and check that they still
serve the results recorded beside them. Run it from a checkout of the version whose formats
you want to freeze (it uses only keyword arguments, which every version accepts)::

    python scripts/make_format_fixtures.py tests/fixtures/formats --tag flat_v1
    python scripts/make_format_fixtures.py tests/fixtures/formats --tag ivf_v2 --ivf

Data: seeded Gaussian vectors (synthetic on purpose: the files must stay a few kB), added
with custom ids (large, unordered), one or two of them deleted. The results are
recorded with ``scores=SCORES``, which ``info.json`` names (fixtures without that key hold
Lucene-mapped ``"similarity"`` scores).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

import bbqlib

FLAT_CASES = {
    "bbq1_cosine": lambda: bbqlib.FlatIndex(bits=1, similarity="cosine"),
    "bbq7_euclidean": lambda: bbqlib.FlatIndex(bits=7, similarity="euclidean"),
    "bbq2_mip_hadamard": lambda: bbqlib.FlatIndex(
        bits=2, similarity="max_inner_product", precondition="hadamard", seed=3
    ),
    "rabitq2_euclidean": lambda: bbqlib.FlatIndex(
        bbqlib.RaBitQQuantizer(bits=2, similarity="euclidean", seed=0)
    ),
    "int8_per_dim_euclidean": lambda: bbqlib.FlatIndex(
        bbqlib.ScalarQuantizer(bits=8, method="per_dim", similarity="euclidean")
    ),
    "int8_global_cosine": lambda: bbqlib.FlatIndex(
        bbqlib.ScalarQuantizer(bits=8, method="global", similarity="cosine")
    ),
    "int8_osq_cosine": lambda: bbqlib.FlatIndex(
        bbqlib.ScalarQuantizer(bits=8, method="osq", similarity="cosine")
    ),
}


#: The score kind the results are recorded in.
SCORES = "raw"


def _data(n: int, d: int, seed: int):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32) + 0.3
    Q = rng.normal(size=(8, d)).astype(np.float32) + 0.3
    ids = rng.choice(2**40, size=n, replace=False).astype(np.int64)
    return X, Q, ids


def _record(out: Path, index, Q, **kwargs) -> None:
    results = {}
    for rerank in (True, False):
        scores, ids = index.search(Q, k=5, rerank=rerank, scores=SCORES, **kwargs)
        results[f"scores_rerank{int(rerank)}"] = scores
        results[f"ids_rerank{int(rerank)}"] = ids
    np.savez(out, queries=Q, **results)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("outdir", type=Path)
    p.add_argument("--tag", required=True, help="folder name, e.g. flat_v1 or ivf_v2")
    p.add_argument("--ivf", action="store_true", help="write IVF directories, not flat files")
    args = p.parse_args()
    out = args.outdir / args.tag
    out.mkdir(parents=True, exist_ok=True)
    info = {"bbqlib_version": bbqlib.__version__, "scores": SCORES, "cases": []}
    if args.ivf:
        X, Q, ids = _data(600, 16, 1)
        for name, sim in (("ivf1_cosine", "cosine"), ("ivf1_euclidean", "euclidean")):
            index = bbqlib.IVFIndex(bits=1, similarity=sim, cluster_size=64, seed=7)
            index.add(X, ids=ids)
            index.delete(ids[[3, 5]])
            index.save(out / name)
            _record(out / f"{name}.expected.npz", index, Q, visit_percentage=50.0)
            info["cases"].append(name)
    else:
        X, Q, ids = _data(120, 24, 0)
        for name, make in FLAT_CASES.items():
            index = make()
            index.add(X, ids=ids)
            index.delete(ids[[7]])
            index.save(out / f"{name}.bbq")
            _record(out / f"{name}.expected.npz", index, Q)
            info["cases"].append(name)
    (out / "info.json").write_text(json.dumps(info, indent=1) + "\n")


if __name__ == "__main__":
    main()
