"""The child process of :mod:`bbqlib.index.background`: compiles an index's single-query
path into the kernel cache.

``python -m bbqlib.runtime.compile_child SPEC CACHE_FOLDER``: ``SPEC`` is a pickle of the
parent's index kind, fitted quantizer, rerank vector kind and whether it reads file maps;
the child builds a small index like it, runs :func:`bbqlib.warmup` on it (single-query
kernels only), and exits 0. It holds the cache folder's lock file meanwhile, so children of
several processes compile one after another (the later ones find the kernels and load them).
"""

from __future__ import annotations

import pickle
import sys
import tempfile
from pathlib import Path

from ..index.background import LOCK_NAME

__all__ = []


def _probe_vectors(quantizer, n: int = 600):
    """Vectors the quantizer accepts: unit rows of its dimension, a few clusters."""
    import numpy as np

    rng = np.random.default_rng(0)
    dim = int(quantizer.dim_)
    X = rng.normal(size=(8, dim))[rng.integers(0, 8, n)] + 0.3 * rng.normal(size=(n, dim))
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


def _compile(spec: dict, work: Path) -> None:
    """The child's work: a small index like the parent's, its searches warmed up."""
    import warnings

    from ..index.flat.index import FlatIndex
    from ..index.ivf import IVFIndex
    from ..index.lifecycle import load
    from .warmup import warmup

    makers = {"FlatIndex": FlatIndex, "IVFIndex": IVFIndex}
    cls = makers[spec["kind"]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        index = cls(spec["quantizer"], store_vectors=spec["store_vectors"])
        index.add(_probe_vectors(spec["quantizer"]))
        if spec["mapped"]:
            index = load(index.save(work / "index"))
        warmup(index, batch=False)


def _main(spec_path: str, folder: str) -> int:
    import fcntl

    with open(spec_path, "rb") as f:
        spec = pickle.load(f)
    with open(Path(folder) / LOCK_NAME, "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one compiler per cache folder at a time
        with tempfile.TemporaryDirectory(prefix="bbqlib-compile-") as work:
            _compile(spec, Path(work))
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1], sys.argv[2]))
