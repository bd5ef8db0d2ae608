"""Finding the cheapest configuration that meets the target: the smart walk and the grid.

A configuration *meets* the target when the one-sided 95% bootstrap lower bound of its
recall@k is at least ``target_recall`` (and its latency is within ``max_latency_ms``). The
cheapest is the one with the fewest bytes per vector, then the lowest latency.

The smart walk (:func:`smart_search`) visits the code points (codes, preconditioning,
stored vectors: what fixes the bytes) in ascending bytes, one group of equal bytes at a
time:

1. each point of the group is *probed* at its most generous setting (the largest
   oversample; for the IVF the smallest visit budget whose lists hold nearly all true
   neighbours, see below); a point that misses the target there misses it everywhere
   (recall grows with the rerank depth and the visit budget) and is dropped;
2. points that pass but whose probe is more than :data:`PROBE_SLACK` times slower than the
   group's fastest probe are dominated (a slower scan: float queries against quantized ones,
   say) and kept as probed; for the others the fastest setting that meets the target is
   searched: the smallest oversample (bisection over :data:`~.space.OVERSAMPLES`); for the
   IVF the staircase of minimal (oversample, visit) pairs (a pair is dominated when another
   meets the target with no more depth and no more visits), walked from the deepest rerank
   down while it gets faster;
0. on large bases (:data:`bbqlib.calibration.SCREEN_ROWS`) every probe is first made on a
   seeded subsample of the base (a tenth, at least 100,000 vectors: encodes cost a tenth)
   and a point whose mean recall there misses the target by more than
   :data:`SCREEN_MARGIN` is dropped without its full encode (recall falls as the base
   grows, so a point that misses on the subsample misses on the whole);
3. the first group where some point meets the target holds the answer: its candidates
   are timed again (three interleaved repeats on at most 64 queries, median) and the
   fastest is chosen. Every more expensive group is pruned.

IVF visit budgets are pruned by *coverage*: the share of a query's true neighbours that lie
in the lists the search visits (computed from the shared lists, no scoring) bounds the
recall of every quantizer from above. Budgets whose mean coverage is below the target are
never tried; the probe uses the smallest budget whose coverage reaches ``1 - (1 -
target) / 4`` and falls back to visiting everything when the probe misses by less than the
coverage it left out.

:func:`grid_search` measures every point at every setting (the exhaustive reference), in
groups of equal bytes from the cheapest up, and stops after the first group that meets the
target (``search="full-grid"`` measures every group).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .measure import Measurement
from .space import OVERSAMPLES

__all__ = ["Trial", "smart_search", "grid_search", "cheapest"]

#: Re-timing repeats of the finalists (when there are several), on at most
#: :data:`RETIME_QUERIES` of the queries.
RETIME_REPEATS = 3
RETIME_QUERIES = 64
#: A probed point is tuned only when its probe is at most this many times slower than the
#: fastest probe of its bytes group (all probes use the same generous setting).
PROBE_SLACK = 3.0
#: The IVF staircase stops once a pair is this many times slower than the fastest so far.
STAIR_SLACK = 1.5
#: A screen (a subsample of the base) drops a point when its mean recall there is below
#: the target by more than this (recall falls as the base grows: more close competitors).
SCREEN_MARGIN = 0.01


@dataclass
class Trial:
    """One measured setting of a point (``phase``: probe, sweep, grid)."""

    point: object
    oversample: float | None
    visit: float | None
    m: Measurement
    bytes_per_vector: float
    phase: str
    chosen: bool = False


def _meets(m: Measurement, target: float, max_latency) -> bool:
    return m.recall_low >= target and (max_latency is None or m.latency_ms <= max_latency)


def cheapest(trials, target: float, max_latency=None) -> Trial | None:
    """The trial meeting the target with the fewest bytes, then the lowest latency."""
    ok = [t for t in trials if _meets(t.m, target, max_latency)]
    if not ok:
        return None
    return min(ok, key=lambda t: (round(t.bytes_per_vector, 1), t.m.latency_ms))


class _Walk:
    def __init__(self, engine, target, max_latency, log, *, screen: bool = False):
        self.e = engine
        self.target = float(target)
        self.max_latency = max_latency
        self.log = log
        self.screen = screen
        self.trials: list[Trial] = []
        self.lists = engine.index_kind.lists  # visit budgets to tune, pruned by coverage
        self.budgets = engine.index_kind.visits  # those budgets (percent), ascending
        self._probe_visit: dict = {}

    def run(self, point, oversample, visit, phase) -> Measurement:
        phase = "screen" if self.screen else phase
        m = self.e.measure(point, oversample, visit)
        o = oversample if point.store else None
        if not any(t.point == point and t.oversample == o and t.visit == visit
                   for t in self.trials):  # fmt: skip
            self.trials.append(Trial(point, o, visit, m, self.e.bytes_per_vector(point), phase))
        return m

    def score(self, m) -> float:
        """The recall compared with the target: the lower bound (the mean when screening,
        less :data:`SCREEN_MARGIN`: a screen only drops points that miss clearly)."""
        return m.recall + SCREEN_MARGIN if self.screen else m.recall_low

    def ok(self, m) -> bool:
        return self.score(m) >= self.target

    # -- IVF visit budgets ------------------------------------------------------------------
    def _depth(self, point, oversample) -> int:
        return math.ceil(self.e.k * oversample) if point.store else self.e.k

    def visits(self, point, oversample) -> list[float]:
        """Budgets whose coverage can reach the target (ascending)."""
        depth = self._depth(point, oversample)
        keep = [v for v in self.budgets if self.e.coverage(v, depth).mean() >= self.target]
        return keep or [self.budgets[-1]]

    def probe_visit(self, point) -> float:
        depth = self._depth(point, OVERSAMPLES[-1])
        if depth not in self._probe_visit:
            want = 1.0 - (1.0 - self.target) / 4.0
            v = next((v for v in self.budgets if self.e.coverage(v, depth).mean() >= want),
                     self.budgets[-1])  # fmt: skip
            self._probe_visit[depth] = v
        return self._probe_visit[depth]

    # -- the two steps ------------------------------------------------------------------
    def probe(self, point) -> tuple[bool, float | None]:
        """Whether the point can meet the target, and the largest visit budget to search."""
        o = OVERSAMPLES[-1]
        if not self.lists:
            return self.ok(self.run(point, o, None, "probe")), None
        v = self.probe_visit(point)
        m = self.run(point, o, v, "probe")
        if self.ok(m):
            return True, v
        depth = self._depth(point, o)
        left_out = 1.0 - self.e.coverage(v, depth).mean()
        if v < self.budgets[-1] and self.score(m) + left_out >= self.target:
            # The budget left out enough neighbours to matter: try one that holds 99.9%.
            v = next((x for x in self.budgets
                      if x > v and self.e.coverage(x, depth).mean() >= 0.999),
                     self.budgets[-1])  # fmt: skip
            if self.ok(self.run(point, o, v, "probe")):
                return True, v
        return False, None

    def _bisect(self, values, feasible) -> int | None:
        """Smallest index of ``values`` (ascending, last known feasible) that is feasible."""
        lo, hi = 0, len(values) - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if feasible(values[mid]):
                hi = mid
            else:
                lo = mid + 1
        return lo

    def fastest(self, point, top_visit) -> Trial | None:
        """The fastest setting of a probed point that meets the target."""
        if not self.lists:
            if not point.store:
                best = (None, None)
            else:
                i = self._bisect(OVERSAMPLES, lambda o: self.ok(self.run(point, o, None, "sweep")))
                best = (OVERSAMPLES[i], None)
        elif not point.store:
            vs = [v for v in self.visits(point, 1.0) if v <= top_visit] or [top_visit]
            if vs[-1] != top_visit:
                vs.append(top_visit)
            j = self._bisect(vs, lambda v: self.ok(self.run(point, None, v, "sweep")))
            best = (None, vs[j])
        else:
            best = self._staircase(point, top_visit)
        m = self.e.measure(point, *best)
        if self.max_latency is not None and m.latency_ms > self.max_latency:
            return None
        return next(t for t in self.trials if (t.point, t.oversample, t.visit) == (point, *best))

    def _staircase(self, point, top_visit):
        """Minimal (oversample, visit) pairs from the deepest rerank down; the fastest.

        For each oversample, descending, the smallest budget that meets the target (it can
        only grow as the rerank gets shallower); the walk stops when a pair is more than
        :data:`STAIR_SLACK` times slower than the fastest so far (latency is scan cost,
        growing with the budget, plus rerank cost, growing with the depth).
        """
        vs = [v for v in self.visits(point, OVERSAMPLES[-1]) if v <= top_visit]
        if not vs or vs[-1] != top_visit:
            vs.append(top_visit)
        j = self._bisect(vs, lambda v: self.ok(self.run(point, OVERSAMPLES[-1], v, "sweep")))
        best = (OVERSAMPLES[-1], vs[j])
        best_ms = self.e.measure(point, *best).latency_ms
        for o in reversed(OVERSAMPLES[:-1]):
            while j < len(vs) and not self.ok(self.run(point, o, vs[j], "sweep")):
                j += 1
            if j == len(vs):
                break
            ms = self.e.measure(point, o, vs[j]).latency_ms
            if ms < best_ms:
                best, best_ms = (o, vs[j]), ms
            elif ms > STAIR_SLACK * best_ms:
                break
        return best


def smart_search(engine, points, target, *, max_bytes=None, max_latency=None, log=print,
                 screen=None):  # fmt: skip
    """The cheapest point meeting the target, walking groups of equal bytes upwards.

    ``screen``: an engine over a subsample of the base; a point is probed on the full base
    only when its probe on the subsample does not miss the target clearly.
    Returns ``(trials, chosen trial or None)``.
    """
    walk = _Walk(engine, target, max_latency, log)
    sieve = None if screen is None else _Walk(screen, target, max_latency, log, screen=True)
    by_bytes: dict = {}
    for p in points:
        b = round(engine.bytes_per_vector(p), 1)
        if max_bytes is None or b <= max_bytes:
            by_bytes.setdefault(b, []).append(p)
    for b in sorted(by_bytes):
        passed = []
        for p in by_bytes[b]:
            if sieve is not None and not sieve.probe(p)[0]:
                continue
            ok, top_visit = walk.probe(p)
            if ok:
                probe = engine.measure(p, OVERSAMPLES[-1], top_visit)
                passed.append((probe.latency_ms, p, top_visit))
        fastest_probe = min((ms for ms, _, _ in passed), default=0.0)
        finalists = []
        for ms, p, top_visit in passed:
            if ms <= PROBE_SLACK * fastest_probe:  # the others are dominated: slower scans
                best = walk.fastest(p, top_visit)
                if best is not None:
                    finalists.append(best)
        if not finalists:
            continue
        log(f"{b:.0f} B/vector meets the target: {len(finalists)} candidate(s), timing them")
        times = {id(t): [t.m.latency_ms] for t in finalists}
        for _ in range(RETIME_REPEATS if len(finalists) > 1 else 0):  # interleaved repeats
            for t in finalists:
                times[id(t)] += engine.retime(t.point, t.oversample, t.visit, 1)
        for t in finalists:
            t.m = t.m.retimed(float(np.median(times[id(t)])))
        ok = [t for t in finalists if max_latency is None or t.m.latency_ms <= max_latency]
        if ok:
            chosen = min(ok, key=lambda t: t.m.latency_ms)
            chosen.chosen = True
            return _with_screen(walk, sieve), chosen
    return _with_screen(walk, sieve), None


def _with_screen(walk, sieve) -> list:
    """``(engine, trial)`` pairs: the screen's trials (on the subsample) first."""
    out = [] if sieve is None else [(sieve.e, t) for t in sieve.trials]
    return out + [(walk.e, t) for t in walk.trials]


