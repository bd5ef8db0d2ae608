"""bbqlib's own files: containers, atomic writes and locks, checksummed blocks, streamed writes.

:mod:`.container` (the container format), :mod:`.atomic` and :mod:`.locks` (atomic replaces
under a lock), :mod:`.blocks` (block CRC32s, mapped rows), :mod:`.streamed` (containers
written row by row), :mod:`.preload`, :mod:`.errors`. Other projects' files are
:mod:`bbqlib.formats`.
"""

from .container import (
    CorruptFileError,
    UnsupportedFormatError,
    open_container,
    read_container,
    write_container,
)
from .locks import LockError, LockTimeoutError, get_lock_timeout, set_lock_timeout

__all__ = [
    "CorruptFileError",
    "UnsupportedFormatError",
    "open_container",
    "read_container",
    "write_container",
    "LockError",
    "LockTimeoutError",
    "get_lock_timeout",
    "set_lock_timeout",
]
