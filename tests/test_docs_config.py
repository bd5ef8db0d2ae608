"""The documentation's own machinery, without building it: API pages cover every public name
once, every page is in a toctree, links out of docs/ point at the
repository, and the pages cite nothing outside the repository."""

from __future__ import annotations

import importlib
import re
import sys

import pytest
from paths import ROOT

sys.path.insert(0, str(ROOT / "docs" / "_ext"))
bbqlib_docs = importlib.import_module("bbqlib_docs")


def test_api_pages_cover_every_public_name_once(tmp_path):
    pages = bbqlib_docs.write_api_pages(tmp_path)
    listed: dict[str, list[str]] = {}
    for page in pages:
        text = (tmp_path / f"{page}.rst").read_text(encoding="utf-8")
        body = text.split(":toctree: generated/", 1)[1] if ":toctree:" in text else ""
        for name in re.findall(r"^   (\w+)$", body, re.M):
            listed.setdefault(f"{page}.{name}", []).append(page)
    for module_name, _ in bbqlib_docs.API_MODULES:
        module = importlib.import_module(module_name)
        for name in getattr(module, "__all__", []):
            if name.startswith("__"):
                continue
            obj = getattr(module, name)
            homes = [key for key in listed if key.rsplit(".", 1)[1] == name]
            if callable(obj):  # documented once, under its first public home
                owners = [
                    k
                    for k in homes
                    if getattr(importlib.import_module(k.rsplit(".", 1)[0]), name, None) is obj
                ]
                assert len(owners) == 1, (module_name, name, owners)
            else:
                assert f"{module_name}.{name}" in listed, (module_name, name)
    assert "bbqlib.BBQQuantizer" in listed and "bbqlib.quantizers.BBQQuantizer" not in listed
    index = (tmp_path / "index.rst").read_text(encoding="utf-8")
    assert all(f"   {page}" in index for page in pages)


def test_every_guide_is_in_the_toctree_and_exists():
    """The Guides page lists each guide once in its bullets and its toctree, and each exists
    (the optional Lucene guide joined the toctree for good in the strict-build fix)."""
    text = (ROOT / "docs" / "guides.md").read_text(encoding="utf-8")
    bullets, toctree = text.split("```{toctree}", 1)
    entries = [ln for ln in toctree.splitlines() if ln and not ln.startswith((":", "`"))]
    assert len(entries) == len(set(entries)) and {"lucene", "saq"} <= set(entries)
    for page in entries:
        assert (ROOT / "docs" / f"{page}.md").exists(), page
        assert f"{{doc}}`{page}`" in bullets, page


def test_links_out_of_docs_point_at_the_repository():
    source = ["see [the table](../benchmarks/results/int8.md) and [arch](architecture.md)"]
    bbqlib_docs._source_read(None, "int8", source)
    url = bbqlib_docs.repository_url()
    assert f"[the table]({url}/blob/main/benchmarks/results/int8.md)" in source[0]
    assert "[arch](architecture.md)" in source[0]


def test_docstring_spec_citations_are_dropped():
    lines = [
        "The visit budget (spec §6.7) counts entries.",
        "the scale of the theory (spec ``rabitq.md`` §1.2 and §2.5), comparable",
        "a spec of its own stays",
    ]
    bbqlib_docs._drop_spec_citations(None, "class", "x", None, {}, lines)
    assert lines == [
        "The visit budget counts entries.",
        "the scale of the theory, comparable",
        "a spec of its own stays",
    ]


@pytest.mark.parametrize(
    "page", [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))], ids=lambda p: p.name
)
def test_pages_cite_nothing_outside_the_repository(page):
    """Papers and Lucene classes, not the development notes beside the repository."""
    text = page.read_text(encoding="utf-8")
    for pattern in (r"spec §", r"shared/spec", r"spec `[\w-]+\.md`"):
        assert not re.search(pattern, text), f"{page.name} cites {pattern!r}"
