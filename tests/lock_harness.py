"""The lock cases, tried one at a time (issue 27): shared by ``tests/test_locks.py`` and the
"lock cases" section of ``benchmarks/faults/faults.py``, which runs each many times against
this checkout and a baseline. Works with any bbqlib that has ``bbqlib.storage.atomic`` (before
and after locks failed closed), so the outcome, not an import error, tells them apart.

Outcomes of one trial:

- ``named``: an error naming the cause (the errno name, the holder's pid, the loop or the
  missing target), or the write went where it should (through a symlink to its target), or
  ``repair`` reported the real cause;
- ``vague``: an error that does not name the cause;
- ``silent``: the write happened without the lock, or in the wrong place (a link replaced),
  or ``repair`` called a lock it could not take "busy";
- ``hang``: no answer within ``hang_seconds`` (a wait behind a stopped holder).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from fault_harness import small_ivf, unit_rows

import bbqlib
from bbqlib.storage import atomic

LOCK_CASES = (
    "lock EACCES (flat save)",
    "lock EROFS (flat save)",
    "lock EACCES (IVF add)",
    "stopped holder (flat save)",
    "stopped holder (IVF add)",
    "save through a symlink",
    "symlink loop",
    "dangling symlink",
    "repair, lock EROFS",
)
LOCK_OUTCOMES = ("named", "vague", "silent", "hang")

#: A child that holds a lock with the checkout's own code (stdlib only: starts fast).
_HOLD = """
import sys, types
pkg = types.ModuleType("bbqio")
pkg.__path__ = [sys.argv[1]]
sys.modules["bbqio"] = pkg
from bbqio.atomic import path_lock
with path_lock(sys.argv[2]):
    print("held", flush=True)
    sys.stdin.read()
"""


class LockFixture:
    """What every trial starts from: a fitted flat index and a small IVF directory."""

    def __init__(self, workdir: Path):
        self.workdir = Path(workdir)
        self.flat = bbqlib.FlatIndex(bits=1)
        self.flat.add(unit_rows(40, 8, 0))
        self.ivf = self.workdir / "ivf-template"
        small_ivf(self.ivf, n=300, d=8)


@contextlib.contextmanager
def _failing_lock_opens(code: int):
    real = os.open

    def fake(path, flags, *args, **kwargs):
        if str(path).endswith(".lock"):
            raise OSError(code, os.strerror(code), str(path))
        return real(path, flags, *args, **kwargs)

    os.open = fake
    try:
        yield
    finally:
        os.open = real


@contextlib.contextmanager
def _lock_timeout(seconds: str):
    """``$BBQLIB_LOCK_TIMEOUT`` for the trial (a bbqlib without bounded waits ignores it)."""
    name = "BBQLIB_LOCK_TIMEOUT"
    before = os.environ.get(name)
    os.environ[name] = seconds
    try:
        yield
    finally:
        if before is None:
            del os.environ[name]
        else:
            os.environ[name] = before


@contextlib.contextmanager
def _stopped_holder(lock_file: Path):
    io_dir = str(Path(atomic.__file__).parent)
    proc = subprocess.Popen([sys.executable, "-c", _HOLD, io_dir, str(lock_file)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            cwd=tempfile.gettempdir())  # fmt: skip
    try:
        if proc.stdout.readline().strip() != b"held":
            raise RuntimeError("the lock holder did not start")
        os.kill(proc.pid, signal.SIGSTOP)
        yield proc.pid
    finally:
        proc.kill()
        proc.wait(10)
        proc.stdin.close()
        proc.stdout.close()


def _fingerprint(path: Path):
    st = os.stat(path)
    return st.st_ino, st.st_mtime_ns, st.st_size


def _error_outcome(err: BaseException, *names: str) -> str:
    return "named" if all(n in str(err) for n in names) else "vague"


def _write_outcome(write, watched: Path, cause: str, hang_seconds: float = 0.0) -> str:
    """Run ``write``; an error naming ``cause`` is ``named``, a change of ``watched`` while
    the lock was not held is ``silent``; with ``hang_seconds``, no answer by then: ``hang``."""
    before = _fingerprint(watched)
    result: list = []

    def run():
        try:
            write()
            result.append(None)
        except Exception as err:  # noqa: BLE001 - judged below
            result.append(err)

    if not hang_seconds:
        run()
    else:
        t = threading.Thread(target=run, daemon=True)
        t.start()
        t.join(hang_seconds)
        if t.is_alive():
            return "hang"  # the caller ends the holder, which lets the write go on
    err = result[0]
    if err is not None:
        return _error_outcome(err, cause)
    return "silent" if _fingerprint(watched) != before else "vague"


def lock_trial(case: str, fix: LockFixture, hang_seconds: float = 2.0) -> str:
    """One trial of ``case`` (one of :data:`LOCK_CASES`) in a fresh directory."""
    work = Path(tempfile.mkdtemp(prefix="bbqlock", dir=fix.workdir))
    try:
        return _trial(case, fix, work, hang_seconds)
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _trial(case: str, fix: LockFixture, work: Path, hang_seconds: float) -> str:
    path = fix.flat.save(work / "a.bbq")
    ivf = work / "ivf"
    shutil.copytree(fix.ivf, ivf)
    if case.startswith("lock "):
        name = case.split()[1]
        index = bbqlib.IVFIndex.open(ivf) if "IVF" in case else None
        with _failing_lock_opens(getattr(errno, name)):
            if index is not None:
                return _write_outcome(lambda: index.add(unit_rows(10, 8, 1)),
                                      ivf / "MANIFEST", name)  # fmt: skip
            return _write_outcome(lambda: fix.flat.save(path), path, name)
    if case.startswith("stopped holder"):
        if "IVF" in case:
            index = bbqlib.IVFIndex.open(ivf)
            lock, watched = atomic.dir_lock_path(ivf), ivf / "MANIFEST"
            write = lambda: index.add(unit_rows(10, 8, 1))  # noqa: E731
        else:
            lock, watched = atomic.file_lock_path(path), path
            write = lambda: fix.flat.save(path)  # noqa: E731
        with _lock_timeout("0.2"), _stopped_holder(lock) as pid:
            return _write_outcome(write, watched, f"pid {pid}", hang_seconds)
    if case == "save through a symlink":
        real = work / "real.bbq"
        shutil.copyfile(path, real)
        link = work / "link.bbq"
        link.symlink_to(real)
        before = _fingerprint(real)
        try:
            fix.flat.save(link)
        except Exception:  # noqa: BLE001 - a refusal would also be safe, but says less
            return "vague"
        through = link.is_symlink() and _fingerprint(real) != before
        return "named" if through else "silent"
    if case in ("symlink loop", "dangling symlink"):
        link = work / "link.bbq"
        link.symlink_to(link if case == "symlink loop" else work / "gone" / "x.bbq")
        try:
            fix.flat.save(link)
        except OSError as err:
            return _error_outcome(err, "loop" if case == "symlink loop" else "does not exist")
        return "silent"
    if case == "repair, lock EROFS":
        with _failing_lock_opens(errno.EROFS):
            report = bbqlib.repair(path)
        if report.status == "busy" or report.busy:
            return "silent"  # a false "busy: a live writer holds the lock"
        return "named" if getattr(report, "lock_error", None) == "EROFS" else "vague"
    raise ValueError(f"unknown lock case {case!r}; one of {LOCK_CASES}")
