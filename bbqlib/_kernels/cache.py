"""Where bbqlib's compiled kernels are cached on disk: a per-user directory, never the package.

numba's ``cache=True`` writes next to the source (``<package>/_kernels/__pycache__``) when
it can. For an installed package that leaves files ``pip uninstall`` does not know about (a
half-removed package then imports as an empty namespace), and it fails on read-only
installs. bbqlib's kernels use their own numba cache object instead, whose only locator is
:func:`cache_dir`:

1. ``$BBQLIB_CACHE_DIR`` if set;
2. else ``$NUMBA_CACHE_DIR`` if the user set it (the same place as their other kernels);
3. else the per-user cache directory: ``$XDG_CACHE_HOME/bbqlib/<version>`` (by default
   ``~/.cache/bbqlib/<version>``) on Linux, ``~/Library/Caches/bbqlib/<version>`` on macOS,
   ``%LOCALAPPDATA%\\bbqlib\\Cache\\<version>`` on Windows.

Inside it, each source folder gets its own subfolder (numba's naming: folder name and a hash
of its path), so an editable checkout and an installed copy do not share entries; each entry
is also keyed by a hash of its source file and by the stamps (modification time, size) of
every module under ``bbqlib/_kernels``, subfolders included, so an edited kernel
recompiles, and so does a kernel that inlines a helper from another module when that module
changes (numba's own key covers the kernel's file alone, and would keep the machine code of
the old helper).
numba's configuration and other packages' caches are untouched: only dispatchers built by
:mod:`bbqlib._kernels.policy` and C callbacks built by :func:`cached_cfunc` get this
cache. Where no directory is writable the kernels compile in every process (no disk cache),
as numba does for functions it cannot cache.

Loading an entry is bbqlib's share of a fresh process's first query, so entries are stored
for loading. numba stores each kernel's machine code with the whole optimized LLVM module
beside it (for kernels compiled later that call this one and inline it) and parses that
module at every load, to list the names it defines: for a large kernel such as the fused
single-query IVF one, most of the load (``benchmarks/serving/serving.py --sections startup``
times the first query of a fresh process). bbqlib's entries hold the
machine code, a module of only the names other code can look up (functions and globals that
are not private, with empty bodies, never compiled), and the whole module as bytes, parsed
only if numba links the kernel into a caller compiled in that process.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import os
import sys
from pathlib import Path

import llvmlite.binding as ll
from numba.core import sigutils
from numba.core.caching import (
    CompileResultCacheImpl,
    FunctionCache,
    NullCache,
    _CacheLocator,
    _SourceFileBackedLocatorMixin,
)

from .._version import __version__

__all__ = [
    "cache_dir",
    "has_entries",
    "use_bbqlib_cache",
    "cached_cfunc",
    "BbqlibCacheLocator",
]


def _user_cache_root() -> Path:
    if sys.platform == "win32":
        base = os.environ.get("LOCALAPPDATA") or os.path.expanduser(r"~\AppData\Local")
        return Path(base) / "bbqlib" / "Cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "bbqlib"
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) if xdg and os.path.isabs(xdg) else Path.home() / ".cache"
    return base / "bbqlib"


def has_entries(dispatcher) -> bool:
    """Whether the disk cache holds machine code of ``dispatcher`` (for any argument types):
    its index file exists. False for kernels without a disk cache."""
    cache_file = getattr(getattr(dispatcher, "_cache", None), "_cache_file", None)
    index = getattr(cache_file, "_index_path", None)
    return index is not None and os.path.exists(index)


def cache_dir() -> Path:
    """The folder bbqlib's kernel cache uses now (see the module notes for the order)."""
    own = os.environ.get("BBQLIB_CACHE_DIR", "")
    if own:
        return Path(own).expanduser()
    numba_dir = os.environ.get("NUMBA_CACHE_DIR", "")
    if numba_dir:
        return Path(numba_dir).expanduser()
    return _user_cache_root() / __version__


