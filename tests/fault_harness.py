"""Helpers shared by the fault tests and ``benchmarks/faults/faults.py``: small indexes,
where a section of a container lives, a seeded mutation fuzzer over files and directories,
and the kill -9 harness.

Outcomes of one mutation, judged against the same operations on the clean copy:

- ``clean``: a :class:`bbqlib.CorruptFileError` or ``ValueError`` was raised;
- ``same``: no error and every result equal to the clean run's;
- ``wrong``: no error but a result differs (silently wrong);
- ``crash``: any other exception (in-process), or the process died (subprocess runs).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import numpy as np
from paths import TESTS

import bbqlib
from bbqlib.formats.vectors import write_vectors

_PREFIX = struct.Struct("<8sIIII")


# --------------------------------------------------------------------------- data and indexes


def unit_rows(n: int, d: int, seed: int) -> np.ndarray:
    g = np.random.default_rng(seed)
    X = g.standard_normal((n, d)) + 0.2
    return (X / np.linalg.norm(X, axis=1, keepdims=True)).astype(np.float32)


def small_ivf(path=None, n: int = 1200, d: int = 24, seed: int = 0, ids=None, **kwargs):
    index = bbqlib.IVFIndex(
        bits=kwargs.pop("bits", 1),
        similarity=kwargs.pop("similarity", "cosine"),
        cluster_size=64,
        seed=7,
        path=path,
        **kwargs,
    )
    index.add(unit_rows(n, d, seed), ids=ids)
    return index


def section_span(path: Path, name: str) -> tuple[int, int]:
    """``(offset, nbytes)`` of a container section (read from the file's JSON header)."""
    with open(path, "rb") as f:
        _, _, header_len, _, _ = _PREFIX.unpack(f.read(_PREFIX.size))
        header = json.loads(f.read(header_len))
    (sec,) = [s for s in header["sections"] if s["name"] == name]
    return sec["offset"], sec["nbytes"]


def flip(path: Path, offset: int, mask: int = 0x01) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)
        f.seek(offset)
        f.write(bytes([b[0] ^ mask]))


def snapshot_files(directory: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(Path(directory).iterdir()) if p.is_file()}


def restore_files(directory: Path, files: dict[str, bytes]) -> None:
    for p in Path(directory).iterdir():
        if p.name not in files:
            p.unlink()
    for name, data in files.items():
        (Path(directory) / name).write_bytes(data)


# --------------------------------------------------------------------------- mutations


def mutate(data: bytes, rng: np.random.Generator) -> bytes:
    """One seeded mutation: a bit flip, a random byte, a zeroed run, or a truncation."""
    buf = bytearray(data)
    kind = rng.integers(0, 10)
    if len(buf) == 0:
        return bytes(rng.integers(0, 256, 8, dtype=np.uint8))
    if kind < 5:  # flip one bit
        i = int(rng.integers(0, len(buf)))
        buf[i] ^= 1 << int(rng.integers(0, 8))
    elif kind < 7:  # one random byte
        i = int(rng.integers(0, len(buf)))
        buf[i] = int(rng.integers(0, 256))
    elif kind < 9:  # zero a run of up to 64 bytes
        i = int(rng.integers(0, len(buf)))
        n = int(rng.integers(1, 65))
        buf[i : i + n] = bytes(len(buf[i : i + n]))
    else:  # truncate
        buf = buf[: int(rng.integers(0, len(buf)))]
    return bytes(buf)


def _same(a, b) -> bool:
    if isinstance(a, str) or isinstance(b, str):
        return a == b
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)


def judge(run, clean_result) -> str:
    """Run ``run()`` on a mutated copy and classify it against the clean result."""
    try:
        result = run()
    except ValueError:  # CorruptFileError is a ValueError
        return "clean"
    except Exception:  # noqa: BLE001 - anything else is what the fuzzer is looking for
        return "crash"
    return "same" if _same(result, clean_result) else "wrong"


# --------------------------------------------------------------------------- targets


