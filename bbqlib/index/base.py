"""What every index does the same way: the quantizer it is built with, the checks of a
search's options (:class:`SearchOptions`), and the :class:`Index` base class (caller ids,
tombstones, pickling without locks, and the hooks ``bbqlib.load`` / ``repair`` / ``warmup``
dispatch through, by the registry :data:`INDEX_KINDS`).

The quantizer: either a fitted or unfitted :class:`~bbqlib.Quantizer` of any family, or
the options of the default :class:`~bbqlib.BBQQuantizer` (``bits``, ``query_bits``,
``similarity``, ``precondition``, ``seed``), checked at construction (a wrong ``bits``
fails before a long ``add``, not after it). Options that differ from their defaults next to
a quantizer are ignored with a ``FutureWarning`` (they raise from bbqlib 0.4, as
``IVFIndex`` raises now).
"""

from __future__ import annotations

import contextlib
import warnings
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from .._validation import check_k
from ..quantizers import BBQQuantizer, Quantizer
from ..search import finish
from ..search.finish import check_scores, result_columns
from ..search.rerank import candidate_count, check_oversample
from .guard import IndexGuard

__all__ = [
    "DEFAULT_OPTIONS", "INDEX_KINDS", "Index", "SearchOptions", "default_quantizer",
    "index_quantizer",
]  # fmt: skip

#: The default quantizer's options (``BBQQuantizer``'s own defaults, as the indexes document).
DEFAULT_OPTIONS = {"bits": 1, "query_bits": "auto", "similarity": "cosine", "precondition": None,
                   "seed": None}  # fmt: skip


def default_quantizer(**options) -> BBQQuantizer:
    """The default :class:`~bbqlib.BBQQuantizer` of ``options``, its bits, query bits and
    similarity checked now (``ValueError`` naming the accepted values)."""
    q = BBQQuantizer(**{**DEFAULT_OPTIONS, **options})
    q._encoding_for_params()
    q.similarity_kind  # noqa: B018
    return q


def index_quantizer(quantizer, owner: str, **options) -> Quantizer:
    """The quantizer an index named ``owner`` is made with: ``quantizer``, else the default
    quantizer of ``options`` (:func:`default_quantizer`).

    ``TypeError`` when ``quantizer`` is not a bbqlib quantizer; a ``FutureWarning`` naming
    the options that differ from :data:`DEFAULT_OPTIONS` when a quantizer is given too.
    """
    if quantizer is None:
        return default_quantizer(**options)
    if not isinstance(quantizer, Quantizer):
        raise TypeError(f"quantizer must be a bbqlib Quantizer, got {type(quantizer).__name__}")
    ignored = sorted(
        k for k, v in options.items() if v is not DEFAULT_OPTIONS[k] and v != DEFAULT_OPTIONS[k]
    )
    if ignored:
        warnings.warn(
            f"{owner}: {', '.join(ignored)} ignored, the quantizer given sets them; passing "
            "both raises from bbqlib 0.4 (as IVFIndex does): pass the quantizer alone",
            FutureWarning,
            stacklevel=3,
        )
    return quantizer


@dataclass(frozen=True)
class SearchOptions:
    """A search's options, checked and resolved against the index's defaults: the one copy
    of the checks every index's ``search`` runs (:meth:`Index._search_options`).

    Attributes
    ----------
    k : int >= 1, as asked (the results' columns follow :meth:`columns`).
    rerank : True, False, or a mode of the index (``"bound"``: :class:`~bbqlib.FlatIndex`).
    oversample : float >= 1, the rerank depth's factor.
    scores : ``"raw"`` or ``"similarity"`` (:data:`~bbqlib.search.finish.SCORE_KINDS`).
    pad_to_k : True, False or None (:func:`~bbqlib.search.finish.result_columns`).
    """

    k: int
    rerank: bool | str
    oversample: float
    scores: str
    pad_to_k: bool | None

    def columns(self, n: int, nq: int) -> int:
        """The results' columns for an index of ``n`` vectors and ``nq`` queries (warns or
        raises as :func:`~bbqlib.search.finish.result_columns` does)."""
        return result_columns(self.k, n, nq, self.pad_to_k)

    def depth(self, n: int, live: int | None = None) -> int:
        """Candidates the scan keeps: ``candidate_count(min(k, n), oversample, live)`` for a
        rerank, else ``min(k, live)`` (``live``: the vectors not deleted, default ``n``)."""
        live = n if live is None else live
        k = min(self.k, n)
        return candidate_count(k, self.oversample, live) if self.rerank else min(k, live)


def _modes_text(modes: tuple) -> str:
    """``(True, False, "bound")`` as ``"True, False or 'bound'"``."""
    names = [repr(m) for m in modes]
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"


#: Every index class by its ``kind`` (:meth:`Index.__init_subclass__`): what
#: :func:`bbqlib.load`, :func:`bbqlib.repair` and :func:`bbqlib.warmup` dispatch through.
INDEX_KINDS: dict[str, type[Index]] = {}
# The one-query paths' checked options by call (:meth:`Index._fast_options`).
_FAST: dict[tuple, SearchOptions] = {}
_FAST_SIZE = 256


