"""The sample bundled with bbqlib, for examples, documentation and the demo.

4,000 Debian 12 package descriptions and 200 held-out queries, embedded with
all-MiniLM-L6-v2 (d = 384, unit norm), stored as float16 with each row's package name and
synopsis (``scripts/make_demo_sample.py`` builds it from ``debian-minilm-384``).
"""

from __future__ import annotations

from importlib import resources

import numpy as np

__all__ = ["load_demo_sample"]


def _unit_rows(x: np.ndarray) -> np.ndarray:
    """Rows of ``x`` rescaled to unit length in float64, returned as float32."""
    x64 = np.asarray(x, dtype=np.float64)
    norms = np.linalg.norm(x64, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (x64 / norms).astype(np.float32)


def load_demo_sample() -> dict:
    """Load the bundled sample: base vectors, queries and their texts.

    Returns
    -------
    dict
        ``"base"``: float32 [4000, 384]; ``"queries"``: float32 [200, 384];
        ``"base_texts"`` and ``"query_texts"``: str arrays (package name and synopsis) of the
        same lengths; ``"source"``: a one-line description of the data.

    Notes
    -----
    The embeddings are unit vectors, but storing them as float16 moves squared norms to
    0.99987 - 1.00014, outside the 1e-4 tolerance that ``similarity="dot_product"`` enforces
    (as Elasticsearch does). The rows are therefore rescaled to unit length after decoding,
    in float64 and then rounded to float32 (squared norms within about 1e-6 of 1), so the
    sample works with every similarity. Cosine results are unchanged by the rescaling.

    Examples
    --------
    >>> from bbqlib.datasets import load_demo_sample
    >>> sample = load_demo_sample()
    >>> sample["base"].shape, sample["queries"].shape
    ((4000, 384), (200, 384))
    """
    with resources.files("bbqlib").joinpath("data/demo_sample.npz").open("rb") as f:
        z = np.load(f)
        return {
            "base": _unit_rows(z["base"]),
            "queries": _unit_rows(z["queries"]),
            "base_texts": z["base_texts"],
            "query_texts": z["query_texts"],
            "source": str(z["source"]),
        }