class FlatTarget:
    """A saved FlatIndex file; the run loads it and searches (rerank and quantized)."""

    name = "flat file"

    def __init__(self, workdir: Path, seed: int = 0):
        X = unit_rows(300, 20, seed)
        self.Q = unit_rows(6, 20, seed + 1)
        index = bbqlib.FlatIndex(bits=1, similarity="cosine")
        ids = np.random.default_rng(seed).choice(2**40, size=len(X), replace=False)
        index.add(X, ids=ids)  # custom ids and tombstones: the ids/deleted sections too
        index.delete(ids[[4, 9]])
        self.path = workdir / "flat.bbq"
        index.save(self.path)
        self.original = self.path.read_bytes()
        self.clean = self.run()

    def run(self):
        index = bbqlib.load(self.path)
        return index.search(self.Q, 5), index.search(self.Q, 5, rerank=False)

    def apply(self, rng) -> str:
        self.path.write_bytes(mutate(self.original, rng))
        return "flat file"

    def reset(self) -> None:
        self.path.write_bytes(self.original)


class IVFTarget:
    """A saved IVF directory; one of its files is mutated. The run opens it, searches, adds a
    few rows (rewriting every list: damage must not be laundered), searches and verifies."""

    name = "IVF directory"

    def __init__(self, workdir: Path, seed: int = 0):
        self.dir = workdir / "ivf"
        self.Q = unit_rows(5, 24, seed + 1)
        self.more = unit_rows(20, 24, seed + 2)
        index = small_ivf(n=900, seed=seed, ids=np.arange(900) * 7 + 10**9)  # row_ids too
        index.delete(np.array([1, 2]) * 7 + 10**9)
        index.save(self.dir)
        self.files = snapshot_files(self.dir)
        self.names = sorted(self.files)
        self.clean = self.run()

    def run(self):
        index = bbqlib.IVFIndex.open(self.dir)
        before = index.search(self.Q, 5, visit_percentage=60.0)
        index.path = None  # mutate in memory: the files stay as mutated
        index.add(self.more)
        after = index.search(self.Q, 5, visit_percentage=60.0)
        index.verify()
        return before, after

    def apply(self, rng) -> str:
        name = self.names[int(rng.integers(0, len(self.names)))]
        (self.dir / name).write_bytes(mutate(self.files[name], rng))
        return name.split(".")[0]  # MANIFEST, header, postings, vectors

    def reset(self) -> None:
        restore_files(self.dir, self.files)


class VectorFileTarget:
    """Vector files (.npy, .fvecs, .fbin): no checksums, so changed values are expected; the
    reader must raise CorruptFileError/ValueError or return an array, never crash."""

    name = "vector files"

    def __init__(self, workdir: Path, seed: int = 0):
        X = unit_rows(64, 12, seed)
        self.paths = []
        for suffix in (".npy", ".fvecs", ".fbin"):
            p = workdir / f"vectors{suffix}"
            write_vectors(p, X)
            self.paths.append(p)
        self.originals = {p: p.read_bytes() for p in self.paths}
        self.current = self.paths[0]
        self.clean_by_path = {p: self._read(p) for p in self.paths}

    @staticmethod
    def _read(p):
        return np.array(bbqlib.formats.read_vectors(p, mmap=False))

    @property
    def clean(self):
        return self.clean_by_path[self.current]

    def run(self):
        return self._read(self.current)

    def apply(self, rng) -> str:
        self.current = self.paths[int(rng.integers(0, len(self.paths)))]
        self.current.write_bytes(mutate(self.originals[self.current], rng))
        return self.current.suffix

    def reset(self) -> None:
        for p, data in self.originals.items():
            p.write_bytes(data)


class HDF5Target:
    """An ann-benchmarks HDF5 file. It has no checksums, so a changed value inside a
    dataset's stored bytes is data (label ``data``); a mutation anywhere else (label
    ``structure``: superblock, object headers, attributes, heaps) or a truncation must give a
    clean error or the same results. libhdf5 runs in a worker with ``timeout`` seconds."""

    name = "ann-benchmarks HDF5"
    timeout = 20.0

    def __init__(self, workdir: Path, seed: int = 0):
        import h5py

        from bbqlib.formats.ann_benchmarks import write_ann_benchmarks

        X = unit_rows(64, 12, seed)
        nn, dist = np.zeros((4, 3), np.int32), np.zeros((4, 3))  # as in the earlier runs
        self.path = write_ann_benchmarks(workdir / "data.hdf5", X, X[:4], nn, dist, "angular")
        self.original = self.path.read_bytes()
        self.data = np.zeros(len(self.original), bool)  # bytes holding dataset values
        with h5py.File(self.path, "r") as f:
            for name in ("train", "test", "neighbors", "distances"):
                start = f[name].id.get_offset()
                self.data[start : start + f[name].id.get_storage_size()] = True
        self.clean = self.run()

    def run(self):
        from bbqlib.formats.ann_benchmarks import read_ann_benchmarks, read_ann_benchmarks_metric

        return (
            *read_ann_benchmarks(self.path, timeout=self.timeout),
            read_ann_benchmarks_metric(self.path, timeout=self.timeout),
        )

    def apply(self, rng) -> str:
        mutated = mutate(self.original, rng)
        self.path.write_bytes(mutated)
        if len(mutated) != len(self.original):
            return "truncated"
        changed = np.frombuffer(mutated, np.uint8) != np.frombuffer(self.original, np.uint8)
        return "data" if self.data[changed].all() else "structure"

    def reset(self) -> None:
        self.path.write_bytes(self.original)


