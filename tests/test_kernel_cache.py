"""The compiled-kernel cache lives in a per-user folder, never in the installed package."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from paths import PACKAGE, ROOT

import bbqlib
from bbqlib._kernels import cache
from bbqlib._kernels.validation import row_sq_norms


def test_cache_dir_precedence(monkeypatch, tmp_path):
    for key in ("BBQLIB_CACHE_DIR", "NUMBA_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    if sys.platform.startswith("linux"):
        assert cache.cache_dir() == tmp_path / "home" / ".cache" / "bbqlib" / bbqlib.__version__
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
        assert cache.cache_dir() == tmp_path / "xdg" / "bbqlib" / bbqlib.__version__
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba"))
    assert cache.cache_dir() == tmp_path / "numba"
    monkeypatch.setenv("BBQLIB_CACHE_DIR", str(tmp_path / "own"))
    assert cache.cache_dir() == tmp_path / "own"


def test_kernels_use_the_bbqlib_cache():
    for disp in (row_sq_norms.dispatcher, row_sq_norms.serial):
        path = Path(disp._cache.cache_path)
        assert cache.cache_dir() in path.parents
        assert PACKAGE not in path.parents


_RUN = """
import numpy as np
from bbqlib._validation import row_sq_norms
print(float(row_sq_norms(np.ones((3, 5), np.float32))[0]))
"""


def _clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("BBQLIB_", "NUMBA_CACHE"))}
    env.pop("XDG_CACHE_HOME", None)
    env.update(extra)
    return env


def _files(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def test_an_installed_copy_writes_nothing_into_its_folder(tmp_path):
    """A read-only copy of the package (as pip lays it out) runs a kernel; the compiled code
    lands in $HOME/.cache/bbqlib/<version>, the package folder is left as it was."""
    site = tmp_path / "site"
    shutil.copytree(PACKAGE, site / "bbqlib", ignore=shutil.ignore_patterns("__pycache__"))
    before = _files(site)
    for p in [site, *site.rglob("*")]:
        if p.is_dir():
            p.chmod(p.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    home = tmp_path / "home"
    env = _clean_env(PYTHONPATH=str(site), HOME=str(home), PYTHONDONTWRITEBYTECODE="1")
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _RUN], capture_output=True, text=True, env=env, timeout=300
        )
    finally:
        for p in [site, *site.rglob("*")]:
            if p.is_dir():
                p.chmod(p.stat().st_mode | stat.S_IWUSR)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "5.0"
    assert _files(site) == before
    cached = _files(home / ".cache" / "bbqlib" / bbqlib.__version__)
    assert any(f.endswith(".nbi") for f in cached) and any(f.endswith(".nbc") for f in cached)


def test_an_unwritable_cache_folder_only_costs_compilation(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    env = _clean_env(PYTHONPATH=str(ROOT), BBQLIB_CACHE_DIR=str(blocked / "cache"))
    proc = subprocess.run(
        [sys.executable, "-c", _RUN], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "5.0"


def test_entries_are_stamped_with_every_kernel_module(tmp_path):
    """A kernel that inlines a helper of another module recompiles when that module changes:
    each entry's stamp holds the (mtime, size) of every module in ``bbqlib/_kernels``."""
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "b.py").write_text("y = 2\n")
    before = cache.folder_stamp(tmp_path)
    assert [name for name, _, _ in before] == ["a.py", "b.py"]
    (tmp_path / "b.py").write_text("y = 22\n")  # another size
    cache.folder_stamp.cache_clear()
    assert cache.folder_stamp(tmp_path) != before
    locator = cache.BbqlibCacheLocator(
        row_sq_norms.py_func, cache.inspect.getfile(row_sq_norms.py_func)
    )
    own, modules = locator.get_source_stamp()
    assert modules == cache.folder_stamp(cache._KERNELS_FOLDER)
    assert "saq_fastscan.py" in [name for name, _, _ in modules]


def test_names_only_module_keeps_the_names_other_code_looks_up():
    """The module an entry loads with defines exactly the non-private functions and globals
    of the kernel's module (quoted names with any bytes survive), with no code."""
    import llvmlite.binding as ll

    full = ll.parse_assembly(
        """
        @"public.const" = global i32 7
        @hidden = private constant [3 x i8] c"abc"
        @"env$\\22q\\22" = common global ptr null
        define linkonce_odr i32 @"f.odr"(i32 %x) {
          %y = add i32 %x, 1
          ret i32 %y
        }
        define internal i32 @helper(i32 %x) {
          ret i32 %x
        }
        define i32 @"cfunc.entry"(i32 %x) {
          %r = call i32 @helper(i32 %x)
          ret i32 %r
        }
        declare i32 @external_decl(i32)
        """
    ).as_bitcode()
    slim = ll.parse_bitcode(cache.names_only_bitcode(full))
    functions = {f.name for f in slim.functions if not f.is_declaration}
    variables = {g.name for g in slim.global_variables if not g.is_declaration}
    assert functions == {"f.odr", "cfunc.entry"}
    assert variables == {"public.const", 'env$"q"'}
    assert all(len(list(f.blocks)) == 1 for f in slim.functions)


_DEFINE = """
from bbqlib._kernels import policy

@policy.kernel
def total(x):
    s = 0.0
    for v in x:
        s += v
    return s
"""

_LOAD_THEN_LINK = """
import numba, numpy as np
import kernels_under_test as K

x = np.arange(10.0)
print(K.total(x))
library = next(iter(K.total.overloads.values())).library
print(K.total.stats.cache_hits and 'hit' or 'miss', library._shared_module is None)

@numba.njit
def caller(x):  # compiled here: numba links the cached kernel's whole module into it
    return 2.0 * K.total(x)

print(caller(x), library._shared_module is not None)
"""


def test_cached_entries_load_without_their_module_and_still_link(tmp_path):
    """A second process loads a kernel from its entry without parsing its LLVM module; a
    kernel compiled there that calls it gets the whole module (parsed on demand)."""
    (tmp_path / "kernels_under_test.py").write_text(_DEFINE)
    env = _clean_env(
        PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]),
        BBQLIB_CACHE_DIR=str(tmp_path / "cache"),
    )
    runs = []
    for _ in range(2):  # the first compiles and stores, the second loads
        proc = subprocess.run(
            [sys.executable, "-c", _LOAD_THEN_LINK],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            cwd=tmp_path,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs.append(proc.stdout.split("\n"))
    assert runs[0][0] == runs[1][0] == "45.0"
    assert runs[0][1].split()[0] == "miss"
    assert runs[1][1] == "hit True"  # loaded, its module not parsed
    assert runs[1][2] == "90.0 True"  # linked into a new caller: parsed then
