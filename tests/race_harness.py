"""Races between processes, files swapped in from elsewhere, killed first builds (issue 27):
helpers shared by ``tests/test_races.py`` and ``benchmarks/faults/faults.py``.

- :func:`loads_during_saves`: a child process saves two versions of one index (a flat file or
  an IVF directory) over the same path in a loop while this process opens it and searches;
  every open must give one of the two versions (``"a"`` / ``"b"``), never an error
  (``"error"``) or a mix (``"wrong"``).
- :func:`swap_outcomes`: a file of another index, copy or generation put in an IVF
  directory; each must be a ``CorruptFileError`` at open (``"clean"``), never served
  (``"silent"``).
- :func:`killed_first_build`: ``kill -9`` of a child building a path-backed IVF index; the
  bytes it left, and the bytes left after ``bbqlib.repair`` (or an open).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np
from fault_harness import unit_rows
from paths import TESTS

import bbqlib
from bbqlib.storage.container import read_container, write_container

D = 16

_SAVER = r"""
import sys, time, bbqlib
kind, target, a, b = sys.argv[1:5]
versions = [bbqlib.load(a, mmap=False) if kind == "flat" else bbqlib.IVFIndex.open(a),
            bbqlib.load(b, mmap=False) if kind == "flat" else bbqlib.IVFIndex.open(b)]
print("ready", flush=True)
i = 0
while True:
    versions[i % 2].save(target)
    i += 1
