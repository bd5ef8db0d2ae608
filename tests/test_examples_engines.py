"""The engine examples run (issue 6): each script in a fresh interpreter, skipped when its
engine is not installed."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest
from paths import ROOT

EXAMPLES = ROOT / "examples"
CASES = [
    ("engine_usearch.py", "usearch", "recall@10"),
    ("engine_faiss.py", "faiss", "recall@10"),
    ("engine_hnswlib.py", "hnswlib", "recall@10"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("script", "engine", "expect"), CASES)
def test_engine_example_runs(script, engine, expect):
    if importlib.util.find_spec(engine) is None:
        pytest.skip(f"{engine} is not installed (the example needs it)")
    path = EXAMPLES / script
    assert path.is_file(), f"missing example {path}"
    done = subprocess.run(
        [sys.executable, str(path)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert expect in done.stdout
    # every printed recall is a number in [0, 1] and the best one is useful
    recalls = [
        float(line.split("recall@10")[1].split()[0])
        for line in done.stdout.splitlines()
        if "recall@10" in line
    ]
    assert recalls and all(0.0 <= r <= 1.0 for r in recalls) and max(recalls) >= 0.8
