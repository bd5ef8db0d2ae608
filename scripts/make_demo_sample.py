"""Build the demo sample shipped in ``bbqlib/data/`` from ``../shared/data/debian-minilm-384``.

The sample: 4,000 base rows drawn at random (seed 0) and the first 200 held-out queries of the
Debian 12 package descriptions embedded with all-MiniLM-L6-v2 (unit norm, d = 384), stored as
float16, with each row's package name and one-line synopsis. Run from the repository root:

    python scripts/make_demo_sample.py
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np

SOURCE = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "debian-minilm-384"
OUT = Path(__file__).resolve().parents[1] / "bbqlib" / "data" / "demo_sample.npz"
N_BASE, N_QUERIES = 4000, 200


def main() -> None:
    base = np.load(SOURCE / "base.npy", mmap_mode="r")
    queries = np.load(SOURCE / "queries.npy", mmap_mode="r")
    rows = np.sort(np.random.default_rng(0).choice(len(base), N_BASE, replace=False))
    texts_base, texts_queries = {}, {}
    with gzip.open(SOURCE / "texts.jsonl.gz", "rt") as f:
        for line in f:
            rec = json.loads(line)
            label = f"{rec['id']}: {rec['text'].splitlines()[0]}"[:120]
            (texts_base if rec["split"] == "base" else texts_queries)[rec["row"]] = label
    np.savez_compressed(
        OUT,
        base=np.asarray(base[rows], dtype=np.float16),
        queries=np.asarray(queries[:N_QUERIES], dtype=np.float16),
        base_rows=rows.astype(np.int32),
        base_texts=np.array([texts_base[int(r)] for r in rows]),
        query_texts=np.array([texts_queries[i] for i in range(N_QUERIES)]),
        source=np.array("debian-minilm-384 (Debian 12 package descriptions, all-MiniLM-L6-v2)"),
    )
    print(f"wrote {OUT} ({OUT.stat().st_size / 1e6:.2f} MB)")


if __name__ == "__main__":
    main()
