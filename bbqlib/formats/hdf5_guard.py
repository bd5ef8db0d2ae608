"""Read HDF5 metadata in a subprocess that may hang or crash, never the caller.

libhdf5 can loop forever or crash on a damaged file (a fuzzer found mutated ann-benchmarks
files that hang ``h5py`` while it reads an attribute), and a call inside libhdf5 cannot be
interrupted. So bbqlib never parses an HDF5 file in the caller's process: a worker process
(a fresh interpreter started with ``python -c``, not a fork) opens the file with h5py and
describes it; the caller waits at most ``timeout`` seconds for the answer (time during which
the caller itself was stopped or got no CPU is not counted) and kills the worker after that
(or when it died: libhdf5 crashed), and raises :class:`~bbqlib.storage.errors.CorruptFileError`
naming the file.

The worker is started at the first read and kept for the next ones (one per process, its
requests serialized), so only the first read pays the start of an interpreter that imports
h5py; it exits when the caller's process does (its stdin closes). It reports, as one JSON
line, the file's top-level names, requested attributes, and for each requested dataset its
shape, dtype and, when it is stored contiguously without filters (ann-benchmarks' layout),
its byte offset. The caller then reads such a dataset itself with plain file reads (or
memory-maps it): the bytes libhdf5 would return, with no libhdf5 call in the caller and no
copy through a pipe. Any other dataset (chunked, compressed, external, not allocated) the
worker reads with h5py and saves to a temporary ``.npy`` file that the caller loads.
"""

from __future__ import annotations

import atexit
import json
import math
import os
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from ..storage.errors import CorruptFileError

__all__ = ["DEFAULT_TIMEOUT", "HDF5Layout", "default_timeout", "describe_hdf5", "load_dataset"]

#: Seconds the worker may take on top of reading data: starting it (an interpreter that
#: imports h5py) and the metadata of a healthy file take well under a second on an idle core.
DEFAULT_TIMEOUT = 60.0
#: Polling step of the wait for the worker (seconds; see :func:`_wait`).
_STEP = 0.25
#: Extra seconds per byte of file for the worker's own reads (chunked or compressed data).
_SECONDS_PER_BYTE = 1.0 / (32 << 20)

#: The worker: one JSON request per stdin line (path, output directory, what to report),
#: one JSON answer per stdout line.
_WORKER = r"""
import json, sys

def describe(path, outdir, attrs, datasets, read):
    import numpy as np, h5py
    out = {}
    with h5py.File(path, "r") as f:
        out["keys"] = sorted(f.keys())
        found = {}
        for name in attrs:
            if name in f.attrs:
                value = f.attrs[name]
                if isinstance(value, bytes):
                    value = value.decode("utf-8", "replace")
                elif isinstance(value, np.generic):
                    value = value.item()
                found[name] = value if isinstance(value, (str, int, float)) else repr(value)
        out["attrs"] = found
        sets = {}
        for name in datasets:
            if name not in f:
                continue
            obj = f[name]
            if not isinstance(obj, h5py.Dataset):
                sets[name] = {"dataset": False}
                continue
            entry = {"dataset": True, "shape": list(obj.shape), "dtype": obj.dtype.str}
            dt = obj.dtype
            simple = dt.fields is None and dt.subdtype is None and dt.kind in "biuf"
            offset = obj.id.get_offset()
            if simple and offset is not None and obj.chunks is None and not obj.external:
                entry["offset"] = int(offset)
            elif read:
                entry["npy"] = f"{outdir}/{len(sets)}.npy"
                np.save(entry["npy"], obj[()], allow_pickle=False)
            sets[name] = entry
        out["datasets"] = sets
    return out

for line in sys.stdin:
    try:
        out = describe(**json.loads(line))
    except Exception as exc:
        out = {"error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.write(json.dumps(out) + "\n")
    sys.stdout.flush()
"""


