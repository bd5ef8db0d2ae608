"""Encode a Dask array with a fitted quantizer: codes and corrections, block by block."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ._dask import require
from .inputs import as_dask_array

__all__ = ["encode"]


def _encode_block(quantizer, block):
    return quantizer.encode(np.asarray(block))


def _write_block(quantizer, block, directory: str, part: int) -> int:
    enc = quantizer.encode(np.asarray(block))
    base = Path(directory)
    for name, arr in (("codes", enc.codes), ("corrections", enc.corrections)):
        final = base / f"part-{part:05d}.{name}.npy"
        tmp = base / f".part-{part:05d}.{name}.{os.getpid()}.tmp.npy"
        np.save(tmp, arr)
        os.replace(tmp, final)
    return len(enc)


def encode(quantizer, X, *, path=None, client=None):
    """Codes and corrections of every row of ``X``, bit-identical to ``quantizer.encode``.

    Parameters
    ----------
    quantizer : Quantizer
        A fitted bbqlib quantizer; it is one node of the task graph, so it travels to each
        worker once.
    X : dask.array [n, d], NumPy array, or vector file path(s)
        See :func:`bbqlib.distributed.inputs.as_dask_array`.
    path : str or Path, optional
        Write each block's ``part-NNNNN.codes.npy`` and ``part-NNNNN.corrections.npy`` into
        this directory (visible to the workers) instead of returning lazy arrays.
    client : distributed.Client, optional
        With ``path``: the client that runs the writes (default: the current one, else
        Dask's default scheduler).

    Returns
    -------
    (codes, corrections) : two dask.array
        ``codes`` uint8 [n, doc_bytes] and ``corrections`` (the quantizer's structured
        record) [n], lazy; computing both together encodes each block once. With ``path``:
        the number of rows written.

    Examples
    --------
    >>> import numpy as np, bbqlib, dask.array as da
    >>> from bbqlib.distributed import encode
    >>> X = np.random.default_rng(0).normal(size=(1000, 16)).astype(np.float32)
    >>> q = bbqlib.BBQQuantizer(bits=1, similarity="euclidean").fit(X)
    >>> codes, corr = encode(q, da.from_array(X, chunks=(300, 16)))
    >>> bool((codes.compute() == q.encode(X).codes).all())
    True
    """
    dask, _ = require()
    import dask.array as da

    if not getattr(quantizer, "is_fitted", False):
        raise ValueError("quantizer must be a fitted bbqlib quantizer; call fit(X) first")
    X = as_dask_array(X)
    if X.shape[1] != quantizer.dim_:
        raise ValueError(
            f"X has dimension {X.shape[1]}, the quantizer was fitted on {quantizer.dim_}"
        )
    q = dask.delayed(quantizer, pure=True)
    blocks = X.to_delayed().ravel()
    if path is not None:
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        tasks = [dask.delayed(_write_block)(q, b, str(path), i) for i, b in enumerate(blocks)]
        if client is not None:
            return int(sum(client.gather(client.compute(tasks))))
        return int(sum(dask.compute(*tasks)))
    d = quantizer.dim_  # a unit row: valid for every similarity (dot_product wants unit rows)
    probe = quantizer.encode(np.full((1, d), 1.0 / np.sqrt(d), dtype=np.float32))
    B = probe.codes.shape[1]
    codes, corr = [], []
    for b, rows in zip(blocks, X.chunks[0], strict=True):
        enc = dask.delayed(_encode_block, pure=True)(q, b)
        codes.append(da.from_delayed(enc.codes, shape=(rows, B), dtype=np.uint8))
        corr.append(da.from_delayed(enc.corrections, shape=(rows,), dtype=probe.corrections.dtype))
    return da.concatenate(codes), da.concatenate(corr)