"""


def _child(code: str, *args: str, cwd: Path) -> subprocess.Popen:
    tree = Path(bbqlib.__file__).resolve().parents[1]  # the bbqlib under test
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), str(TESTS)]))
    return subprocess.Popen([sys.executable, "-c", code, *args], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=env, cwd=cwd)  # fmt: skip


def _version(kind: str, where: Path, n: int, seed: int):
    X = unit_rows(n, D, seed)
    ids = np.random.default_rng(seed).choice(10**9, n, replace=False).astype(np.int64)
    if kind == "flat":
        index = bbqlib.FlatIndex(bits=1, similarity="cosine")
    else:
        index = bbqlib.IVFIndex(bits=1, similarity="cosine", cluster_size=64, seed=7)
    index.add(X, ids=ids)
    index.save(where)
    return index


def loads_during_saves(
    kind: str, workdir: Path, *, seconds: float = 3.0, loads: int | None = None, n: int = 2000
) -> Counter:
    """Open ``kind`` (``"flat"`` or ``"ivf"``) at one path while a child process saves two
    versions of it there in turn, for ``seconds`` (or ``loads`` opens); counts of ``a``,
    ``b`` (an open equal to one version), ``wrong``, ``error`` (with the first ``errors``)."""
    workdir.mkdir(parents=True, exist_ok=True)
    suffix = ".bbq" if kind == "flat" else ""
    a, b, target = (workdir / f"{name}{suffix}" for name in ("a", "b", "target"))
    Q = unit_rows(4, D, 99)
    expected = {}
    for name, path, seed in (("a", a, 1), ("b", b, 2)):
        expected[name] = _version(kind, path, n, seed).search(Q, 5)
    (shutil.copy if kind == "flat" else shutil.copytree)(a, target)
    # one open and search first: compiling the kernels of mapped indexes is not a race
    (bbqlib.FlatIndex.load(a) if kind == "flat" else bbqlib.IVFIndex.open(a)).search(Q, 5)
    proc = _child(_SAVER, kind, str(target), str(a), str(b), cwd=workdir)
    counts: Counter = Counter()
    try:
        assert proc.stdout.readline().strip() == b"ready"
        stop = time.monotonic() + seconds
        i = 0
        while (loads is None and time.monotonic() < stop) or (loads is not None and i < loads):
            verify = i % 2 == 0
            i += 1
            try:
                if kind == "flat":
                    index = bbqlib.FlatIndex.load(target, verify=verify)
                else:
                    index = bbqlib.IVFIndex.open(target)
                got = index.search(Q, 5)
            except Exception as err:  # noqa: BLE001 - every error is counted
                counts["error"] += 1
                if counts["error"] <= 3:
                    counts[f"error: {type(err).__name__}: {err}"[:300]] += 1
                continue
            for name, want in expected.items():
                if np.array_equal(got[1], want[1]) and np.allclose(got[0], want[0]):
                    counts[name] += 1
                    break
            else:
                counts["wrong"] += 1
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    return counts


# --------------------------------------------------------------------------- swapped files


def _ivf(where: Path, ids=None, seed: int = 0, n: int = 1200):
    index = bbqlib.IVFIndex(bits=1, similarity="cosine", cluster_size=64, seed=7)
    index.add(unit_rows(n, D, seed), ids=ids)
    index.save(where)
    return index


def _names(where: Path) -> tuple[dict, dict]:
    manifest = json.loads((where / "MANIFEST").read_text())
    _, meta, _ = read_container(where / manifest["header"], mmap=False)
    return manifest, meta


def _postings_other_ids(work: Path) -> Path:
    ids = np.arange(1200, dtype=np.int64) * 3 + 5
    _ivf(work / "ix", ids=ids)
    _ivf(work / "other", ids=ids[::-1].copy())  # the same vectors and lists, other ids
    mine, other = _names(work / "ix")[1], _names(work / "other")[1]
    shutil.copy(work / "other" / other["postings_file"], work / "ix" / mine["postings_file"])
    return work / "ix"


def _header_of_a_copy(work: Path) -> Path:
    ids = np.arange(1200, dtype=np.int64) + 10
    _ivf(work / "ix", ids=ids)
    shutil.copytree(work / "ix", work / "copy")
    bbqlib.IVFIndex.open(work / "ix").delete(ids[[3]])  # delete reuses the posting file
    bbqlib.IVFIndex.open(work / "copy").delete(ids[[5]])
    manifest = _names(work / "ix")[0]
    shutil.copy(work / "copy" / manifest["header"], work / "ix" / manifest["header"])
    return work / "ix"


def _segment_of_another_index(work: Path) -> Path:
    _ivf(work / "ix", seed=0)
    _ivf(work / "other", seed=1)  # other vectors, the same shape
    mine, other = _names(work / "ix")[1], _names(work / "other")[1]
    shutil.copy(work / "other" / other["vector_segments"][0]["file"],
                work / "ix" / mine["vector_segments"][0]["file"])  # fmt: skip
    return work / "ix"


def _postings_of_an_older_generation(work: Path) -> Path:
    index = _ivf(work / "ix", seed=0)
    old = work / "old_postings.bbq"
    shutil.copy(work / "ix" / _names(work / "ix")[1]["postings_file"], old)
    index = bbqlib.IVFIndex.open(work / "ix")
    index.add(unit_rows(3, D, 5))
    index.save(work / "ix")
    shutil.copy(old, work / "ix" / _names(work / "ix")[1]["postings_file"])
    return work / "ix"


def _header_of_another_format(work: Path) -> Path:
    _ivf(work / "ix")
    manifest = _names(work / "ix")[0]
    kind, meta, arrays = read_container(work / "ix" / manifest["header"], mmap=False)
    meta["format_version"] = manifest["format_version"] - 1
    write_container(work / "ix" / manifest["header"], kind, meta, arrays)
    return work / "ix"


SWAPS = {
    "postings of an index with the same vectors, other ids": _postings_other_ids,
    "header of a copy with other deletions": _header_of_a_copy,
    "vector segment of another index (same shape)": _segment_of_another_index,
    "postings of an older generation": _postings_of_an_older_generation,
    "header of another format version than MANIFEST": _header_of_another_format,
}


def swap_outcomes(workdir: Path) -> dict[str, str]:
    """Each swap of :data:`SWAPS`: ``"clean"`` (``CorruptFileError`` at open) or
    ``"silent"`` (the index opened; its searches served whatever the files hold)."""
    out = {}
    for i, (name, make) in enumerate(SWAPS.items()):
        work = workdir / f"swap{i}"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
        where = make(work)
        try:
            bbqlib.IVFIndex.open(where).search(unit_rows(2, D, 9), 5)
            out[name] = "silent"
        except bbqlib.CorruptFileError:
            out[name] = "clean"
        shutil.rmtree(work, ignore_errors=True)
    return out


# --------------------------------------------------------------------------- killed builds

_BUILDER = r"""
import sys, numpy as np, bbqlib
where, n, d = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
X = np.random.default_rng(0).normal(size=(n, d)).astype(np.float32)
index = bbqlib.IVFIndex(bits=1, similarity="euclidean", path=where, precondition=True)
print("ready", flush=True)
index.add(X)
print("done", flush=True)
"""


def dir_bytes(where: Path) -> int:
    return sum(p.stat().st_size for p in where.iterdir() if p.is_file()) if where.exists() else 0


def killed_first_build(
    workdir: Path, delay: float, *, n: int = 60_000, d: int = 64, then: str = "repair"
) -> dict:
    """``kill -9`` a child building a path-backed IVF index ``delay`` seconds after its first
    file appears; ``{"killed", "left", "after"}``: whether it was killed before committing,
    the bytes it left, the bytes left after ``then`` (``"repair"`` or ``"open"``)."""
    where = workdir / "ivf"
    shutil.rmtree(where, ignore_errors=True)
    workdir.mkdir(parents=True, exist_ok=True)
    proc = _child(_BUILDER, str(where), str(n), str(d), cwd=workdir)
    try:
        assert proc.stdout.readline().strip() == b"ready"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (
            where.exists() and any(p.name != ".bbqlib.lock" for p in where.iterdir())
        ):
            time.sleep(0.002)
        time.sleep(delay)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    killed = not (where / "MANIFEST").exists()
    left = dir_bytes(where)
    if then == "repair":
        bbqlib.repair(where)
    else:
        try:
            bbqlib.IVFIndex.open(where)
        except FileNotFoundError:
            pass
    return {"killed": killed, "left": left, "after": dir_bytes(where) if killed else 0,
            "files_after": sorted(os.listdir(where)) if killed else []}  # fmt: skip
