"""Advisory path locks of bbqlib's writers: fail closed, bounded waits, the holder's pid.

Every write holds an exclusive ``flock`` on a small lock file: ``.<name>.lock`` beside a file,
``<directory>/.bbqlib.lock`` inside an IVF directory (``docs/concurrency.md``).

- **Fail closed.** A lock file that cannot be opened (``EACCES``, ``EPERM``, ``EROFS``,
  ``ENOENT``) or locked (``ENOLCK``) raises :class:`LockError` naming the lock file, the
  cause and what to do; the write does not happen. Cleanup at an open catches it and skips.
- **Bounded waits.** A writer waits at most the lock timeout (:func:`set_lock_timeout`,
  else ``$BBQLIB_LOCK_TIMEOUT``, else :data:`DEFAULT_LOCK_TIMEOUT` seconds), then raises
  :class:`LockTimeoutError` naming the holder's pid, which every holder writes into the
  lock file once it holds the lock.
- **One lock per file, whatever the path.** The lock file's directory is resolved
  (symlinks followed), so writers through a symlinked directory and through its target take
  the same lock; :func:`resolve_target` gives the file a write through a symlink goes to.
- The lock file is removed when its lock is released; the kernel releases the lock of a
  killed process, and its stale file is reused by the next holder. Re-entrant within a thread.
- Where ``fcntl`` is missing (Windows) there are no advisory locks: the first write warns
  once per process, and writes from two processes are not serialized.
"""

from __future__ import annotations

import contextlib
import errno
import math
import os
import threading
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

try:  # POSIX only; see the module docstring for the fallback
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

__all__ = [
    "DEFAULT_LOCK_TIMEOUT",
    "DIR_LOCK_NAME",
    "LOCK_TIMEOUT_ENV",
    "LockError",
    "LockTimeoutError",
    "dir_lock_path",
    "file_lock_path",
    "get_lock_timeout",
    "lock_holder",
    "path_lock",
    "resolve_target",
    "set_lock_timeout",
]

#: Lock file inside a directory-shaped index (IVF).
DIR_LOCK_NAME = ".bbqlib.lock"
#: Seconds a writer waits for another process's lock before :class:`LockTimeoutError`.
DEFAULT_LOCK_TIMEOUT = 60.0
#: Environment variable read when :func:`set_lock_timeout` was not called.
LOCK_TIMEOUT_ENV = "BBQLIB_LOCK_TIMEOUT"

_held: dict[str, list] = {}  # lock file -> [thread id, depth, fd]
_held_guard = threading.Lock()
_timeout: float | None = None  # set_lock_timeout's value; None: the environment or default
_warned_no_fcntl = False


class LockError(OSError):
    """A write's advisory lock could not be opened or taken; nothing was written.

    ``errno`` names the cause (``EACCES``/``EPERM``: no permission on the lock file or its
    directory; ``EROFS``: read-only file system; ``ENOENT``: the directory is gone;
    ``ENOLCK``: the file system has no ``flock``), ``filename`` the lock file.
    """


class LockTimeoutError(LockError, TimeoutError):
    """Another process held a write's lock longer than the lock timeout; nothing was written.

    ``pid``: the holder's process id as its lock file records it (None if unknown);
    ``timeout``: the seconds waited. See :func:`set_lock_timeout`.
    """

    pid: int | None = None
    timeout: float | None = None


# --------------------------------------------------------------------------- settings


def _check_timeout(seconds, name: str) -> float:
    try:
        value = float(seconds)
    except (TypeError, ValueError):
        value = math.nan
    if isinstance(seconds, bool) or not value >= 0:  # also refuses nan
        raise ValueError(
            f"{name} must be a number of seconds >= 0 (0: do not wait; inf: wait forever), "
            f"got {seconds!r}"
        )
    return value


