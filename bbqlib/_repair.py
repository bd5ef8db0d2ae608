"""``bbqlib.repair``: remove what killed writers left at an index path, and say what it did."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from .io.atomic import file_lock_path, path_lock, remove_temp_files
from .io.container import CorruptFileError, read_container, read_kind
from .io.vectors import SUPPORTED_SUFFIXES, read_vectors

__all__ = ["RepairReport", "repair"]


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
    status : ``"ok"`` (opens, and every checksum matches when ``verify``), ``"corrupt"``
        (see ``problem``), ``"missing"``, or ``"busy"``.
    problem : the :class:`~bbqlib.CorruptFileError` message when ``status == "corrupt"``.
    """

    path: Path
    kind: str
    removed: list = field(default_factory=list)
    busy: bool = False
    status: str = "ok"
    problem: str | None = None

    @property
    def bytes_freed(self) -> int:
        return sum(size for _, size in self.removed)

    def __str__(self) -> str:
        lines = [f"{self.path} ({self.kind}): {self.status}"]
        if self.busy:
            lines.append("  a live writer holds the lock: nothing removed; try again later")
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
    if path.parent.is_dir():
        with path_lock(file_lock_path(path), blocking=wait > 0, timeout=wait or None) as got:
            if got:
                report.removed = remove_temp_files(path.parent, path.name)
            report.busy = not got
    if not path.exists():
        report.status = "busy" if report.busy else "missing"
        return report
    suffix = path.suffix.lower()
    try:
        if suffix in SUPPORTED_SUFFIXES:
            report.kind = "vectors"
            read_vectors(path, mmap=True)
        else:
            kind = read_kind(path)
            report.kind = "flat" if kind == "flat_index" else "container"
            if kind == "flat_index":
                from .index.flat import FlatIndex

                FlatIndex.load(path, verify=verify)
            else:
                read_container(path, verify=verify)
    except CorruptFileError as err:
        report.status, report.problem = "corrupt", str(err)
    if report.busy and report.status == "ok":
        report.status = "busy"
    return report


def _repair_directory(path: Path, verify: bool, wait: float) -> RepairReport:
    from .index.ivf import IVFIndex
    from .index.ivf import storage as ST

    report = RepairReport(path, "ivf")
    removed = ST.clean_directory(path, blocking=wait > 0, timeout=wait or None)
    report.busy = removed is None
    report.removed = removed or []
    if not (path / ST.MANIFEST).exists():
        report.status = "busy" if report.busy else "missing"
        return report
    try:
        index = IVFIndex.open(path)
        if verify:
            index.verify()
    except CorruptFileError as err:
        report.status, report.problem = "corrupt", str(err)
    if report.busy and report.status == "ok":
        report.status = "busy"
    return report
