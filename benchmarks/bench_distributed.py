"""Distributed IVF build on a Dask LocalCluster (issue 17); WIP: data preparation."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

#: Rows per input shard (125,000 x 384 float32 = 183 MiB: one Dask partition each).
SHARD_ROWS = 125_000
N_QUERIES = 500
DIM = 384
TOPICS = 1000


def _topk_merge(keys, ids, new_keys, new_ids, k):
    keys = np.concatenate([keys, new_keys], axis=1)
    ids = np.concatenate([ids, new_ids], axis=1)
    part = np.argpartition(-keys, k - 1, axis=1)[:, :k]
    keys = np.take_along_axis(keys, part, 1)
    ids = np.take_along_axis(ids, part, 1)
    order = np.lexsort((ids, -keys), axis=1)
    return np.take_along_axis(keys, order, 1), np.take_along_axis(ids, order, 1)


def prepare(n: int, workdir: Path, checkpoints=(1_000_000,)) -> None:
    """Write ``n`` base rows as ``.npy`` shards, the queries, and exact top-10 (inner product)
    of the whole base and of its first ``checkpoints`` rows."""
    base_dir = workdir / "base"
    done = workdir / f"gt-{n}.npy"
    if done.exists():
        return
    base_dir.mkdir(parents=True, exist_ok=True)
    if not (workdir / "queries.npy").exists():
        _write_shards(n, base_dir, workdir)
    _ground_truth(workdir, base_dir, done, checkpoints)


def _write_shards(n: int, base_dir: Path, workdir: Path) -> None:
    from _synthetic import clustered_blocks

    t0 = time.perf_counter()
    # Queries are rows n .. n + 500 of the same stream: generate them first (one pass).
    buf, filled, shard = np.empty((SHARD_ROWS, DIM), np.float32), 0, 0
    Q = np.empty((N_QUERIES, DIM), np.float32)
    for start, block, _ in clustered_blocks(n + N_QUERIES, DIM, TOPICS, seed=0):
        lo, hi = start, start + block.shape[0]
        if hi > n:
            q0 = max(lo, n)
            Q[q0 - n : hi - n] = block[q0 - lo :]
            block = block[: max(0, n - lo)]
        off = 0
        while off < block.shape[0]:
            take = min(SHARD_ROWS - filled, block.shape[0] - off)
            buf[filled : filled + take] = block[off : off + take]
            filled += take
            off += take
            if filled == SHARD_ROWS:
                np.save(base_dir / f"part-{shard:05d}.npy", buf)
                shard, filled = shard + 1, 0
    if filled:
        np.save(base_dir / f"part-{shard:05d}.npy", buf[:filled])
    np.save(workdir / "queries.npy", Q)
    print(f"data written in {time.perf_counter() - t0:.0f} s", flush=True)


def _ground_truth(workdir: Path, base_dir: Path, done: Path, checkpoints) -> None:
    t0 = time.perf_counter()
    Q = np.load(workdir / "queries.npy")
    q64 = Q.astype(np.float64)
    keys = np.empty((N_QUERIES, 0))
    ids = np.empty((N_QUERIES, 0), np.int64)
    row = 0
    for path in sorted(base_dir.glob("part-*.npy")):
        xb = np.load(path)
        # float32 product for the 32 best per shard, then those rescored in float64
        cand = np.argpartition(-(Q @ xb.T), 31, axis=1)[:, :32]
        ip = np.einsum("qd,qcd->qc", q64, xb[cand].astype(np.float64))
        keys, ids = _topk_merge(keys, ids, ip, cand + row, 10)
        row += xb.shape[0]
        if row in checkpoints:
            np.save(workdir / f"gt-{row}.npy", ids)
    np.save(done, ids)
    print(f"ground truth in {time.perf_counter() - t0:.0f} s", flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("command", choices=["prepare"])
    ap.add_argument("--n", type=int, default=5_000_000)
    ap.add_argument("--workdir", default="/work/tmp/bbqlib-dask")
    args = ap.parse_args(argv)
    if args.command == "prepare":
        prepare(args.n, Path(args.workdir))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
