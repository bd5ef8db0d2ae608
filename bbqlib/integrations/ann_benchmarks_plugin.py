"""Install bbqlib into an ann-benchmarks checkout, as one of its algorithms.

``python -m bbqlib ann-benchmarks-plugin HARNESS_DIR`` writes, in the harness's current layout
(one folder per algorithm, each with its own ``config.yml``)::

    HARNESS_DIR/ann_benchmarks/algorithms/bbqlib/module.py   the wrappers, as BaseANN subclasses
    HARNESS_DIR/ann_benchmarks/algorithms/bbqlib/config.yml  every definition, angular + euclidean
    HARNESS_DIR/ann_benchmarks/algorithms/bbqlib/Dockerfile  image ann-benchmarks-bbqlib

Then, from ``HARNESS_DIR``, ``python run.py --local --dataset glove-100-angular --algorithm
bbqlib-flat`` runs bbqlib in the same process as the harness, or ``python install.py
--algorithm bbqlib`` builds the image and ``python run.py --algorithm bbqlib-flat`` runs it in
Docker as every other algorithm.

The definitions are the table :data:`DEFINITIONS`; a new quantizer flavour of the flat index
is one row there (and one entry in :data:`bbqlib.integrations.ann_benchmarks.FLAT_FLAVOURS`).
:func:`register_dataset` adds a data set of your own to a harness checkout (the harness lists
its data sets in ``ann_benchmarks/datasets.py`` and downloads them; here nothing is
downloaded).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "DEFINITIONS",
    "DOCKER_TAG",
    "HARNESS_METRICS",
    "MODULE",
    "PluginDefinition",
    "add_subcommand",
    "install_plugin",
    "register_dataset",
    "render_config",
    "render_dockerfile",
    "render_module",
    "warm_up",
]

#: Folder of the plugin under ``ann_benchmarks/algorithms`` (``install.py`` tags the image
#: ``ann-benchmarks-<folder>``).
FOLDER = "bbqlib"
DOCKER_TAG = f"ann-benchmarks-{FOLDER}"
MODULE = f"ann_benchmarks.algorithms.{FOLDER}"
#: The harness's float metrics bbqlib runs under (it scores no others: ``ann_benchmarks.distance``).
HARNESS_METRICS = ("angular", "euclidean")


@dataclass(frozen=True)
class PluginDefinition:
    """One algorithm entry of the plugin's ``config.yml``.

    Parameters
    ----------
    name : str
        The harness's algorithm name (``run.py --algorithm NAME``, the results folder).
    constructor : str
        A class of :mod:`bbqlib.integrations.ann_benchmarks`.
    run_groups : mapping
        Group name -> ``{"args": [...], "query_args": [[...], ...]}`` in the harness's
        syntax: each list inside ``args`` / ``query_args`` is swept, a scalar is fixed.
    base_args : sequence
        Constructor arguments after ``"@metric"`` (e.g. the flavour of :class:`QuantizedFlat`).
    """

    name: str
    constructor: str
    run_groups: Mapping[str, Mapping[str, Any]]
    base_args: Sequence[Any] = field(default_factory=tuple)
    disabled: bool = False


#: Oversample sweeps of the flat indexes, by doc bits: 1-bit codes need a deeper rerank.
OVERSAMPLE = {1: [1, 2, 3, 5, 10, 20], 2: [1, 1.5, 2, 3, 5], 4: [1, 1.5, 2, 3]}
#: Share of the vectors BBQIVF visits, in percent.
VISIT_PERCENTAGE = [0.5, 1, 2, 4, 8, 16]
#: usearch's ``ef`` at search time.
EXPANSION_SEARCH = [16, 32, 64, 128, 256, 512]
#: IVF cluster size and HNSW build parameters (M, efConstruction) of the definitions.
CLUSTER_SIZE = 384
CONNECTIVITY, EXPANSION_ADD = 16, 128


def flat_definition(name: str, constructor: str, bits, base_args=()) -> PluginDefinition:
    """A flat index at each bit width, sweeping :data:`OVERSAMPLE`."""
    groups = {f"bits-{b}": {"args": [b], "query_args": [OVERSAMPLE[b]]} for b in bits}
    return PluginDefinition(name, constructor, groups, tuple(base_args))


#: Every algorithm the plugin installs (for each metric of :data:`HARNESS_METRICS`).
DEFINITIONS: tuple[PluginDefinition, ...] = (
    flat_definition("bbqlib-flat", "BBQFlat", bits=(1, 2, 4)),
    # RaBitQ above 1 bit queries with floats (query_bits="auto"): a flat scan with float
    # queries of multi-bit codes is too slow for a sweep.
    flat_definition("bbqlib-rabitq-flat", "QuantizedFlat", bits=(1,), base_args=["rabitq"]),
    # SAQ at an average of 1 and 2 bits a dimension (its plan spends them where the variance is).
    flat_definition("bbqlib-saq-flat", "QuantizedFlat", bits=(1, 2), base_args=["saq"]),
    PluginDefinition(
        "bbqlib-ivf",
        "BBQIVF",
        {
            f"bits-{b}": {"args": [b, CLUSTER_SIZE], "query_args": [VISIT_PERCENTAGE]}
            for b in (1, 2)
        },
    ),
    PluginDefinition(
        "bbqlib-usearch",
        "BBQUSearch",
        {"bits-1": {"args": [1, CONNECTIVITY, EXPANSION_ADD], "query_args": [EXPANSION_SEARCH]}},
    ),
)


# ------------------------------------------------------------------------------ rendering
def _header(comment: str = "#") -> str:
    from .._version import __version__

    return (
        f"{comment} Written by `python -m bbqlib ann-benchmarks-plugin` (bbqlib {__version__}).\n"
        f"{comment} Change bbqlib.integrations.ann_benchmarks_plugin.DEFINITIONS and run it again "
        "rather than editing this file.\n"
    )


def _flow(value: Any) -> str:
    """A YAML flow scalar or list (JSON is valid YAML; strings stay quoted)."""
    return json.dumps(value)


def render_config(definitions: Sequence[PluginDefinition] = DEFINITIONS) -> str:
    """``config.yml`` in the harness's format: ``float`` -> metric -> list of algorithms."""
    lines = [_header().rstrip("\n"), "float:"]
    for metric in HARNESS_METRICS:
        lines.append(f"  {metric}:")
        for d in definitions:
            lines += [
                f"  - base_args: {_flow(['@metric', *d.base_args])}",
                f"    constructor: {d.constructor}",
                f"    disabled: {'true' if d.disabled else 'false'}",
                f"    docker_tag: {DOCKER_TAG}",
                f"    module: {MODULE}",
                f"    name: {d.name}",
                "    run_groups:",
            ]
            for group, spec in d.run_groups.items():
                lines.append(f"      {group}:")
                lines += [f"        {key}: {_flow(value)}" for key, value in spec.items()]
    return "\n".join(lines) + "\n"