TARGETS = {"flat": FlatTarget, "ivf": IVFTarget, "vectors": VectorFileTarget, "hdf5": HDF5Target}


def fuzz(target, n: int, seed: int, start: int = 0, report=None) -> Counter:
    """Mutations ``start .. n - 1`` of ``target`` (mutation ``i`` seeded by ``(seed, i)``, so
    any one replays alone); counts of each outcome. ``report(i, label, outcome)`` is called
    after each, ``label`` naming what was mutated (the benchmark's subprocess workers stream
    them, to count hard crashes)."""
    counts = Counter()
    for i in range(start, n):
        label = target.apply(np.random.default_rng([seed, i]))
        outcome = judge(target.run, target.clean)
        target.reset()
        counts[outcome] += 1
        if report is not None:
            report(i, label, outcome)
    return counts


# --------------------------------------------------------------------------- kill -9

#: A child that saves in a loop forever; the parent kills it at a random moment.
_CHILD = textwrap.dedent(
    """
    import sys, numpy as np, bbqlib
    from fault_harness import unit_rows, trace_phases
    kind, where = sys.argv[1], sys.argv[2]
    X = unit_rows(3000, 32, 0)
    if kind == "flat":
        index = bbqlib.FlatIndex(bits=1, similarity="cosine")
        index.add(X)
        step = lambda i: index.save(where)
    elif kind == "vectors":
        step = lambda i: bbqlib.formats.write_vectors(where, X)
    elif kind == "ivf_save":  # an in-memory index: every save writes a whole generation
        index = bbqlib.IVFIndex(bits=1, similarity="cosine", cluster_size=64, seed=7)
        index.add(X)
        step = lambda i: index.save(where)
    elif kind == "ivf_add":  # new vector segment, postings, header, MANIFEST
        index = bbqlib.IVFIndex.open(where)
        step = lambda i: index.add(unit_rows(200, 32, i + 1))
    else:  # ivf_delete: header and MANIFEST only
        index = bbqlib.IVFIndex.open(where)
        step = lambda i: index.delete(np.array([i]))
    step(0)  # compiled and warm: the parent's kill lands inside a save
    step = trace_phases(step, sys.argv[3])  # which phase of a save the kill hits
    print("ready", flush=True)
    i = 1
    while True:
        step(i)
        i += 1
    """
)

SAVE_KINDS = ("flat", "vectors", "ivf_add", "ivf_delete", "ivf_save")

#: Where a kill can land, in the order of a save: outside a save (the child's loop), before
#: the first temporary file (encoding, serializing), writing a temporary file, in ``fsync``
#: (of a file or its directory), in the ``rename`` over the target, after a rename (the next
#: file of an IVF generation, garbage collection, lock release).
PHASES = ("between saves", "prepare", "write", "fsync", "rename", "after a rename")


def trace_phases(step, phase_file: str):
    """Wrap ``step`` (one save) so that the phase it is in is always in ``phase_file`` (one
    byte, an index into :data:`PHASES`, memory-mapped: it survives a kill -9)."""
    import mmap

    from bbqlib.storage import atomic

    with open(phase_file, "wb") as f:
        f.write(bytes(1))
    with open(phase_file, "r+b") as f:
        buf = mmap.mmap(f.fileno(), 1)
    state = {"phase": 0}

    def set_phase(code):
        state["phase"] = code
        buf[0] = code

    def wrap(fn, during, after=None):
        def wrapped(*args, **kwargs):
            before = state["phase"]
            set_phase(during)
            try:
                return fn(*args, **kwargs)
            finally:
                set_phase(before if after is None else after)

        return wrapped

    os.fsync = wrap(os.fsync, 3)
    os.replace = wrap(os.replace, 4, after=5)
    atomic.temp_path = wrap(atomic.temp_path, 2, after=2)
    return wrap(step, 1, after=0)


