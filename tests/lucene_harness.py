"""Run Lucene 10.5 itself (``tests/java/LuceneOracle.java``) on float32 vectors and read back what
it produced: doc bytes and corrections, the centroid, query levels and corrections, scores.

Used by ``tests/test_lucene_oracle.py`` and ``benchmarks/quality/lucene.py``. Lucene 10 needs
Java 21 or newer: :func:`find_java` looks at ``$JAVA_HOME`` first, then at the JDKs installed
beside the ``java`` on ``PATH`` (``/usr/lib/jvm/*``, ``/opt/java/*``, ``/Library/Java/...``).
The harness is compiled once per source version and JDK into a cache folder.

The reference run is Lucene's scalar path without fused multiply-adds:
``-Dlucene.useScalarFMA=false`` and no ``--add-modules jdk.incubator.vector`` (so
``DefaultVectorUtilSupport`` serves ``VectorUtil``); :func:`run_oracle` with ``fma=True``
passes ``-Dlucene.useScalarFMA=true`` instead, to measure what fused multiply-adds change.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from paths import ROOT, SHARED, TESTS

__all__ = [
    "ENCODINGS",
    "SIMILARITIES",
    "JAR",
    "ALL_CONFIGS",
    "LuceneTask",
    "LuceneOutput",
    "find_java",
    "shared_dir",
    "find_jar",
    "compile_harness",
    "query_bits",
    "run_oracle",
    "compare",
    "same_bits",
    "lucene_top",
    "FRACTIONS",
]

REPO = ROOT
SOURCE = TESTS / "java" / "LuceneOracle.java"


def shared_dir() -> Path:
    """``shared/`` beside the checkout or beside one of its parents (``paths.SHARED``)."""
    return SHARED


#: The Lucene jar in ``shared/oracle``; ``$BBQLIB_LUCENE_JAR`` wins.
JAR = shared_dir() / "oracle" / "lucene-10.5.0.jar"
#: (doc bits, query bits) -> Lucene's ``ScalarEncoding``.
ENCODINGS = {
    (1, 4): "SINGLE_BIT_QUERY_NIBBLE",
    (2, 4): "DIBIT_QUERY_NIBBLE",
    (4, 4): "PACKED_NIBBLE",
    (7, 7): "SEVEN_BIT",
}
#: bbqlib similarity name -> Lucene's ``VectorSimilarityFunction``.
SIMILARITIES = {
    "euclidean": "EUCLIDEAN",
    "dot_product": "DOT_PRODUCT",
    "cosine": "COSINE",
    "max_inner_product": "MAXIMUM_INNER_PRODUCT",
}
MIN_JAVA = 21


def find_jar() -> Path | None:
    """The Lucene jar: ``$BBQLIB_LUCENE_JAR``, else ``shared/oracle/lucene-10.5.0.jar``."""
    env = os.environ.get("BBQLIB_LUCENE_JAR")
    jar = Path(env) if env else JAR
    return jar if jar.is_file() else None


def _java_major(java: Path) -> int | None:
    try:
        out = subprocess.run(
            [str(java), "-version"], capture_output=True, text=True, timeout=60
        ).stderr
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r'version "(\d+)(?:\.(\d+))?', out)
    if not m:
        return None
    major = int(m.group(1))
    return int(m.group(2) or 0) if major == 1 else major


def _candidate_homes() -> list[Path]:
    homes = []
    if os.environ.get("JAVA_HOME"):
        homes.append(Path(os.environ["JAVA_HOME"]))
    on_path = shutil.which("java")
    roots = [Path("/usr/lib/jvm"), Path("/opt/java"), Path("/usr/local/lib/jvm")]
    roots.append(Path("/Library/Java/JavaVirtualMachines"))
    if on_path:
        # the folder that holds the JDK behind `java` (e.g. /usr/lib/jvm/java-17/bin/java)
        roots.insert(0, Path(os.path.realpath(on_path)).parents[2])
    for root in roots:
        if root.is_dir():
            homes.extend(sorted(p for p in root.iterdir() if p.is_dir()))
    if on_path:
        homes.append(Path(os.path.realpath(on_path)).parents[1])
    return homes


def find_java(minimum: int = MIN_JAVA) -> tuple[Path, Path] | None:
    """``(java, javac)`` of the first JDK >= ``minimum``: ``$JAVA_HOME``, then installed JDKs."""
    seen = set()
    for home in _candidate_homes():
        for base in (home, home / "Contents" / "Home"):
            java, javac = base / "bin" / "java", base / "bin" / "javac"
            key = os.path.realpath(java)
            if key in seen or not (java.is_file() and javac.is_file()):
                continue
            seen.add(key)
            major = _java_major(java)
            if major is not None and major >= minimum:
                return java, javac
    return None


def compile_harness(javac: Path, jar: Path) -> Path:
    """Compile ``LuceneOracle.java`` once per (source, JDK, jar); returns the classes folder."""
    h = hashlib.sha256(SOURCE.read_bytes())
    h.update(str(os.path.realpath(javac)).encode())
    h.update(str(jar.stat().st_size).encode())
    out = Path(tempfile.gettempdir()) / f"bbqlib-lucene-oracle-{h.hexdigest()[:16]}"
    if (out / "LuceneOracle.class").is_file():
        return out
    tmp = Path(tempfile.mkdtemp(prefix="bbqlib-lucene-oracle-"))
    subprocess.run(
        [str(javac), "-nowarn", "-d", str(tmp), "-cp", str(jar), str(SOURCE)],
        check=True,
        capture_output=True,
        timeout=600,
    )
    try:
        tmp.rename(out)
    except OSError:  # another process finished first
        shutil.rmtree(tmp, ignore_errors=True)
    return out


#: Every configuration Lucene104 offers with a bbqlib counterpart: (similarity, doc bits).
ALL_CONFIGS = tuple((s, b) for s in SIMILARITIES for b in (1, 2, 4, 7))


def query_bits(bits: int) -> int:
    """Lucene's query bits for ``bits``-bit docs (7 for 7-bit docs, else 4)."""
    return 7 if bits == 7 else 4