def _constructors(definitions: Sequence[PluginDefinition]) -> list[str]:
    return sorted({d.constructor for d in definitions})


def render_module(definitions: Sequence[PluginDefinition] = DEFINITIONS) -> str:
    """``module.py``: bbqlib's wrappers, also deriving from the harness's ``BaseANN``."""
    classes = "\n\n".join(
        f"class {name}(_bbqlib.{name}, BaseANN):\n"
        f'    """bbqlib.integrations.ann_benchmarks.{name} as a harness BaseANN."""\n'
        for name in _constructors(definitions)
    )
    return (
        _header()
        + '"""bbqlib in ann-benchmarks: the wrappers of bbqlib.integrations.ann_benchmarks.\n\n'
        "They measure memory as BaseANN does (resident set in kB), compile or load their numba\n"
        "kernels inside fit, answer single queries on one thread and batches on all of them.\n"
        '"""\n\n'
        "from bbqlib.integrations import ann_benchmarks as _bbqlib\n\n"
        "from ..base.module import BaseANN\n\n\n" + classes
    )


def render_dockerfile() -> str:
    """A Dockerfile in the harness's style (``FROM ann-benchmarks``, pip, an import check)."""
    from .._version import __version__

    return (
        "FROM ann-benchmarks\n\n"
        + _header()
        + "# Build: python install.py --algorithm bbqlib   (image ann-benchmarks-bbqlib)\n"
        "# bbqlib comes from a wheel put in this folder (ann-benchmarks-plugin --wheel PATH) or,\n"
        '# if there is none, from the pip requirement BBQLIB (--build-arg BBQLIB="...").\n'
        f'ARG BBQLIB="bbqlib[hdf5]=={__version__}"\n'
        f"COPY ann_benchmarks/algorithms/{FOLDER}/ /tmp/bbqlib-plugin/\n"
        'RUN pip install $(ls /tmp/bbqlib-plugin/*.whl 2>/dev/null || echo "$BBQLIB") '
        "usearch psutil\n\n"
        "# Compile numba's kernels into the image, so that no container compiles them in fit.\n"
        "RUN python -c 'from bbqlib.integrations.ann_benchmarks_plugin import warm_up; "
        "warm_up()'\n\n"
        "RUN python -c 'import bbqlib.integrations.ann_benchmarks'\n"
    )


