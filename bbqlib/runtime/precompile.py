"""``python -m bbqlib warmup``: compile ahead of time every kernel the searches of a chosen
set of index kinds and families need, into bbqlib's kernel cache.

A fresh container or CI runner otherwise pays numba's compilation at its first queries
(:func:`bbqlib.warmup` pays it for one index at start-up). Run this once at image build time,
with the cache folder the servers will read (``BBQLIB_CACHE_DIR`` or the per-user default),
and the servers' first queries load machine code instead of compiling it.

What a run covers: for each chosen family configuration and index kind, a small index of
synthetic vectors under each chosen similarity, searched by one query and by a batch (the
single-threaded kernels and their multi-threaded twins, :func:`bbqlib.warmup`), once in memory
and once saved and opened again (an opened index's arrays are read-only file maps, whose
kernels compile apart from those of in-memory arrays). Kernels do not depend on the vector
dimension, the data or ``k``, so one small index per case stands for every index of that
case. Similarities share most kernels: after the first, each costs little.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

__all__ = ["FAMILIES", "INDEX_KINDS", "SIMILARITIES", "PrecompileReport", "precompile"]

#: The family configurations ``--family all`` covers, by the name the command line takes:
#: one per distinct set of kernels (BBQ 1-bit stands for 2 and 4 bits, which run the same
#: lookup-table and popcount kernels; 7-bit for the byte codes of 5-8 bits).
FAMILIES = {
    "bbq1": ("BBQQuantizer", {"bits": 1}),
    "bbq7": ("BBQQuantizer", {"bits": 7}),
    "rabitq1": ("RaBitQQuantizer", {"bits": 1, "seed": 0}),
    "rabitq2": ("RaBitQQuantizer", {"bits": 2, "seed": 0}),
    "int8_osq": ("ScalarQuantizer", {"bits": 8, "method": "osq"}),
    "int8_per_dim": ("ScalarQuantizer", {"bits": 8, "method": "per_dim"}),
    "int8_global": ("ScalarQuantizer", {"bits": 8, "method": "global"}),
    "saq": ("SAQQuantizer", {"bits": 2.0, "seed": 0}),
    "turboquant_mse": ("TurboQuantQuantizer", {"bits": 4, "variant": "mse", "seed": 0}),
    "turboquant_prod": ("TurboQuantQuantizer", {"bits": 3, "variant": "prod", "seed": 0}),
}
#: The families of the default index (``FlatIndex()`` and ``IVFIndex()``: BBQ 1-bit).
DEFAULT_FAMILIES = ("bbq1",)
SIMILARITIES = ("cosine", "dot_product", "euclidean", "max_inner_product")

# Small enough to build in well under a second, large enough for an IVF of several lists.
_N, _DIM = 2000, 64

INDEX_KINDS = ("flat", "ivf")


@dataclass
class PrecompileReport:
    """What :func:`precompile` did: seconds per ``(family, index kind)``, the total, and
    the kernel cache's folder with its size in bytes before and after."""

    seconds: dict = field(default_factory=dict)
    total_seconds: float = 0.0
    cache_dir: str = ""
    cache_bytes_before: int = 0
    cache_bytes_after: int = 0

    def __str__(self) -> str:
        lines = [f"{'family':<16} {'index':<6} {'seconds':>8}"]
        lines += [f"{f:<16} {k:<6} {s:8.1f}" for (f, k), s in self.seconds.items()]
        lines.append(f"total {self.total_seconds:.1f} s; kernel cache {self.cache_dir}: "
                     f"{self.cache_bytes_before / 1e6:.1f} MB before, "
                     f"{self.cache_bytes_after / 1e6:.1f} MB after")  # fmt: skip
        return "\n".join(lines)