class _Worker:
    """A running worker process and a thread that queues its answer lines (None: EOF)."""

    def __init__(self):
        # cwd: an empty directory, so nothing there can shadow h5py (``-c`` puts cwd first
        # on sys.path; PYTHONSAFEPATH does the same from Python 3.11)
        self.cwd = tempfile.mkdtemp(prefix="bbqlib-h5-")
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=self.cwd,
            env=dict(os.environ, PYTHONSAFEPATH="1"),
        )
        self.pid = os.getpid()  # a forked child must not talk to its parent's worker
        self.answers: queue.Queue = queue.Queue()
        threading.Thread(target=self._pump, daemon=True, name="bbqlib-hdf5-worker").start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.answers.put(line)
        self.answers.put(None)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        for pipe in (self.proc.stdin, self.proc.stdout):
            try:
                pipe.close()
            except OSError:
                pass
        shutil.rmtree(self.cwd, ignore_errors=True)


_lock = threading.Lock()
_worker: _Worker | None = None


@atexit.register
def _stop_worker() -> None:
    global _worker
    if _worker is not None and _worker.pid == os.getpid():
        _worker.stop()
    _worker = None


def _wait(answers: queue.Queue, timeout: float):
    """The next answer; ``queue.Empty`` after ``timeout`` seconds of waiting, counted in
    steps of at most :data:`_STEP` x 2, so that time this process (or the machine) was
    stopped or starved of CPU, e.g. ``SIGSTOP`` or a suspended laptop, does not count."""
    counted, last = 0.0, time.monotonic()
    while True:
        try:
            return answers.get(timeout=min(_STEP, max(timeout - counted, 0.0)))
        except queue.Empty:
            now = time.monotonic()
            counted += min(now - last, 2 * _STEP)
            last = now
            if counted >= timeout:
                raise


def _ask(request: dict, timeout: float, path) -> dict:
    """Send ``request`` to the worker (started if needed); its answer within ``timeout``."""
    global _worker
    with _lock:
        if _worker is None or _worker.pid != os.getpid() or _worker.proc.poll() is not None:
            if _worker is not None and _worker.pid == os.getpid():
                _worker.stop()
            _worker = _Worker()
        worker = _worker
        try:
            worker.proc.stdin.write(json.dumps(request).encode() + b"\n")
            worker.proc.stdin.flush()
            line = _wait(worker.answers, timeout)
        except OSError:  # the worker died before reading the request
            line = None
        except BaseException as exc:  # no answer in time, or interrupted: an answer may
            worker.stop()  # still come, so this worker must not serve the next request
            _worker = None
            if isinstance(exc, queue.Empty):
                raise CorruptFileError(
                    f"{str(path)!r}: libhdf5 did not finish reading it within {timeout:.0f} s "
                    "(damaged HDF5 files can make it loop; its worker process was killed). "
                    "If the file is healthy and the machine very slow, pass a larger timeout="
                ) from None
            raise
        if line is None:
            code = worker.proc.wait()
            worker.stop()
            _worker = None
            how = f"signal {-code}" if code < 0 else f"exit {code}"
            raise CorruptFileError(
                f"{str(path)!r}: libhdf5 crashed reading it (its worker process: {how})"
            )
        try:
            return json.loads(line)
        except ValueError:
            worker.stop()  # out of step with its requests
            _worker = None
            raise CorruptFileError(f"{str(path)!r}: unreadable answer of the HDF5 worker") from None


def default_timeout(path) -> float:
    """:data:`DEFAULT_TIMEOUT` plus one second per 32 MiB of ``path``."""
    try:
        size = os.path.getsize(path)
    except OSError:
        size = 0
    return DEFAULT_TIMEOUT + size * _SECONDS_PER_BYTE


