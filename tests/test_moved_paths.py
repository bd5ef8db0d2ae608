"""Old module paths keep working through shims (``bbqlib._deprecated.moved``).

:data:`MOVED` lists every module moved so far, old path -> new path: each old path still
imports, gives the new module's objects (the same objects) with a ``FutureWarning`` naming the
new path and the release that removes the old one, and forwards assignments of settings. The
mechanism itself is checked on a toy package written here (reads, ``import *``, settings,
pickles naming a class by its old module, submodules of a shim package).
"""

from __future__ import annotations

import importlib
import pickle
import sys
import textwrap
import warnings

import pytest

from bbqlib._deprecated import REMOVED_IN

#: Old module path -> new module path, for every module moved (filled as modules move).
MOVED: dict[str, str] = {
    "bbqlib.quantizers.bbq": "bbqlib.quantizers.osq.quantizer",
    "bbqlib.quantizers.lucene_osq": "bbqlib.quantizers.osq.lucene",
    "bbqlib.quantizers.rabitq_codes": "bbqlib.quantizers.rabitq.codes",
    "bbqlib.quantizers.scalar": "bbqlib.quantizers.int8",
    "bbqlib.quantizers.scalar.osq": "bbqlib.quantizers.int8.per_vector",
    "bbqlib.quantizers.scalar.per_dim": "bbqlib.quantizers.int8.per_dim",
    "bbqlib.quantizers.scalar.lucene_global": "bbqlib.quantizers.int8.global_interval",
    "bbqlib.quantizers.saq_plan": "bbqlib.quantizers.saq.plan",
    "bbqlib.quantizers.saq_encoding": "bbqlib.quantizers.saq.encoding",
    "bbqlib.quantizers.saq_bounds": "bbqlib.quantizers.saq.bounds",
    "bbqlib.quantizers.saq_scoring": "bbqlib.quantizers.saq.scanner",
    "bbqlib.quantizers.saq_search": "bbqlib.quantizers.saq.search",
    "bbqlib.quantizers.saq_ivf": "bbqlib.quantizers.saq.lists",
    "bbqlib.scoring": "bbqlib.search",
    "bbqlib.threads": "bbqlib.runtime.threads",
    "bbqlib.warmup": "bbqlib.runtime.warmup",
    "bbqlib.index.single": "bbqlib.index.tiers",
    "bbqlib.index.ivf.single": "bbqlib.index.ivf.one",
    "bbqlib.scoring.candidates": "bbqlib.search.candidates",
    "bbqlib.scoring.codes": "bbqlib.layouts.codes",
    "bbqlib.scoring.dispatch": "bbqlib.layouts.kernels",
    "bbqlib.scoring.finish": "bbqlib.search.finish",
    "bbqlib.scoring.rerank": "bbqlib.search.rerank",
    "bbqlib.scoring.scan": "bbqlib.layouts.scan",
    "bbqlib.scoring.stored": "bbqlib.search.stored",
    "bbqlib.scoring.topk": "bbqlib.search.topk",
    "bbqlib.io": "bbqlib.formats",
    "bbqlib.io.ann_benchmarks": "bbqlib.formats.ann_benchmarks",
    "bbqlib.io.atomic": "bbqlib.storage.atomic",
    "bbqlib.io.blocks": "bbqlib.storage.blocks",
    "bbqlib.io.container": "bbqlib.storage.container",
    "bbqlib.io.errors": "bbqlib.storage.errors",
    "bbqlib.io.hdf5_guard": "bbqlib.formats.hdf5_guard",
    "bbqlib.io.locks": "bbqlib.storage.locks",
    "bbqlib.io.preload": "bbqlib.storage.preload",
    "bbqlib.io.streamed": "bbqlib.storage.streamed",
    "bbqlib.io.vectors": "bbqlib.formats.vectors",
    "bbqlib.adapters": "bbqlib.integrations",
    "bbqlib.adapters.ann_benchmarks": "bbqlib.integrations.ann_benchmarks",
    "bbqlib.adapters.ann_benchmarks_plugin": "bbqlib.integrations.ann_benchmarks_plugin",
    "bbqlib.adapters.arrow": "bbqlib.integrations.exchange",
    "bbqlib.adapters.faiss": "bbqlib.integrations.faiss",
    "bbqlib.adapters.hnswlib": "bbqlib.integrations.hnswlib",
    "bbqlib.adapters.records": "bbqlib.integrations.records",
    "bbqlib.adapters.scorer": "bbqlib.search.candidates",
    "bbqlib.adapters.usearch": "bbqlib.integrations.usearch",
    "bbqlib.index.flat_files": "bbqlib.index.flat.files",
    "bbqlib.index.variants": "bbqlib.calibration.parts",
    "bbqlib.io.exchange": "bbqlib.integrations.exchange",
}


