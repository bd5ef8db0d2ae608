"""SAQ's fitted plan: PCA of the data, then segments and bit widths from a dynamic program.

SAQ (Li, Deng, Yan, Zhi, Cheng, SIGMOD 2026; spec ``../shared/spec/saq.md`` §1-2) projects
vectors on the data's principal axes, cuts the axes (in decreasing variance) into contiguous
*segments* of whole blocks of ``block`` dimensions, and gives each segment its own bit width
``B_s``; the last segment may get 0 bits (a dropped tail). A dynamic program picks the cut and
the widths that minimise a pluggable error model under a total bit budget:

* cost of a coded segment: ``B_s · d_s`` code bits plus :data:`FACTOR_BITS` (its two float32
  factors); a 0-bit tail costs nothing;
* budget: ``floor(bits · D_p) + FACTOR_BITS`` (one segment's factors are free, so a one-segment
  plan is exactly ``bits`` per dimension), ``D_p`` the dimension padded to a multiple of 64.

Error models (``err(segment, bits)``, summed over segments, minimised):

``"reference"``
    The authors' code: ``V_s / 2^B`` with ``V_s`` the segment's PCA variance (``V_s`` at 0
    bits). Error *magnitudes* of the whole data set; the safe default at 2 bits and above.
``"neighbour"``
    Error *variance* of near-neighbour pairs, which is what ranking sees: ``κ_B · E[‖o_s‖²
    ‖q_s‖²] / d_s`` over sampled (query, true neighbour) pairs for a coded segment (``κ_B``:
    CAQ's ``(1 - a²) / a²``), and for a 0-bit tail the within-query variance of the dropped
    term ``<o_tail, q_tail>`` over each query's true neighbours (spec §10, finding 3).
a callable
    ``model(stats, start, stop, bits) -> float`` with ``stats`` a :class:`PlanStats`; ``start``
    and ``stop`` are dimensions of the padded PCA frame, ``bits == 0`` means a dropped tail
    (``stop == D_p``).

Realisable budgets: a plan's code bits are whole blocks at whole bits, i.e. multiples of
``block`` bits, so the average code bits per dimension move in steps of ``block / D_p`` (1/6
at ``D_p = 384`` and ``block = 64``); the plan spends at most the budget and reports what it
spent (:attr:`SAQPlan.code_bits`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "BLOCK",
    "FACTOR_BITS",
    "MAX_SEGMENT_BITS",
    "CAQ_KAPPA",
    "Segment",
    "SAQPlan",
    "PlanStats",
    "fit_pca",
    "error_table",
    "plan_segments",
    "neighbour_stats",
    "max_segments",
    "budget_bits",
]

#: Dimensions per block; segment boundaries fall on multiples of it (spec §2).
BLOCK = 64
#: Bits charged per coded segment: two float32 factors (rescale and norm).
FACTOR_BITS = 64
#: Widest segment code.
MAX_SEGMENT_BITS = 12
#: ``κ_B = (1 - a²) / a²`` of CAQ on Gaussian segments of 64 dimensions (spec §5, measured);
#: it falls about 4x per extra bit beyond 5.
CAQ_KAPPA = {1: 0.565, 2: 0.129, 3: 0.035, 4: 0.0088, 5: 0.0022}


def kappa(bits: int) -> float:
    """CAQ's ``κ_B`` (see :data:`CAQ_KAPPA`), extrapolated by 1/4 per bit above 5."""
    if bits in CAQ_KAPPA:
        return CAQ_KAPPA[bits]
    return CAQ_KAPPA[5] * 4.0 ** (5 - bits)


# ----------------------------------------------------------------------------- records
@dataclass(frozen=True)
class Segment:
    """Contiguous PCA coordinates ``[start, start + dims)`` coded at ``bits`` per dimension."""

    start: int
    dims: int
    bits: int

    @property
    def stop(self) -> int:
        return self.start + self.dims

    @property
    def code_bits(self) -> int:
        return self.dims * self.bits


