"""``BBQQuantizer(arithmetic="lucene")`` against Lucene 10.5 itself, bit for bit.

The Java harness (``tests/java/LuceneOracle.java``, compiled here against
``shared/oracle/lucene-10.5.0.jar``) indexes the same float32 vectors with
``Lucene104ScalarQuantizedVectorsFormat`` (one flushed segment per data set, one field per
similarity x encoding) and scores the queries with the segment reader's scorer. Everything is
batched into two JVM launches: the reference run (scalar path, ``-Dlucene.useScalarFMA=false``,
no vector incubator module) and a smaller run with fused multiply-adds on.

Covered: every similarity x (1x4, 2x4, 4x4, 7x7) on both shared data sets (2,000 docs, 200
queries; spacy's dot_product on its normalized vectors) and on adversarial vectors (constant,
one-hot, d = 1, 3, 65, 127, huge, tiny and subnormal magnitudes, rounding ties, zero rows).
Skips without the jar or without a Java >= 21; with ``CI=true`` and the jar present a missing
Java 21 fails instead.
"""

from __future__ import annotations

import os
import sys

import numpy as np
import pytest
from lucene_harness import (
    ALL_CONFIGS,
    FRACTIONS,
    LuceneOutput,
    LuceneTask,
    compare,
    find_jar,
    find_java,
    run_oracle,
    same_bits,
    shared_dir,
)

import bbqlib
from bbqlib._kernels import osq_lucene as osq_lucene_kernels

N_DOCS, N_QUERIES = 2000, 200
DATA = shared_dir() / "data"
NON_DOT = tuple(c for c in ALL_CONFIGS if c[0] != "dot_product")
DOT = tuple(c for c in ALL_CONFIGS if c[0] == "dot_product")
NO_COSINE = tuple(c for c in NON_DOT if c[0] != "cosine")


def _unit(X: np.ndarray) -> np.ndarray:
    return (X / np.linalg.norm(X.astype(np.float64), axis=1, keepdims=True)).astype(np.float32)


def _adversarial() -> list[LuceneTask]:
    """Small awkward sets; the configs each similarity's input rules allow."""
    g = np.random.default_rng(16)
    normal = g.normal(size=(120, 70))
    sets = {
        "constant": (_unit(np.full((64, 33), 0.5)), ALL_CONFIGS),
        "onehot": (np.eye(48, 40, dtype=np.float32) + np.eye(48, 40, k=-8, dtype=np.float32),
                   ALL_CONFIGS),
        "unit_d1": (g.permutation(np.r_[np.ones(35), -np.ones(15)])[:, None].astype(np.float32),
                    ALL_CONFIGS),
        "unit_d3": (_unit(g.normal(size=(80, 3))), ALL_CONFIGS),
        "unit_d65": (_unit(g.normal(0.3, 1, size=(150, 65))), ALL_CONFIGS),
        "unit_d127": (_unit(g.standard_t(2, size=(150, 127))), ALL_CONFIGS),
        "huge": ((normal * 1e18).astype(np.float32), NON_DOT),
        "tiny": ((normal * 1e-20).astype(np.float32), NON_DOT),
        "tinier": ((normal * 1e-30).astype(np.float32), NO_COSINE),
        "subnormal": ((normal * 1e-41).astype(np.float32), NO_COSINE),
        "decades": ((normal * 10.0 ** g.uniform(-15, 15, size=(120, 1))).astype(np.float32),
                    NON_DOT),
        "ties": ((g.integers(1, 5, size=(100, 17)) / 4.0).astype(np.float32), NON_DOT),
        "zeros": (np.vstack([np.zeros((5, 9)), g.normal(size=(40, 9))]).astype(np.float32),
                  NO_COSINE),
    }  # fmt: skip
    # one-hot rows with k=-8 overlap the identity in rows 8..39: make them unit again
    sets["onehot"] = (_unit(sets["onehot"][0]), ALL_CONFIGS)
    return [LuceneTask(name, X, X[:10], configs) for name, (X, configs) in sets.items()]


