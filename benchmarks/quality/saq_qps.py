"""SAQ's search throughput at fixed recall, flat and IVF, next to RaBitQ (bbqlib, rabitqlib).

The ``--part qps`` of ``benchmarks/quality/saq.py`` (issue 15's last rows):

1. **Flat**, single thread, k = 10, all queries in one call: ``FlatIndex(SAQQuantizer(bits))``
   (its default scan: two-pass 4-bit lookup-table + float re-score) vs
   ``FlatIndex(RaBitQQuantizer(bits))`` (its default query bits), each with float32 rerank
   vectors over a sweep of ``oversample``; recall@10 of each setting, then the QPS of the
   fastest setting reaching recall@10 0.90 and 0.95 and the ratio SAQ / RaBitQ.
2. **IVF**, the same with ``IVFIndex`` (same ``cluster_size``, SOAR on), sweeping
   ``visit_percentage`` x ``oversample`` (and ``rerank=False``): SAQ with float queries (its
   default list scan, and the same index forced to two passes), and SAQ and RaBitQ with
   ``query_bits=4`` ("q4": RaBitQ's lookup-table scan of issue 11, the ratio's base; SAQ's
   one 4-bit pass without float re-score).
3. **rabitqlib** ``IvfIndex`` (``nbits = bits``, ``RaBitQKMeans`` centroids, as many lists as
   bbqlib's IVF, no rerank: rabitqlib has none below 32 bits) sweeping ``nprobe``, next to
   bbqlib's IVF SAQ without rerank (its raw estimate) at the visited share of vectors that
   rabitqlib's ``nprobe`` gives; QPS and recall at the same targets.

Timings: builds and recall passes run at the lowest CPU priority; every timing loop holds
``$LOCKS/bench.lock`` (when present) at normal priority, the methods of one table
interleaved, medians of ``repeats`` rounds.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path

import numpy as np

import bbqlib
from bbqlib.analysis import recall_at_k

#: A lock file shared by the runner's timed benchmarks (``BBQLIB_BENCH_LOCK``; unset: none).
BENCH_LOCK = Path(os.environ.get("BBQLIB_BENCH_LOCK", "/nonexistent/bench.lock"))
TARGETS = (0.90, 0.95)
OVERSAMPLE = (1.0, 1.5, 2.0, 3.0, 5.0, 8.0, 12.0)
VISITS = (0.5, 1.0, 2.0, 4.0, 8.0)
IVF_OVERSAMPLE = (None, 2.0, 4.0, 8.0)
NPROBE = (2, 4, 8, 16, 32)


def _load() -> float:
    return os.getloadavg()[0]


@contextlib.contextmanager
def bench_lock():
    """Hold the shared benchmark lock (builds inside it stay at nice 19, see :func:`_time`)."""
    f = open(BENCH_LOCK, "a") if BENCH_LOCK.parent.exists() else None  # noqa: SIM115
    try:
        if f is not None:
            fcntl.flock(f, fcntl.LOCK_EX)
        yield
    finally:
        if f is not None:
            fcntl.flock(f, fcntl.LOCK_UN)
            f.close()


def _nice() -> None:
    os.setpriority(os.PRIO_PROCESS, 0, 19)


def _time(runs: dict, repeats: int) -> tuple[dict, str]:
    """Median seconds per run (interleaved rounds, normal priority; call it holding
    :func:`bench_lock`), and the 1-min load average before and after."""
    with contextlib.suppress(PermissionError):
        os.setpriority(os.PRIO_PROCESS, 0, 0)
    try:
        load0 = _load()
        for f in runs.values():  # warm-up
            f()
        times = {k: [] for k in runs}
        for _ in range(repeats):
            for k, f in runs.items():
                t0 = time.perf_counter()
                f()
                times[k].append(time.perf_counter() - t0)
        load = f"{load0:.1f}-{_load():.1f}"
    finally:
        _nice()
    return {k: float(np.median(v)) for k, v in times.items()}, load


def _at_target(points: list[dict], target: float):
    """The fastest point (max QPS) with recall >= target, or None."""
    ok = [p for p in points if p["recall"] >= target]
    return max(ok, key=lambda p: p["qps"]) if ok else None


def _summary(method_points: dict, base: str) -> list[dict]:
    rows = []
    for t in TARGETS:
        best = {m: _at_target(pts, t) for m, pts in method_points.items()}
        ref = best.get(base)
        for m, b in best.items():
            rows.append(
                {
                    "target": t,
                    "method": m,
                    "qps": None if b is None else b["qps"],
                    "recall": None if b is None else b["recall"],
                    "setting": "not reached" if b is None else b["setting"],
                    "vs_base": None if b is None or ref is None else b["qps"] / ref["qps"],
                    "bytes": None if b is None else b.get("bytes"),
                }
            )
    return rows


def _pair(index_cls, bits, sim) -> dict:
    """SAQ and bbqlib's RaBitQ at the same bits, in the same kind of index."""
    saq = bbqlib.SAQQuantizer(bits=float(bits), similarity=sim)
    rq = bbqlib.RaBitQQuantizer(bits=int(bits), similarity=sim)
    return {f"SAQ {bits:g}b": index_cls(saq), f"RaBitQ {bits:g}b": index_cls(rq)}


