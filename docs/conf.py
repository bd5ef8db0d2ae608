"""Sphinx configuration of bbqlib's documentation.

Build (strict: a warning fails the build)::

    python -m pip install -e ".[docs]"
    python -m sphinx -W --keep-going -b html docs docs/_build/html

The API reference is generated from the docstrings: ``_ext/bbqlib_docs.py`` writes one page per
public module listing the names in its ``__all__`` (so new public names appear without editing
the docs), and autosummary makes a page per name. The estimator notebook is rendered from its
stored outputs (myst-nb, never executed here).
"""

from __future__ import annotations

import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path.insert(0, str(ROOT))  # document this checkout, not some installed bbqlib
sys.path.insert(0, str(DOCS / "_ext"))

import bbqlib_docs  # noqa: E402

import bbqlib  # noqa: E402

bbqlib_docs.write_api_pages()  # docs/api/*.rst from the modules' __all__
bbqlib_docs.copy_notebooks()  # examples/*.ipynb -> docs/examples/

project = "bbqlib"
author = "bbqlib contributors"
copyright = "bbqlib contributors"  # noqa: A001
release = bbqlib.__version__
version = ".".join(release.split(".")[:2])

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "sphinx.ext.mathjax",
    "sphinx.ext.viewcode",
    "numpydoc",
    "myst_nb",  # brings myst_parser: Markdown pages and notebooks
    "bbqlib_docs",
]

source_suffix = {".rst": "restructuredtext", ".md": "myst-nb", ".ipynb": "myst-nb"}
exclude_patterns = ["_build", "Thumbs.db", ".DS_Store", "**.ipynb_checkpoints", "jupyter_execute"]
templates_path = ["_templates"]

# -- MyST and notebooks ----------------------------------------------------------------------
myst_enable_extensions = ["dollarmath", "colon_fence", "deflist"]
myst_heading_anchors = 3  # GitHub-style anchors, so the pages' #section links resolve
nb_execution_mode = "off"  # the notebook is rendered from its committed outputs
nb_merge_streams = True

# -- API reference ---------------------------------------------------------------------------
autosummary_generate = True
autosummary_imported_members = True
autosummary_ignore_module_all = False
autodoc_default_options = {"member-order": "bysource"}
autodoc_typehints = "none"  # the numpydoc sections say the types; signatures stay readable
autodoc_inherit_docstrings = True
numpydoc_show_class_members = False  # the class template lists members itself
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = False
numpydoc_validation_checks: set[str] = set()

# -- HTML ------------------------------------------------------------------------------------
html_theme = "pydata_sphinx_theme"
html_title = f"bbqlib {release}"
html_static_path = ["_static"]
html_show_sourcelink = False
html_theme_options = {
    "github_url": bbqlib_docs.repository_url(),
    "navbar_align": "left",
    "show_toc_level": 2,
    "navigation_with_keys": False,
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version", "theme-version"],
}
html_context = {"default_mode": "light"}
