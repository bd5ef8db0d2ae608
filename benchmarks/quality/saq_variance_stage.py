"""Would the authors' variance stage (spec §7.1) prune SAQ scans on our data? (issue 15)

The stage bounds each segment's cross term by ``m · sqrt(Σ_i σ_i² q_i²)`` (the PCA variances
``σ²`` of the base set, ``m = 4`` in the reference code) and skips docs whose lower bound on
``d²`` exceeds the current k-th best. For each query of the first 300 (unit vectors, so the
cosine ranking is the squared-L2 one), this prints the share of docs whose bound exceeds the
**true** k-th / 100th best ``d²`` (the tightest bar any scan could have) and the share of the
true top k / 100 whose own bound exceeds their true ``d²`` (the bound is broken for them, so
the stage would drop true neighbours). No timing.

    BBQLIB_DATA=../shared/data PYTHONPATH=$PWD python benchmarks/quality/saq_variance_stage.py
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
BENCH = HERE.parent  # benchmarks/, on sys.path instead of HERE (see common.py)
sys.path[:] = [str(BENCH), *(p for p in sys.path if Path(p or ".").resolve() != HERE)]
import common  # noqa: E402

import bbqlib  # noqa: E402


def main() -> None:
    ds = common.load_dataset("debian-minilm-384", 300)
    X = ds.base / np.linalg.norm(ds.base, axis=1, keepdims=True)
    Q = ds.queries / np.linalg.norm(ds.queries, axis=1, keepdims=True)
    true = 2.0 - 2.0 * (Q @ X.T).astype(np.float64)
    print("| bits | plan (dims@bits) | m | depth | docs pruned (mean, min over queries) | "
          "true top-depth whose bound fails |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    for bits in (2.0, 4.0):
        q = bbqlib.SAQQuantizer(bits=bits, similarity="euclidean").fit(X)
        W, mu = q.frame_.astype(np.float64), q.mean_.astype(np.float64)
        Yx, Yq = (X - mu) @ W, (Q - mu) @ W
        var = q.variances_
        cuts = [(s.start, s.stop) for s in q.plan_.segments]
        if q.plan_.coded_dims < Yx.shape[1]:
            cuts.append((q.plan_.coded_dims, Yx.shape[1]))  # the 0-bit tail
        plan = ", ".join(f"{s.dims}@{s.bits}" for s in q.plan_.segments)
        for m in (4.0, 2.0):
            lb = np.zeros_like(true)
            for a, b in cuts:
                on = (Yx[:, a:b] ** 2).sum(1)
                qn = (Yq[:, a:b] ** 2).sum(1)
                sd = np.sqrt((var[a:b] * Yq[:, a:b] ** 2).sum(1))
                lb += np.maximum(0.0, on[None, :] + qn[:, None] - 2.0 * m * sd[:, None])
            for depth in (10, 100):
                bar = np.sort(true, axis=1)[:, depth - 1]
                pruned = (lb > bar[:, None]).mean(1)
                broken = ((lb > true + 1e-9) & (true <= bar[:, None])).sum() / (len(Q) * depth)
                print(f"| {bits:g} | {plan} | {m:g} | {depth} | {pruned.mean():.3f}, "
                      f"{pruned.min():.3f} | {broken:.3f} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