def set_lock_timeout(seconds: float | None) -> float | None:
    """Set how long a write waits for another process's lock, for the whole process.

    Parameters
    ----------
    seconds : float >= 0, ``math.inf`` or None
        ``0``: fail at once when another process writes; ``math.inf``: wait forever;
        ``None``: back to the default (``$BBQLIB_LOCK_TIMEOUT``, else 60 s).

    Returns
    -------
    float or None
        The previous setting (None when it was the default), to restore it.

    Notes
    -----
    A write that waits longer raises :class:`LockTimeoutError` naming the lock file and the
    pid of the process that holds it; nothing is written.
    """
    global _timeout
    previous = _timeout
    _timeout = None if seconds is None else _check_timeout(seconds, "seconds")
    return previous


def get_lock_timeout() -> float:
    """Seconds a write waits for another process's lock (``math.inf``: forever)."""
    if _timeout is not None:
        return _timeout
    env = os.environ.get(LOCK_TIMEOUT_ENV, "").strip()
    if not env:
        return DEFAULT_LOCK_TIMEOUT
    return _check_timeout(env, f"${LOCK_TIMEOUT_ENV}")


# --------------------------------------------------------------------------- paths


def file_lock_path(path) -> Path:
    """The lock file of a single-file target: ``.<name>.lock`` beside it."""
    path = Path(path)
    return path.parent / f".{path.name}.lock"


def dir_lock_path(directory) -> Path:
    """The lock file of a directory-shaped index: ``<directory>/.bbqlib.lock``."""
    return Path(directory) / DIR_LOCK_NAME


def resolve_target(path) -> Path:
    """The path a write of ``path`` goes to: every symlink followed (its own and its parents').

    A write through a symlink replaces the link's target, not the link, so the link keeps
    naming the new content. A symlink loop raises ``OSError`` (``ELOOP``) and a link to
    nothing ``FileNotFoundError``, each naming the link; a path that does not exist yet (a
    new file, not a link) is returned with its directories resolved.
    """
    path = Path(os.path.abspath(path))
    try:
        os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise FileNotFoundError(
                errno.ENOENT,
                f"{path} is a symlink to {os.readlink(path)}, which does not exist; create "
                "that file (or directory), or point the link at an existing one",
                str(path),
            ) from None
    except OSError as err:
        if err.errno != errno.ELOOP:
            raise
        raise OSError(
            errno.ELOOP,
            f"{path} is a symlink loop (it, or a directory above it, ends up pointing at "
            "itself); point the link at a real file or directory",
            str(path),
        ) from None
    return Path(os.path.realpath(path))


def _key(lock_file) -> str:
    """The lock file's path with its directory resolved: one key per lock, whatever path."""
    lock_file = os.path.abspath(lock_file)
    return os.path.join(os.path.realpath(os.path.dirname(lock_file)), os.path.basename(lock_file))


def lock_holder(lock_file) -> int | None:
    """The pid the holder of ``lock_file`` wrote into it (None: no file, unreadable, empty)."""
    try:
        with open(lock_file, "rb") as f:
            return int(f.read(32).split()[0])
    except (OSError, ValueError, IndexError):
        return None


# --------------------------------------------------------------------------- errors


def _unavailable(lock_file: str, err: OSError) -> LockError:
    code = err.errno
    name = errno.errorcode.get(code, str(code))
    if code in (errno.EACCES, errno.EPERM):
        uid = os.getuid() if hasattr(os, "getuid") else "?"
        fix = (
            f"this user (uid {uid}) may not create or open it: give every writer write "
            "permission on the directory and on existing lock files (a shared directory: "
            "group-writable, setgid, and umask 002 for every writer), or write elsewhere"
        )
    elif code == errno.EROFS:
        fix = "the file system is read-only: write to a writable location"
    elif code == errno.ENOENT:
        fix = "its directory does not exist (any more): create it, or write elsewhere"
    elif code == errno.ENOLCK:
        fix = "the file system has no flock (e.g. NFS without locking): write to a local disk"
    else:
        fix = "write elsewhere"
    message = (
        f"cannot take the write lock {lock_file} ({name}: {os.strerror(code)}); nothing was "
        f"written. The lock keeps two processes from writing at once: {fix}"
    )
    return LockError(code, message, lock_file)