# ------------------------------------------------------------------------------ installing
def _harness_dir(harness_dir) -> Path:
    root = Path(harness_dir)
    missing = [
        p
        for p in ("run_algorithm.py", "ann_benchmarks/algorithms/base/module.py")
        if not (root / p).is_file()
    ]
    if missing:
        raise ValueError(
            f"harness_dir: {str(root)!r} is not an ann-benchmarks checkout ({', '.join(missing)} "
            "not found); pass the folder that holds run.py and ann_benchmarks/"
        )
    return root


def install_plugin(
    harness_dir, *, definitions: Sequence[PluginDefinition] = DEFINITIONS, wheel=None
) -> list[Path]:
    """Write ``module.py``, ``config.yml`` and ``Dockerfile`` into a harness checkout.

    Parameters
    ----------
    harness_dir : str or os.PathLike
        The ann-benchmarks checkout (the folder with ``run.py``).
    definitions : sequence of PluginDefinition
        The algorithms to configure (default :data:`DEFINITIONS`).
    wheel : str or os.PathLike, optional
        A bbqlib wheel copied beside the Dockerfile, which then installs it.

    Returns
    -------
    list of pathlib.Path
        The files written (existing ones are replaced).
    """
    folder = _harness_dir(harness_dir) / "ann_benchmarks" / "algorithms" / FOLDER
    folder.mkdir(exist_ok=True)
    files = {
        "module.py": render_module(definitions),
        "config.yml": render_config(definitions),
        "Dockerfile": render_dockerfile(),
    }
    written = []
    for name, text in files.items():
        (folder / name).write_text(text)
        written.append(folder / name)
    if wheel is not None:
        wheel = Path(wheel)
        if wheel.suffix != ".whl" or not wheel.is_file():
            raise ValueError(f"wheel: expected an existing .whl file, got {str(wheel)!r}")
        written.append(Path(shutil.copy2(wheel, folder / wheel.name)))
    return written


# The marker keeps the module's old path: harness checkouts patched before the move carry it.
_REGISTRY_MARK = "# Data sets registered by bbqlib.adapters.ann_benchmarks_plugin.register_dataset"
_REGISTRY_CODE = f"""

{_REGISTRY_MARK}: their files
# data/<name>.hdf5 were written by write_output above; there is nothing to download.
def _made_by_bbqlib(out_fn: str) -> None:
    raise FileNotFoundError(f"{{out_fn}} is written by bbqlib's register_dataset; run it again")


"""

_WRITE = """
import sys
import numpy
from ann_benchmarks.datasets import write_output
train, test, fn, distance, count = sys.argv[1:]
write_output(numpy.load(train), numpy.load(test), fn, distance, "float", int(count))
"""


