"""The errors bbqlib raises for files it cannot trust."""

from __future__ import annotations

__all__ = ["CorruptFileError", "UnsupportedFormatError"]


class CorruptFileError(ValueError):
    """The file is truncated, corrupted or not a bbqlib file.

    The message names the file and what is wrong with it. A subclass of ``ValueError``, so
    code that caught ``ValueError`` for bad files keeps working.
    """


class UnsupportedFormatError(CorruptFileError):
    """The file was written by a newer bbqlib, in a format version this one cannot read."""