def grid_search(engine, points, target, *, max_bytes=None, max_latency=None, log=print,
                complete: bool = False):  # fmt: skip
    """Every point at every setting; returns ``(trials, cheapest trial or None)``.

    The points are measured in groups of equal bytes, cheapest first, every setting of every
    point of a group (no pruning, no assumption that recall grows with the oversample or
    the visit budget). Once a group holds a setting that meets the target, no more
    expensive group can hold the cheapest configuration, so the grid stops there (the
    answer is the same as measuring everything); ``complete=True`` measures every group.
    """
    trials = []
    by_bytes: dict = {}
    for p in points:
        b = engine.bytes_per_vector(p)
        if max_bytes is None or round(b, 1) <= max_bytes:
            by_bytes.setdefault(round(b, 1), []).append((p, b))
    for group in sorted(by_bytes):
        for p, b in by_bytes[group]:
            overs = OVERSAMPLES if p.store else (None,)
            visits = engine.index_kind.visits
            for o in overs:
                for v in visits:
                    trials.append(Trial(p, o, v, engine.measure(p, o, v), b, "grid"))
        if not complete and cheapest(trials, target, max_latency) is not None:
            log(f"grid: {group:.0f} B/vector meets the target; more expensive groups skipped")
            break
    best = cheapest(trials, target, max_latency)
    if best is not None:
        best.chosen = True
    return [(engine, t) for t in trials], best