#: Suffix of the method that scans SAQ's IVF with the two-pass scan (same index): 4-bit pass,
#: float re-score of the entries that can still reach the heap, whatever the rerank.
TWO_PASS = " two-pass scan"


def _ivf_search(ix, Q, vp, kw, scan):
    """``ix.search`` with SAQ's IVF list scan set to ``scan`` for the call."""
    from bbqlib.quantizers.saq import lists as saq_ivf

    old, saq_ivf.IVF_SCAN = saq_ivf.IVF_SCAN, scan
    try:
        return ix.search(Q, 10, visit_percentage=vp, **kw)
    finally:
        saq_ivf.IVF_SCAN = old


def _ivf_methods(bits, sim) -> dict:
    """IVF indexes at ``bits``: SAQ (float queries, its default list scan: one 4-bit pass when
    the search reranks more than k candidates, else two passes), the same index forced to
    the two-pass scan, SAQ and RaBitQ with 4-bit queries (RaBitQ's: the lookup-table scan of
    issue 11, the ratio's base; SAQ's: one 4-bit pass). RaBitQ at its default query bits and
    SAQ's float-table scan were measured in commit a6a6bde (0.02-0.03x and 0.13-0.20x the
    base) and are left out to keep the bench lock's hold short."""
    out = {f"SAQ {bits:g}b": bbqlib.IVFIndex(bbqlib.SAQQuantizer(bits=float(bits), similarity=sim))}
    out[f"SAQ {bits:g}b{TWO_PASS}"] = out[f"SAQ {bits:g}b"]
    out[f"SAQ {bits:g}b q4"] = bbqlib.IVFIndex(
        bbqlib.SAQQuantizer(bits=float(bits), query_bits=4, similarity=sim)
    )
    out[f"RaBitQ {bits:g}b q4"] = bbqlib.IVFIndex(
        bbqlib.RaBitQQuantizer(bits=int(bits), query_bits=4, similarity=sim)
    )
    return out


def timed(steps, repeats) -> None:
    """Drive timing steps: generators that build and measure recall (nice 19), then yield
    ``runs`` (a dict of callables) and receive ``(median seconds, load)`` for them. Every
    generator is advanced to its first request first; then all requests are timed under one
    hold of the bench lock (the generators' work between requests is bookkeeping only)."""
    first = [(g, next(g)) for g in steps]
    with bench_lock():
        for g, runs in first:
            while True:
                try:
                    runs = g.send(_time(runs, repeats))
                except StopIteration:
                    break


def flat_rows(ds, bits_list, repeats, log, points, summary):
    """Timing steps of the flat tables (rows appended to ``points`` / ``summary``)."""
    return [_flat_bits(ds, bits, repeats, log, points, summary) for bits in bits_list]


def _flat_bits(ds, bits, repeats, log, points, summary):
    Q, sim = ds.queries, ds.similarity
    _nice()
    idx = _pair(bbqlib.FlatIndex, bits, sim)
    runs, meta = {}, {}
    for name, ix in idx.items():
        ix.add(ds.base)
        for os_ in OVERSAMPLE:
            key = (name, os_)
            runs[key] = lambda ix=ix, os_=os_: ix.search(Q, 10, oversample=os_)
            meta[key] = recall_at_k(runs[key]()[1], ds.gt_ids, 10)
    med, load = yield runs
    per = {name: [] for name in idx}
    for (name, os_), t in med.items():
        ix = idx[name]
        p = {
            "bits": bits, "method": name, "setting": f"oversample {os_:g}",
            "recall": meta[(name, os_)], "qps": len(Q) / t, "load": load,
            "bytes": ix.quantizer.encode(ds.base[:1]).bytes_per_vector,
            "query_bits": ix.quantizer.encoding_.query_bits,
        }  # fmt: skip
        per[name].append(p)
        points.append(p)
    summary += [dict(r, bits=bits, load=load) for r in _summary(per, f"RaBitQ {bits:g}b")]
    log(f"flat {bits}: {summary[-2 * len(idx) :]}")