def _folder_bytes(folder: Path) -> int:
    if not folder.is_dir():
        return 0
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _choose(given, everything, name: str) -> tuple:
    if given is None or given == "all" or given == ("all",):
        return tuple(everything)
    given = (given,) if isinstance(given, str) else tuple(given)
    unknown = [g for g in given if g not in everything]
    if unknown:
        raise ValueError(f"unknown {name} {unknown}: choose from {', '.join(everything)} or all")
    return given


def _vectors(similarity: str) -> np.ndarray:
    """Clustered synthetic vectors (unit rows where the similarity asks for them)."""
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(16, _DIM))
    X = centres[rng.integers(0, 16, _N)] + 0.3 * rng.normal(size=(_N, _DIM))
    if similarity == "dot_product":
        X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X.astype(np.float32)


def _quantizer(family: str, similarity: str):
    from .. import quantizers

    cls_name, options = FAMILIES[family]
    return getattr(quantizers, cls_name)(similarity=similarity, **options)


def _flat(quantizer, folder: Path, name: str):
    """A flat index in memory and how to save it to a file in ``folder``."""
    from ..index.flat.index import FlatIndex

    index = FlatIndex(quantizer)
    return index, lambda: index.save(folder / f"{name}.bbq")


def _ivf(quantizer, folder: Path, name: str):
    """An IVF index in memory and how to save it to a folder in ``folder``."""
    from ..index.ivf import IVFIndex

    index = IVFIndex(quantizer)
    return index, lambda: index.save(folder / name)


#: How each index kind is made and saved: ``(quantizer, folder, name) -> (index, save)``.
_MAKERS = {"flat": _flat, "ivf": _ivf}


def _one_case(kind: str, family: str, similarity: str, mapped: bool, folder: Path) -> None:
    import warnings

    from ..index.lifecycle import load
    from .warmup import warmup

    name = f"{kind}-{family}-{similarity}"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the probe data may trip data warnings; not the user's
        index, save = _MAKERS[kind](_quantizer(family, similarity), folder, name)
        index.add(_vectors(similarity))
        warmup(index)
        if not mapped:
            return
        opened = load(save())
        warmup(opened)
        close = getattr(opened, "close", None)
        if close is not None:
            close()


def precompile(indexes="all", families=None, similarities="all", *, mapped: bool = True,
               progress=None) -> PrecompileReport:  # fmt: skip
    """Compile, into bbqlib's kernel cache, every kernel the searches of the chosen indexes
    need (see the module notes for what a run covers).

    Parameters
    ----------
    indexes : "flat", "ivf", "all" or a sequence of them
    families : str, sequence of str or None
        Keys of :data:`FAMILIES` or ``"all"``; None: the default index's (BBQ 1-bit).
    similarities : str or sequence of str
        Similarities to cover, or ``"all"``.
    mapped : bool
        Also cover indexes opened from files (read-only maps compile apart).
    progress : callable, optional
        Called with a line of text after each ``(family, index kind)``.

    Returns
    -------
    PrecompileReport
    """
    from .._kernels.cache import cache_dir
    from .warmup import warmup

    kinds = _choose(indexes, INDEX_KINDS, "index kind")
    fams = _choose(DEFAULT_FAMILIES if families is None else families, FAMILIES, "family")
    sims = _choose(similarities, SIMILARITIES, "similarity")
    report = PrecompileReport(cache_dir=str(cache_dir()))
    report.cache_bytes_before = _folder_bytes(cache_dir())
    start = time.perf_counter()
    warmup()  # numba's target and thread pool first, so the first case does not carry them
    with tempfile.TemporaryDirectory(prefix="bbqlib-precompile-") as tmp:
        for family in fams:
            for kind in kinds:
                t0 = time.perf_counter()
                for similarity in sims:
                    _one_case(kind, family, similarity, mapped, Path(tmp))
                report.seconds[(family, kind)] = time.perf_counter() - t0
                if progress is not None:
                    progress(f"{family:<16} {kind:<6} {report.seconds[(family, kind)]:6.1f} s")
    report.total_seconds = time.perf_counter() - start
    report.cache_bytes_after = _folder_bytes(cache_dir())
    return report
