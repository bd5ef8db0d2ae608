"""Staging folders of distributed builds inside an IVF directory, and their removal when the
build that made them is dead.

A distributed build (:mod:`bbqlib.distributed`) writes its workers' files into
``<directory>/.bbqlib-build-<hex token>/`` and moves the finished files into the directory at
its commit. The driver holds the folder's own advisory lock (``.bbqlib.lock`` inside it) for
the whole build, and takes it while holding the directory's lock, so a cleaner that holds the
directory's lock either sees no folder or sees one whose lock tells whether its build lives.
A ``kill -9`` of the driver releases the lock; the next open, save or :func:`bbqlib.repair`
of the directory then removes the folder (:func:`remove_dead_staging`).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

from ...storage.atomic import DIR_LOCK_NAME, dir_lock_path, path_lock
from ...storage.locks import LockError

__all__ = ["STAGING", "staging_folder", "remove_dead_staging"]

#: Names of staging folders.
STAGING = re.compile(r"^\.bbqlib-build-[0-9a-f]+$")


@contextlib.contextmanager
def staging_folder(directory: Path, token: str, directory_lock) -> Iterator[Path]:
    """Create ``directory/.bbqlib-build-<token>`` and hold its lock until the block ends
    (the folder is removed then, whatever happened). ``directory_lock``: a callable giving
    the directory's lock context, held while the folder is created and locked."""
    folder = Path(directory) / f".bbqlib-build-{token}"
    with directory_lock(directory):
        folder.mkdir()
        held = path_lock(dir_lock_path(folder))
        held.__enter__()
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)
        held.__exit__(None, None, None)


def _size(folder: str) -> int:
    """Bytes of the files in ``folder`` (its lock file aside)."""
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            if name == DIR_LOCK_NAME:
                continue
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(root, name)).st_size
    return total


def remove_dead_staging(directory: Path) -> list[tuple[str, int]]:
    """Remove the staging folders in ``directory`` whose build is dead (their lock is free);
    the caller holds the directory's lock. Returns ``(name, bytes)`` of what was removed."""
    removed = []
    for entry in os.scandir(directory):
        if not (STAGING.match(entry.name) and entry.is_dir(follow_symlinks=False)):
            continue
        try:
            with path_lock(dir_lock_path(entry.path), blocking=False, reentrant=False) as got:
                if not got:
                    continue  # a live build
                size = _size(entry.path)
                shutil.rmtree(entry.path, ignore_errors=True)
        except LockError:
            continue  # cannot tell: keep it
        removed.append((entry.name + "/", size))
    return removed
