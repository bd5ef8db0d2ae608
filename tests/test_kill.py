"""kill -9 during each kind of save (issue 12): the next open finds an intact index (the
previous version or the new one, never a mix) and no leftover file. Subprocesses save in a
loop and are killed at seeded moments; ``benchmarks/faults/faults.py`` runs 100 per kind."""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from fault_harness import SAVE_KINDS, fresh, kill_trial

pytestmark = pytest.mark.skipif(
    sys.platform == "win32" or not hasattr(os, "fork"), reason="POSIX signals and locks"
)


@pytest.mark.parametrize("kind", SAVE_KINDS)
def test_kill_9_during_save_leaves_no_corrupt_or_leaked_file(kind, tmp_path):
    delays = np.random.default_rng(sum(map(ord, kind))).uniform(0.0, 0.4, 2)
    for trial, delay in enumerate(delays):
        corrupt, leaked = kill_trial(kind, fresh(tmp_path / str(trial)), float(delay))
        assert not corrupt, f"{kind}: corrupt after kill at {delay:.3f} s"
        assert not leaked, f"{kind}: leaked {sorted(leaked)} after kill at {delay:.3f} s"
