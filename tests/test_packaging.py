"""Packaging (issue 13): licence, typing marker, metadata, and a ``test`` extra that holds every
optional package the tests import, so ``pip install -e ".[test]"`` runs them all."""

from __future__ import annotations

import re

from paths import PACKAGE, ROOT, TESTS

import bbqlib

PYPROJECT = (ROOT / "pyproject.toml").read_text(encoding="utf-8")

#: Import name -> distribution name, where they differ.
DISTRIBUTIONS = {"faiss": "faiss-cpu", "sklearn": "scikit-learn", "threadpoolctl": "scikit-learn",
                 "yaml": "pyyaml", "colors": "ansicolors"}  # fmt: skip


def _extra(name: str) -> set[str]:
    block = re.search(rf"^{name} = \[(.*?)^\]", PYPROJECT, re.M | re.S)
    assert block, f"pyproject.toml has no [{name}] extra"
    return {re.split(r"[<>=\[ ]", req)[0].lower() for req in re.findall(r'"([^"]+)"', block[1])}


def test_license_is_the_apache_2_text():
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert re.search(r'^license = "Apache-2.0"$', PYPROJECT, re.M)
    assert 'license-files = ["LICENSE"]' in PYPROJECT


def test_package_is_typed():
    assert (PACKAGE / "py.typed").is_file()
    assert '"py.typed"' in PYPROJECT.split("[tool.setuptools.package-data]")[1]


def test_version_has_one_source():
    assert 'version = { attr = "bbqlib._version.__version__" }' in PYPROJECT
    assert re.fullmatch(r"\d+\.\d+\.\d+(\.dev\d+|rc\d+)?", bbqlib.__version__)


def test_urls_and_classifiers():
    urls = PYPROJECT.split("[project.urls]")[1].split("\n\n")[0]
    for key in ("Homepage", "Repository", "Documentation", "Issues", "Changelog"):
        assert re.search(rf"^{key} = \"https://", urls, re.M), key
    assert "Typing :: Typed" in PYPROJECT
    requires = re.search(r'^requires-python = ">=3\.(\d+)"', PYPROJECT, re.M)
    oldest = f"Programming Language :: Python :: 3.{requires[1]}"
    assert oldest in PYPROJECT, "the oldest supported Python (tested in CI) is a classifier"


def test_changelog_has_a_deprecation_policy():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "## Deprecation policy" in text and "FutureWarning" in text
    assert "exact_knn" in text  # this wave's deprecations are listed


def test_test_extra_holds_every_optional_package_the_tests_import():
    imported = set()
    for path in TESTS.rglob("*.py"):
        src = path.read_text(encoding="utf-8")
        imported |= set(re.findall(r"importorskip\(\s*\"([A-Za-z_][A-Za-z0-9_]*)", src))
    imported -= {"bbqlib"}
    test_extra = _extra("test")
    missing = sorted(
        DISTRIBUTIONS.get(m, m) for m in imported if DISTRIBUTIONS.get(m, m) not in test_extra
    )
    assert not missing, f"add to the test extra: {missing}"
    # and the engines of the adapters and examples
    assert {"faiss-cpu", "usearch", "hnswlib", "pyarrow", "h5py", "scikit-learn"} <= test_extra


def test_docs_tools_live_in_the_docs_extra_only():
    docs = _extra("docs")
    assert {"sphinx", "pydata-sphinx-theme", "numpydoc", "myst-nb"} <= docs
    assert not docs & _extra("test")