@dataclass
class LuceneTask:
    """One run of the harness over one set of docs and queries, for several configurations.

    ``configs``: ``(similarity, doc bits)`` pairs. ``mode="index"``: the docs go through one
    ``IndexWriter`` with one vector field per configuration (the writer's centroid and cosine
    normalization). ``mode="direct"``: Lucene's quantizer and scorer on the docs as given,
    against ``centroid``.
    """

    name: str
    docs: np.ndarray
    queries: np.ndarray
    configs: tuple = ALL_CONFIGS
    mode: str = "index"
    centroid: np.ndarray | None = None


@dataclass
class LuceneOutput:
    """What Lucene produced for one configuration (arrays as in ``LuceneOracle.java``)."""

    codes: np.ndarray  # uint8 [n, doc packed length]
    doc_corrections: np.ndarray  # int32 [n, 4]: float bits of lower/upper/additional, Σk
    centroid: np.ndarray  # float32 [d]
    centroid_dp: np.float32
    query_levels: np.ndarray  # uint8 [nq, discrete dims]
    query_bytes: np.ndarray  # uint8 [nq, query packed length]
    query_corrections: np.ndarray  # int32 [nq, 4]
    scores: np.ndarray  # float32 [nq, n]
    meta: dict = field(default_factory=dict)

    @staticmethod
    def floats(corrections: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(lower, upper, additional, component_sum)`` of a corrections array."""
        c = np.ascontiguousarray(corrections)
        f = c[:, :3].copy().view(np.float32)
        return f[:, 0], f[:, 1], f[:, 2], c[:, 3].astype(np.int64)


def _field(similarity: str, bits: int) -> str:
    return f"{SIMILARITIES[similarity]}.{ENCODINGS[(bits, query_bits(bits))]}"


def run_oracle(
    tasks: list[LuceneTask],
    *,
    java: Path,
    javac: Path,
    jar: Path,
    fma: bool = False,
    timeout: float = 1800,
) -> dict[str, dict[tuple[str, int], LuceneOutput]]:
    """Run every task in one JVM: ``{task.name: {(similarity, bits): LuceneOutput}}``."""
    classes = compile_harness(javac, jar)
    work = Path(tempfile.mkdtemp(prefix="bbqlib-lucene-run-"))
    try:
        lines = []
        written: dict[int, tuple[Path, np.ndarray]] = {}

        def dump(arr: np.ndarray) -> Path:
            arr = np.ascontiguousarray(arr, dtype="<f4")
            if id(arr) not in written:
                path = work / f"in{len(written)}.f32"
                arr.tofile(path)
                written[id(arr)] = (path, arr)  # keep arr alive so its id stays unique
            return written[id(arr)][0]

        for t in tasks:
            n, d = t.docs.shape
            cpath = "-" if t.centroid is None else str(dump(np.asarray(t.centroid)[None, :]))
            configs = ",".join(_field(s, b).replace(".", ":") for s, b in t.configs)
            fields = [t.name, t.mode, str(d), str(dump(t.docs)), str(n)]
            fields += [str(dump(t.queries)), str(len(t.queries)), cpath, configs]
            lines.append("\t".join(fields))
        manifest = work / "manifest.tsv"
        manifest.write_text("\n".join(lines) + "\n")
        out = work / "out"
        cmd = [
            str(java),
            f"-Dlucene.useScalarFMA={'true' if fma else 'false'}",
            "-cp",
            os.pathsep.join([str(jar), str(classes)]),
            "LuceneOracle",
            str(manifest),
            str(out),
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            raise RuntimeError(f"Lucene harness failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
        meta = json.loads((out / "meta.json").read_text())
        return {t.name: _read_task(out, t, meta) for t in tasks}
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _read_task(out: Path, t: LuceneTask, meta: dict) -> dict[tuple[str, int], LuceneOutput]:
    n = len(t.docs)
    nq = len(t.queries)
    results = {}
    for sim, bits in t.configs:
        prefix = f"{t.name}.{_field(sim, bits)}"

        def read(ext: str, dtype, rows: int, prefix=prefix) -> np.ndarray:
            a = np.fromfile(out / f"{prefix}.{ext}", dtype=dtype)
            return a.reshape(rows, -1) if rows else a

        results[(sim, bits)] = LuceneOutput(
            codes=read("codes", np.uint8, n),
            doc_corrections=read("dcorr", "<i4", n),
            centroid=read("centroid", "<f4", 0),
            centroid_dp=read("centroiddp", "<f4", 0)[0],
            query_levels=read("qlev", np.uint8, nq),
            query_bytes=read("qpack", np.uint8, nq),
            query_corrections=read("qcorr", "<i4", nq),
            scores=read("scores", "<f4", nq),
            meta=meta,
        )
    return results


# ----------------------------------------------------------------------------- comparison
def same_bits(a, b) -> np.ndarray:
    """Elementwise: the same float32 bits (a NaN matches any NaN)."""
    a = np.asarray(a, dtype=np.float32)
    b = np.asarray(b, dtype=np.float32)
    return (a.view(np.int32) == b.view(np.int32)) | (np.isnan(a) & np.isnan(b))


def lucene_top(scores: np.ndarray, k: int) -> np.ndarray:
    """Lucene's ranking of a score matrix: higher first, ties by the lower id, NaN never (-1)."""
    order = np.lexsort((np.broadcast_to(np.arange(scores.shape[1]), scores.shape), -scores))
    order = order[:, :k]
    return np.where(np.isnan(np.take_along_axis(scores, order, axis=1)), -1, order)


def compare(q, X: np.ndarray, Q: np.ndarray, out: LuceneOutput) -> dict[str, float]:
    """How much of what a fitted ``BBQQuantizer`` makes of ``X`` / ``Q`` equals Lucene's bits.

    Fractions of doc vectors (bytes, levels, each correction), of queries (levels, all four
    corrections), of scores, and of queries whose top 10 (ids, in order) agree; plus the
    largest relative interval difference and absolute score difference.
    """
    from reference.osq_lucene import unpack_lucene_doc_bytes

    from bbqlib.packing import unpack_planes
    from bbqlib.quantizers.osq import lucene as lucene_osq
    from bbqlib.quantizers.osq.math import quantize_rows

    d = X.shape[1]
    bits = q.encoding_.doc_bits
    enc = q.encode(X)
    c = enc.corrections
    lo, up, add, ks = LuceneOutput.floats(out.doc_corrections)
    mine_bytes = lucene_osq.lucene_doc_bytes(enc)
    if enc.encoding.layout == "planes":
        mine = unpack_planes(enc.codes, bits, d)
    else:
        mine = np.asarray(enc.codes)
    theirs = unpack_lucene_doc_bytes(out.codes, bits, d)
    if lucene_osq.is_lucene(q):
        y = lucene_osq.quantize_queries(q, Q)
    else:
        Qp = q._validated(Q, "Q")
        y = quantize_rows(
            Qp, q.centroid_, q.encoding_.query_bits, euclidean=q.similarity_.is_distance
        )
        y = lucene_osq.LuceneCodes(y.codes, y.lower, y.upper, y.additional, y.component_sum)
    qlo, qup, qadd, qks = LuceneOutput.floats(out.query_corrections)
    scores = q.similarity_scores(Q, enc)
    ids = q.search(Q, enc, 10)[1]
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.abs(np.r_[c["lower"] - lo, c["upper"] - up]) / np.abs(np.r_[lo, up])
        rel = float(np.nanmax(np.where(np.r_[lo, up] == 0, 0.0, rel))) if rel.size else 0.0
    finite = np.isfinite(scores) & np.isfinite(out.scores)
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(scores.astype(np.float64) - out.scores)[finite]
    return {
        "centroid": float(same_bits(q.centroid_, out.centroid).all()),
        "centroid_dp": float(same_bits(np.float32(q.centroid_dot_), out.centroid_dp).all()),
        "doc_bytes": float((mine_bytes == out.codes).all(axis=1).mean()),
        "doc_levels": float((mine == theirs).all(axis=1).mean()),
        "lower": float(same_bits(c["lower"], lo).mean()),
        "upper": float(same_bits(c["upper"], up).mean()),
        "additional": float(same_bits(c["additional"], add).mean()),
        "component_sum": float((c["component_sum"] == ks).mean()),
        "query_levels": float(
            (
                (y.levels == out.query_levels[:, :d]).all(axis=1)
                & ~out.query_levels[:, d:].any(axis=1)
            ).mean()
        ),
        "query_corrections": float(
            (
                same_bits(y.lower, qlo)
                & same_bits(y.upper, qup)
                & same_bits(y.additional, qadd)
                & (y.component_sum == qks)
            ).mean()
        ),
        "scores": float(same_bits(scores, out.scores).mean()),
        "top10": float((ids == lucene_top(out.scores, 10)).all(axis=1).mean()),
        "max_rel_interval": rel,
        "max_abs_score": float(diff.max()) if diff.size else 0.0,
    }


#: Keys of :func:`compare` that are fractions (1.0 = bit for bit everywhere).
FRACTIONS = (
    "centroid",
    "centroid_dp",
    "doc_bytes",
    "doc_levels",
    "lower",
    "upper",
    "additional",
    "component_sum",
    "query_levels",
    "query_corrections",
    "scores",
    "top10",
)
