"""The package version, in one place (the kernel cache folder is named after it)."""

__version__ = "0.1.0"
