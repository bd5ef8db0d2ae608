"""Atomic writes, the names of their temporary files, advisory path locks, orphan cleanup.

Every file bbqlib writes goes through :func:`atomic_path`: a temporary file beside the target
named ``.<target name>.<16 hex digits>.tmp`` is written, fsynced and renamed over the target,
so a crash leaves the old file or the new one. A process killed mid-write (``kill -9``, power
loss) leaves its temporary file behind; such *orphans* are removed

- by the next write of the same target (which holds the target's lock, so no live writer
  can own another temporary file of that target),
- by the next open of the same index, when no live writer holds its lock
  (:func:`clean_orphans`, non-blocking: an open never waits for a writer),
- by :func:`bbqlib.repair`, which reports what it removed.

Locks are advisory ``flock`` locks on a small lock file: ``.<name>.lock`` beside a file,
``<directory>/.bbqlib.lock`` inside an IVF directory. A writer holds the lock for the whole
write (an IVF ``add`` or ``save``: every file of the new generation); the lock file is removed
when the lock is released. The kernel releases the lock of a killed process, so a stale lock
file never blocks anybody; it is removed by the next holder. Re-entrant within a thread.
Where ``fcntl`` is missing (Windows) locking is a no-op and cleanup trusts the caller.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import threading
import time
from collections.abc import Iterator
from pathlib import Path

try:  # POSIX only; see the module docstring for the fallback
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

__all__ = [
    "DIR_LOCK_NAME",
    "atomic_path",
    "clean_orphans",
    "dir_lock_path",
    "file_lock_path",
    "fsync_directory",
    "is_temp_name",
    "path_lock",
    "remove_temp_files",
    "temp_path",
]

#: Lock file inside a directory-shaped index (IVF).
DIR_LOCK_NAME = ".bbqlib.lock"
#: ``.<target>.<token>.tmp``; earlier bbqlib took tokens from ``tempfile.mkstemp`` (8 chars).
_TEMP_RE = re.compile(r"^\.(?P<target>.+)\.(?:[0-9a-f]{16}|[a-z0-9_]{8})\.tmp$")
#: Working copies of IVF builds of earlier bbqlib (``.work.<12 hex>.f32``).
_LEGACY_WORK_RE = re.compile(r"^\.work\.[0-9a-f]{12}\.f32$")

_held: dict[str, list] = {}  # lock file -> [thread id, depth, fd]
_held_guard = threading.Lock()


def temp_path(target: Path) -> Path:
    """A fresh temporary name beside ``target`` (not created)."""
    return target.parent / f".{target.name}.{secrets.token_hex(8)}.tmp"


def is_temp_name(name: str, target_name: str | None = None) -> bool:
    """Whether ``name`` is a temporary file of bbqlib (of ``target_name``, if given)."""
    m = _TEMP_RE.match(name)
    if m is not None:
        return target_name is None or m.group("target") == target_name
    return target_name in (None, "work.f32") and _LEGACY_WORK_RE.match(name) is not None


def file_lock_path(path: Path) -> Path:
    """The lock file of a single-file target: ``.<name>.lock`` beside it."""
    path = Path(path)
    return path.parent / f".{path.name}.lock"


def dir_lock_path(directory: Path) -> Path:
    """The lock file of a directory-shaped index: ``<directory>/.bbqlib.lock``."""
    return Path(directory) / DIR_LOCK_NAME


def _try_flock(lock_file: Path, blocking: bool) -> int | None:
    """An fd holding an exclusive flock on ``lock_file`` (the file currently at that path)."""
    while True:
        fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return None
        except BaseException:
            os.close(fd)
            raise
        # The previous holder removes the file when it releases: make sure we locked the file
        # that is at the path now, not an unlinked one (else two holders could coexist).
        try:
            now = os.stat(lock_file)
        except FileNotFoundError:
            now = None
        mine = os.fstat(fd)
        if now is not None and (now.st_ino, now.st_dev) == (mine.st_ino, mine.st_dev):
            return fd
        os.close(fd)


@contextlib.contextmanager
def path_lock(
    lock_file, *, blocking: bool = True, timeout: float | None = None, reentrant: bool = True
) -> Iterator[bool]:
    """Hold the advisory lock ``lock_file``; yields whether it was acquired.

    ``blocking=False`` yields False at once when another process (or thread) holds it;
    ``timeout`` (seconds, with ``blocking``) gives up after that long and yields False. A
    directory that cannot hold the lock file (read-only) yields False without waiting.
    Re-entrant: a thread that holds the lock acquires it again at once (``reentrant=False``:
    yields False instead).
    """
    if fcntl is None:  # pragma: no cover - Windows: no advisory locks
        yield True
        return
    key = os.path.abspath(lock_file)
    me = threading.get_ident()
    with _held_guard:
        entry = _held.get(key)
        reentered = entry is not None and entry[0] == me
        if reentered and reentrant:
            entry[1] += 1
    if reentered and not reentrant:
        yield False
        return
    if reentered:
        try:
            yield True
        finally:
            with _held_guard:
                _held[key][1] -= 1
        return
    fd = None
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while True:
            fd = _try_flock(Path(key), blocking and deadline is None)
            if fd is not None or not blocking or time.monotonic() >= deadline:
                break
            time.sleep(0.01)
    except OSError as err:
        if err.errno not in (errno.EACCES, errno.EROFS, errno.EPERM, errno.ENOENT):
            raise
        fd = None  # read-only or vanished directory: nobody can write here anyway
    if fd is None:
        yield False
        return
    with _held_guard:
        _held[key] = [me, 1, fd]
    try:
        yield True
    finally:
        with _held_guard:
            del _held[key]
        with contextlib.suppress(OSError):
            os.unlink(key)
        os.close(fd)


def remove_temp_files(directory: Path, target_name: str | None = None) -> list[tuple[str, int]]:
    """Remove bbqlib's temporary files in ``directory`` (only ``target_name``'s, if given).

    The caller holds the lock of whatever the files belong to. Returns ``(name, bytes)``.
    """
    removed = []
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return removed
    for entry in entries:
        if not is_temp_name(entry.name, target_name):
            continue
        try:
            size = entry.stat().st_size
            os.unlink(entry.path)
        except OSError:  # gone already, or not ours to remove
            continue
        removed.append((entry.name, size))
    return removed


def clean_orphans(path) -> list[tuple[str, int]]:
    """At the open of the single-file index ``path``: remove its orphaned temporary files.

    Non-blocking: when a live writer holds the path's lock nothing is removed (its temporary
    file is not an orphan). A lock file that a killed writer left goes too (a released
    lock removes its file). Returns ``(name, bytes)`` of the removed temporary files.
    """
    path = Path(path)
    lock = file_lock_path(path)
    if not path.parent.is_dir() or not any(
        is_temp_name(n, path.name) or n == lock.name for n in os.listdir(path.parent)
    ):
        return []  # the common case costs one listdir, and takes no lock
    with path_lock(lock, blocking=False, reentrant=False) as got:
        return remove_temp_files(path.parent, path.name) if got else []


@contextlib.contextmanager
def atomic_path(path, *, lock: bool = True) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success fsync it and rename it over ``path``.

    On any exception the temporary file is removed and ``path`` is left as it was.
    ``lock=True`` holds the path's lock (:func:`file_lock_path`) for the whole write and first
    removes temporary files that killed writers of ``path`` left; pass False when the caller
    already holds a lock covering ``path`` (the files of an IVF directory).
    """
    path = Path(path)
    if not path.parent.is_dir():
        raise FileNotFoundError(errno.ENOENT, "directory does not exist", str(path.parent))
    guard = path_lock(file_lock_path(path)) if lock else contextlib.nullcontext(True)
    with guard:
        if lock:
            remove_temp_files(path.parent, path.name)
        tmp = temp_path(path)
        os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
        try:
            yield tmp
            fd = os.open(tmp, os.O_RDWR)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            # Created 0600; give the result the mode of the file it replaces, or 0644.
            os.chmod(tmp, path.stat().st_mode & 0o7777 if path.exists() else 0o644)
            os.replace(tmp, path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        fsync_directory(path.parent)


def fsync_directory(directory: Path) -> None:
    """Make a rename in ``directory`` durable (POSIX; not possible nor needed on Windows)."""
    if os.name != "posix":
        return
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
