"""Build one IVF directory from a Dask array, partition by partition, on a Dask cluster.

The stages (each a set of tasks, see :mod:`._tasks`):

1. **sample** - seeded row samples gathered to the driver: the quantizer's fit sample (the
   same rows :meth:`bbqlib.IVFIndex.add` fits on) and the clustering sample;
2. **cluster** (driver) - the quantizer is fitted, the sample clustered by
   :func:`~bbqlib.index.clustering.hierarchical_kmeans` to ``cluster_size · sample / n``
   rows per list, so that the full data gives ``cluster_size``;
3. **means** (workers) - every row to its nearest centroid, per-list sums: each centroid
   becomes the mean of all its rows, as the single-process build's last full pass does;
   **split** - lists whose rows exceed ``2 · cluster_size`` are re-clustered on the driver
   from their rows (gathered by tasks) with the single-process build's own
   :func:`~bbqlib.index.ivf.build.split_lists`;
4. **encode** (workers) - nearest centroid again, SOAR spill and its loss, each entry coded
   against its list's centroid by ``quantizer.encode_pairs``, and the prepared float rows
   written at their place in the index's one vector segment;
5. **cap** (driver) - the SOAR spill cap of the single-process build (a list takes at most
   as many spills as it has primary rows, the weakest dropped), over the small per-row arrays;
6. **merge** (workers) - ranges of lists gathered from every partition's entries and written
   at their place in the one posting file, with their CRC32s;
7. **commit** (driver) - header, then ``MANIFEST``: the only step that changes what the
   directory serves.

Nothing is written to ``path`` before the commit but files in a staging directory inside
it; a build that fails leaves the previous index (or, for a new directory, nothing).
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import time
from pathlib import Path

import numpy as np

from ..index.ivf.build import (
    FIT_SAMPLE,
    drop_weakest_spills,
    oversized_lists,
    residual_sample,
    split_lists,
)
from ..index.ivf.staging import staging_folder
from ..packing import lut_block_starts
from ..storage.atomic import LockError, resolve_target
from ..storage.blocks import BLOCK_ROWS, BlockChecksums
from ._dask import broadcast, require, resolve_client, run_tasks
from ._tasks import join_blocks, list_ranges
from .inputs import as_dask_array

__all__ = ["build_ivf", "BuildError", "default_sample"]

log = logging.getLogger(__name__)

#: Sample rows per list for the clustering (as Elasticsearch's k-means samples per cluster).
SAMPLE_PER_LIST = 64
#: Target posting entries per merge task.
MERGE_ENTRIES = 1 << 20
#: Rows of the assignments section written per call.
_ROWS = 1 << 20


class BuildError(RuntimeError):
    """A distributed build failed; the target directory holds what it held before."""


def default_sample(n: int, cluster_size: int) -> int:
    """Clustering sample: ``64`` rows per list of the full build (all rows if fewer)."""
    return int(min(n, max(FIT_SAMPLE, SAMPLE_PER_LIST * -(-n // cluster_size))))


def _check_ids(ids, n: int):
    """Custom ids as int64 [n], or None for the row numbers (the default)."""
    if ids is None:
        return None
    from ..index.ids import check_ids

    ids = check_ids(ids.compute() if hasattr(ids, "compute") else ids, n)
    return None if np.array_equal(ids, np.arange(n)) else ids


def build_ivf(
    X,
    path,
    quantizer=None,
    *,
    ids=None,
    cluster_size: int = 384,
    sample: int | None = None,
    seed: int = 42,
    soar: bool = True,
    store_vectors: bool | str = True,
    refine: bool = True,
    like=None,
    client=None,
    progress: bool | None = None,
):
    """Build an IVF index directory from ``X`` on a Dask cluster; return it opened.

    Parameters
    ----------
    X : dask.array [n, d], NumPy array, or vector file path(s)
        The vectors; see :mod:`bbqlib.distributed.inputs` for files, directories of shards
        and Parquet. Each block is read and processed on a worker; none holds all of ``X``.
    path : str or Path
        The index directory (``docs/ivf-format.md``); it must be visible to every worker
        (a shared filesystem on a real cluster). An index already there is replaced by a new
        generation only when the build succeeds.
    quantizer : Quantizer, optional
        As for :class:`~bbqlib.IVFIndex` (default: 1-bit BBQ, cosine); fitted here on the
        same seeded rows ``IVFIndex.add`` fits on.
    ids : array of int, optional
        The caller's int64 id of each row (NumPy or Dask array; unique, >= 0), stored as
        ``IVFIndex.add(X, ids=...)`` stores them (IVF format 4) and returned by searches;
        default: the row numbers.
    cluster_size : int, default 384
        Target vectors per list.
    sample : int, optional
        Rows clustered on the driver; default :func:`default_sample` (64 per list).
    seed : int, default 42
    soar : bool, default True
        As for :class:`~bbqlib.IVFIndex`.
    store_vectors : bool or {"float32", "float16", "int8"}, default True
        The rerank vectors, as for :class:`~bbqlib.IVFIndex` (``True``: float32); each
        worker converts its rows with the local build's own conversion
        (:func:`bbqlib.search.stored.to_stored`), so the vector file is byte for byte the
        one ``IVFIndex.add`` writes.
    refine : bool, default True
        One pass over all rows moving every centroid to the mean of its rows (stage 3),
        then the re-split of lists above ``2 · cluster_size`` (as ``IVFIndex.add``); without
        it the sample's lists are kept as they are.
    like : IVFIndex or path, optional
        Reuse this index's fitted quantizer and centroids (no sampling, no clustering): the
        shards of one data set built this way share their lists, so a
        :class:`~bbqlib.distributed.ShardedIndex` over them searches like one index.
    client : distributed.Client, optional
        Default: the current client; without one the tasks run in this process.
    progress : bool, optional
        bbqlib's progress bar per stage on the driver (Dask's dashboard shows the tasks,
        named ``bbqlib-<stage>-<build>-<i>``); default on from 1,000,000 rows.

    Returns
    -------
    IVFIndex
        The new index, opened from ``path``.

    Raises
    ------
    BuildError
        A stage failed (e.g. a task failed on every retry); ``path`` is as it was.
    bbqlib.LockError
        The directory's lock cannot be taken, or another writer held it past the lock
        timeout (``LockTimeoutError``); ``path`` is as it was.
    """
    require()
    from ..index.ivf import IVFIndex

    X = as_dask_array(X)
    n, d = (int(s) if s == s else -1 for s in X.shape)
    if n < 0:
        raise ValueError("X has unknown chunk sizes; call X.compute_chunk_sizes() first")
    if n == 0:
        raise ValueError("X is empty (0 rows); pass at least one vector")
    if like is not None:
        if quantizer is not None:
            raise ValueError("pass either a quantizer or like=, not both: like= brings its own")
        like = IVFIndex.coerce(like)
        if like.dim_ != d:
            raise ValueError(f"X has dimension {d}, the index given as like= has {like.dim_}")
        quantizer = like.quantizer
    index = IVFIndex(quantizer, cluster_size=cluster_size, seed=seed, soar=soar,
                     store_vectors=store_vectors)  # fmt: skip
    ids = _check_ids(ids, n)
    if sample is None:
        sample = default_sample(n, index.cluster_size)
    elif isinstance(sample, bool) or not isinstance(sample, (int, np.integer)) or sample < 1:
        raise ValueError(f"sample must be a positive int (rows), got {sample!r}")
    client = resolve_client(client)
    show = n >= 1_000_000 if progress is None else bool(progress)
    path = resolve_target(path)  # a symlinked directory: build in its target
    build = _Build(index, X, path, int(min(sample, n)), refine, client, show)
    build.ids = ids
    if like is not None:
        build.centroids = np.array(like.centroids_)
    return build.run()


class _Build:
    def __init__(self, index, X, path: Path, sample: int, refine: bool, client, show: bool):
        self.index, self.X, self.path = index, X, path
        self.sample, self.refine, self.client, self.show = sample, refine, client, show
        self.n, self.d = (int(s) for s in X.shape)
        self.token = secrets.token_hex(4)
        self.centroids = None
        self.oversized = np.empty(0, dtype=np.int64)
        self.ids = None
        self.vectors = None
        self.timings: dict[str, float] = {}
        self.blocks = list(X.to_delayed().ravel())
        self.rows = np.zeros(len(self.blocks) + 1, dtype=np.int64)
        np.cumsum(X.chunks[0], out=self.rows[1:])

    def mark(self, stage: str) -> str:
        """Log the end of the previous stage (wall seconds) and start ``stage``."""
        now = time.perf_counter()
        if getattr(self, "_stage", None) is not None:
            self.timings[self._stage] = now - self._t0
            log.info("bbqlib build %s: %s took %.1f s", self.token, self._stage, now - self._t0)
        self._stage, self._t0 = stage, now
        return stage

    def tasks(self, fn, args, stage, on_result=None):
        return run_tasks(self.client, fn, args, stage=stage, build=self.token,
                         progress=self.show, on_result=on_result)  # fmt: skip

    # ------------------------------------------------------------------ stages
    def run(self):
        from ..index.ivf import IVFIndex
        from ..index.ivf import storage as ST

        created = not self.path.exists()
        self.path.mkdir(parents=True, exist_ok=True)
        self._staging = staging_folder(self.path, self.token, ST.directory_lock)  # locked
        self.staging = self._staging.__enter__()
        moved: list[Path] = []
        stage = self.mark("sample")
        try:
            C, S_assign, S = self.centroids, None, None
            if C is None:
                fit_rows, km_rows = self.sample_rows()
                q = self.index.quantizer
                q.fit(fit_rows)
                del fit_rows
                stage = self.mark("cluster")
                C, S_assign, S = self.cluster(km_rows)
                del km_rows
                if self.refine:
                    stage = self.mark("means")
                    C, S_assign = self.means(C, S)
                    if self.oversized.size:
                        stage = self.mark("split")
                        C = self.split(C)
            stage = self.mark("encode")
            assigner, results = self.encode(C, S, S_assign)
            del S
            stage = self.mark("merge")
            # The directory's lock from the generation number to MANIFEST: no other writer
            # takes that number, and no open removes the files moved in as a dead writer's.
            with ST.directory_lock(self.path):
                postings = self.merge(assigner, results)
                stage = self.mark("commit")
                self.commit(assigner.C, results, postings, moved)
        except BaseException as err:
            self.abort(created, moved)
            if isinstance(err, (KeyboardInterrupt, ValueError, TypeError, LockError)):
                raise
            raise BuildError(
                f"distributed IVF build failed in stage {stage!r} ({type(err).__name__}: "
                f"{err}); {self.path} holds "
                + ("nothing (removed)" if created else "the index it held before")
            ) from err
        self.mark(None)
        self._staging.__exit__(None, None, None)  # removed, its lock released
        return IVFIndex.open(self.path)

    def abort(self, created: bool, moved: list[Path]) -> None:
        self._staging.__exit__(None, None, None)
        for f in moved:
            f.unlink(missing_ok=True)
        if created and not (self.path / "MANIFEST").exists():
            shutil.rmtree(self.path, ignore_errors=True)

    def sample_rows(self):
        """The quantizer's fit sample (``IVFIndex.add``'s rows) and the clustering sample."""
        from ._tasks import gather_rows

        seed = self.index.seed
        n = self.n
        fit = np.arange(n) if n <= FIT_SAMPLE else np.sort(
            np.random.default_rng(seed).choice(n, FIT_SAMPLE, replace=False))  # fmt: skip
        km = np.arange(n) if self.sample >= n else np.sort(
            np.random.default_rng(seed + 1).choice(n, self.sample, replace=False))  # fmt: skip
        args = []
        which = []
        for p, block in enumerate(self.blocks):
            lo, hi = self.rows[p], self.rows[p + 1]
            f = fit[(fit >= lo) & (fit < hi)] - lo
            k = km[(km >= lo) & (km < hi)] - lo
            both = np.union1d(f, k)
            if both.size:
                args.append((block, both))
                which.append((np.searchsorted(both, f), np.searchsorted(both, k)))
        parts = self.tasks(gather_rows, args, "sample")
        fit_rows = np.concatenate([r[w[0]] for r, w in zip(parts, which, strict=True)])
        km_rows = np.concatenate([r[w[1]] for r, w in zip(parts, which, strict=True)])
        return fit_rows, km_rows

    def cluster(self, km_rows):
        """Centroids of the clustering sample (in the quantizer's space)."""
        from ..index.clustering import TARGET_SIZE_RANGE, hierarchical_kmeans
        from ._tasks import prepared

        q = self.index.quantizer
        S = q.transform_rows(prepared(km_rows, q, self.d))
        target = round(self.index.cluster_size * S.shape[0] / self.n)
        target = int(min(max(target, TARGET_SIZE_RANGE[0]), TARGET_SIZE_RANGE[1]))
        C, assign = hierarchical_kmeans(S, target, seed=self.index.seed, progress=self.show)
        return C, assign, S

    def means(self, C, S):
        """One full pass: each centroid moves to the mean of all its rows (empty: dropped)."""
        from ._assign import make_assigner
        from ._tasks import centroid_sums

        a = make_assigner(C, self.index.seed)
        shared = broadcast(
            self.client, {"quantizer": self.index.quantizer, "assigner": a}, self.staging
        )
        sums = np.zeros(C.shape, dtype=np.float64)
        counts = np.zeros(C.shape[0], dtype=np.int64)
        self.first_assign = np.empty(self.n, dtype=np.int32)

        def add(p, value):
            assign, s, c = value
            self.first_assign[self.rows[p] : self.rows[p + 1]] = assign
            sums.__iadd__(s)
            counts.__iadd__(c)

        args = [(b, shared, p, self.d) for p, b in enumerate(self.blocks)]
        self.tasks(centroid_sums, args, "means", on_result=add)
        keep = counts > 0
        C = C.copy()
        C[keep] = (sums[keep] / counts[keep, None]).astype(np.float32)
        remap = np.cumsum(keep, dtype=np.int32) - 1
        self.first_assign = remap[self.first_assign]
        C = np.ascontiguousarray(C[keep])
        self.oversized = oversized_lists(counts[keep], self.index.cluster_size)
        return C, None

    def split(self, C):
        """Re-cluster the lists above ``SPLIT_FACTOR · cluster_size`` (after the means pass),
        as the single-process build does after its clustering (:func:`split_lists`): their
        rows are gathered to the driver (a small share of ``X``: lists that large are rare)."""
        from ._tasks import gather_rows, prepared

        big = self.oversized
        members = np.flatnonzero(np.isin(self.first_assign, big))
        args = []
        for p, block in enumerate(self.blocks):
            lo, hi = np.searchsorted(members, self.rows[p : p + 2])
            if hi > lo:
                args.append((block, members[lo:hi] - self.rows[p]))
        parts = self.tasks(gather_rows, args, "split")
        q = self.index.quantizer
        Wm = q.transform_rows(prepared(np.concatenate(parts), q, self.d))
        del parts
        C, new_list = split_lists(C, big, Wm, self.first_assign[members],
                                  self.index.cluster_size, self.index.seed)  # fmt: skip
        self.first_assign[members] = new_list
        log.info("bbqlib build %s: %d lists above the split limit (%d rows) became %d",
                 self.token, big.size, members.size, np.unique(new_list).size)  # fmt: skip
        return np.ascontiguousarray(C)

    def encode(self, C, S, S_assign):
        """Fit the residual grids, then assign, spill and encode every partition."""
        from ._assign import make_assigner
        from ._tasks import BuildState, assign_and_encode

        index = self.index
        q = index.quantizer
        a = make_assigner(C, index.seed)
        if S is not None:  # else: the quantizer of like= (fitted to its residuals already)
            m = min(S.shape[0], 65_536)
            primary_s = a.nearest(S[:m], None if S_assign is None else S_assign[:m])
            q.fit_residuals(residual_sample(S[:m], a.C, primary_s, seed=index.seed))
        vectors, offset, kind = None, 0, index.store_vectors or None
        if kind:  # one .npy for all rows (the local writer's header): workers fill it in place
            from ..index.ivf.segments import segment_header
            from ..search.stored import stored_row_bytes

            self.vectors = self.staging / f"vectors.{secrets.token_hex(8)}.npy"
            header = segment_header(self.n, self.d, kind)
            with open(self.vectors, "wb") as f:
                f.write(header)
                f.truncate(len(header) + self.n * stored_row_bytes(kind, self.d))
            vectors, offset = str(self.vectors), len(header)
        state = BuildState(q, a, index.soar, 1.0, str(self.staging), vectors, offset, kind)
        shared = broadcast(self.client, state, self.staging)
        first = getattr(self, "first_assign", None)
        args = [
            (b, shared, p, self.d, int(self.rows[p]),
             None if first is None else first[self.rows[p] : self.rows[p + 1]])
            for p, b in enumerate(self.blocks)
        ]  # fmt: skip
        results = self.tasks(assign_and_encode, args, "encode")
        self.first_assign = None
        return a, results

    def merge(self, a, results):
        """SOAR cap over all rows, then lists merged into one posting file by the workers."""
        from ..index.ivf import storage as ST
        from ..storage.streamed import StreamedContainer, crc32_combine, write_rows
        from ._tasks import MergePlan, merge_lists

        K = a.n_lists
        primary = np.concatenate([r["primary"] for r in results])
        secondary = np.concatenate([r["secondary"] for r in results])
        if self.index.soar and K > 1:
            cost = np.concatenate([r["cost"] for r in results])
            room = np.bincount(primary, minlength=K)
            capped = drop_weakest_spills(secondary, cost, room)
            del cost
        else:
            capped = secondary
        dropped = (secondary >= 0) & (capped < 0)
        self.assignments = np.stack([primary, capped], axis=1).astype(np.int32)
        del primary, secondary, capped
        sizes = np.bincount(self.assignments[:, 0], minlength=K) + np.bincount(
            self.assignments[:, 1][self.assignments[:, 1] >= 0], minlength=K
        )
        start = np.zeros(K + 1, dtype=np.int64)
        np.cumsum(sizes, out=start[1:])
        E = int(start[-1])
        q = self.index.quantizer
        doc_bytes = q.encoding_.doc_bytes(self.d)
        planes = q.encoding_.doc_planes > 0  # plane docs: lookup-table blocks stored too
        width = q.pair_factor_width
        sections = [("codes", np.uint8, (E, doc_bytes)), ("factors", np.float32, (E, width)),
                    ("ids", np.int32, (E,))]  # fmt: skip
        if planes:
            n_blocks = int(lut_block_starts(start)[-1])
            sections.append(("lut_codes", np.uint8, (n_blocks, doc_bytes * 32)))
        sections.append(("assignments", np.int32, (self.n, 2)))
        if self.ids is not None:
            sections.append(("row_ids", np.int64, (self.n,)))
        gen = _next_generation(self.path)
        container = StreamedContainer(
            self.path / f"postings.{gen:06d}.bbq", ST.POSTINGS_KIND, ST.postings_meta(gen),
            sections, partial=self.staging / "postings.partial",
        )  # fmt: skip
        container.allocate()
        offsets = np.zeros((len(results), K + 1), dtype=np.int64)
        for p, r in enumerate(results):
            np.cumsum(r["counts"], out=offsets[p, 1:])
        drops = [dropped[self.rows[p] : self.rows[p + 1]] for p in range(len(results))]
        plan = MergePlan(str(self.staging), container, offsets, self.rows, drops, start, planes)
        shared = broadcast(self.client, plan, self.staging)
        ranges = list_ranges(sizes, MERGE_ENTRIES)
        parts = self.tasks(merge_lists, [(shared, j0, j1) for j0, j1 in ranges], "merge")
        crc = np.concatenate([p[0] for p in parts])
        lut_crc = np.concatenate([p[1] for p in parts]) if planes else None
        section_crc = {}
        for name in [s[0] for s in sections if s[0] not in ("assignments", "row_ids")]:
            value = 0
            for p in parts:
                piece, nbytes = p[2][name]
                value = crc32_combine(value, piece, nbytes)
            section_crc[name] = value
        rows_of = {"assignments": self.assignments, "row_ids": self.ids}
        for name in [s[0] for s in sections if s[0] in rows_of]:
            value = 0
            for r0 in range(0, self.n, _ROWS):
                block = rows_of[name][r0 : r0 + _ROWS]
                value = crc32_combine(value, write_rows(container, name, r0, block),
                                      block.nbytes)  # fmt: skip
            section_crc[name] = value
        return container, section_crc, start, crc, lut_crc

    def commit(self, C, results, postings, moved) -> None:
        """Files into ``path``, then header and MANIFEST, under the directory's lock."""
        from ..index.ids import RowIds
        from ..index.ivf import files as F
        from ..index.ivf import storage as ST
        from ..index.ivf.postings import Postings
        from ..storage.container import read_container

        with ST.directory_lock(self.path):  # an open must not take them for leftovers
            container, section_crc, start, crc, lut_crc = postings
            segments = []
            if self.vectors is not None:
                from ..storage.streamed import crc32_combine

                vec_crc = 0
                for r in results:
                    vec_crc = crc32_combine(vec_crc, *r["vectors_crc"])
                checks = BlockChecksums(join_blocks(results, self.n), BLOCK_ROWS, None)
                target = self.path / self.vectors.name
                with open(self.vectors, "r+b") as f:
                    os.fsync(f.fileno())
                self.vectors.replace(target)
                moved.append(target)
                mapped = np.load(target, mmap_mode="r").view(np.ndarray)
                checks.file = target
                segments.append(ST.Segment(mapped, target, vec_crc, checks))
            moved.append(container.path)
            container.finish(section_crc)
            _, _, arrays = read_container(container.path, mmap=True, verify=False)
            index = self.index
            index._ntotal = self.n
            index._set_centroids(C)
            index._set_deleted(np.zeros(self.n, dtype=bool))
            index._segments = segments
            index._assign = arrays["assignments"]
            index._row_ids = RowIds(self.n, arrays.get("row_ids"))  # format 4: the caller's ids
            index._postings = Postings(
                arrays["codes"], arrays["factors"], arrays["ids"], start, crc=crc,
                lut_crc=lut_crc, source=container.path,
            )  # fmt: skip
            F.save(index, self.path)


def _next_generation(path: Path) -> int:
    from ..index.ivf import storage as ST

    manifest = ST._read_manifest(path)
    return (int(manifest["generation"]) if manifest else 0) + 1