def register_dataset(
    harness_dir, name: str, train, test, distance: str, *, count: int = 100
) -> Path:
    """Add a data set to a harness checkout: ``data/<name>.hdf5`` and a ``DATASETS`` entry.

    The file is written by the harness's own ``write_output`` (its HDF5 layout, int64
    neighbours and float64 distances from its brute-force search), run with this Python in
    ``harness_dir``; the name is appended to ``DATASETS`` in ``ann_benchmarks/datasets.py``,
    which ``run_algorithm.py`` and ``data_export.py`` accept names from.

    Parameters
    ----------
    harness_dir : str or os.PathLike
        The ann-benchmarks checkout.
    name : str
        Data set name, by the harness's convention ``<name>-<dim>-<distance>``.
    train, test : array-like [n, d], [m, d]
        Stored in their dtype (float32 keeps the file as the harness's own).
    distance : {"angular", "euclidean"}
    count : int
        Neighbours stored per test vector (the harness's default is 100).

    Returns
    -------
    pathlib.Path
        The ``.hdf5`` file.
    """
    root = _harness_dir(harness_dir)
    if distance not in HARNESS_METRICS:
        raise ValueError(f"distance must be one of {HARNESS_METRICS}, got {distance!r}")
    if not name or any(c in name for c in "/\\\"'\n"):
        raise ValueError(f"name must be a plain data set name, got {name!r}")
    train, test = np.asarray(train), np.asarray(test)
    if train.ndim != 2 or test.ndim != 2 or train.shape[1] != test.shape[1]:
        raise ValueError(f"train {train.shape} and test {test.shape} must be 2-D with the same d")
    if not 1 <= count <= len(train):
        raise ValueError(f"count must be in [1, {len(train)}] (rows of train), got {count}")
    data = root / "data"
    data.mkdir(exist_ok=True)
    out = data / f"{name}.hdf5"
    with tempfile.TemporaryDirectory(dir=data) as tmp:
        np.save(Path(tmp) / "train.npy", train)
        np.save(Path(tmp) / "test.npy", test)
        partial = Path(tmp) / out.name
        args = [str(Path(tmp) / "train.npy"), str(Path(tmp) / "test.npy"), str(partial)]
        subprocess.run(
            [sys.executable, "-c", _WRITE, *args, distance, str(count)],
            cwd=root,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        os.replace(partial, out)
    datasets = root / "ann_benchmarks" / "datasets.py"
    source = datasets.read_text()
    entry = f"DATASETS[{name!r}] = _made_by_bbqlib\n"
    if entry not in source:
        if _REGISTRY_MARK not in source:
            source = source.rstrip("\n") + "\n" + _REGISTRY_CODE
        datasets.write_text(source + entry)
    return out


# ------------------------------------------------------------------------------ warm-up
def warm_up(definitions: Sequence[PluginDefinition] = DEFINITIONS, metrics=HARNESS_METRICS) -> None:
    """Build every definition's index on a small random set and query it once.

    Compiles numba's kernels into its cache (the Docker image runs this at build time).
    """
    from . import ann_benchmarks as wrappers

    X = np.random.default_rng(0).normal(size=(2000, 48)).astype(np.float32)
    for d in definitions:
        for spec in d.run_groups.values():
            args = [a[0] if isinstance(a, list) else a for a in spec.get("args", [])]
            for metric in metrics:
                algo = getattr(wrappers, d.constructor)(metric, *d.base_args, *args)
                algo.fit(X)
                algo.query(X[0], 10)
                algo.done()


# ------------------------------------------------------------------------------ command line
def add_subcommand(subparsers) -> argparse.ArgumentParser:
    """``bbqlib ann-benchmarks-plugin HARNESS_DIR [--wheel PATH]``."""
    parser = subparsers.add_parser(
        "ann-benchmarks-plugin",
        help="install bbqlib as an algorithm into an ann-benchmarks checkout",
        description="Write bbqlib into an ann-benchmarks checkout as one of its algorithms: "
        "HARNESS_DIR/ann_benchmarks/algorithms/bbqlib/ with module.py (the wrappers), "
        "config.yml (every definition, angular and euclidean) and a Dockerfile. Then, from "
        "HARNESS_DIR, 'python run.py --local --dataset glove-100-angular --algorithm "
        "bbqlib-flat' runs it in the harness's process, or 'python install.py --algorithm "
        "bbqlib' builds its image for Docker runs.",
    )
    parser.add_argument("harness_dir", metavar="HARNESS_DIR", help="the ann-benchmarks checkout")
    parser.add_argument("--wheel", help="a bbqlib wheel for the Docker image to install")
    parser.set_defaults(func=_main)
    return parser


def _main(args) -> int:
    for path in install_plugin(args.harness_dir, wheel=args.wheel):
        print(f"wrote {path}")
    names = ", ".join(d.name for d in DEFINITIONS)
    print(
        f"algorithms: {names}\n"
        f"run, from {args.harness_dir}: python run.py --local --dataset DATASET --algorithm NAME"
    )
    return 0
