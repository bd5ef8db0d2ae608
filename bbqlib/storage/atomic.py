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

Locks (:mod:`bbqlib.storage.locks`) are advisory ``flock`` locks on a small lock file:
``.<name>.lock`` beside a file, ``<directory>/.bbqlib.lock`` inside an IVF directory. A
writer holds the lock for the whole write (an IVF ``add`` or ``save``: every file of the new
generation); a lock that cannot be taken is an error, never a write without it.

A write through a symlink goes to the link's target (resolved when the write starts): the
temporary file is made beside the target and renamed over it, and the lock is the target's,
so writers through the link and through the target exclude each other.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
from collections.abc import Iterator
from pathlib import Path

from .locks import (
    DIR_LOCK_NAME,
    LockError,
    LockTimeoutError,
    dir_lock_path,
    file_lock_path,
    path_lock,
    resolve_target,
)

__all__ = [
    "DIR_LOCK_NAME",
    "LockError",
    "LockTimeoutError",
    "atomic_path",
    "clean_orphans",
    "dir_lock_path",
    "file_lock_path",
    "fsync_directory",
    "is_temp_name",
    "path_lock",
    "remove_temp_files",
    "resolve_target",
    "temp_path",
]

#: ``.<target>.<token>.tmp``; earlier bbqlib took tokens from ``tempfile.mkstemp`` (8 chars).
_TEMP_RE = re.compile(r"^\.(?P<target>.+)\.(?:[0-9a-f]{16}|[a-z0-9_]{8})\.tmp$")
#: Working copies of IVF builds of earlier bbqlib (``.work.<12 hex>.f32``).
_LEGACY_WORK_RE = re.compile(r"^\.work\.[0-9a-f]{12}\.f32$")


def temp_path(target: Path) -> Path:
    """A fresh temporary name beside ``target`` (not created)."""
    return target.parent / f".{target.name}.{secrets.token_hex(8)}.tmp"


def is_temp_name(name: str, target_name: str | None = None) -> bool:
    """Whether ``name`` is a temporary file of bbqlib (of ``target_name``, if given)."""
    m = _TEMP_RE.match(name)
    if m is not None:
        return target_name is None or m.group("target") == target_name
    return target_name in (None, "work.f32") and _LEGACY_WORK_RE.match(name) is not None


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
    file is not an orphan), nor when the lock cannot be taken at all (a read-only file
    system: nothing can be removed there anyway). A lock file that a killed writer left goes
    too (a released lock removes its file). ``path`` may be a symlink: the orphans are its
    target's. Returns ``(name, bytes)`` of the removed temporary files.
    """
    path = Path(os.path.realpath(path))
    lock = file_lock_path(path)
    if not path.parent.is_dir() or not any(
        is_temp_name(n, path.name) or n == lock.name for n in os.listdir(path.parent)
    ):
        return []  # the common case costs one listdir, and takes no lock
    try:
        with path_lock(lock, blocking=False, reentrant=False) as got:
            return remove_temp_files(path.parent, path.name) if got else []
    except LockError:  # an open must work where it cannot write: cleanup is for later
        return []


@contextlib.contextmanager
def atomic_path(path, *, lock: bool = True) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success fsync it and rename it over ``path``.

    On any exception the temporary file is removed and ``path`` is left as it was.
    ``lock=True`` holds the path's lock (:func:`file_lock_path`) for the whole write and first
    removes temporary files that killed writers of ``path`` left; pass False when the caller
    already holds a lock covering ``path`` (the files of an IVF directory).

    A symlink ``path`` is written through (:func:`resolve_target`): the temporary file is
    made beside its target and renamed over the target, under the target's lock. A lock
    that cannot be taken raises :class:`LockError`, one held elsewhere for longer than the
    lock timeout :class:`LockTimeoutError`; nothing is written then.
    """
    path = resolve_target(path)
    if not path.parent.is_dir():
        raise FileNotFoundError(errno.ENOENT, "directory does not exist", str(path.parent))
    guard = path_lock(file_lock_path(path)) if lock else contextlib.nullcontext(True)
    with guard as got:
        if not got:  # pragma: no cover - a blocking path_lock acquires or raises
            raise LockError(errno.EAGAIN, "the write lock was not acquired", str(path))
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
