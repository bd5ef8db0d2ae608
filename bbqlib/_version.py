"""The version of bbqlib (one place; files record it)."""

__version__ = "0.1.0"