def _package_folder(name: str) -> Path:
    """The folder of package ``name``, which is imported or being imported (no import)."""
    return Path(importlib.util.find_spec(name).origin).resolve().parent


# The kernels package by name, not this file's folder: cache.py may move into a subfolder.
_KERNELS_PACKAGE = __name__[: __name__.index("._kernels") + len("._kernels")]
_KERNELS_FOLDER = _package_folder(_KERNELS_PACKAGE)


@functools.cache
def folder_stamp(folder: Path) -> tuple:
    """``(relative path, mtime, size)`` of every ``.py`` file under ``folder``, subfolders
    included, sorted by path: part of each cache entry's source stamp (computed once per
    process). Paths are POSIX-style, so the stamp does not depend on the platform."""
    entries = []
    # os.walk, not Path.rglob: it skips __pycache__ folders, which hold no sources.
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if d != "__pycache__"]
        relative = Path(root).relative_to(folder)
        for name in files:
            if name.endswith(".py"):
                st = os.stat(os.path.join(root, name))
                entries.append(((relative / name).as_posix(), st.st_mtime, st.st_size))
    entries.sort()
    return tuple(entries)


class BbqlibCacheLocator(_SourceFileBackedLocatorMixin, _CacheLocator):
    """numba cache locator for bbqlib's kernels: :func:`cache_dir` / per-source-folder."""

    def __init__(self, py_func, py_file):
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        subpath = self.get_suitable_cache_subpath(py_file)
        self._cache_path = str(cache_dir() / subpath)

    def get_cache_path(self) -> str:
        return self._cache_path

    def get_source_stamp(self):
        """numba's stamp of the kernel's own file, and :func:`folder_stamp` of the whole
        ``bbqlib/_kernels`` tree, whose helpers kernels inline."""
        return (super().get_source_stamp(), folder_stamp(_KERNELS_FOLDER))


class _BbqlibCacheImpl(CompileResultCacheImpl):
    """numba's implementation with one locator, :class:`BbqlibCacheLocator` (numba's own
    ``__init__`` would also consult ``NUMBA_CACHE_LOCATOR_CLASSES``, which is meant for the
    user's functions). ``tag`` names a variant compiled from the same function with other
    options (numba's cache key holds the signature and the bytecode, not the options)."""

    tag = ""

    def __init__(self, py_func):
        self._lineno = py_func.__code__.co_firstlineno
        qualname = getattr(py_func, "__qualname__", py_func.__name__)
        source_path = inspect.getfile(py_func)
        locator = BbqlibCacheLocator.from_function(py_func, source_path)
        if locator is None:
            raise RuntimeError(f"no writable kernel cache folder for {qualname}")
        self._locator = locator
        modname = os.path.splitext(os.path.basename(source_path))[0]
        abiflags = getattr(sys, "abiflags", "")
        name = f"{modname}.{qualname}" + (f".{self.tag}" if self.tag else "")
        self._filename_base = self.get_filename_base(name, abiflags)

    def reduce(self, cres):
        """numba's entry, with the module for linking moved out of the load path."""
        libdata, *rest = super().reduce(cres)
        name, kind, data = libdata
        if kind != "object":
            return (libdata, *rest)
        object_code, link_bitcode = data
        names_only = (name, kind, (object_code, names_only_bitcode(link_bitcode)))
        return (names_only, *rest, (_LINK_TAG, link_bitcode))

    def rebuild(self, target_context, payload):
        last = payload[-1]
        if not (isinstance(last, tuple) and len(last) == 2 and last[0] == _LINK_TAG):
            return super().rebuild(target_context, payload)  # numba's own layout
        cres = super().rebuild(target_context, payload[:-1])
        _link_on_demand(cres.library, last[1])
        return cres


_LINK_TAG = "bbqlib.link_bitcode"
_PRIVATE = (ll.Linkage.private, ll.Linkage.internal)