def _datasets() -> list[LuceneTask]:
    if not (DATA / "debian-minilm-384" / "base.npy").exists():
        return []
    tasks = []
    for name, configs in (("debian-minilm-384", ALL_CONFIGS), ("spacy-wordvec-300", NON_DOT)):
        X = np.load(DATA / name / "base.npy", mmap_mode="r")[:N_DOCS].copy()
        Q = np.load(DATA / name / "queries.npy", mmap_mode="r")[:N_QUERIES].copy()
        tasks.append(LuceneTask(name, X, Q, configs))
        if configs is NON_DOT:  # not unit vectors: dot_product on the normalized ones
            tasks.append(LuceneTask(name + "-unit", _unit(X), _unit(Q), DOT))
    return tasks


def _availability() -> tuple[dict | None, str, str]:
    """``(tools, action, reason)``: tools to run Lucene, or "skip" / "fail" and why.

    No jar: skip. A jar but no Java >= 21: skip, except under ``CI=true``, where it fails.
    """
    jar = find_jar()
    if jar is None:
        return None, "skip", "Lucene 10.5 jar not found (shared/oracle or $BBQLIB_LUCENE_JAR)"
    found = find_java(21)
    if found is None:
        reason = "no Java >= 21 found ($JAVA_HOME, then installed JDKs); Lucene 10 needs Java 21"
        if os.environ.get("CI", "").lower() == "true":
            return None, "fail", reason + ", and CI=true with the Lucene jar present"
        return None, "skip", reason
    return {"java": found[0], "javac": found[1], "jar": jar}, "", ""


@pytest.fixture(scope="session")
def lucene_tools():
    tools, action, reason = _availability()
    if tools is None:
        (pytest.fail if action == "fail" else pytest.skip)(reason)
    return tools


@pytest.fixture(scope="session")
def oracle(lucene_tools):
    """One JVM launch: every data set and adversarial set, FMA off (the reference)."""
    tasks = _datasets() + _adversarial() + [_out_of_range()]
    return {t.name: t for t in tasks}, run_oracle(tasks, **lucene_tools, fma=False)


def _out_of_range() -> LuceneTask:
    """Components of a few subnormal ulps: Lucene's step underflows and its codes leave the
    encoding's range (BBQQuantizer refuses these rows; the kernel still follows Lucene)."""
    X = (np.random.default_rng(5).normal(size=(50, 20)) * 1e-44).astype(np.float32)
    return LuceneTask("out_of_range", X, X[:5], tuple(("euclidean", b) for b in (1, 2, 4, 7)))


def _check(task: LuceneTask, sim: str, bits: int, out: LuceneOutput) -> dict[str, float]:
    """Fractions (of vectors, queries, scores) where bbqlib's lucene mode has Lucene's bits."""
    q = bbqlib.BBQQuantizer(bits=bits, similarity=sim, arithmetic="lucene").fit(task.docs)
    got = compare(q, task.docs, task.queries, out)
    return {k: got[k] for k in FRACTIONS}


def _cases():
    names = ["debian-minilm-384", "spacy-wordvec-300"]
    cases = [(n, s, b) for n in names for s, b in ALL_CONFIGS]
    return cases + [(t.name, s, b) for t in _adversarial() for s, b in t.configs]


def test_reference_run_is_scalar_without_fma(oracle):
    meta = next(iter(next(iter(oracle[1].values())).values())).meta
    assert meta["lucene"] == "10.5.0"
    assert meta["has_fast_scalar_fma"] is False
    assert meta["vector_incubator_module"] is False


@pytest.mark.parametrize("name, sim, bits", _cases())
def test_bit_for_bit_with_lucene(oracle, name, sim, bits):
    tasks, results = oracle
    if sim == "dot_product" and name == "spacy-wordvec-300":
        name += "-unit"
    if name not in tasks:
        pytest.skip(f"shared data not found at {DATA}")
    got = _check(tasks[name], sim, bits, results[name][(sim, bits)])
    assert all(v == 1.0 for v in got.values()), {k: v for k, v in got.items() if v != 1.0}


# ----------------------------------------------------------------------------- FMA on
@pytest.fixture(scope="session")
def oracle_fma(lucene_tools, oracle):
    """The same Lucene with ``-Dlucene.useScalarFMA=true``, on the first 500 docs / 50 queries."""
    tasks = [
        LuceneTask(t.name, t.docs[:500], t.queries[:50], t.configs)
        for t in oracle[0].values()
        if len(t.docs) >= 1000
    ]
    if not tasks:
        pytest.skip(f"shared data not found at {DATA}")
    results = run_oracle(tasks, **lucene_tools, fma=True)
    meta = next(iter(next(iter(results.values())).values())).meta
    if not meta["has_fast_scalar_fma"]:
        pytest.skip("this CPU / JVM has no fast scalar FMA: useScalarFMA=true changes nothing")
    return {t.name: t for t in tasks}, results


