"""Local Sphinx extension of bbqlib's docs: API pages from ``__all__``, the notebook, links.

* :func:`write_api_pages` writes ``api/*.rst``: one page per public module, whose autosummary
  lists the module's ``__all__`` (names the top level re-exports are documented there once).
* The notebooks of ``examples/`` are copied to ``examples/`` under the docs (myst-nb renders
  them from their stored outputs).
* Links from the guides to files outside ``docs/`` (``../benchmarks/...``, ``../examples/...``)
  become links to the repository, so the Markdown reads the same on GitHub and on the site.
* Docstrings citing sections of the development notes (``(spec §6.7)``), which are not part of
  the repository, render without those citations.
"""

from __future__ import annotations

import importlib
import re
import shutil
from pathlib import Path

DOCS = Path(__file__).resolve().parents[1]
ROOT = DOCS.parent

#: Public modules of the API reference, in order: (module, one-line title).
API_MODULES = [
    ("bbqlib", "Top level: quantizers, indexes, encodings, files"),
    ("bbqlib.quantizers", "Quantizers"),
    ("bbqlib.index", "Indexes"),
    ("bbqlib.transforms", "Preconditioning transforms"),
    ("bbqlib.calibration", "Calibration: the cheapest configuration meeting a recall target"),
    ("bbqlib.analysis", "Evaluation: recall, ground truth, estimator errors"),
    ("bbqlib.analysis.plots", "Plots"),
    ("bbqlib.storage", "Files: bbqlib's containers, atomic writes, locks"),
    ("bbqlib.formats", "Vector files, ann-benchmarks HDF5"),
    ("bbqlib.distributed", "On a Dask cluster: encode, IVF build, sharded search"),
    ("bbqlib.integrations.exchange", "Exchange format: NumPy, records, Arrow"),
    ("bbqlib.integrations", "Integrations: scorers for other engines"),
    ("bbqlib.integrations.usearch", "usearch adapter"),
    ("bbqlib.integrations.faiss", "faiss adapter"),
    ("bbqlib.integrations.hnswlib", "hnswlib adapter"),
    ("bbqlib.integrations.ann_benchmarks", "ann-benchmarks wrappers"),
    ("bbqlib.datasets", "Bundled sample"),
]


def repository_url() -> str:
    """``Repository`` of ``[project.urls]`` in ``pyproject.toml`` (the one place to change it)."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    match = re.search(r'^Repository\s*=\s*"([^"]+)"', text, re.M)
    if match is None:
        raise RuntimeError("pyproject.toml has no Repository entry under [project.urls]")
    return match[1].rstrip("/")


def _public_names(module_name: str, documented: dict[int, str]) -> list[str]:
    module = importlib.import_module(module_name)
    names = []
    for name in getattr(module, "__all__", []):
        if name.startswith("__"):
            continue
        obj = getattr(module, name)
        if callable(obj):  # classes and functions; constants are listed where they live
            key = id(obj)
            if key in documented:  # re-exported: documented under its first public home
                continue
            documented[key] = f"{module_name}.{name}"
        names.append(name)
    return names


def write_api_pages(out: Path = DOCS / "api") -> list[str]:
    """Write ``api/index.rst`` and one page per module of :data:`API_MODULES`."""
    out.mkdir(parents=True, exist_ok=True)
    documented: dict[int, str] = {}
    pages = []
    for module_name, title in API_MODULES:
        names = _public_names(module_name, documented)
        heading = f"``{module_name}``: {title}"
        lines = [
            heading,
            "=" * len(heading),
            "",
            f".. automodule:: {module_name}",
            "   :no-members:",
            "",
            f".. currentmodule:: {module_name}",
            "",
        ]
        if names:
            lines += [".. autosummary::", "   :toctree: generated/", ""]
            lines += [f"   {name}" for name in names]
        page = module_name
        _write_if_changed(out / f"{page}.rst", "\n".join(lines) + "\n")
        pages.append(page)
    index = [
        "API reference",
        "=============",
        "",
        "Generated from the docstrings of every public module (the names in its ``__all__``).",
        "Names the top level re-exports are documented there.",
        "",
        ".. toctree::",
        "   :maxdepth: 1",
        "",
        *[f"   {page}" for page in pages],
    ]
    _write_if_changed(out / "index.rst", "\n".join(index) + "\n")
    return pages


def copy_notebooks(out: Path = DOCS / "examples") -> list[Path]:
    """Copy ``examples/*.ipynb`` next to the docs (Sphinx reads only its source folder)."""
    out.mkdir(parents=True, exist_ok=True)
    copied = []
    for nb in sorted((ROOT / "examples").glob("*.ipynb")):
        target = out / nb.name
        if not target.exists() or target.read_bytes() != nb.read_bytes():
            shutil.copyfile(nb, target)
        copied.append(target)
    return copied


def _write_if_changed(path: Path, text: str) -> None:
    if not path.exists() or path.read_text(encoding="utf-8") != text:
        path.write_text(text, encoding="utf-8")


_OUTSIDE_LINK = re.compile(
    r"\]\(\.\./(?P<path>(?:benchmarks|examples|bbqlib|tests|scripts)/[^)\s]+)\)"
)


def _source_read(app, docname: str, source: list[str]) -> None:
    text = source[0]
    blob = f"{repository_url()}/blob/main/"
    text = _OUTSIDE_LINK.sub(lambda m: f"]({blob}{m['path']})", text)
    source[0] = text


#: "(spec §6.7)", "(spec §1.2, §2.5)", "(spec ``rabitq.md`` §1.4)": citations of notes kept
#: outside the repository (the source keeps them for developers; the site drops them).
_SPEC_CITATION = re.compile(r"\s*\(spec(?: ``[^`]+``)? §[^)]*\)")


def _drop_spec_citations(app, what, name, obj, options, lines: list[str]) -> None:
    lines[:] = [_SPEC_CITATION.sub("", line) for line in lines]


def setup(app):
    app.connect("autodoc-process-docstring", _drop_spec_citations, priority=100)
    # The API pages and the notebook copies are written by conf.py when it is read, before
    # Sphinx lists the source files (autosummary only sees pages that exist by then).
    app.connect("source-read", _source_read)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
