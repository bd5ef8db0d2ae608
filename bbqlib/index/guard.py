"""How an index serves concurrent threads: searches in parallel, writes one at a time.

The contract (``docs/concurrency.md``): any number of threads may search an index while
one thread writes to it (``add``, ``delete``, ``save``); every search sees the index as it
was before a write or after it, never a mix. Writes are serialized with each other.

The mechanism is copy-on-write behind a readers-writer lock:

- a search holds the **read** side of :class:`RWLock` for its whole duration (cheap: one
  condition-variable round trip; the numba kernels release the GIL, so searches run in
  parallel);
- a write holds :attr:`IndexGuard.writing` (a re-entrant mutex, so one write at a time)
  while it prepares the new state *without modifying the published one* (it encodes, merges
  posting lists, writes files), then takes the **write** side only to swap the new state in
  (a few attribute assignments), waiting for running searches to finish; new searches wait
  for the swap (the lock prefers writers, so a stream of searches cannot starve them).

Locks do not pickle: the indexes drop their guard in ``__getstate__`` and make a new one in
``__setstate__``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

__all__ = ["RWLock", "IndexGuard"]


class _ReadSide:
    """The read side of :class:`RWLock` as a context manager (a plain class: a single query
    takes it once per call, and a generator-based one costs about a microsecond more)."""

    __slots__ = ("_lock",)

    def __init__(self, lock: RWLock):
        self._lock = lock

    def __enter__(self) -> None:
        lock = self._lock
        with lock._cond:
            while lock._writer or lock._waiting:
                lock._cond.wait()
            lock._readers += 1

    def __exit__(self, *exc) -> None:
        lock = self._lock
        with lock._cond:
            lock._readers -= 1
            # Only a waiting writer waits for the readers to leave (new readers wait for
            # it, not for them): no one to wake otherwise.
            if lock._readers == 0 and lock._waiting:
                lock._cond.notify_all()


class RWLock:
    """A readers-writer lock that prefers writers (not re-entrant on the write side)."""

    def __init__(self):
        self._cond = threading.Condition(threading.Lock())
        self._readers = 0
        self._writer = False
        self._waiting = 0
        self._read = _ReadSide(self)

    def read(self) -> _ReadSide:
        """The read side (``with lock.read():``)."""
        return self._read

    @contextlib.contextmanager
    def write(self) -> Iterator[None]:
        with self._cond:
            self._waiting += 1
            try:
                while self._writer or self._readers:
                    self._cond.wait()
            except BaseException:  # interrupted: wake the readers held back for it
                self._waiting -= 1
                self._cond.notify_all()
                raise
            self._waiting -= 1
            self._writer = True
        try:
            yield
        finally:
            with self._cond:
                self._writer = False
                self._cond.notify_all()


class IndexGuard:
    """The locks of one index: ``reading`` (searches), ``writing`` (one write at a time),
    ``swapping`` (a write publishing its new state), ``joining`` (a lazy concatenation that
    searches share)."""

    def __init__(self):
        self._rw = RWLock()
        self.writing = threading.RLock()
        self.joining = threading.Lock()

    def reading(self):
        """Held by a search (or anything that reads the published state) throughout."""
        return self._rw.read()

    def swapping(self):
        """Held by a write (inside ``writing``) while it assigns its new state."""
        return self._rw.write()