@dataclass(frozen=True)
class SAQPlan:
    """Segments (coded ones, in PCA order) of a padded frame; what follows them is dropped.

    Attributes
    ----------
    segments : tuple of Segment
        Coded segments, contiguous from 0; ``coded_dims`` = the last one's stop.
    dim, padded_dim : int
        Input dimension and its padding to a multiple of 64.
    block : int
        Block width of the plan.
    budget : int
        Bits the plan was allowed: codes plus :data:`FACTOR_BITS` per coded segment.
    error : float
        The model's error of this plan.
    model : str
        Name of the error model.
    """

    segments: tuple[Segment, ...]
    dim: int
    padded_dim: int
    block: int
    budget: int
    error: float = float("nan")
    model: str = "reference"
    _cache: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def coded_dims(self) -> int:
        return self.segments[-1].stop if self.segments else 0

    @property
    def code_bits(self) -> int:
        return sum(s.code_bits for s in self.segments)

    @property
    def code_bytes(self) -> int:
        return self.code_bits // 8

    @property
    def cost_bits(self) -> int:
        """What the budget counts: code bits plus factor bits of every coded segment."""
        return self.code_bits + FACTOR_BITS * len(self.segments)

    @property
    def bits_per_dim(self) -> float:
        """Code bits per padded dimension actually spent."""
        return self.code_bits / self.padded_dim

    def describe(self) -> str:
        """``"64@5, 192@2, 128@0"``: dims@bits per segment, the dropped tail last."""
        parts = [f"{s.dims}@{s.bits}" for s in self.segments]
        if self.coded_dims < self.padded_dim:
            parts.append(f"{self.padded_dim - self.coded_dims}@0")
        return ", ".join(parts)

    def to_dict(self) -> dict:
        return {
            "segments": [[s.start, s.dims, s.bits] for s in self.segments],
            "dim": self.dim,
            "padded_dim": self.padded_dim,
            "block": self.block,
            "budget": self.budget,
            "error": self.error,
            "model": self.model,
        }

    @classmethod
    def from_dict(cls, d: dict) -> SAQPlan:
        segs = tuple(Segment(int(a), int(b), int(c)) for a, b, c in d["segments"])
        plan = cls(
            segs,
            int(d["dim"]),
            int(d["padded_dim"]),
            int(d["block"]),
            int(d["budget"]),
            float(d.get("error", float("nan"))),
            str(d.get("model", "reference")),
        )
        plan.validate()
        return plan

    def validate(self) -> None:
        """Raise ValueError unless the segments tile ``[0, coded_dims)`` within budget."""
        pos = 0
        for s in self.segments:
            if s.start != pos or s.dims <= 0 or s.dims % 8 or not 1 <= s.bits <= MAX_SEGMENT_BITS:
                raise ValueError(f"invalid SAQ plan segments: {self.describe()}")
            pos = s.stop
        if not self.segments or pos > self.padded_dim or self.cost_bits > self.budget:
            raise ValueError(
                f"invalid SAQ plan ({self.describe()}: {self.cost_bits} bits, budget {self.budget})"
            )

    # Arrays the kernels take, made once.
    def arrays(self) -> dict[str, np.ndarray]:
        """``start, dims, bits, msb_off, low_off`` int64 [S]: segment geometry and the byte
        offsets of each segment's top plane and first lower plane inside a code row."""
        if "arrays" not in self._cache:
            start = np.array([s.start for s in self.segments], dtype=np.int64)
            dims = np.array([s.dims for s in self.segments], dtype=np.int64)
            bits = np.array([s.bits for s in self.segments], dtype=np.int64)
            plane_bytes = dims // 8
            msb_off = np.concatenate([[0], np.cumsum(plane_bytes)[:-1]]).astype(np.int64)
            low_bytes = plane_bytes * (bits - 1)
            low_off = plane_bytes.sum() + np.concatenate([[0], np.cumsum(low_bytes)[:-1]])
            self._cache["arrays"] = {
                "start": start,
                "dims": dims,
                "bits": bits,
                "msb_off": msb_off,
                "low_off": low_off.astype(np.int64),
            }
        return self._cache["arrays"]


