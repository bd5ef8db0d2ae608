"""numba policy, decided in one place.

Every kernel in :mod:`bbqlib._kernels` is compiled through these decorators so that
caching, threading and fastmath flags stay uniform.

* ``cache=True``: a second process loads machine code from the disk cache instead of
  recompiling (first-call compile time is the main start-up cost). The cache lives in a
  per-user directory, not in the installed package (:mod:`bbqlib._kernels.cache`).
* ``nogil=True`` so that callers may run kernels from Python threads.
* No fastmath for float code whose bias we publish (estimators, rerank): reassociation
  would change the numbers the statistical tests pin down. Integer bit kernels need none.

Threads
-------
A :func:`parallel_kernel` is called through a :class:`ParallelKernel`, which runs it on

    min(numba's thread count for the calling thread, bbqlib's limit, the caller's caps,
        the kernel's own work rule)

threads (:func:`threads_for`): a parallel region costs a fork and a join, and on a busy
machine the join waits until every helper thread has been scheduled, so small calls run on
the calling thread alone. bbqlib's limit is :func:`bbqlib.set_num_threads` (process-wide) or
:func:`bbqlib.thread_limit` (this thread, inside a ``with`` block); call sites that know the
size of a whole operation cap the kernels inside it with :func:`limit_threads`. Nothing here
touches numba's global configuration: the thread count is numba's per-thread mask, set
around the call and restored after it.

numba's ``workqueue`` threading layer (chosen by numba when neither TBB nor OpenMP loads)
aborts the process when two Python threads launch parallel kernels at once, so under it
bbqlib's parallel kernels run one at a time (a process-wide lock). With TBB installed
(``pip install tbb``, a dependency of bbqlib where wheels exist) numba's own preference
order picks it; :func:`_preload_tbb` only makes the library of the ``tbb`` package loadable
where numba's loader would not look (virtual environments).
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
import time
from collections.abc import Callable, Iterator

import numba
import numpy as np

from . import cache as _cache

__all__ = [
    "kernel",
    "parallel_kernel",
    "prange",
    "num_threads",
    "max_threads",
    "threads_for",
    "limit_threads",
    "thread_scope",
    "cap_threads",
    "ParallelKernel",
    "threading_layer",
    "set_threads",
    "threads",
]

prange = numba.prange


def _compile(func, options, vectorize: bool, *, serial_twin: bool = False):
    options = dict(options)
    cache = options.pop("cache", False)
    # numba's own cache=True would write into the package folder; bbqlib's goes per user.
    dispatcher = numba.njit(cache=False, **options)(func)
    if cache:
        _cache.use_bbqlib_cache(dispatcher, serial_twin=serial_twin)
    if not vectorize:
        _disable_loop_vectorizer(dispatcher)
    return dispatcher


def _disable_loop_vectorizer(dispatcher) -> None:
    """Compile ``dispatcher`` with LLVM's loop vectorizer off (this kernel only).

    Popcount loops over a few uint64 words (6 at d = 384) run faster as scalar POPCNT than
    after LLVM rewrites ``ctpop`` into AVX2 byte shuffles with a horizontal sum
    (``benchmarks/results/flat.md`` times the scans that run them).
    numba reads ``config.LOOP_VECTORIZE`` when it optimizes a module, under its global
    compiler lock, so switching it around this dispatcher's compilation touches nothing else.
    """
    compile_signature = dispatcher.compile

    def compile_without_loop_vectorizer(sig):
        old = numba.config.LOOP_VECTORIZE
        numba.config.LOOP_VECTORIZE = 0
        try:
            return compile_signature(sig)
        finally:
            numba.config.LOOP_VECTORIZE = old

    dispatcher.compile = compile_without_loop_vectorizer


def kernel(func=None, *, vectorize: bool = True, **overrides):
    """Compile a serial kernel: ``@njit(cache=True, nogil=True)``.

    ``vectorize=False`` turns LLVM's loop vectorizer off for this kernel (bit kernels).
    """
    options = {"cache": True, "nogil": True, **overrides}
    if func is None:
        return lambda f: _compile(f, options, vectorize)
    return _compile(func, options, vectorize)


def parallel_kernel(
    func=None,
    *,
    vectorize: bool = True,
    work: Callable[..., int] | None = None,
    min_work: int = 1,
    serial: Callable | None = None,
    **overrides,
):
    """Compile a multi-threaded kernel: ``@njit(cache=True, nogil=True, parallel=True)``.

    Returns a :class:`ParallelKernel` (callable like the dispatcher; ``.dispatcher`` is the
    numba dispatcher, for calls from other compiled code). ``work(*args)`` optionally counts
    the kernel's work items for a call and ``min_work`` is the fewest items worth a thread
    (:func:`threads_for`); without ``work`` the kernel takes the threads its callers allow.
    ``serial(*args)``, optional, does a one-thread call with the same arguments, typically
    by calling the kernel's (non-inlined) body over the whole range: then no single-threaded
    twin is compiled (the twin would re-optimize that body: compile time for nothing).
    """
    options = {"cache": True, "nogil": True, "parallel": True, **overrides}

    def build(f):
        return ParallelKernel(f, options, vectorize, work, min_work, serial)

    return build if func is None else build(func)


# ------------------------------------------------------------------------------- threads
#: Multiplies every ``min_work`` / ``min_per_thread``; tests set it to 0 to force threads on
#: small inputs (``tests/conftest.py``'s ``numba_threads``).
WORK_SCALE = 1.0

_process_limit: int | None = None  # bbqlib.set_num_threads
_local = threading.local()  # .user: bbqlib.thread_limit; .caps: limit_threads stack
_serial_lock = threading.Lock()
_layer_ready = False
_serialize = False  # numba's workqueue layer: one parallel kernel at a time
_record: dict | None = None  # bbqlib.warmup: parallel kernel -> argument types it got
_get_mask = numba.get_num_threads
_set_mask = numba.set_num_threads


def max_threads() -> int:
    """Threads numba started (``NUMBA_NUM_THREADS``, by default the usable cores)."""
    return int(numba.config.NUMBA_NUM_THREADS)


def _user_limit() -> int | None:
    user = getattr(_local, "user", None)
    return user if user is not None else _process_limit


def _caps() -> list:
    caps = getattr(_local, "caps", None)
    if caps is None:
        caps = _local.caps = []
    return caps


def _allowed(mask: int) -> int:
    n = mask
    user = _user_limit()
    if user is not None and user < n:
        n = user
    caps = getattr(_local, "caps", None)
    if caps:
        n = min(n, caps[-1])
    return n


def num_threads() -> int:
    """Threads a parallel kernel called here and now may use (before its work rule)."""
    _ensure_layer()
    return _allowed(_get_mask())


def threads_for(work_items: float, min_per_thread: float) -> int:
    """Threads worth using for ``work_items`` units of work: at least ``min_per_thread``
    units each, never more than :func:`num_threads`, never fewer than 1.

    ``min_per_thread`` is set per kernel family (docs/threads.md lists them): enough work
    for one thread that a parallel region's fork and join (short on an idle machine, long
    when a helper thread waits for a busy core) stay small beside it;
    ``benchmarks/serving/serving.py --sections contention`` measures searches under load.
    """
    n = num_threads()
    if n <= 1:
        return 1
    per = min_per_thread * WORK_SCALE
    if per <= 0:
        return n
    return max(1, min(n, int(work_items // per)))


@contextlib.contextmanager
def limit_threads(n: int) -> Iterator[int]:
    """Cap the parallel kernels called inside the block at ``n`` threads (this thread only).

    Caps nest (the smallest wins); :func:`bbqlib.thread_limit` and ``numba.set_num_threads``
    still apply. Yields the effective count.
    """
    caps = _caps()
    caps.append(max(1, min(int(n), caps[-1])) if caps else max(1, int(n)))
    try:
        yield num_threads()
    finally:
        caps.pop()


def thread_scope(method):
    """Decorator: the function's kernels obey :func:`cap_threads` calls made inside it.

    For long functions that learn their amount of work halfway (an index search): one
    decorator and one :func:`cap_threads` line instead of a ``with`` block around the rest.
    """

    @functools.wraps(method)
    def scoped(*args, **kwargs):
        caps = _caps()
        depth = len(caps)
        caps.append(caps[-1] if caps else max_threads())
        try:
            return method(*args, **kwargs)
        finally:
            del caps[depth:]

    return scoped


def cap_threads(n: int) -> int:
    """Lower the thread cap of the innermost :func:`thread_scope` (or :func:`limit_threads`
    block) to ``n`` for the rest of it; returns the effective count."""
    caps = _caps()
    if not caps:
        raise RuntimeError("cap_threads needs an enclosing thread_scope or limit_threads")
    caps[-1] = max(1, min(int(n), caps[-1]))
    return num_threads()


@contextlib.contextmanager
def recording() -> Iterator[dict]:
    """Collect the :class:`ParallelKernel` objects called inside the block (any thread),
    each with the argument types it was called with."""
    global _record
    seen: dict = {}
    before, _record = _record, seen
    try:
        yield seen
    finally:
        _record = before


def _ensure_layer() -> None:
    """Start numba's threading layer (as its first parallel call would) and note its kind."""
    global _layer_ready, _serialize, _get_mask, _set_mask
    if _layer_ready:
        return
    from numba.np.ufunc import parallel

    _preload_tbb()
    parallel._launch_threads()
    _serialize = numba.threading_layer() == "workqueue"
    # numba's per-thread mask through its C entry points, which skip what the public
    # functions add on every call: argument checks and a launch check we have done.
    get_raw = getattr(parallel, "_get_num_threads", None)
    set_raw = getattr(parallel, "_set_num_threads", None)
    if callable(get_raw) and callable(set_raw):
        _get_mask, _set_mask = get_raw, set_raw
    _layer_ready = True