def test_fma_leaves_euclidean_unchanged(oracle_fma):
    """``VectorUtil.dotProduct`` is the only FMA user, and euclidean never calls it where it
    matters (no normalization; ``centroidDP`` is stored but not scored): bit for bit still."""
    tasks, results = oracle_fma
    for name, task in tasks.items():
        for sim, bits in task.configs:
            if sim != "euclidean":
                continue
            got = _check(task, sim, bits, results[name][(sim, bits)])
            got.pop("centroid_dp")
            assert all(v == 1.0 for v in got.values()), (name, bits, got)


def test_fma_changes_only_dot_product_paths(oracle_fma):
    """With FMA, MIP / dot_product keep every code (OSQ has no dotProduct) and differ at most in
    ``centroidDP``; cosine moves through the doc magnitudes, the centroid and the query norms."""
    tasks, results = oracle_fma
    for name, task in tasks.items():
        for sim, bits in task.configs:
            if sim not in ("max_inner_product", "dot_product"):
                continue
            got = _check(task, sim, bits, results[name][(sim, bits)])
            for key in ("doc_bytes", "lower", "upper", "additional", "query_corrections"):
                assert got[key] == 1.0, (name, sim, bits, key, got)


@pytest.mark.parametrize("bits", [1, 2, 4, 7])
def test_out_of_range_codes_follow_lucene(oracle, bits):
    """Where Lucene's float32 step underflows, the kernel still writes Lucene's bytes and
    corrections; the quantizer raises instead of storing codes outside the encoding."""
    task = oracle[0]["out_of_range"]
    out = oracle[1]["out_of_range"][("euclidean", bits)]
    X = task.docs
    centroid = out.centroid
    n, d = X.shape
    res = (np.empty((n, d), np.uint8),) + tuple(np.empty(n, np.float32) for _ in range(3))
    res += (np.empty(n, np.int64),)
    osq_lucene_kernels.osq_quantize_lucene(X, centroid, bits, 5, np.float32(0.1), True, *res)
    lo, up, add, ks = LuceneOutput.floats(out.doc_corrections)
    for mine, theirs in zip(res[1:4], (lo, up, add), strict=True):
        assert same_bits(mine, theirs).all()
    np.testing.assert_array_equal(res[4], ks)
    if bits == 7:  # stored byte for byte
        np.testing.assert_array_equal(res[0], out.codes)
    if (res[0] > (1 << bits) - 1).any():
        with pytest.raises(ValueError, match="narrower than float32"):
            bbqlib.BBQQuantizer(bits=bits, similarity="euclidean", arithmetic="lucene").fit(
                X
            ).encode(X)


def test_missing_java_skips_locally_and_fails_under_ci(monkeypatch, tmp_path):
    jar = tmp_path / "lucene.jar"
    jar.write_bytes(b"")
    monkeypatch.setenv("BBQLIB_LUCENE_JAR", str(jar))
    monkeypatch.setattr(sys.modules[__name__], "find_java", lambda minimum=21: None)
    monkeypatch.delenv("CI", raising=False)
    assert _availability()[1] == "skip"
    monkeypatch.setenv("CI", "true")
    assert _availability()[1] == "fail"
    monkeypatch.setenv("BBQLIB_LUCENE_JAR", str(tmp_path / "missing.jar"))
    assert _availability()[1] == "skip"  # no jar: nothing to compare with, even in CI


def test_find_java_takes_java_home_first(monkeypatch):
    found = find_java(21)
    if found is None:
        pytest.skip("no Java >= 21 installed")
    home = found[0].parents[1]
    monkeypatch.setenv("JAVA_HOME", str(home))
    assert find_java(21)[0] == found[0]
    monkeypatch.setenv("JAVA_HOME", "/nonexistent")
    assert find_java(21) is not None  # then the installed JDKs
    assert find_java(999) is None
