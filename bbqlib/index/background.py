"""Compiling a single-query path in another process while this one serves (the parent's
side; the child is :mod:`bbqlib.runtime.compile_child`).

numba holds the GIL while it compiles, so a kernel compiled in a thread would still stall
every search of the process for seconds. A server whose one-query path is not compiled yet
(neither in this process nor in the kernel cache) answers single queries by the batch path
meanwhile, and :func:`start` has a child process compile the path into the kernel cache: the
child builds a small index with a copy of the index's fitted quantizer (the same kernels,
the same argument types), in memory or opened from a file as the index is, and runs
:func:`bbqlib.warmup` on it. When the child is done, the next one-query search loads the
machine code from the cache instead of compiling it.

One child compiles into a cache folder at a time: children take a lock file in the folder
(other processes' children wait for it, then find the kernels there and only load them).
Where the cache folder cannot be written, or processes cannot be started, :func:`start`
returns None and the caller compiles in-process as before. ``BBQLIB_BACKGROUND_COMPILE=0``
turns the child off.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path

__all__ = ["BACKGROUND_ENV", "Child", "start"]

BACKGROUND_ENV = "BBQLIB_BACKGROUND_COMPILE"
#: The lock file children take in the cache folder (one compiler at a time).
LOCK_NAME = ".background-compile.lock"


class Child:
    """A compiling child process: :meth:`done` and :meth:`succeeded` poll it."""

    def __init__(self, process: subprocess.Popen, spec: Path):
        self._process = process
        self._spec = spec

    def done(self) -> bool:
        finished = self._process.poll() is not None
        if finished:
            self._spec.unlink(missing_ok=True)
        return finished

    def succeeded(self) -> bool:
        return self.done() and self._process.returncode == 0

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the child (tests, shutdown); whether it succeeded."""
        self._process.wait(timeout)
        return self.succeeded()


def _cache_writable() -> Path | None:
    from .._kernels.cache import cache_dir

    folder = cache_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    return folder if os.access(folder, os.W_OK) else None


def start(index) -> Child | None:
    """Have a child process compile ``index``'s single-query path into the kernel cache.

    Returns the child, or None where no child can do it (see the module notes); the
    caller then compiles in-process.
    """
    if os.environ.get(BACKGROUND_ENV, "1") == "0" or sys.platform == "win32":
        return None
    folder = _cache_writable()
    if folder is None:
        return None
    spec = {
        "kind": type(index).__name__,
        "quantizer": index.quantizer,
        "store_vectors": getattr(index, "store_vectors", "float32"),
        "mapped": _is_mapped(index),
    }
    try:
        fd, name = tempfile.mkstemp(prefix="bbqlib-compile-", suffix=".pickle")
        with os.fdopen(fd, "wb") as f:
            pickle.dump(spec, f, protocol=pickle.HIGHEST_PROTOCOL)
        process = subprocess.Popen(
            [sys.executable, "-m", "bbqlib.runtime.compile_child", name, str(folder)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            env={**os.environ, "BBQLIB_CACHE_DIR": str(folder), BACKGROUND_ENV: "0"},
        )  # fmt: skip
    except (OSError, pickle.PicklingError, TypeError):
        return None
    return Child(process, Path(name))


def _is_mapped(index) -> bool:
    """Whether ``index`` searches read-only arrays, as file maps are (kernels compile apart
    for read-only and writable arrays; a flat index's codes are read-only in memory too)."""
    if getattr(index, "path", None) is not None:  # an IVF index in a directory
        return True
    codes = index._parts()[0] if hasattr(index, "_parts") else None
    data = getattr(codes, "codes", None)
    return data is not None and not data.flags.writeable
