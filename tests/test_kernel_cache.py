"""The compiled-kernel cache lives in a per-user folder, never in the installed package."""

from __future__ import annotations

import ast
import importlib
import os
import pkgutil
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


_PRINT_PACKAGE = """
import bbqlib
print(bbqlib.__file__)
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
            [sys.executable, "-c", _PRINT_PACKAGE + _RUN],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            cwd=tmp_path,  # not the checkout: "-c" puts the working folder first on sys.path
        )
    finally:
        for p in [site, *site.rglob("*")]:
            if p.is_dir():
                p.chmod(p.stat().st_mode | stat.S_IWUSR)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == [str(site / "bbqlib" / "__init__.py"), "5.0"]
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
    each entry's stamp holds the (mtime, size) of every module under ``bbqlib/_kernels``."""
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "b.py").write_text("y = 2\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "c.py").write_text("z = 3\n")
    (tmp_path / "sub" / "notes.txt").write_text("not a module\n")
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "stale.py").write_text("")  # never a source
    before = cache.folder_stamp(tmp_path)
    assert [name for name, _, _ in before] == ["a.py", "b.py", "sub/c.py"]
    (tmp_path / "b.py").write_text("y = 22\n")  # another size
    cache.folder_stamp.cache_clear()
    assert cache.folder_stamp(tmp_path) != before
    locator = cache.BbqlibCacheLocator(
        row_sq_norms.py_func, cache.inspect.getfile(row_sq_norms.py_func)
    )
    own, modules = locator.get_source_stamp()
    assert modules == cache.folder_stamp(cache._KERNELS_FOLDER)
    assert "saq_fastscan.py" in [name for name, _, _ in modules]


def test_the_stamp_covers_subfolders_of_the_kernels_package(tmp_path, monkeypatch):
    """An edited module in a subfolder of ``_kernels`` (a helper a kernel elsewhere inlines)
    changes every entry's stamp, so no machine code of the old helper is loaded."""
    import bbqlib._kernels

    assert cache._KERNELS_FOLDER == Path(bbqlib._kernels.__file__).resolve().parent
    tree = tmp_path / "_kernels"
    shutil.copytree(cache._KERNELS_FOLDER, tree, ignore=shutil.ignore_patterns("__pycache__"))
    helper = tree / "layouts" / "planes.py"
    helper.parent.mkdir()
    helper.write_text("def helper(x):\n    return x\n")
    monkeypatch.setattr(cache, "_KERNELS_FOLDER", tree)
    locator = cache.BbqlibCacheLocator(
        row_sq_norms.py_func, cache.inspect.getfile(row_sq_norms.py_func)
    )
    try:
        own, before = locator.get_source_stamp()
        assert "layouts/planes.py" in [name for name, _, _ in before]
        helper.write_text("def helper(x):\n    return x + 1\n")
        cache.folder_stamp.cache_clear()
        own_after, after = locator.get_source_stamp()
    finally:
        cache.folder_stamp.cache_clear()
    assert own_after == own and after != before


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


# numba's compiling decorators: with cache=True each writes numba's own cache beside the source.
_NUMBA_COMPILERS = {"jit", "njit", "cfunc", "vectorize", "guvectorize", "stencil", "jitclass"}
# Where numba is told to compile: policy hands every dispatcher to cache.use_bbqlib_cache,
# cache.cached_cfunc gives C callbacks bbqlib's cache.
_COMPILES_HERE = {"bbqlib/_kernels/policy.py", "bbqlib/_kernels/cache.py"}


