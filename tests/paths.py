"""Where the tests find the checkout, the package, their fixtures and the shared data.

Test modules and helpers import these names instead of computing paths from their own
location (``Path(__file__).parents[1]``), so a test module can move into a subfolder of
``tests/`` without changing what it reads. Benchmarks that put ``tests/`` on ``sys.path``
(``benchmarks/quality/lucene.py``, ``benchmarks/faults/faults.py``) import the helpers, hence
this module: it imports no pytest at import time.

Attributes
----------
ROOT : Path
    The checkout (the folder holding ``pyproject.toml``).
PACKAGE : Path
    The ``bbqlib`` package folder of the checkout.
TESTS : Path
    The ``tests`` folder: what subprocesses put on ``PYTHONPATH`` to import the helpers.
FIXTURES : Path
    ``tests/fixtures``: committed files (old formats, pickles, HDF5 samples).
SHARED : Path
    The ``shared`` folder beside the checkout (data sets, peers, the Lucene jar). It is not
    part of the repository; tests that need it skip without it (:func:`shared_or_skip`).
"""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
PACKAGE = ROOT / "bbqlib"
FIXTURES = TESTS / "fixtures"


def _find_shared() -> Path:
    # A worktree may sit deeper than the main checkout, so take the nearest ancestor that
    # has a ``shared`` folder; else the one beside the checkout.
    for parent in ROOT.parents:
        if (parent / "shared").is_dir():
            return parent / "shared"
    return ROOT.parent / "shared"


SHARED = _find_shared()


def shared_or_skip(*parts: str, what: str = "shared data") -> Path:
    """The path ``SHARED / parts``; skips the calling test when it does not exist.

    Parameters
    ----------
    *parts : str
        Path components under :data:`SHARED`, e.g. ``"data", "debian-minilm-384"``.
    what : str
        What the test needed, for the skip reason.

    Returns
    -------
    Path
        The existing path.
    """
    path = SHARED.joinpath(*parts)
    if not path.exists():
        import pytest  # only tests call this; the benchmarks importing helpers do not

        pytest.skip(f"{what} not found at {path} (needs ../shared beside the checkout)")
    return path
