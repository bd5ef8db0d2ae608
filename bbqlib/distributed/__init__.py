"""bbqlib on a Dask cluster: encode, build one IVF directory, search shards (``bbqlib[dask]``).

* :func:`encode` - codes and corrections of a ``dask.array``, bit-identical to
  ``quantizer.encode``;
* :func:`build_ivf` - an IVF index directory in the documented format
  (``docs/ivf-format.md``) built partition by partition on the workers;
* :class:`ShardedIndex` - scatter-gather search over several IVF directories;
* :func:`from_files`, :func:`from_parquet` - Dask arrays of ``.npy`` / ``.fvecs`` / ``.fbin``
  files (memory-mapped) and of a Parquet embedding column.

Dask (``dask``, ``distributed``) is imported when a function runs, never by ``import
bbqlib``; without it they raise ``ImportError`` naming the extra. See ``docs/distributed.md``.
"""

from .build import BuildError, build_ivf, default_sample
from .encode import encode
from .inputs import as_dask_array, from_files, from_parquet
from .sharded import ShardedIndex

__all__ = [
    "BuildError",
    "ShardedIndex",
    "as_dask_array",
    "build_ivf",
    "default_sample",
    "encode",
    "from_files",
    "from_parquet",
]
