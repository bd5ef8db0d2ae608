"""Dask as bbqlib uses it: the optional import, and one way to run a list of tasks.

Every task of a distributed build goes through :func:`run_tasks`: on a ``distributed.Client``
the tasks are submitted with readable keys (``bbqlib-<stage>-<build>-<i>``, shown on Dask's
dashboard and in its diagnostics) and collected as they finish, with bbqlib's progress bar on
the driver; without a client they run one after another in this process.
"""

from __future__ import annotations

import functools
import os
import pickle
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "require",
    "resolve_client",
    "broadcast",
    "shared_value",
    "SharedFile",
    "run_tasks",
    "WORKER_ENV",
]

#: Environment for worker processes: one numba / BLAS thread each (a worker is one core).
WORKER_ENV = {
    "NUMBA_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}


def require():
    """Import and return ``(dask, distributed)``, or raise naming the pip extra."""
    try:
        import dask
        import distributed
    except ImportError as err:
        raise ImportError(
            "bbqlib.distributed needs Dask: pip install 'bbqlib[dask]' (installs dask and "
            f"distributed); the import failed with: {err}"
        ) from None
    return dask, distributed


def resolve_client(client):
    """``client`` itself, else the current default ``distributed.Client``, else ``None``."""
    if client is not None:
        _, distributed = require()
        if not isinstance(client, distributed.Client):
            raise TypeError(f"client must be a distributed.Client, got {type(client).__name__}")
        return client
    try:
        from distributed import default_client
    except ImportError:
        return None
    try:
        return default_client()
    except ValueError:  # no client in this process
        return None


@dataclass(frozen=True)
class SharedFile:
    """A handle to an object that :func:`broadcast` pickled into the build's staging
    directory; a task gets the object with :func:`shared_value` (read once per worker)."""

    path: str


def broadcast(client, obj, staging):
    """``obj`` for every task of a stage: pickled once into ``staging`` (a directory every
    worker sees) and read once per worker process, or ``obj`` itself without a client.

    Not a scattered future: a scattered object lives only in worker memory, so when the
    worker holding the one copy dies before the others fetched it, the scheduler cannot
    rebuild it and every task that needs it fails (a rare failure of the worker-kill test).
    A file survives any worker. Not ``scatter(broadcast=True)`` either: that waits for
    every worker the scheduler lists, and it hung when a worker had just died.
    """
    if client is None:
        return obj
    path = Path(staging) / f"shared.{secrets.token_hex(8)}.pkl"
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as f:
        pickle.dump(obj, f, protocol=pickle.HIGHEST_PROTOCOL)
    os.replace(tmp, path)
    return SharedFile(str(path))


@functools.lru_cache(maxsize=2)
def _load(path: str):
    with open(path, "rb") as f:
        return pickle.load(f)


def shared_value(obj):
    """Inside a task: the object behind a :class:`SharedFile`, else ``obj`` itself."""
    return _load(obj.path) if isinstance(obj, SharedFile) else obj


class _NoBar:
    def update(self, n: int) -> None:
        pass

    def close(self) -> None:
        pass


def _bar(show: bool, total: int, desc: str):
    if not show:
        return _NoBar()
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="task")


def run_tasks(
    client,
    fn: Callable,
    args: Sequence[tuple],
    *,
    stage: str,
    build: str,
    progress: bool = False,
    on_result: Callable[[int, object], None] | None = None,
) -> list:
    """``[fn(*a) for a in args]``, on the cluster when ``client`` is given.

    Arguments may be Dask collections (e.g. one block of a ``dask.array`` from
    ``to_delayed()``) or handles from :func:`broadcast`: each task then reads its own block on
    the worker. ``on_result(i, value)`` sees each result as it arrives (e.g. to sum partial
    results without holding all of them); the returned list then holds ``None`` in its place.
    """
    import dask

    tasks = [
        dask.delayed(fn, pure=False)(*a, dask_key_name=f"bbqlib-{stage}-{build}-{i}")
        for i, a in enumerate(args)
    ]
    out: list = [None] * len(tasks)

    def take(i, value):
        if on_result is not None:
            on_result(i, value)
        else:
            out[i] = value
        bar.update(1)

    bar = _bar(progress, len(tasks), stage)
    try:
        if client is None:
            for i, task in enumerate(tasks):
                take(i, task.compute(scheduler="sync"))
            return out
        from distributed import as_completed

        futures = client.compute(tasks)
        index = {f.key: i for i, f in enumerate(futures)}
        try:
            for future in as_completed(futures):
                take(index[future.key], future.result())
                future.release()
        except BaseException:
            client.cancel(futures)
            raise
        return out
    finally:
        bar.close()


def set_worker_threads() -> None:
    """Inside a task: numba at the thread count the worker was started with (or 1)."""
    threads = int(os.environ.get("NUMBA_NUM_THREADS", "0") or 0)
    if threads:
        import numba

        numba.set_num_threads(min(threads, numba.config.NUMBA_NUM_THREADS))
