"""``bbqlib.diagnose``: what in a set of vectors makes quantized search hard, and the fix.

The statistics are read from a sample (evenly spaced rows, no seed): the spectrum of the
centred rows (effective dimension as the participation ratio ``(Σλ)² / Σλ²``, anisotropy
as the largest eigenvalue over the mean one), the mean offset, the norm spread, the far
outliers of :mod:`bbqlib.quantizers.centre`, exact duplicates. Recall@k of the defaults
(``FlatIndex(bits=1)``) is measured on the sample against exact neighbours of held-out
rows, as :func:`bbqlib.calibrate` measures; with ``recommend=True`` the cheapest
configuration reaching ``target_recall`` comes from :func:`bbqlib.calibrate` itself.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from .._validation import DataWarning
from ..quantizers.centre import outlier_rows
from ..quantizers.data_checks import (
    LOW_BITS,
    Finding,
    coordinate_participation,
    coordinate_spread_finding,
    low_bits_finding,
    sample_rows,
)
from ..similarity import resolve_similarity

__all__ = ["Diagnosis", "diagnose"]

#: Widths whose bits per vector the report lists.
WIDTHS = (1, 2, 4, 7)
#: Effective dimension below which 1-bit codes spend most bits on noise directions.
LOW_EFFECTIVE_DIM = 16
#: Mean offset (||mean|| over the median distance to it) above which centring matters.
OFFSET = 1.0
#: Share of sample rows with an exact duplicate above which the report flags them.
DUPLICATES = 0.01


@dataclass(frozen=True)
class Diagnosis:
    """What :func:`diagnose` found (``repr`` is a short table).

    Attributes
    ----------
    n, dim, similarity, k : int, int, str, int
        Rows of ``X``, dimension, similarity, depth of the recall measured.
    sample_rows : int
        Rows the statistics and the recall were measured on.
    effective_dimension : float
        Participation ratio of the centred sample's spectrum (1 to ``dim``).
    bits_per_vector : dict
        ``{width: dim * width}`` for 1, 2, 4 and 7 bits per dimension.
    anisotropy : float
        Largest eigenvalue of the centred sample's covariance over the mean eigenvalue.
    coordinate_participation : float
        ``(Σσ²)² / (d Σσ⁴)`` of the per-coordinate variances (1: every coordinate alike;
        below 0.5 codes without a rotation lose recall).
    mean_offset : float
        Norm of the mean over the median distance of a row to it.
    norm_spread : float
        99th percentile of the row norms over their median.
    outliers : int
        Sample rows far from the rest (left out of the centre).
    duplicate_rate : float
        Share of sample rows that repeat an earlier row exactly.
    default_recall : float or None
        Recall@k of ``FlatIndex(bits=1)`` with default search parameters (None: not
        measured, ``measure=False``).
    findings : tuple of Finding
        Each problem found, with its fix.
    recommended : Configuration or None
        :func:`bbqlib.calibrate`'s choice (``recommend=True``): ``.build()`` returns the
        index, ``.code()`` the code to paste, ``.bytes_per_vector`` its size.
    """

    n: int
    dim: int
    similarity: str
    k: int
    sample_rows: int
    effective_dimension: float
    bits_per_vector: dict
    anisotropy: float
    coordinate_participation: float
    mean_offset: float
    norm_spread: float
    outliers: int
    duplicate_rate: float
    default_recall: float | None
    findings: tuple = ()
    recommended: object = None
    calibration: object = field(default=None, repr=False)

    def __repr__(self) -> str:
        lines = [
            f"bbqlib.diagnose: {self.n} vectors x {self.dim} dims, {self.similarity}, "
            f"statistics on {self.sample_rows} rows",
            f"  effective dimension  {self.effective_dimension:.1f}",
            "  bits per vector      "
            + ", ".join(f"{w}-bit: {b}" for w, b in self.bits_per_vector.items()),
            f"  anisotropy           {self.anisotropy:.1f} (largest / mean eigenvalue)",
            f"  coordinates          {self.coordinate_participation:.2f} (participation ratio "
            "of their variances)",
            f"  mean offset          {self.mean_offset:.2f} (|mean| / median distance to it)",
            f"  norm spread          {self.norm_spread:.2f} (p99 / median norm)",
            f"  far outliers         {self.outliers}",
            f"  duplicate rate       {self.duplicate_rate:.3f}",
        ]
        if self.default_recall is not None:
            lines.append(f"  recall@{self.k} defaults   {self.default_recall:.3f} "
                         "(FlatIndex(bits=1))")  # fmt: skip
        for f in self.findings:
            lines.append(f"  - {f.name}: {f}")
        if not self.findings:
            lines.append("  no finding: the defaults suit these vectors")
        if self.recommended is not None:
            r = self.recommended
            lines.append(f"  recommended: {r.label()} ({r.bytes_per_vector:.0f} bytes per vector "
                         f"against {4 * self.dim} for float32), recall@{self.k} "
                         f"{r.recall:.3f}")  # fmt: skip
        return "\n".join(lines)


def _spectrum(rows: np.ndarray) -> np.ndarray:
    centred = rows - rows.mean(axis=0)
    eig = np.linalg.eigvalsh(centred.T @ centred / max(len(rows) - 1, 1))
    return np.clip(eig, 0.0, None)


def _findings(report: dict, dim: int, similarity, norms: np.ndarray) -> list[Finding]:
    found = []
    low = low_bits_finding(dim, 1, "flat")
    if low is not None:
        found.append(low)
    if report["effective_dimension"] < LOW_EFFECTIVE_DIM and dim * 1 > LOW_BITS:
        found.append(Finding(
            "low_effective_dimension",
            f"the variance lives in about {report['effective_dimension']:.0f} directions of "
            f"{dim}: 1-bit codes spend most bits on directions that carry little",
            "use bits=2 or 4, or an IVFIndex (residuals to list centres are closer to "
            "isotropic)",
        ))  # fmt: skip
    spread = coordinate_spread_finding(report["coordinate_participation"])
    if spread is not None:
        found.append(spread)
    if report["outliers"]:
        found.append(Finding(
            "outliers",
            f"{report['outliers']} sampled row(s) lie far from the rest",
            "nothing to do with the default arithmetic (they are left out of the centre and "
            "encoded on their own); arithmetic='lucene' keeps Lucene's plain mean and its "
            "recall can collapse: check the rows for unnormalized or corrupt vectors",
        ))  # fmt: skip
    if report["duplicate_rate"] > DUPLICATES:
        found.append(Finding(
            "duplicates",
            f"{100 * report['duplicate_rate']:.1f}% of sampled rows repeat another exactly",
            "deduplicate before indexing (duplicates tie, fill result lists and cost bytes)",
        ))  # fmt: skip
    if report["mean_offset"] > OFFSET and similarity.value in ("dot_product", "cosine"):
        found.append(Finding(
            "mean_offset",
            f"the mean is {report['mean_offset']:.1f}x the spread around it",
            "handled by the centre of BBQ/RaBitQ codes; binary codes without a centre "
            "(sign bits of raw vectors) would lose most information",
        ))  # fmt: skip
    return found


def _default_recall(X: np.ndarray, similarity, k: int, n_queries: int) -> float:
    from ..index import FlatIndex
    from .ground_truth import exact_knn
    from .recall import recall_at_k

    m = min(n_queries, max(1, X.shape[0] // 10))
    pick = np.unique(np.linspace(0, X.shape[0] - 1, m).astype(np.int64))
    keep = np.ones(X.shape[0], dtype=bool)
    keep[pick] = False
    base, queries = X[keep], X[pick]
    metric = {"euclidean": "l2", "cosine": "cosine"}.get(similarity.value, "ip")
    _, gt = exact_knn(base, queries, k, metric=metric, scores_first=True)
    index = FlatIndex(bits=1, similarity=similarity.value)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)  # the report states the findings
        index.add(base)
    _, ids = index.search(queries, k)
    return float(recall_at_k(ids, gt, k))


def diagnose(X, similarity: str, *, k: int = 10, sample: int = 20_000, n_queries: int = 200,
             measure: bool = True, recommend: bool = False, target_recall: float = 0.95,
             seed: int = 0) -> Diagnosis:  # fmt: skip
    """Diagnose a set of vectors: what makes quantized search hard on it, and the fix.

    Parameters
    ----------
    X : float array [n, d]
        Your vectors (may be memory-mapped: only ``sample`` rows are read).
    similarity : str
        ``"cosine"``, ``"dot_product"``, ``"euclidean"`` or ``"max_inner_product"``.
    k : int
        Depth of the recall measured.
    sample : int
        Rows read (evenly spaced) for the statistics and the measured recall.
    n_queries : int
        Sampled rows held out as queries for the measured recall.
    measure : bool
        Measure recall@k of ``FlatIndex(bits=1)`` with default search parameters.
    recommend : bool
        Run :func:`bbqlib.calibrate` on the sample (slower: it builds several indexes) and
        report its choice as ``recommended``.
    target_recall, seed : float, int
        Passed to :func:`bbqlib.calibrate`.

    Returns
    -------
    Diagnosis

    Examples
    --------
    >>> import numpy as np, bbqlib
    >>> X = np.random.default_rng(0).normal(size=(2000, 24)).astype(np.float32)
    >>> report = bbqlib.diagnose(X, similarity="euclidean", measure=False)
    >>> [f.name for f in report.findings]
    ['low_bits']
    """
    sim = resolve_similarity(similarity)
    if getattr(X, "ndim", None) != 2:
        X = np.asarray(X)
        if X.ndim != 2:
            raise ValueError(f"X must be 2-D [n, d], got shape {X.shape}")
    n, dim = X.shape
    rows = sample_rows(X, sample)
    norms = np.sqrt(np.einsum("ij,ij->i", rows, rows))
    prepared = rows / np.where(norms > 0, norms, 1.0)[:, None] if sim.value == "cosine" else rows
    far = outlier_rows(prepared)
    prepared = prepared[~far]  # the shape of the bulk: one far row would be the whole spectrum
    eig = _spectrum(prepared)
    total = float(eig.sum())
    mean = prepared.mean(axis=0)
    spread = np.sqrt(np.einsum("ij,ij->i", prepared - mean, prepared - mean))
    median_norm = float(np.median(norms))
    stats = {
        "effective_dimension": total**2 / float((eig**2).sum()) if total > 0 else 0.0,
        "anisotropy": float(eig.max()) / (total / dim) if total > 0 else 0.0,
        "coordinate_participation": coordinate_participation(prepared),
        "mean_offset": float(np.linalg.norm(mean)) / max(float(np.median(spread)), 1e-30),
        "norm_spread": float(np.percentile(norms, 99)) / median_norm if median_norm > 0 else 0.0,
        "outliers": int(far.sum()),
        "duplicate_rate": 1.0 - len(np.unique(rows, axis=0)) / len(rows),
    }
    findings = _findings(stats, dim, sim, norms)
    recall = None
    sample32 = rows.astype(np.float32)
    if measure:
        recall = _default_recall(sample32, sim, k, n_queries)
    recommended = calibration = None
    if recommend:
        from ..calibration import calibrate

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DataWarning)  # its candidates: findings above
            calibration = calibrate(sample32, similarity=sim.value, k=k, n_queries=n_queries,
                                    target_recall=target_recall, seed=seed, n=n)  # fmt: skip
        recommended = calibration.chosen
    return Diagnosis(n, dim, sim.value, k, len(rows), stats["effective_dimension"],
                     {w: dim * w for w in WIDTHS}, stats["anisotropy"],
                     stats["coordinate_participation"], stats["mean_offset"],
                     stats["norm_spread"], stats["outliers"], stats["duplicate_rate"], recall,
                     tuple(findings), recommended, calibration)  # fmt: skip
