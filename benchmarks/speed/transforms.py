"""Time the random orthogonal transforms: fast Hadamard (FhtKac) vs dense matrix vs block.

Single thread (numba and BLAS), median of interleaved repeats, on Gaussian float32 vectors.
Writes a markdown table to ``benchmarks/results/transforms.md``.

Usage::

    python benchmarks/speed/transforms.py [--n 10000] [--dims 384 768 1024 1536] [--repeats 9]
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import time
from pathlib import Path

import numba
import numpy as np
from threadpoolctl import threadpool_info, threadpool_limits

from bbqlib.transforms import make_transform

NAMES = ("hadamard", "dense", "block")
OUT = Path(__file__).resolve().parents[1] / "results" / "transforms.md"


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def time_dim(d: int, n: int, repeats: int, seed: int = 0) -> dict[str, float]:
    """Median seconds per ``transform`` of ``n`` vectors, methods interleaved per repeat."""
    X = np.random.default_rng(seed).standard_normal((n, d)).astype(np.float32)
    transforms = {name: make_transform(name, d) for name in NAMES}
    for t in transforms.values():
        t.transform(X[:64])  # compile / warm caches outside the timing
    times: dict[str, list[float]] = {name: [] for name in NAMES}
    for rep in range(repeats):
        order = NAMES[rep % len(NAMES) :] + NAMES[: rep % len(NAMES)]  # rotate who goes first
        for name in order:
            start = time.perf_counter()
            transforms[name].transform(X)
            times[name].append(time.perf_counter() - start)
    return {name: float(np.median(v)) for name, v in times.items()}


def render(results: dict[int, dict[str, float]], n: int, repeats: int, command: str) -> str:
    blas = ", ".join(
        f"{i.get('internal_api')} {i.get('version')}"
        for i in threadpool_info()
        if i.get("user_api") == "blas"
    )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    lines = [
        "# Transform speed: fast Hadamard vs dense matrix vs block preconditioner",
        "",
        f"`transform` of {n:,} Gaussian float32 vectors, one thread (numba and BLAS), median of "
        f"{repeats} interleaved repeats. Ratios are the figures to read: the machine is shared, "
        "so absolute times are only indicative.",
        "",
        f"- command: `{command}`",
        f"- machine: {os.cpu_count()} CPUs (nproc), {cpu_model()}; load average {load:.2f} "
        "at the end of the run",
        f"- Python {platform.python_version()}, NumPy {np.__version__} ({blas}), "
        f"numba {numba.__version__}",
        "- dense: `X @ Q.T` (float32 BLAS matmul, O(d²) per vector); block: 32×32 blocks on "
        "gathered columns (O(32·d)); hadamard: FhtKac, 4 rounds (O(d log d)), numba",
        "",
        "| d | hadamard ms | dense ms | block ms | hadamard µs/vec | dense / hadamard "
        "| block / hadamard |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for d, r in results.items():
        h, dn, b = r["hadamard"], r["dense"], r["block"]
        lines.append(
            f"| {d} | {1e3 * h:.1f} | {1e3 * dn:.1f} | {1e3 * b:.1f} | {1e6 * h / n:.2f} "
            f"| {dn / h:.2f} | {b / h:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000, help="vectors per transform call")
    parser.add_argument("--dims", type=int, nargs="+", default=[384, 768, 1024, 1536])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)

    numba.set_num_threads(1)
    results = {}
    with threadpool_limits(limits=1):
        for d in args.dims:
            results[d] = time_dim(d, args.n, args.repeats)
            r = results[d]
            print(
                f"d={d}: " + ", ".join(f"{k} {1e3 * v:.1f} ms" for k, v in r.items()),
                flush=True,
            )
    command = "python " + shlex.join(["benchmarks/speed/transforms.py", *sys.argv[1:]])
    text = render(results, args.n, args.repeats, command)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