def test_every_moved_module_gives_the_new_objects_with_a_warning():
    for old, new in sorted(MOVED.items()):
        new_module = importlib.import_module(new)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            old_module = importlib.import_module(old)  # importing alone does not warn
        for name in getattr(new_module, "__all__", []):
            with pytest.warns(FutureWarning, match=rf"{old}.*{REMOVED_IN}.*{new}"):
                assert getattr(old_module, name) is getattr(new_module, name)


@pytest.fixture()
def toy(tmp_path, monkeypatch):
    """A package ``toy_moved`` with ``new`` (the module) and ``old`` (its shim), and a shim
    package ``oldpkg`` whose submodule ``sub`` is a shim too."""
    root = tmp_path / "toy_moved"
    (root / "oldpkg").mkdir(parents=True)
    (root / "__init__.py").write_text("")
    (root / "new.py").write_text(
        textwrap.dedent("""
        __all__ = ["Thing", "SETTING", "setting"]
        SETTING = 1

        class Thing:
            def __init__(self, x):
                self.x = x

        def setting():
            return SETTING
    """)
    )
    shim = 'from bbqlib._deprecated import moved\nmoved(__name__, "toy_moved.new")\n'
    (root / "old.py").write_text('"""Moved to toy_moved.new."""\n' + shim)
    (root / "oldpkg" / "__init__.py").write_text(shim)
    (root / "oldpkg" / "sub.py").write_text(shim)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in [m for m in sys.modules if m.startswith("toy_moved")]:
        del sys.modules[name]


def test_reads_warn_and_give_the_new_objects(toy):
    from toy_moved import new

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from toy_moved import old  # no use yet: no warning
    with pytest.warns(FutureWarning, match=rf"toy_moved.old .*{REMOVED_IN}: import Thing from "):
        assert old.Thing is new.Thing
    with pytest.warns(FutureWarning):
        from toy_moved.old import setting
    assert setting is new.setting
    namespace: dict = {}
    with pytest.warns(FutureWarning):
        exec("from toy_moved.old import *", namespace)
    assert namespace["Thing"] is new.Thing
    assert "Thing" in dir(old)
    with pytest.raises(AttributeError, match="moved to toy_moved.new"):
        old.missing  # noqa: B018


def test_settings_assigned_through_the_old_path_reach_the_new_module(toy):
    from toy_moved import new, old

    with pytest.warns(FutureWarning, match="set SETTING"):
        old.SETTING = 7
    assert new.SETTING == 7 and new.setting() == 7


def test_pickles_naming_the_old_module_load(toy):
    from toy_moved import new

    thing = new.Thing(3)
    new.Thing.__module__ = "toy_moved.old"  # as a pickle written before the move names it
    try:
        with pytest.warns(FutureWarning):  # pickle checks the class is found at that path
            data = pickle.dumps(thing)
    finally:
        new.Thing.__module__ = "toy_moved.new"
    assert b"toy_moved.old" in data
    with pytest.warns(FutureWarning):
        back = pickle.loads(data)
    assert type(back) is new.Thing and back.x == 3


def test_a_shim_package_keeps_its_submodules(toy):
    import toy_moved.oldpkg.sub as sub
    from toy_moved import new, oldpkg

    assert oldpkg.__dict__["sub"] is sub  # bound on the package, not sent to the new module
    assert not hasattr(new, "sub")
    with pytest.warns(FutureWarning):
        assert sub.Thing is new.Thing


def test_bbqlib_threads_stays_an_attribute_of_the_package():
    import bbqlib  # the documented bbqlib.threads.threading_layer() needs no import of its own

    with pytest.warns(FutureWarning, match="bbqlib.runtime.threads"):
        assert bbqlib.threads.get_num_threads is bbqlib.get_num_threads


def test_bbqlib_warmup_stays_the_function_after_importing_its_old_module_path():
    """``bbqlib/warmup.py`` is a shim of ``bbqlib.runtime.warmup``; importing that path must
    not replace the public function ``bbqlib.warmup`` by the shim module."""
    import importlib

    import bbqlib

    importlib.import_module("bbqlib.warmup")
    exec("import bbqlib.warmup", {})
    assert callable(bbqlib.warmup) and bbqlib.warmup is bbqlib.runtime.warmup.warmup
