"""Every ```python block of the README and of docs/*.md runs (issue 13), on the bundled sample.

One test per block, named ``<file>:<line>`` (the line of the opening fence), so a failure points
at the block to fix. Blocks of one page run in order in one namespace, as a reader would paste
them, in a scratch directory (files they save land there). A page's blocks are self-contained:
they load their data themselves (``bbqlib.datasets.load_demo_sample``); the namespace starts
empty.

A block that needs an optional engine (faiss, hnswlib, usearch, pyarrow) is skipped when that
engine is missing, except under ``CI=true`` where the ``test`` extra installs all of them.
A block whose fence reads ```python no-test is shown but not run (say why in the text).
"""

from __future__ import annotations

import importlib.util
import linecache
import os
import re
from pathlib import Path

import pytest
from paths import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(
    r"^(?P<indent> *)```(?P<info>[^\n`]*)\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S
)
#: Engines a block may import; the test extra installs them all.
ENGINES = {"faiss": "faiss", "hnswlib": "hnswlib", "usearch": "usearch", "pyarrow": "pyarrow"}


def python_blocks(path: Path) -> list[tuple[int, str, str]]:
    """``(line, info, code)`` of each fenced block whose info string starts with python."""
    text = path.read_text(encoding="utf-8")
    out = []
    for m in FENCE.finditer(text):
        info = m["info"].strip()
        if info.split(" ")[:1] != ["python"]:
            continue
        line = text.count("\n", 0, m.start()) + 1
        indent = len(m["indent"])
        code = "\n".join(ln[indent:] for ln in m["body"].splitlines())
        out.append((line, info, code))
    return out


# Blocks marked ``no-test`` (they need a real cluster or a service) are not collected at all:
# they are not tests, and a skip would hide a real one among them.
BLOCKS = [
    (page, *block)
    for page in PAGES
    for block in python_blocks(page)
    if "no-test" not in block[1].split()
]
IDS = [f"{page.relative_to(ROOT)}:{line}" for page, line, _, _ in BLOCKS]


def test_pages_have_python_blocks():
    pages = {page.name for page, *_ in BLOCKS}
    assert {"README.md", "adapters.md", "estimators.md", "int8.md"} <= pages, pages


def _engines_used(code: str) -> list[str]:
    used = set(re.findall(r"^\s*(?:import|from)\s+(\w+)", code, re.M))
    used |= {"faiss"} if "integrations.faiss" in code else set()
    used |= {"hnswlib"} if "integrations.hnswlib" in code else set()
    used |= {"usearch"} if "integrations.usearch" in code else set()
    used |= {"pyarrow"} if "to_arrow" in code or "from_arrow" in code else set()
    return sorted(ENGINES[name] for name in used if name in ENGINES)


class _Page:
    """The namespace and progress of one page's blocks."""

    def __init__(self, workdir: Path):
        self.namespace: dict = {"__name__": "__docs__"}
        self.workdir = workdir
        self.done: set[int] = set()
        self.failed: int | None = None


_PAGES: dict[Path, _Page] = {}


def _run(page: Path, line: int, code: str, state: _Page, monkeypatch) -> None:
    missing = [e for e in _engines_used(code) if importlib.util.find_spec(e) is None]
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{missing} not installed; the test extra should install it")
        pytest.skip(f"needs {', '.join(missing)} (pip install -e '.[test]')")
    monkeypatch.chdir(state.workdir)
    try:
        # Tracebacks show the block's own lines (line 1 = the line after the fence).
        name = f"{page.relative_to(ROOT)}, block at line {line}"
        linecache.cache[name] = (len(code), None, code.splitlines(keepends=True), name)
        exec(compile(code, name, "exec"), state.namespace)
    except BaseException:
        state.failed = line
        raise
    finally:
        state.done.add(line)


@pytest.mark.parametrize(("page", "line", "info", "code"), BLOCKS, ids=IDS)
def test_block_runs(page, line, info, code, tmp_path_factory, monkeypatch):
    state = _PAGES.get(page)
    if state is None:
        state = _PAGES[page] = _Page(tmp_path_factory.mktemp(page.stem))
    # Run the page's earlier blocks first when this block was selected on its own (-k).
    for prev_line, prev_info, prev_code in python_blocks(page):
        if prev_line >= line:
            break
        if prev_line not in state.done and "no-test" not in prev_info.split():
            _run(page, prev_line, prev_code, state, monkeypatch)
    if state.failed is not None and state.failed < line:
        pytest.skip(f"an earlier block of {page.name} (line {state.failed}) failed")
    _run(page, line, code, state, monkeypatch)


def test_readme_visit_percentage_gives_sensible_recall():
    """The README's IVF example once used visit_percentage=2.0: recall@10 0.69 on the sample."""
    import bbqlib
    from bbqlib.analysis import exact_knn, recall_at_k
    from bbqlib.datasets import load_demo_sample

    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    values = re.findall(r"index\.search\(Q, k=10, visit_percentage=([\d.]+)\)", readme)
    assert len(values) == 1, values
    sample = load_demo_sample()
    X, Q = sample["base"], sample["queries"]
    index = bbqlib.IVFIndex(bits=1, similarity="cosine", cluster_size=384)
    index.add(X)
    _, ids = index.search(Q, k=10, visit_percentage=float(values[0]))
    _, gt = exact_knn(X, Q, 10, "cosine", scores_first=True)
    assert recall_at_k(ids, gt, 10) >= 0.85