def _timed_out(lock_file: str, timeout: float) -> LockTimeoutError:
    pid = lock_holder(lock_file)
    if pid is None:
        who = "a process that did not record its pid (an older bbqlib, or one just locking)"
    else:
        who = f"pid {pid}" + (" (this process, another thread)" if pid == os.getpid() else "")
    message = (
        f"timed out after {timeout:g} s waiting for the write lock {lock_file}, held by "
        f"{who}; nothing was written. If that process is stopped or hung, end it; to wait "
        f"longer call bbqlib.set_lock_timeout(seconds) or set ${LOCK_TIMEOUT_ENV} "
        "(math.inf / inf: wait forever)"
    )
    err = LockTimeoutError(errno.ETIMEDOUT, message, lock_file)
    err.pid, err.timeout = pid, timeout
    return err


# --------------------------------------------------------------------------- locking


def _try_flock(lock_file: str, blocking: bool) -> int | None:
    """An fd holding an exclusive flock on ``lock_file`` (the file currently at that path)."""
    while True:
        fd = os.open(lock_file, os.O_RDWR | os.O_CREAT, 0o666)  # the umask decides sharing
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
            with contextlib.suppress(OSError):  # the pid only improves a waiter's message
                os.ftruncate(fd, 0)
                os.pwrite(fd, b"%d\n" % os.getpid(), 0)
            return fd
        os.close(fd)


def _acquire(key: str, blocking: bool, timeout: float) -> int | None:
    """Poll (bounded wait) or block (``inf``) for the lock; None when not blocking and held."""
    try:
        if not blocking or timeout == math.inf:
            return _try_flock(key, blocking)
        deadline = time.monotonic() + timeout
        pause = 0.002
        while True:
            fd = _try_flock(key, False)
            if fd is not None:
                return fd
            left = deadline - time.monotonic()
            if left <= 0:
                raise _timed_out(key, timeout)
            time.sleep(min(pause, left))
            pause = min(2 * pause, 0.05)
    except LockError:
        raise
    except OSError as err:
        raise _unavailable(key, err) from err


def _warn_no_fcntl() -> None:
    global _warned_no_fcntl
    if not _warned_no_fcntl:
        _warned_no_fcntl = True
        warnings.warn(
            "this platform has no advisory file locks (fcntl): bbqlib cannot keep two "
            "processes from writing one index at once; write each index from one process",
            RuntimeWarning,
            stacklevel=4,
        )


@contextlib.contextmanager
def path_lock(
    lock_file, *, blocking: bool = True, timeout: float | None = None, reentrant: bool = True
) -> Iterator[bool]:
    """Hold the advisory lock ``lock_file``; yields whether it was acquired.

    Parameters
    ----------
    lock_file : path of the lock file (created if missing, removed at release).
    blocking : wait for another holder (True: yields True or raises); False: yield False at
        once when another process or thread holds it.
    timeout : seconds to wait when ``blocking`` (``math.inf``: forever); None: the process
        setting (:func:`get_lock_timeout`).
    reentrant : a thread that holds the lock acquires it again at once; False: yields False
        instead (a cleanup that must not run inside a write of the same thread).

    Raises
    ------
    LockError
        The lock file cannot be opened or locked (``errno`` says why), blocking or not.
    LockTimeoutError
        Another process held it for ``timeout`` seconds (names the holder's pid).
    """
    if fcntl is None:  # pragma: no cover - exercised by monkeypatching fcntl away
        if blocking:
            _warn_no_fcntl()
        yield True
        return
    key = _key(lock_file)
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
    wait = get_lock_timeout() if timeout is None else _check_timeout(timeout, "timeout")
    fd = _acquire(key, blocking, wait)
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