def _ir_name(name: str) -> str:
    """``name`` as a quoted LLVM IR global name."""
    safe = (chr(b) if 32 <= b < 127 and b not in (34, 92) else f"\\{b:02X}" for b in name.encode())
    return '@"' + "".join(safe) + '"'


def names_only_bitcode(bitcode: bytes) -> bytes:
    """A module defining the functions and globals of ``bitcode``'s module that are not
    private, with empty bodies: what numba's loader reads to know the names the machine code
    defines (it never compiles or links this module)."""
    module = ll.parse_bitcode(bitcode)
    lines = [
        f"define void {_ir_name(fn.name)}() {{\n  ret void\n}}"
        for fn in module.functions
        if not fn.is_declaration and fn.linkage not in _PRIVATE
    ]
    lines += [
        f"{_ir_name(gv.name)} = global i8 0"
        for gv in module.global_variables
        if not gv.is_declaration and gv.linkage not in _PRIVATE
    ]
    return ll.parse_assembly("\n".join(lines)).as_bitcode()


def _link_on_demand(library, bitcode: bytes) -> None:
    """Give a loaded ``library`` its whole module when numba links it into a caller (parsed
    at the first such link): the names-only module must never be linked."""
    library._shared_module = None

    def module_for_linking():
        if library._shared_module is None:
            library._shared_module = ll.parse_bitcode(bitcode)
        return library._shared_module

    library._get_module_for_linking = module_for_linking


class _BbqlibSerialCacheImpl(_BbqlibCacheImpl):
    tag = "serial"


class _BbqlibFunctionCache(FunctionCache):
    _impl_class = _BbqlibCacheImpl


class _BbqlibSerialFunctionCache(FunctionCache):
    _impl_class = _BbqlibSerialCacheImpl


class _CacheOnFirstUse:
    """Stands in for a dispatcher's cache until numba first asks it anything (a compile or a
    load), then puts the real cache in its place. Building a cache finds and write-tests its
    folder, work that ``import bbqlib`` should not do for every kernel it defines."""

    def __init__(self, dispatcher, cache_class):
        self._dispatcher = dispatcher
        self._cache_class = cache_class

    def __getattr__(self, name):
        real = _function_cache(self._cache_class, self._dispatcher.py_func)
        self._dispatcher._cache = real
        return getattr(real, name)


def _function_cache(cache_class, py_func):
    """``cache_class(py_func)``, or numba's no-op cache when no folder is writable."""
    try:
        return cache_class(py_func)
    except RuntimeError:  # no locator: the folder is not writable
        return NullCache()


def use_bbqlib_cache(dispatcher, *, serial_twin: bool = False) -> None:
    """Give ``dispatcher`` (built with ``cache=False``) bbqlib's disk cache, or none at all
    when :func:`cache_dir` cannot be created or written (decided at its first compile).
    ``serial_twin``: the dispatcher is the single-threaded twin of a parallel kernel (its own
    cache entries)."""
    cls = _BbqlibSerialFunctionCache if serial_twin else _BbqlibFunctionCache
    dispatcher._cache = _CacheOnFirstUse(dispatcher, cls)


def cached_cfunc(signature, func, **options):
    """numba's ``cfunc(signature, cache=True, **options)(func)``, cached in :func:`cache_dir`.

    numba's own ``cache=True`` writes beside the source, into the package (files that
    ``pip uninstall`` leaves behind); here the C callback gets bbqlib's disk cache, or none
    when no folder is writable.

    Returns
    -------
    numba.core.ccallback.CFunc
        Compiled (or loaded from the cache); ``.address`` is the function pointer.
    """
    from numba.core.ccallback import CFunc  # numba imports it only for C callbacks

    callback = CFunc(func, sigutils.normalize_signature(signature), locals={}, options=options)
    callback._cache = _function_cache(_BbqlibFunctionCache, func)
    callback.compile()
    return callback