def ivf_rows(ds, bits_list, repeats, log, rabitqlib, points, summary, peer_rows):
    """Timing steps of the IVF tables (and rabitqlib's)."""
    return [_ivf_bits(ds, bits, repeats, log, rabitqlib, points, summary, peer_rows)
            for bits in bits_list]  # fmt: skip


def _ivf_bits(ds, bits, repeats, log, rabitqlib, points, summary, peer_rows):
    Q, sim = ds.queries, ds.similarity
    _nice()
    idx = _ivf_methods(bits, sim)
    runs, meta = {}, {}
    for name, ix in idx.items():
        if len(ix) == 0:
            t0 = time.perf_counter()
            ix.add(ds.base)
            log(f"ivf {name} built in {time.perf_counter() - t0:.0f} s (nice 19)")
        scan = "two-pass" if name.endswith(TWO_PASS) else "auto"
        for vp in VISITS:
            for os_ in (*IVF_OVERSAMPLE, "raw"):
                kw = {"rerank": False} if os_ == "raw" else {"oversample": os_}
                key = (name, vp, os_)
                runs[key] = lambda ix=ix, vp=vp, kw=kw, sc=scan: _ivf_search(ix, Q, vp, kw, sc)
                meta[key] = recall_at_k(runs[key]()[1], ds.gt_ids, 10)
    peer = _rabitqlib_rows(ds, bits, idx[f"SAQ {bits:g}b"], log) if rabitqlib else None
    peer_runs = next(peer) if peer is not None else None  # its build, before any timing
    med, load = yield runs
    per = {name: [] for name in idx}
    raw = {name: [] for name in idx}
    for (name, vp, os_), t in med.items():
        ix = idx[name]
        setting = f"visit {vp:g}%, " + (
            "no rerank" if os_ == "raw" else f"oversample {'default' if os_ is None else os_}"
        )
        p = {
            "bits": bits, "method": name, "setting": setting, "visit": vp,
            "recall": meta[(name, vp, os_)], "qps": len(Q) / t, "load": load,
            "bytes": ix.bytes_per_entry,
        }  # fmt: skip
        (raw if os_ == "raw" else per)[name].append(p)
        points.append(p)
    summary += [dict(r, bits=bits, load=load) for r in _summary(per, f"RaBitQ {bits:g}b q4")]
    log(f"ivf {bits}: {summary[-2 * len(idx) :]}")
    if peer is not None:
        try:
            peer.send((yield peer_runs))
        except StopIteration as done:
            peer_rows += done.value


def _rabitqlib_rows(ds, bits, saq_ix, log):
    from engines import peers

    _nice()
    Q = ds.queries
    K = saq_ix._postings.n_lists
    t0 = time.perf_counter()
    peer = peers.rabitqlib_ivf(ds.base, ds.similarity, nlist=K, bits=int(bits))
    log(f"rabitqlib IvfIndex nbits={bits} nlist={K} built in {time.perf_counter() - t0:.0f} s")
    runs, rec = {}, {}
    for npb in NPROBE:
        key = ("rabitqlib", npb)
        runs[key] = lambda npb=npb: peer.set_search_params(nprobe=npb).search(Q, 10)
        rec[key] = recall_at_k(runs[key]()[1], ds.gt_ids, 10)
    for vp in VISITS:
        for os_ in ("raw", None):
            kw = {"rerank": False} if os_ == "raw" else {}
            key = ("saq", vp, os_)
            runs[key] = lambda vp=vp, kw=kw: saq_ix.search(Q, 10, visit_percentage=vp, **kw)
            rec[key] = recall_at_k(runs[key]()[1], ds.gt_ids, 10)
    med, load = yield runs
    rows = []
    for key, t in med.items():
        if key[0] == "rabitqlib":
            setting = f"nprobe {key[1]} of {K} lists (~{100 * key[1] / K:.1f}% of lists)"
            name, nbytes = f"rabitqlib IvfIndex {bits}b", peer.bytes_per_vector
        else:
            rr = "no rerank" if key[2] == "raw" else "default rerank"
            setting = f"visit {key[1]:g}% of vectors, {rr}"
            name, nbytes = f"bbqlib IVF SAQ {bits:g}b", saq_ix.bytes_per_entry
        rows.append(
            {
                "bits": bits,
                "method": name,
                "setting": setting,
                "recall": rec[key],
                "qps": len(Q) / t,
                "bytes": nbytes,
                "load": load,
            }  # fmt: skip
        )
    log(f"rabitqlib {bits}: {rows}")
    return rows