# ----------------------------------------------------------------------------- PCA
def fit_pca(X: np.ndarray, *, chunk: int = 16384) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Full-rank PCA of the rows of ``X`` from the float64 covariance (NumPy ``eigh``).

    Returns ``(mean float64 [d], components float64 [d, d], variances float64 [d])``:
    column ``i`` of ``components`` is the axis of the ``i``-th largest variance (population
    variance, divided by n). The covariance is accumulated in chunks of ``chunk`` rows, so the
    only d-squared temporaries are the covariance and its eigenvectors. Signs are fixed so
    that each axis's largest-magnitude coordinate is positive (reproducible across LAPACKs).
    """
    n, d = X.shape
    mean = X.mean(axis=0, dtype=np.float64)
    cov = np.zeros((d, d))
    for s in range(0, n, chunk):
        B = X[s : s + chunk].astype(np.float64) - mean
        cov += B.T @ B
    cov /= max(n, 1)
    vals, vecs = np.linalg.eigh(cov)
    order = np.argsort(vals)[::-1]
    vals = np.maximum(vals[order], 0.0)
    vecs = vecs[:, order]
    flip = np.sign(vecs[np.abs(vecs).argmax(axis=0), np.arange(d)])
    flip[flip == 0] = 1.0
    return mean, vecs * flip, vals


# ----------------------------------------------------------------------------- error models
@dataclass(frozen=True, eq=False)
class PlanStats:
    """What the error models read.

    Attributes
    ----------
    variances : float64 [D_p]
        Per-coordinate variance in the PCA frame (0 on padding).
    pair_q, pair_o : float64 [m, D_p] or None
        PCA-frame coordinates (centred) of sampled queries and of their true neighbours, one
        row per (query, neighbour) pair; ``pair_query`` [m] says which query a pair belongs to.
    """

    variances: np.ndarray
    pair_q: np.ndarray | None = None
    pair_o: np.ndarray | None = None
    pair_query: np.ndarray | None = None


def _reference_table(stats: PlanStats, block: int, max_bits: int) -> np.ndarray:
    v = stats.variances
    nb = len(v) // block
    cum = np.concatenate([[0.0], np.cumsum(v.reshape(nb, block).sum(axis=1))])
    V = cum[None, :] - cum[:, None]  # V[i, j]: blocks i..j-1
    b = np.arange(max_bits + 1)
    return V[:, :, None] / (2.0**b)[None, None, :]


def _neighbour_table(stats: PlanStats, block: int, max_bits: int) -> np.ndarray:
    if stats.pair_q is None:
        raise ValueError("the neighbour error model needs neighbour pairs (PlanStats.pair_q)")
    Dp = len(stats.variances)
    nb = Dp // block
    qb = (stats.pair_q**2).reshape(len(stats.pair_q), nb, block).sum(axis=2)
    ob = (stats.pair_o**2).reshape(len(stats.pair_o), nb, block).sum(axis=2)
    cross = (stats.pair_q * stats.pair_o).reshape(len(stats.pair_q), nb, block).sum(axis=2)
    cq = np.concatenate([np.zeros((len(qb), 1)), np.cumsum(qb, axis=1)], axis=1)
    co = np.concatenate([np.zeros((len(ob), 1)), np.cumsum(ob, axis=1)], axis=1)
    # tail[m, i]: the dropped term <o, q> over blocks i..nb-1 of each pair
    tail = np.concatenate([np.cumsum(cross[:, ::-1], axis=1)[:, ::-1], np.zeros((len(qb), 1))], 1)
    groups = stats.pair_query
    counts = np.bincount(groups)
    # within-query variance of the tail term over each query's neighbours, averaged
    means = np.stack([np.bincount(groups, weights=tail[:, i]) for i in range(nb + 1)], 1)
    means /= np.maximum(counts, 1)[:, None]
    within = ((tail - means[groups]) ** 2).mean(axis=0)
    T = np.full((nb + 1, nb + 1, max_bits + 1), np.inf)
    for i in range(nb + 1):
        for j in range(i + 1, nb + 1):
            prod = ((cq[:, j] - cq[:, i]) * (co[:, j] - co[:, i])).mean()
            d = (j - i) * block
            for b in range(1, max_bits + 1):
                T[i, j, b] = kappa(b) * prod / max(d - 1, 1)
        T[i, nb, 0] = within[i]
    return T


def error_table(
    model: str | Callable, stats: PlanStats, block: int, max_bits: int = MAX_SEGMENT_BITS
) -> np.ndarray:
    """``T[i, j, b]``: the model's error of blocks ``i .. j-1`` as one segment at ``b`` bits.

    Only ``T[i, n_blocks, 0]`` (a dropped tail) is read at ``b = 0``.
    """
    if model == "reference":
        return _reference_table(stats, block, max_bits)
    if model == "neighbour":
        return _neighbour_table(stats, block, max_bits)
    if not callable(model):
        raise ValueError(
            f"error_model must be 'reference', 'neighbour', 'auto' or a callable, got {model!r}"
        )
    nb = len(stats.variances) // block
    T = np.full((nb + 1, nb + 1, max_bits + 1), np.inf)
    for i in range(nb + 1):
        for j in range(i + 1, nb + 1):
            for b in range(1, max_bits + 1):
                T[i, j, b] = float(model(stats, i * block, j * block, b))
        if i < nb:
            T[i, nb, 0] = float(model(stats, i * block, nb * block, 0))
    return T


def neighbour_stats(
    Y: np.ndarray,
    variances: np.ndarray,
    *,
    is_l2: bool,
    mean_frame: np.ndarray | None = None,
    n_queries: int = 200,
    k: int = 10,
    max_base: int = 20000,
    seed: int = 0,
) -> PlanStats:
    """Sample (query, true neighbour) pairs from PCA-frame rows ``Y`` (centred, padded).

    ``n_queries`` rows act as queries; their ``k`` nearest other rows among at most
    ``max_base`` sampled rows are the neighbours: by squared L2 for euclidean, else by the
    inner product of the uncentred vectors (``mean_frame``: the mean in the PCA frame).
    """
    rng = np.random.default_rng([seed, 0x5A0])
    n = len(Y)
    B = Y[np.sort(rng.choice(n, min(n, max_base), replace=False))]
    nq = min(n_queries, len(B) - 1)
    q_pos = rng.choice(len(B), nq, replace=False)
    Qv = B[q_pos]
    k = max(1, min(k, len(B) - 1))
    if is_l2:
        scores = 2 * (Qv @ B.T) - (B * B).sum(axis=1)[None, :]
    else:  # <q, o> ranks over o like <q - mu + mu, o - mu>
        shift = 0.0 if mean_frame is None else mean_frame[None, :]
        scores = (Qv + shift) @ B.T
    scores[np.arange(nq), q_pos] = -np.inf
    top = np.argpartition(-scores, k - 1, axis=1)[:, :k]
    return PlanStats(
        variances=variances,
        pair_q=np.repeat(Qv, k, axis=0),
        pair_o=B[top.ravel()],
        pair_query=np.repeat(np.arange(nq), k),
    )


# ----------------------------------------------------------------------------- the DP
def budget_bits(bits: float, padded_dim: int) -> int:
    """``floor(bits · D_p) + FACTOR_BITS`` (spec §2)."""
    return int(math.floor(bits * padded_dim + 1e-9)) + FACTOR_BITS


def max_segments(bits: float, padded_dim: int) -> int:
    """Segment limit (tail included): ``D_p / 64`` below 2 bits, else ``D_p / 128``."""
    return max(1, padded_dim // (64 if bits < 2 else 128))


def plan_segments(
    table: np.ndarray,
    *,
    dim: int,
    padded_dim: int,
    block: int,
    budget: int,
    max_segs: int,
    min_gain: float = 0.01,
    max_bits: int = MAX_SEGMENT_BITS,
    model: str = "reference",
) -> SAQPlan:
    """The dynamic program of spec §2 over an error table (see :func:`error_table`).

    ``f[n][i][u]``: least error covering the first ``i`` blocks with ``n`` segments and
    ``u`` budget units (``gcd(block, FACTOR_BITS)`` bits each). A coded segment of blocks
    ``i..j-1`` at ``b`` bits costs ``b · block · (j - i) + FACTOR_BITS``; a 0-bit tail closes
    the plan at no cost. Final states are scanned with ``n`` ascending, and a plan with more
    segments replaces the best so far only if its error is below ``(1 - min_gain)`` times it
    (``min_gain = 0``: the exact minimum, ties to fewer segments).
    """
    from ..._kernels.saq import plan_dp

    nb = padded_dim // block
    unit = math.gcd(block, FACTOR_BITS)
    U = budget // unit
    shape = (max_segs + 1, nb + 1, U + 1)
    f = np.full(shape, np.inf)
    par = np.full((3, *shape), -1, dtype=np.int64)  # parent block, parent units, bits
    done = np.full((max_segs + 1, U + 1), np.inf)  # plans closed by a tail or ending at nb
    done_i = np.full(done.shape, -1, dtype=np.int64)  # tail start block (nb: no tail)
    plan_dp(
        np.ascontiguousarray(table, dtype=np.float64),
        block // unit,
        FACTOR_BITS // unit,
        max_bits,
        f,
        par,
        done,
        done_i,
    )
    inf = np.inf
    best, best_n, best_u = inf, -1, -1
    for n in range(1, max_segs + 1):
        u = int(np.argmin(done[n]))
        err = done[n, u]
        if not np.isfinite(err):
            continue
        if best_n < 0 or err < (1.0 - min_gain) * best:
            best, best_n, best_u = float(err), n, u
    if best_n < 0:
        raise ValueError(f"no SAQ plan fits {budget} bits for {padded_dim} dimensions; raise bits")
    # backtrack
    segs = []
    n, u, i = best_n, best_u, int(done_i[best_n, best_u])
    if i < nb:  # a tail closed the plan: the coded part ends at block i with n - 1 segments
        n -= 1
    while n > 0:
        pi, pu, pb = (int(x) for x in par[:, n, i, u])
        segs.append(Segment(pi * block, (i - pi) * block, pb))
        n, i, u = n - 1, pi, pu
    plan = SAQPlan(tuple(reversed(segs)), dim, padded_dim, block, budget, best, model)
    plan.validate()
    return plan
