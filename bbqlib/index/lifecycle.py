"""An index's life on disk: open any saved index, repair what killed writers left.

:func:`load` (``bbqlib.load``) opens a flat file or an IVF directory by what its header says it
holds; :func:`repair` (``bbqlib.repair``) removes what killed writers left at an index path
and says what it did (:class:`RepairReport`). Both find the index class in the registry
:data:`bbqlib.index.base.INDEX_KINDS` (a file by its container kind, a directory by the
class saved as one), and call its hooks (``open``, ``check_saved``, ``remove_leftovers``).
"""

from __future__ import annotations

import contextlib
import errno
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..formats.vectors import SUPPORTED_SUFFIXES, read_vectors
from ..storage.atomic import file_lock_path, path_lock, remove_temp_files
from ..storage.container import CorruptFileError, read_container, read_kind
from ..storage.locks import LockError, LockTimeoutError, lock_holder
from .base import INDEX_KINDS, Index

__all__ = ["RepairReport", "load", "repair"]


@dataclass
class RepairReport:
    """What :func:`repair` found and did.

    Attributes
    ----------
    path : the path repaired.
    kind : ``"ivf"`` (an IVF directory), ``"flat"`` (a flat index file), ``"container"``
        (another bbqlib file), ``"vectors"`` (a vector file), ``"missing"`` (nothing there).
    removed : ``(file name, bytes)`` of every file removed: temporary files of killed
        writes, and in an IVF directory the files of no generation.
    busy : a live writer held the path's lock, so nothing was removed (its files are not
        orphans); run again when it is done.
    holder : the pid of that writer, as its lock file records it (None: unknown).
    lock_error : why the lock could not be taken at all, as an errno name (``"EROFS"``:
        read-only file system; ``"EACCES"``/``"EPERM"``: no permission to create or open
        the lock file), so nothing was removed; None when it was taken or busy.
    status : ``"ok"`` (opens, and every checksum matches when ``verify``), ``"corrupt"``
        (see ``problem``), ``"missing"``, ``"busy"`` (a live writer holds the lock) or
        ``"no_lock"`` (the lock cannot be taken: see ``lock_error``; the index was still
        checked).
    problem : the :class:`~bbqlib.CorruptFileError` message when ``status == "corrupt"``,
        else the lock's error when ``status == "no_lock"``.
    """

    path: Path
    kind: str
    removed: list = field(default_factory=list)
    busy: bool = False
    status: str = "ok"
    problem: str | None = None
    holder: int | None = None
    lock_error: str | None = None

    @property
    def bytes_freed(self) -> int:
        return sum(size for _, size in self.removed)

    def __str__(self) -> str:
        lines = [f"{self.path} ({self.kind}): {self.status}"]
        if self.busy:
            who = "a live writer" if self.holder is None else f"a live writer (pid {self.holder})"
            lines.append(f"  {who} holds the lock: nothing removed; try again later")
        for name, size in self.removed:
            lines.append(f"  removed {name} ({size:,} bytes)")
        if self.removed:
            lines.append(f"  {len(self.removed)} file(s), {self.bytes_freed:,} bytes freed")
        if self.problem:
            lines.append(f"  {self.problem}")
        return "\n".join(lines)


