"""Arrow record batches of codes and corrections (re-exported from :mod:`bbqlib.io.exchange`).

``to_arrow(enc, quantizer=None) -> pyarrow.RecordBatch`` and
``from_arrow(batch, quantizer) -> EncodedVectors``; pyarrow is the ``bbqlib[arrow]`` extra.
"""

from __future__ import annotations

from ..io.exchange import ARROW_METADATA_KEY, from_arrow, to_arrow

__all__ = ["ARROW_METADATA_KEY", "from_arrow", "to_arrow"]
