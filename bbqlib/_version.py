"""The package version, in one place (files record it; the kernel cache folder is named after
it)."""

__version__ = "0.1.0"
