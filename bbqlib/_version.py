"""The package version, in one place (files record it; the kernel cache folder is named after
it)."""

__version__ = "0.2.0.dev0"