class HDF5Layout:
    """What the worker found in an HDF5 file (see :func:`describe_hdf5`).

    ``keys``: top-level names; ``attrs``: the requested file attributes present (str, int,
    float or a repr); ``datasets``: per requested name present, ``{"dataset": bool, "shape",
    "dtype", "offset"}`` or ``"npy"`` (a temporary file in ``workdir``). Use as a context
    manager: leaving it removes ``workdir``.
    """

    def __init__(self, path: Path, report: dict, workdir: Path):
        self.path = path
        self.keys: list[str] = report["keys"]
        self.attrs: dict = report["attrs"]
        self.datasets: dict = report["datasets"]
        self.workdir = workdir

    def __enter__(self) -> HDF5Layout:
        return self

    def __exit__(self, *exc) -> None:
        shutil.rmtree(self.workdir, ignore_errors=True)


def describe_hdf5(
    path: Path,
    *,
    attrs: tuple[str, ...] = (),
    datasets: tuple[str, ...] = (),
    read: bool = True,
    timeout: float | None = None,
) -> HDF5Layout:
    """Describe ``path`` through the worker process, which may hang or crash, not the caller.

    ``read``: have the worker save the requested datasets that cannot be read as raw bytes
    (chunked, compressed...) to temporary ``.npy`` files. ``timeout`` (seconds, default
    :func:`default_timeout`): the worker is killed after that long.

    Raises :class:`CorruptFileError` naming ``path`` when h5py raises, the worker dies, or
    it does not answer in time.
    """
    if timeout is None:
        timeout = default_timeout(path)
    workdir = Path(tempfile.mkdtemp(prefix="bbqlib-h5-"))
    request = {"path": os.path.abspath(path), "outdir": str(workdir), "attrs": list(attrs),
               "datasets": list(datasets), "read": read}  # fmt: skip
    try:
        report = _ask(request, timeout, path)
        if not isinstance(report, dict) or "error" in report:
            why = report.get("error") if isinstance(report, dict) else report
            raise CorruptFileError(f"{str(path)!r} is not a readable HDF5 file: {why}")
        return HDF5Layout(Path(path), report, workdir)
    except BaseException:
        shutil.rmtree(workdir, ignore_errors=True)
        raise


def load_dataset(layout: HDF5Layout, name: str, *, mmap: bool) -> np.ndarray:
    """Dataset ``name`` of ``layout``: raw bytes of the file (memory-mapped with ``mmap``)
    or the worker's ``.npy``; :class:`CorruptFileError` if it does not fit in the file."""
    entry = layout.datasets[name]
    where = f"{str(layout.path)!r}, dataset {name!r}"
    try:
        shape = tuple(int(n) for n in entry["shape"])
        dtype = np.dtype(entry["dtype"])
    except (TypeError, ValueError, KeyError) as exc:
        raise CorruptFileError(f"{where}: unreadable shape or dtype ({exc})") from None
    if "npy" in entry:
        try:
            arr = np.load(entry["npy"], allow_pickle=False)
        except (OSError, ValueError) as exc:
            raise CorruptFileError(f"{where}: {exc}") from None
        if arr.shape != shape:
            raise CorruptFileError(f"{where}: read {arr.shape}, header says {shape}")
        return arr
    if "offset" not in entry:
        raise CorruptFileError(f"{where}: has no data the reader could locate")
    count = math.prod(shape)
    offset = int(entry["offset"])
    size = os.path.getsize(layout.path)
    if offset < 0 or offset + count * dtype.itemsize > size:
        raise CorruptFileError(
            f"{where}: its {count * dtype.itemsize} bytes at offset {offset} lie beyond the "
            f"end of the file ({size} bytes): truncated or damaged"
        )
    if count == 0:
        return np.empty(shape, dtype)
    if mmap:
        return np.memmap(layout.path, dtype=dtype, mode="r", offset=offset, shape=shape)
    with open(layout.path, "rb") as f:
        f.seek(offset)
        arr = np.fromfile(f, dtype=dtype, count=count)
    if arr.size != count:  # the file shrank since
        raise CorruptFileError(f"{where}: short read ({arr.size} of {count} values)")
    return arr.reshape(shape)