# ----------------------------------------------------------------------------- entry point
def main(args, argv, default_out: Path, notes: list[str]) -> None:
    """``quality/saq.py --part qps``: every data set of ``args.datasets``, one result file."""
    import shlex
    import sys

    import common

    started = time.time()

    def log(msg):
        print(f"[{time.time() - started:6.0f}s load {_load():.1f}] {msg}", flush=True)

    out = default_out if args.out.name == "saq.md" else args.out
    sections = []
    for name in args.datasets:
        ds = common.load_dataset(name, args.queries)
        sections += run(ds, args.qps_bits, args.repeats, log, ivf=not args.no_ivf,
                        rabitqlib=not args.no_rabitqlib)  # fmt: skip
    cmd = "python benchmarks/quality/saq.py " + " ".join(
        shlex.quote(a) for a in (argv or sys.argv[1:])
    )
    common.write_result(out, "SAQ search throughput at fixed recall (flat, IVF, rabitqlib)",
                         cmd.strip(), sections, notes + NOTES)  # fmt: skip
    log(f"wrote {out}")


# ----------------------------------------------------------------------------- tables
def run(ds, bits_list, repeats, log, *, ivf=True, rabitqlib=True) -> list[str]:
    """Every table of this part for one data set (markdown sections)."""
    import common

    head = f"{ds.name} ({ds.similarity}, {ds.queries.shape[0]} queries, n = {ds.n}, d = {ds.d})"
    out = []
    with common.single_thread():
        fp, fs, ip, is_, peer = [], [], [], [], []
        steps = flat_rows(ds, bits_list, repeats, log, fp, fs)
        if ivf:
            steps += ivf_rows(ds, bits_list, repeats, log, rabitqlib, ip, is_, peer)
        timed(steps, repeats)  # builds first (nice 19), then every timing in one hold of the lock
        out.append(_summary_md(f"Flat, QPS at recall@10 targets, {head}", fs))
        out.append(_points_md(f"Flat sweep, {head}", fp))
        if ivf:
            points, summary = ip, is_
            out.append(_summary_md(f"IVF, QPS at recall@10 targets, {head}", summary, "RaBitQ q4"))
            out.append(_points_md(f"IVF sweep, {head}", points))
            if peer:
                out.append(_points_md(f"IVF SAQ vs rabitqlib IvfIndex, {head}", peer))
    return out


def _summary_md(title, rows, base="RaBitQ") -> str:
    t = _common_table(
        rows,
        [
            ("target", "recall@10 target", ".2f"),
            ("bits", "bits/dim"),
            ("method", "method"),
            ("qps", "QPS", ",.0f"),
            ("vs_base", f"QPS / {base}", ".2f"),
            ("recall", "recall@10"),
            ("setting", "fastest setting reaching it"),
            ("bytes", "bytes/vector"),
            ("load", "load avg"),
        ],
    )
    return f"### {title}\n\n{t}"


def _points_md(title, rows) -> str:
    t = _common_table(
        rows,
        [
            ("bits", "bits/dim"),
            ("method", "method"),
            ("setting", "setting"),
            ("recall", "recall@10"),
            ("qps", "QPS", ",.0f"),
            ("bytes", "bytes/vector"),
            ("load", "load avg"),
        ],
    )
    return f"### {title}\n\n{t}"


def _common_table(rows, cols) -> str:
    import common

    return common.markdown_table(rows, cols)


NOTES = [
    "QPS: all queries in one `search` call, k = 10, single thread; each table's methods "
    "and settings are timed in interleaved rounds (median of `--repeats`) while holding "
    "$LOCKS/bench.lock; builds and recall passes ran at nice 19 outside the lock.",
    "Targets: the fastest swept setting whose recall@10 reaches 0.90 / 0.95 ('not reached': "
    "no swept setting did). QPS / RaBitQ compares with bbqlib's RaBitQQuantizer at the same "
    "bits and target (its default query bits: 4-bit queries through the AVX2 lookup-table "
    "scan).",
    "IVF: QPS / RaBitQ q4 compares with bbqlib's RaBitQQuantizer(bits, query_bits=4) in "
    "the same IVF (its AVX2 lookup-table list scan, the fastest bbqlib IVF configuration). "
    "'SAQ q4' is SAQQuantizer(bits, query_bits=4) (one 4-bit pass); plain 'SAQ' (float "
    "queries) takes its default list scan: one 4-bit pass when the exact rerank picks k of "
    "more than k candidates, two passes (4-bit pass, float re-score) otherwise; 'SAQ "
    "two-pass scan' is the same index always scanned with two passes. RaBitQ at its default "
    "query bits and SAQ's float-table scan: see this file at commit a6a6bde.",
    "IVF bytes/vector: one posting entry (code + factors + 4-byte row); SOAR stores about 2 "
    "entries per vector; the float32 rerank vectors are extra for both. rabitqlib: its saved "
    "file / n (ids and centroids included), no rerank.",
]