class Index:
    """What every bbqlib index shares: the search-option checks, caller ids and tombstones,
    the readers-writer guard's pickling, and the hooks files and warmup dispatch through.

    A subclass that sets ``kind`` in its body is registered in :data:`INDEX_KINDS`
    (subclasses that do not, e.g. the adapters of :class:`~bbqlib.index.lists.ListsIndex`,
    share their parent's entry). ``file_kind`` names the container kind it saves
    (:func:`~bbqlib.storage.container.read_kind`), ``directory`` whether it saves a
    directory; :func:`bbqlib.load` and :func:`bbqlib.repair` find the class by them.
    """

    #: Registry key (:data:`INDEX_KINDS`) and the ``kind`` of :class:`~bbqlib.RepairReport`.
    kind: ClassVar[str | None] = None
    #: The container kind of the file it saves (None: no single file).
    file_kind: ClassVar[str | None] = None
    #: Saved as a directory (:func:`bbqlib.load` opens a directory with it).
    directory: ClassVar[bool] = False
    #: Accepted ``rerank`` values (None means the index's default: :meth:`_rerank_ready`).
    rerank_modes: ClassVar[tuple] = (True, False)
    #: ``pad_to_k=None`` means this (None: min(k, ntotal) columns, warning when k > ntotal).
    pad_default: ClassVar[bool | None] = None
    #: The error of a rerank without float vectors.
    no_vectors_message: ClassVar[str] = (
        "this index keeps no float vectors (store_vectors=False); search with rerank=False"
    )
    #: Attributes made again on first use: not pickled, None after unpickling.
    _DERIVED: ClassVar[tuple[str, ...]] = ()
    #: bool [ntotal] once something is deleted (indexes that never delete keep None).
    _deleted: np.ndarray | None = None
    #: The last call of :meth:`_fast_options` and its options (None: none yet).
    _fast_last: tuple | None = None

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        kind = cls.__dict__.get("kind")
        if kind is None:
            return
        other = INDEX_KINDS.get(kind)
        if other is not None and (other.__module__, other.__qualname__) != (
            cls.__module__, cls.__qualname__,
        ):  # fmt: skip
            raise TypeError(f"index kind {kind!r} is taken by {other.__qualname__}")
        INDEX_KINDS[kind] = cls

    # -- state every index has --------------------------------------------------------------
    @property
    def ids(self) -> np.ndarray:
        """The id of every vector added, in insertion order (int64 [ntotal], deleted ones
        included; see :attr:`deleted`)."""
        return self._ids.array()

    @property
    def deleted(self) -> np.ndarray:
        """Whether each vector added is deleted (bool [ntotal], insertion order)."""
        deleted = self._deleted
        return np.zeros(self.ntotal, bool) if deleted is None else deleted.copy()

    @property
    def n_deleted(self) -> int:
        return 0 if self._deleted is None else int(self._deleted.sum())

    def _tombstones_after(self, ids) -> np.ndarray | None:
        """The tombstones (a new bool [ntotal]) once ``ids`` are deleted, or None when
        ``ids`` is empty. ``ValueError`` naming ids not in the index or deleted already
        (:meth:`~bbqlib.index.ids.RowIds.rows_of`); nothing is changed here."""
        rows = self._ids.rows_of(ids, self._deleted)
        if rows.size == 0:
            return None
        deleted = np.zeros(self.ntotal, bool) if self._deleted is None else self._deleted.copy()
        deleted[rows] = True
        return deleted

    @property
    def ntotal(self) -> int:  # pragma: no cover - every index defines it
        raise NotImplementedError

    def __len__(self) -> int:
        """Live (not deleted) vectors."""
        return self.ntotal - self.n_deleted

    @contextlib.contextmanager
    def _exclusive(self):
        """A write that changes the state in place (the adapters' engines): one write at a
        time, and no search meanwhile (searches see the index before or after it)."""
        with self._guard.writing, self._guard.swapping():
            yield

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_guard", None)  # locks do not pickle
        for name in self._DERIVED:
            state.pop(name, None)
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        for name in self._DERIVED:  # older pickles may carry them
            self.__dict__[name] = None
        self._guard = IndexGuard()

    # -- search options ---------------------------------------------------------------------
    def _rerank_ready(self) -> bool:
        """Whether a rerank has float vectors to read (default: ``store_vectors``)."""
        return bool(self.store_vectors)

    def _search_options(self, k, oversample, rerank, scores, pad_to_k) -> SearchOptions:
        """The search options checked (``ValueError`` / ``TypeError`` naming what is wrong)
        and resolved against the index's defaults."""
        k = check_k(k)
        check_scores(scores)
        if rerank is None:  # the index's default: when it has vectors to read
            rerank = self._rerank_ready()
        if rerank not in self.rerank_modes:
            raise ValueError(f"rerank must be {_modes_text(self.rerank_modes)}, got {rerank!r}")
        if rerank is not False and rerank != "bound" and not self._rerank_ready():
            raise ValueError(self.no_vectors_message)
        if pad_to_k is None:
            pad_to_k = self.pad_default
        elif not isinstance(pad_to_k, (bool, np.bool_)):
            result_columns(k, k, 1, pad_to_k)  # raises its TypeError
        if oversample is None:
            oversample = self.oversample
        oversample = check_oversample(oversample, self.quantizer.encoding_.default_oversample)
        if rerank is not True and rerank is not False and rerank != "bound":
            rerank = bool(rerank)  # 1 and 0 (equal to True and False)
        return SearchOptions(k, rerank, oversample, scores, pad_to_k)

    def _fast_options(self, k, oversample, rerank, scores, pad_to_k) -> SearchOptions | None:
        """:meth:`_search_options` for the one-query paths: kept per distinct call (an
        application repeats the same few), None where the checks fail (the batch path then
        raises) or the rerank is not plain True / False."""
        last = self._fast_last  # the same objects as the last call: its options (no hashing)
        if (
            last is not None and last[0] is k and last[1] is oversample and last[2] is rerank
            and last[3] is scores and last[4] is pad_to_k and last[5] is self.store_vectors
            and last[6] is self.oversample and last[7] is self.quantizer
        ):  # fmt: skip
            return last[8]
        # everything the checks read: the arguments with their types (1 == True == 1.0), and
        # the index's defaults (``_rerank_ready`` follows ``store_vectors`` on these paths)
        key = (type(self), k, type(k), oversample, type(oversample), rerank, type(rerank), scores,
               pad_to_k, type(pad_to_k), self.store_vectors, self.oversample,
               self.quantizer.encoding_.default_oversample)  # fmt: skip
        try:
            opts = _FAST.get(key)
        except TypeError:  # an unhashable argument: the batch path checks it
            return None
        if opts is None:
            try:
                opts = self._search_options(k, oversample, rerank, scores, pad_to_k)
            except (TypeError, ValueError):
                return None
            if opts.rerank is not True and opts.rerank is not False:
                return None
            if len(_FAST) >= _FAST_SIZE:
                _FAST.clear()
            _FAST[key] = opts
        self._fast_last = (k, oversample, rerank, scores, pad_to_k, self.store_vectors,
                           self.oversample, self.quantizer, opts)  # fmt: skip
        return opts

    def _finish(self, keys, rows, k: int, scores: str):
        """:func:`bbqlib.search.finish` to ``k`` columns, then rows mapped to the caller's
        ids."""
        out, rows = finish(keys, rows, k, self.quantizer.similarity_, scores)
        return out, self._ids.of_rows(rows)

    # -- files and warmup: what bbqlib.load, repair and warmup call -------------------------
    @classmethod
    def open(cls, path, **kwargs) -> Index:  # pragma: no cover - saved kinds define it
        """Open the index saved at ``path``."""
        raise NotImplementedError(f"{cls.__name__} is not saved to files")

    @classmethod
    def coerce(cls, index_or_path) -> Index:
        """``index_or_path`` itself when it is an index of this class, else the index saved
        there (:meth:`open`)."""
        return index_or_path if isinstance(index_or_path, cls) else cls.open(index_or_path)

    @classmethod
    def check_saved(cls, path, *, verify: bool = True) -> None:
        """Open the index saved at ``path`` and, with ``verify``, check every checksum
        (:func:`bbqlib.repair`); raises :class:`~bbqlib.CorruptFileError` when damaged."""
        index = cls.open(path)
        if verify:
            index.verify()

    @classmethod
    def holds_saved(cls, path) -> bool:  # pragma: no cover - directory kinds define it
        """Whether the directory ``path`` holds a saved index of this class."""
        raise NotImplementedError(f"{cls.__name__} is not saved as a directory")

    @classmethod
    def saved_lock_path(cls, path):  # pragma: no cover - directory kinds define it
        """The advisory lock file of the index directory ``path``."""
        raise NotImplementedError(f"{cls.__name__} is not saved as a directory")

    @classmethod
    def remove_leftovers(cls, path, *, blocking: bool, timeout: float):  # pragma: no cover
        """Remove what killed writers left in the index directory ``path``: ``(file name,
        bytes)`` of each file removed, or None when a live writer holds its lock."""
        raise NotImplementedError(f"{cls.__name__} is not saved as a directory")

    def warmup_tiers(self) -> tuple:
        """The tiers of the one-query kernels this index runs, opened by
        :func:`bbqlib.warmup` (none: its searches run the batch path's kernels)."""
        return ()

    @classmethod
    def warm_saved_kernels(cls, folder) -> None:
        """Load the one-query kernels of a saved index of this class with the default
        quantizer where the kernel cache holds them, through a probe saved in ``folder``
        (:func:`bbqlib.warmup` without an index); nothing is compiled. Default: none."""