def _preload_tbb() -> None:
    """Load the ``tbb`` package's ``libtbb`` so numba's default layer order can pick TBB.

    numba asks the dynamic loader for ``libtbb.so.12`` by name, which misses the copy pip
    installs into ``<environment>/lib`` unless that folder is on the loader's path (it is in
    conda environments, not in virtual environments). Loading that file first lets numba's
    own lookup find it. Nothing happens when the threading layer is already running, when
    ``NUMBA_THREADING_LAYER`` names a layer, when ``BBQLIB_NO_TBB=1``, or when the ``tbb``
    package is not installed.
    """
    from numba.np.ufunc import parallel

    if getattr(parallel, "_is_initialized", False):
        return
    if os.environ.get("BBQLIB_NO_TBB", "") not in ("", "0"):
        return
    if str(numba.config.THREADING_LAYER).lower() not in ("default", "tbb", "threadsafe"):
        return
    path = _tbb_library()
    if path is None:
        return
    import ctypes

    try:
        ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
    except OSError:
        pass  # numba falls back to OpenMP, as without the package


@functools.cache
def _tbb_library() -> str | None:
    """Path of the libtbb the ``tbb`` distribution installed, from its file list."""
    import sys
    from importlib import metadata

    names = {"linux": "libtbb.so.12", "darwin": "libtbb.12.dylib", "win32": "tbb12.dll"}
    want = names.get(sys.platform)
    if want is None:
        return None
    try:
        files = metadata.files("tbb") or []
    except metadata.PackageNotFoundError:
        return None
    for f in files:
        if f.name == want:
            path = str(f.locate())
            return path if os.path.exists(path) else None
    return None


