"""A seeded mutation fuzzer over flat index files, IVF directories, vector files and
ann-benchmarks HDF5 files (issue 12): at least 1,000 mutations per run, each giving a clean
``CorruptFileError``/``ValueError`` or results equal to the undamaged file's. Checksummed
formats must never be silently wrong; vector files carry no checksum (a changed value is
data), so there only crashes count; in HDF5 files a changed byte of a dataset's stored
values is data too, any other mutation (structure, truncation) must be clean or unchanged.
Larger runs with the counts: ``benchmarks/faults/faults.py``.
"""

from __future__ import annotations

from collections import Counter

import pytest
from fault_harness import TARGETS, fuzz

#: Mutations per target and run (1,350 in all); seeds fixed so that a failure reproduces.
RUNS = {"flat": 500, "ivf": 300, "vectors": 400, "hdf5": 150}


@pytest.mark.parametrize("name", list(RUNS))
def test_mutations_give_clean_errors_or_unchanged_results(name, tmp_path):
    if name == "hdf5":
        pytest.importorskip("h5py", reason="h5py (bbqlib[hdf5]) is not installed")
    target = TARGETS[name](tmp_path, seed=0)
    by_label: dict[str, Counter] = {}
    counts = fuzz(target, RUNS[name], seed=12,
                  report=lambda i, label, outcome: by_label.setdefault(label, Counter()).update(
                      [outcome]))  # fmt: skip
    assert sum(counts.values()) == RUNS[name]
    assert counts["crash"] == 0, by_label
    if name == "hdf5":
        for label in ("structure", "truncated"):
            assert by_label.get(label, Counter())["wrong"] == 0, by_label
    elif name != "vectors":
        assert counts["wrong"] == 0, counts
    assert counts["clean"] > 0, counts  # the damage is actually noticed