def repair(path, *, verify: bool = True, wait: float = 0.0) -> RepairReport:
    """Remove the leftovers of killed writes at ``path`` and check what remains.

    Parameters
    ----------
    path : a flat index file, an IVF index directory, or any file bbqlib writes.
    verify : open the index and check every checksum (reads every byte once).
    wait : seconds to wait for a live writer to release the path's lock (0: do not wait).

    Returns
    -------
    RepairReport
        Printable; ``status`` says whether the index opens and checks out.

    Notes
    -----
    bbqlib writes every file to a temporary file beside it and renames it into place, so a
    killed write never damages what was there; it leaves the temporary file, and an IVF
    save killed before (or after) its ``MANIFEST`` swap leaves files of no generation.
    Opening or saving the same path removes them too, when no writer holds its lock;
    ``repair`` does it on request and reports it. It never removes a file the current
    generation names and never rewrites data: a corrupt index stays as it is (rebuild it
    or restore it from a copy).

    Examples
    --------
    >>> print(bbqlib.repair("index.bbq"))          # doctest: +SKIP
    index.bbq (flat): ok
      removed .index.bbq.5d1c0e8a4b7f2a91.tmp (1,048,576 bytes)
      1 file(s), 1,048,576 bytes freed
    """
    path = Path(path)
    if path.is_dir():
        return _repair_directory(path, verify, wait)
    report = RepairReport(path, "missing")
    target = Path(os.path.realpath(path))  # a symlink: its target's leftovers and lock
    if target.parent.is_dir():
        lock = file_lock_path(target)
        with _lock_outcome(report, lock):
            with path_lock(lock, blocking=wait > 0, timeout=wait) as got:
                if got:
                    report.removed = remove_temp_files(target.parent, target.name)
                else:
                    report.busy, report.holder = True, lock_holder(lock)
    if not path.exists():
        report.status = "busy" if report.busy else "missing"
        return report
    suffix = path.suffix.lower()
    try:
        if suffix in SUPPORTED_SUFFIXES:
            report.kind = "vectors"
            read_vectors(path, mmap=True)
        else:
            cls = _file_class(read_kind(path))
            if cls is not None:
                report.kind = cls.kind
                cls.check_saved(path, verify=verify)
            else:
                report.kind = "container"
                read_container(path, verify=verify)
    except CorruptFileError as err:
        report.status, report.problem = "corrupt", str(err)
    return _settled(report)


@contextlib.contextmanager
def _lock_outcome(report: RepairReport, lock: Path):
    """Record a lock that is busy past ``wait`` or cannot be taken, instead of raising."""
    try:
        yield
    except LockTimeoutError as err:
        report.busy, report.holder = True, err.pid
    except LockError as err:
        report.lock_error = errno.errorcode.get(err.errno, str(err.errno))
        report.problem = str(err)


def _settled(report: RepairReport) -> RepairReport:
    """The status when the index checked out but the lock was not taken."""
    if report.status == "ok" and report.busy:
        report.status = "busy"
    elif report.status == "ok" and report.lock_error is not None:
        report.status = "no_lock"
    elif report.status != "ok" and report.lock_error is not None and report.problem is None:
        report.problem = f"the lock could not be taken ({report.lock_error})"
    return report


def _file_class(kind: str) -> type[Index] | None:
    """The index class saving files of container kind ``kind`` (None: not an index's)."""
    for cls in INDEX_KINDS.values():
        if cls.file_kind is not None and cls.file_kind == kind:
            return cls
    return None


def _directory_class(path: Path) -> type[Index]:
    """The index class saved as a directory that holds ``path`` (the first such class when
    none holds it: its ``open`` says what is missing)."""
    classes = [cls for cls in INDEX_KINDS.values() if cls.directory]
    for cls in classes:
        if cls.holds_saved(path):
            return cls
    return classes[0]


def _repair_directory(path: Path, verify: bool, wait: float) -> RepairReport:
    cls = _directory_class(path)
    report = RepairReport(path, cls.kind)
    lock = cls.saved_lock_path(path)
    with _lock_outcome(report, lock):
        removed = cls.remove_leftovers(path, blocking=wait > 0, timeout=wait)
        report.removed = removed or []
        if removed is None:
            report.busy, report.holder = True, lock_holder(lock)
    if not cls.holds_saved(path):
        report.status = "busy" if report.busy else "missing"
        return report
    lock_problem, report.problem = report.problem, None
    try:
        cls.check_saved(path, verify=verify)
    except CorruptFileError as err:
        report.status, report.problem = "corrupt", str(err)
    report.problem = report.problem or lock_problem
    return _settled(report)


def load(path, **kwargs):
    """Open a saved index (flat file or IVF directory), dispatching on its header: the
    index class registered for its container kind, or the one saved as a directory."""
    path = Path(path)
    if path.is_dir():
        return _directory_class(path).open(path, **kwargs)
    kind = read_kind(path)
    cls = _file_class(kind)
    if cls is not None:
        return cls.open(path, **kwargs)
    raise ValueError(f"{path} holds a {kind!r}, which bbqlib.load cannot open")