def _callee(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")


def _is_true(node) -> bool:
    return not (isinstance(node, ast.Constant) and node.value is False)


def test_every_cached_kernel_goes_through_the_bbqlib_cache():
    """No ``cache=True`` of numba's and no numba compiler call outside the two modules that
    give bbqlib's cache (``policy``, ``cache``); every dispatcher of the kernel package has
    bbqlib's cache."""
    problems = []
    for path in sorted((ROOT / "bbqlib").rglob("*.py")):
        where = path.relative_to(ROOT).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), filename=where)):
            if isinstance(node, ast.Call):
                name = _callee(node)
                caching = [kw for kw in node.keywords if kw.arg == "cache" and _is_true(kw.value)]
                if name in _NUMBA_COMPILERS | {"CFunc"} and where not in _COMPILES_HERE:
                    problems.append(f"{where}:{node.lineno}: numba's {name}() outside policy")
                elif name in _NUMBA_COMPILERS and caching:
                    problems.append(f"{where}:{node.lineno}: {name}(cache=...) is numba's cache")
                elif name == "enable_caching":
                    problems.append(f"{where}:{node.lineno}: enable_caching() is numba's cache")
            elif isinstance(node, ast.Dict) and where not in _COMPILES_HERE:
                for key in node.keys:
                    if isinstance(key, ast.Constant) and key.value == "cache":
                        problems.append(f"{where}:{node.lineno}: a cache option outside policy")
    assert not problems, "\n".join(problems)

    import numba

    from bbqlib._kernels.policy import ParallelKernel

    package = importlib.import_module("bbqlib._kernels")
    ours = (cache._CacheOnFirstUse, cache._BbqlibFunctionCache, cache._BbqlibSerialFunctionCache)
    seen = 0
    for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if isinstance(value, ParallelKernel):
                value = value.dispatcher
            if isinstance(value, numba.core.dispatcher.Dispatcher):
                seen += 1
                assert isinstance(value._cache, ours), f"{info.name}.{name}: {value._cache!r}"
    assert seen > 50


_METRIC_AND_KERNELS = """
import numpy as np
import bbqlib
from bbqlib._kernels.candidates import doc_doc_metric
from bbqlib._validation import row_sq_norms

print(bbqlib.__file__)
print(float(row_sq_norms(np.ones((3, 5), np.float32))[0]), doc_doc_metric(0, False).cache_hits)
try:
    from bbqlib.integrations.usearch import USearchIndex, _usearch

    _usearch()
except ImportError:  # the adapter's metric was compiled above, without the adapter
    print("no usearch")
else:
    X = np.random.default_rng(0).normal(size=(200, 16)).astype(np.float32)
    index = USearchIndex(bits=1, similarity="euclidean", expansion_add=16, expansion_search=16)
    index.add(X)
    print(index.search(X[:2], k=3, rerank=False)[1][:, 0].tolist())
"""

_METRIC_AGAIN = """
from bbqlib._kernels.candidates import doc_doc_metric

print(doc_doc_metric(0, False).cache_hits)
"""


def test_the_usearch_metric_and_kernels_write_nothing_into_the_package(tmp_path):
    """A writable copy of the package (numba's own cache would write there: ``pip uninstall``
    then leaves an empty namespace package) runs the usearch adapter's metric and the
    kernels of an adapter build with an empty kernel cache: every compiled entry lands in
    the bbqlib cache folder, none in the package; a second process loads the metric."""
    site = tmp_path / "site"
    shutil.copytree(ROOT / "bbqlib", site / "bbqlib", ignore=shutil.ignore_patterns("__pycache__"))
    before = _files(site)
    env = _clean_env(
        PYTHONPATH=str(site),
        HOME=str(tmp_path / "home"),
        BBQLIB_CACHE_DIR=str(tmp_path / "cache"),
        PYTHONDONTWRITEBYTECODE="1",
    )
    runs = []
    for script in (_METRIC_AND_KERNELS, _METRIC_AGAIN):
        proc = subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            env=env,
            timeout=300,
            cwd=tmp_path,  # not the checkout: "-c" puts the working folder first on sys.path
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        runs.append(proc.stdout.split("\n"))
    assert runs[0][0] == str(site / "bbqlib" / "__init__.py")
    assert runs[0][1] == "5.0 0"
    assert runs[0][2] in ("no usearch", "[0, 1]")
    assert runs[1][0] == "1"  # the metric came from bbqlib's cache
    assert not [f for f in _files(site) if f.endswith((".nbi", ".nbc"))]
    assert _files(site) == before
    cached = _files(tmp_path / "cache")
    assert any("/candidates._bytes_ip-" in f and f.endswith(".nbi") for f in cached)
