"""The flat index: :class:`FlatIndex` (``index``) and its file (``files``).

The package re-exports what the module ``bbqlib.index.flat`` had before it became this
package (pickles name ``bbqlib.index.flat.FlatIndex``).
"""

from .index import FORMAT_VERSION, FlatIndex

__all__ = ["FlatIndex", "FORMAT_VERSION"]
