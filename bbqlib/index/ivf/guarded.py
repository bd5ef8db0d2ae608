"""Copy-on-write writes of an :class:`~bbqlib.IVFIndex` (``docs/concurrency.md``).

A write (``add``, ``delete``, ``save``) runs on :meth:`GuardedWrites._clone`, a shallow
copy whose attributes it replaces (it never modifies an array the published state holds),
then :meth:`GuardedWrites._publish` swaps the new attributes in while no search runs.
Writes are serialized by the index's guard and, for a directory, by its advisory lock; a
save to another directory than the index's own writes a snapshot without the guard
(:meth:`GuardedWrites._save_snapshot`).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

from ...storage.atomic import resolve_target
from ..guard import IndexGuard
from . import files as F
from . import storage as ST

__all__ = ["GuardedWrites"]


class GuardedWrites:
    """Mixin: the write protocol of an index whose state is replaced, not mutated."""

    _guard: IndexGuard

    #: Derived from the published state and made again on first use: the one-query path's
    #: kernel arguments, the live-row mask and per-list live counts (reset by every delete).
    #: Not pickled; None after unpickling (:class:`bbqlib.index.base.Index`).
    _DERIVED = ("_single_state", "_live_cache", "_live_per_list")

    @contextlib.contextmanager
    def _writing(self, path):
        """One write at a time in this process, and the directory's lock across processes."""
        with self._guard.writing:
            if path is None:
                yield
            else:
                path = resolve_target(path)  # a symlinked directory: its target's lock
                path.mkdir(parents=True, exist_ok=True)  # the lock file lives inside
                with ST.directory_lock(path):
                    yield

    def _clone(self):
        """A shallow copy whose state a write may replace without touching this one."""
        work = object.__new__(type(self))
        work.__dict__.update(
            {k: list(v) if isinstance(v, list) else v for k, v in self.__dict__.items()}
        )
        return work

    def _publish(self, work) -> None:
        """Make ``work``'s state this index's, between two searches."""
        work._writes = getattr(self, "_writes", 0) + 1  # what a save's snapshot compares
        with self._guard.swapping():
            self.__dict__.update(work.__dict__)

    def _save_snapshot(self, path: Path) -> None:
        """Save the state as of now to ``path``, another directory than the index's own,
        without holding the write mutex while the files are written: adds and deletes in
        memory go on meanwhile (they publish states the snapshot does not see), and so do
        searches. Writes to the index's own directory commit generations themselves, in the
        order the directory's lock gives them, so they never go through here."""
        Path(path).mkdir(parents=True, exist_ok=True)  # the lock file lives inside
        with ST.directory_lock(path):  # first: two saves to one path snapshot in lock order
            with self._guard.writing:
                work = self._clone()  # copy-on-write: later writes replace, never mutate
            F.save(work, path)

    def _store(self, path: Path) -> None:
        """Save to ``path``; when the index lives there, serve from the new files."""
        F.save(self, path)
        if self.path is not None and path.resolve() == self.path.resolve():
            F.load_into(self, path)  # drop the RAM copies

    def _commit(self, work) -> None:
        """Write ``work`` to its directory (when it has one), then publish it."""
        if work.path is not None:
            work._store(work.path)
        self._publish(work)