def threading_layer() -> str:
    """numba's threading layer for this process (``tbb``, ``omp`` or ``workqueue``),
    starting it if no parallel kernel has run yet."""
    _ensure_layer()
    return numba.threading_layer()


#: Tiered compilation: a multi-threaded variant that is neither compiled in this process nor
#: in the disk cache is compiled once its kernel has spent this many seconds running
#: single-threaded in calls that wanted more threads (its compile costs about as much).
#: Until then such calls run single-threaded. ``bbqlib.warmup(index)`` compiles at once;
#: tests set 0 (``tests/conftest.py``).
COMPILE_PARALLEL_AFTER = 2.0


def _type_key(args) -> tuple:
    """A cheap key that separates argument lists numba would type differently."""
    key = []
    for a in args:
        if isinstance(a, np.ndarray):
            f = a.flags
            key.append((a.dtype.str, a.ndim, f.c_contiguous, f.f_contiguous, f.writeable))
        else:
            key.append(type(a))
    return tuple(key)


def _load_cached(dispatcher, sig) -> bool:
    """Install ``sig`` from the disk cache if it is there (never compiles): numba's own
    ``Dispatcher.compile`` steps up to its cache lookup."""
    from numba.core.compiler_lock import global_compiler_lock

    with global_compiler_lock:
        if tuple(sig) in dispatcher.overloads:
            return True
        cres = dispatcher._cache.load_overload(sig, dispatcher.targetctx)
        if cres is None:
            return False
        dispatcher._cache_hits[sig] += 1
        if not cres.objectmode:
            dispatcher.targetctx.insert_user_function(cres.entry_point, cres.fndesc, [cres.library])
        dispatcher.add_overload(cres)
        return True


