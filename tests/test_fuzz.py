"""A seeded mutation fuzzer over flat index files, IVF directories and vector files (issue
12): at least 1,000 mutations per run, each giving a clean ``CorruptFileError``/``ValueError``
or results equal to the undamaged file's. Checksummed formats must never be silently wrong;
vector files carry no checksum (a changed value is data), so there only crashes count.
Larger runs with the counts: ``benchmarks/bench_faults.py``.
"""

from __future__ import annotations

import pytest
from fault_harness import TARGETS, fuzz

#: Mutations per target and run (1,200 in all); seeds fixed so that a failure reproduces.
RUNS = {"flat": 500, "ivf": 300, "vectors": 400}


@pytest.mark.parametrize("name", list(RUNS))
def test_mutations_give_clean_errors_or_unchanged_results(name, tmp_path):
    target = TARGETS[name](tmp_path, seed=0)
    counts = fuzz(target, RUNS[name], seed=12)
    assert sum(counts.values()) == RUNS[name]
    assert counts["crash"] == 0, counts
    if name != "vectors":
        assert counts["wrong"] == 0, counts
    assert counts["clean"] > 0, counts  # the damage is actually noticed