def prepare_kill_target(kind: str, workdir: Path) -> Path:
    """The path a kill -9 child writes to, holding a complete first version."""
    if kind == "flat":
        where = workdir / "index.bbq"
        index = bbqlib.FlatIndex(bits=1, similarity="cosine")
        index.add(unit_rows(3000, 32, 0))
        index.save(where)
    elif kind == "vectors":
        where = workdir / "base.fbin"
        write_vectors(where, unit_rows(3000, 32, 0))
    else:
        where = workdir / "ivf"
        index = bbqlib.IVFIndex(bits=1, similarity="cosine", cluster_size=64, seed=7)
        index.add(unit_rows(3000, 32, 0))
        index.save(where)
    return where


def phase_file(where: Path) -> Path:
    return where.parent / "kill_phase"


def start_child(kind: str, where: Path) -> subprocess.Popen:
    tree = Path(bbqlib.__file__).resolve().parents[1]  # the bbqlib under test, not cwd's
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tree), str(TESTS)]))
    proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, kind, str(where), str(phase_file(where))],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=where.parent,
    )
    assert proc.stdout.readline().strip() == b"ready"
    return proc


def kill_after(proc: subprocess.Popen, seconds: float) -> None:
    time.sleep(seconds)
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def expected_files(kind: str, where: Path) -> set[str]:
    """The files a healthy target holds (everything else after an open is a leak)."""
    if kind in ("flat", "vectors"):
        return {where.name}
    manifest = json.loads((where / "MANIFEST").read_text())
    _, meta, _ = bbqlib.formats.read_container(where / manifest["header"], mmap=False)
    return {"MANIFEST", manifest["header"], meta["postings_file"]} | {
        s["file"] for s in meta["vector_segments"]
    }


def check_after_kill(kind: str, where: Path) -> tuple[bool, set[str]]:
    """Open what the killed child left (the next open cleans up), check it; return
    ``(corrupt, leaked files)``."""
    corrupt = False
    try:
        if kind == "vectors":
            X = bbqlib.formats.read_vectors(where, mmap=False)
            corrupt = X.shape != (3000, 32)
        elif kind == "flat":
            bbqlib.load(where).search(unit_rows(2, 32, 9), 3)
        else:
            index = bbqlib.IVFIndex.open(where)
            index.verify()
            index.search(unit_rows(2, 32, 9), 3)
    except ValueError:
        corrupt = True
    listing = {p.name for p in (where.parent if kind in ("flat", "vectors") else where).iterdir()}
    if kind in ("flat", "vectors"):
        listing = {n for n in listing if n.startswith(f".{where.name}") or n == where.name}
    return corrupt, listing - expected_files(kind, where)


def leftovers(kind: str, where: Path) -> set[str]:
    """Files beside (flat, vectors) or in (IVF) the target that no healthy target holds."""
    if kind in ("flat", "vectors"):
        names = {n for n in os.listdir(where.parent) if n.startswith(f".{where.name}.")}
        return names
    try:
        return set(os.listdir(where)) - expected_files(kind, where)
    except (OSError, ValueError):
        return set(os.listdir(where))


def kill_trial(kind: str, workdir: Path, seconds: float, where: Path | None = None):
    """Kill a child saving ``kind`` after ``seconds``; ``(corrupt, leaked files)`` after the
    next open (vector files: the next write of the same path, which cleans up), and the
    files the kill left before that open (``kill_trial.left``) and the phase of the save
    it hit (``kill_trial.phase``, one of :data:`PHASES`)."""
    where = where if where is not None else prepare_kill_target(kind, workdir)
    proc = start_child(kind, where)
    kill_after(proc, seconds)
    kill_trial.phase = PHASES[phase_file(where).read_bytes()[0]]
    kill_trial.left = leftovers(kind, where)
    if kind != "vectors":
        return check_after_kill(kind, where)
    corrupt, _ = check_after_kill(kind, where)
    write_vectors(where, unit_rows(3000, 32, 0))
    return corrupt, check_after_kill(kind, where)[1]


def fresh(workdir: Path) -> Path:
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    return workdir