class ParallelKernel:
    """A parallel numba kernel called with bbqlib's thread policy (see the module notes).

    A call that may use several threads goes to ``dispatcher`` (``parallel=True``) with
    numba's per-thread mask lowered to the allowed count for the duration of the call; a
    call on one thread goes to ``serial``, the same function compiled without
    ``parallel=True`` (compiled on first use, cached apart): it costs no threading-layer
    call, cannot wait on a busy core, is safe under any layer, and compiles faster.
    Attributes not defined here come from the parallel dispatcher.

    Compilation is tiered (:data:`COMPILE_PARALLEL_AFTER`): the multi-threaded variant costs
    more than the single-threaded one to compile (numba re-optimizes the kernel body inside
    the parallel wrapper), so on an empty cache the first calls run single-threaded and the
    variant is compiled once the kernel has proven hot; from the disk cache it is used at once.
    """

    def __init__(self, func, options: dict, vectorize: bool, work, min_work: float, serial=None):
        self._func = func
        self._options = options
        self._vectorize = vectorize
        self.dispatcher = _compile(func, options, vectorize)
        self._serial = serial
        self._work = work
        self._min_work = float(min_work)
        self._ready: dict = {}  # type key -> True (parallel variant usable) / False (not yet)
        self._serial_seconds = 0.0  # single-threaded time of calls that wanted threads
        functools.update_wrapper(self, func, updated=())

    @property
    def serial(self):
        """The one-thread path: the ``serial=`` function given to :func:`parallel_kernel`,
        else the single-threaded twin (``prange`` runs as ``range``)."""
        if self._serial is None:
            options = {k: v for k, v in self._options.items() if k != "parallel"}
            self._serial = _compile(self._func, options, self._vectorize, serial_twin=True)
        return self._serial

    def compile_both(self, signatures=()) -> None:
        """Compile (or load from the cache) both variants for ``signatures`` (argument type
        tuples) and for every signature either variant already has."""
        serial, parallel = self.serial, self.dispatcher
        twin = hasattr(serial, "signatures")  # else a Python function over compiled bodies
        sigs = set(signatures) | set(parallel.signatures)
        if twin:
            sigs |= set(serial.signatures)
        for sig in sigs:
            if sig not in parallel.signatures:
                parallel.compile(sig)
            if twin and sig not in serial.signatures:
                serial.compile(sig)
        self._ready.clear()  # looked up again (now compiled) at the next call

    def threads(self, *args) -> int:
        """Threads a call with ``args`` would use here and now."""
        _ensure_layer()
        return self._threads(_get_mask(), args)

    def _threads(self, mask: int, args) -> int:
        n = _allowed(mask)
        if self._work is not None and n > 1:
            per = self._min_work * WORK_SCALE
            if per > 0:
                n = max(1, min(n, int(self._work(*args) // per)))
        return n

    def __call__(self, *args):
        if not _layer_ready:
            _ensure_layer()
        if _record is not None:
            sig = tuple(self.dispatcher.typeof_pyval(a) for a in args)
            _record.setdefault(self, set()).add(sig)
        mask = _get_mask()
        n = self._threads(mask, args)
        if n <= 1:
            serial = self._serial if self._serial is not None else self.serial
            return serial(*args)
        key = _type_key(args)
        if self._ready.get(key) is not True and not self._make_ready(key, args):
            t0 = time.perf_counter()
            try:
                return self.serial(*args)
            finally:
                self._serial_seconds += time.perf_counter() - t0
        if _serialize:
            with _serial_lock:
                return self._run(n, mask, args)
        return self._run(n, mask, args)

    def _make_ready(self, key, args) -> bool:
        """Is the multi-threaded variant usable for these argument types (compiled here, in
        the disk cache, or worth compiling now)?"""
        disp = self.dispatcher
        if self._serial_seconds >= COMPILE_PARALLEL_AFTER:
            disp.compile(tuple(disp.typeof_pyval(a) for a in args))
            self._ready[key] = True
            return True
        if key in self._ready:  # looked up before: not on disk
            return False
        sig = tuple(disp.typeof_pyval(a) for a in args)
        self._ready[key] = _load_cached(disp, sig)
        return self._ready[key]

    def _run(self, n: int, mask: int, args):
        if n == mask:
            return self.dispatcher(*args)
        _set_mask(n)
        try:
            return self.dispatcher(*args)
        finally:
            _set_mask(mask)

    def __getattr__(self, name):
        if name in ("dispatcher", "_func"):  # not set yet (during __init__)
            raise AttributeError(name)
        return getattr(self.dispatcher, name)

    def __repr__(self) -> str:
        return f"ParallelKernel({self._func.__module__}.{self._func.__qualname__})"


def set_threads(n: int | None) -> int:
    """Threads for ``parallel_kernel`` calls made from the calling Python thread.

    ``n`` is clipped to ``[1, NUMBA_NUM_THREADS]``; ``None`` takes them all. numba keeps this
    count per Python thread (other threads keep theirs) and the threading layer is left as it
    is. Returns the previous count, so a caller can put it back.
    """
    previous = numba.get_num_threads()
    limit = numba.config.NUMBA_NUM_THREADS
    numba.set_num_threads(limit if n is None else max(1, min(int(n), limit)))
    return previous


@contextlib.contextmanager
def threads(n: int | None) -> Iterator[int]:
    """``with threads(1): ...`` runs the block's kernels on ``n`` threads, then restores."""
    previous = set_threads(n)
    try:
        yield numba.get_num_threads()
    finally:
        numba.set_num_threads(previous)
