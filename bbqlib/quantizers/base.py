"""What every quantizer shares: parameters, fitted state, persistence, the scoring API.

A family subclass declares its registry family, capabilities and parameters as class
attributes, and implements four hooks:

* ``_fit_transformed(X, encoding, similarity)``: learn from prepared, transformed rows and set
  the family's fitted attributes (ending in ``_``);
* ``_state()`` / ``_restore(params, arrays)``: the family's fitted state for files;
* ``encode(X)``, ``_doc_codes(enc)`` and ``_query_codes(Q)``: codes as the kernels see them.

The base owns everything else: the scikit-learn estimator contract by duck typing (without
importing scikit-learn), the fit skeleton (validation, similarity rules, the optional
transform), files (:meth:`get_state` / :meth:`from_state`), and estimates, top-k and
candidate scorers through the quantizer's scanner (:mod:`bbqlib.quantizers.scanner`).
"""

from __future__ import annotations

import hashlib
from typing import ClassVar

import numpy as np

from .._params import validate_params
from .._validation import NotFittedError, check_k, check_vectors, prepare_for_similarity
from ..encoding import ENCODINGS, Encoding
from ..layouts.codes import DocCodes, QueryCodes
from ..similarity import Similarity, resolve_similarity, scores_from_raw
from .encoded import EncodedVectors

__all__ = ["Quantizer", "make_transform_for"]


def make_transform_for(spec, dim: int, seed):
    """The transform a ``precondition`` / ``rotation`` parameter asks for (None for none)."""
    if spec is None or spec is False:
        return None
    from ..transforms import make_transform

    return make_transform(spec, dim, seed=seed)


class Quantizer:
    """Base class: fit on data, encode docs, score queries against encoded docs.

    Attributes
    ----------
    family : str
        Registry family of the codes (:data:`bbqlib.ENCODINGS`).
    has_error_bound : bool
        ``estimate(..., return_bounds=True)`` and ``FlatIndex.search(rerank="bound")`` work.
    default_eps0 : float or None
        Default confidence multiplier of the bound.

    The three above are class attributes (declared capabilities). Fitted attributes (set by
    ``fit``, all ending in ``_``): ``encoding_``, ``similarity_``,
    ``dim_``, ``transform_``, ``fingerprint_`` and the family's own.

    Notes
    -----
    The scikit-learn contract holds without importing it: ``__init__`` only stores,
    :meth:`get_params` / :meth:`set_params` work with ``sklearn.base.clone``, and
    ``__sklearn_is_fitted__`` answers ``sklearn.utils.validation.check_is_fitted``.
    :meth:`set_params` on a fitted quantizer discards the fit when a value changes (refit;
    :meth:`with_query_bits` changes the query width and keeps it).
    """

    family: ClassVar[str] = ""
    has_error_bound: ClassVar[bool] = False
    default_eps0: ClassVar[float | None] = None
    #: Float32 factors per IVF posting entry (:meth:`encode_pairs`).
    pair_factor_width: ClassVar[int] = 4
    #: Constructor parameters, in order.
    _param_names: ClassVar[tuple[str, ...]] = ()
    #: The parameter that names the optional transform ("precondition" or "rotation"; None:
    #: the family has none, e.g. SAQ fits its own PCA frame).
    _transform_param: ClassVar[str | None] = "precondition"
    #: Declarative checks of the parameters the registry does not check (bits, query_bits).
    _constraints: ClassVar[dict] = {}
    #: Name hashed into fingerprints (stable across class renames: files store fingerprints).
    _fingerprint_name: ClassVar[str | None] = None

    # -- scikit-learn contract ------------------------------------------------------------
    def get_params(self, deep: bool = True) -> dict:
        """Constructor parameters by name (scikit-learn's ``get_params``)."""
        return {k: getattr(self, k) for k in self._param_names}

    def set_params(self, **params):
        """Set constructor parameters; a changed value discards a fit. Returns ``self``."""
        for name in params:
            if name not in self._param_names:
                raise ValueError(
                    f"invalid parameter {name!r} for {type(self).__name__}; valid parameters "
                    f"are {sorted(self._param_names)}"
                )
        changed = any(
            getattr(self, k) is not v and getattr(self, k) != v for k, v in params.items()
        )
        for name, value in params.items():
            setattr(self, name, value)
        if changed and self.is_fitted:
            self._discard_fit()
        return self

    def __sklearn_is_fitted__(self) -> bool:
        return self.is_fitted

    def __sklearn_tags__(self):
        # Only scikit-learn calls this, so importing it here costs ``import bbqlib`` nothing.
        from sklearn.utils import Tags, TargetTags

        return Tags(estimator_type=None, target_tags=TargetTags(required=False))

    @property
    def is_fitted(self) -> bool:
        return "fingerprint_" in self.__dict__

    def _discard_fit(self) -> None:
        for name in [k for k in self.__dict__ if k.endswith("_") and not k.startswith("_")]:
            del self.__dict__[name]

    def _check_fitted(self) -> None:
        if not self.is_fitted:
            raise NotFittedError(f"this {type(self).__name__} is not fitted yet; call fit(X) first")

    def scanner(self):
        """The fitted quantizer's scanner (:mod:`bbqlib.quantizers.scanner`): what the
        indexes ask to answer one query in one compiled call. This base has none (the batch
        path serves); families return the scanner of their code layout."""
        from .scanner import Scanner

        self._check_fitted()
        return Scanner(self)

    # -- capabilities ---------------------------------------------------------------------
    @property
    def serves_lists(self) -> bool:
        """Whether an IVF can post this family's codes to its lists (its registry rows list
        the ``"ivf"`` index); a family served by :class:`~bbqlib.FlatIndex` only says no."""
        return not self.no_lists_reason

    @property
    def no_lists_reason(self) -> str:
        """Why an IVF cannot post these codes to its lists (empty when it can)."""
        if "ivf" in ENCODINGS.family(self.family).indexes:
            return ""
        return "their registry rows list no 'ivf'"

    @property
    def supported_query_bits(self) -> tuple:
        """Query widths the family's registry rows accept (``None``: float query)."""
        return ENCODINGS.family(self.family).query_bits

    @property
    def bytes_per_vector(self) -> int:
        """Stored bytes per encoded vector: packed codes plus corrections."""
        self._check_fitted()
        return self.encoding_.bytes_per_vector(self.dim_, self.similarity_.is_distance)

    @property
    def default_oversample(self) -> float:
        self._check_fitted()
        return self.encoding_.default_oversample

    @property
    def similarity_kind(self) -> Similarity:
        return resolve_similarity(self.similarity)

    # -- fitting --------------------------------------------------------------------------
    def _encoding_for_params(self) -> Encoding:
        """The registry row of ``(bits, query_bits)`` (raises naming the accepted values)."""
        return ENCODINGS.lookup(self.family, self.bits, self.query_bits)

    def fit(self, X, y=None):
        """Validate the parameters, apply the similarity's rules and the transform, learn.

        ``y`` is ignored (scikit-learn's signature).
        """
        validate_params(self, self._constraints)
        encoding = self._encoding_for_params()
        similarity = resolve_similarity(self.similarity)
        X = check_vectors(X, "X")
        if X.shape[1] > encoding.max_dim:
            raise ValueError(
                f"{encoding.doc_bits}-bit {self.family} codes support at most "
                f"{encoding.max_dim} dimensions (the component sum would overflow), got "
                f"{X.shape[1]}; use more bits"
            )
        X = prepare_for_similarity(X, similarity, "X")
        spec = getattr(self, self._transform_param) if self._transform_param else None
        transform = make_transform_for(spec, X.shape[1], self.seed)
        if transform is not None:
            X = transform.transform(X)
        self._discard_fit()
        self._set_common(encoding, similarity, X.shape[1], transform)
        self._fit_transformed(X)
        self._seal()
        return self

    def _set_common(self, encoding: Encoding, similarity: Similarity, dim: int, transform):
        self.encoding_ = encoding
        self.similarity_ = similarity
        self.dim_ = int(dim)
        self.transform_ = transform

    def _seal(self) -> None:
        """Compute the fingerprint once every fitted attribute is set."""
        t = None if self.transform_ is None else self.transform_.fingerprint()
        self.fingerprint_ = self._fingerprint(*self._fingerprint_parts(), t)

    def _fit_transformed(self, X: np.ndarray) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def _fingerprint_parts(self) -> tuple:  # pragma: no cover - abstract
        raise NotImplementedError

    def _rotated(self, X: np.ndarray) -> np.ndarray:
        """Apply the fitted transform to validated, prepared rows (no copy without one)."""
        return X if self.transform_ is None else self.transform_.transform(X)

    # -- to implement ---------------------------------------------------------------------
    def encode(self, X) -> EncodedVectors:  # pragma: no cover - abstract
        raise NotImplementedError

    def _doc_codes(self, enc: EncodedVectors) -> DocCodes:  # pragma: no cover
        raise NotImplementedError

    def _query_codes(self, Q: np.ndarray) -> QueryCodes:  # pragma: no cover
        raise NotImplementedError

    # -- shared scoring -------------------------------------------------------------------
    def _check_encoded(self, enc) -> None:
        self._check_fitted()
        if not isinstance(enc, EncodedVectors):
            raise TypeError(f"expected EncodedVectors from encode(), got {type(enc).__name__}")
        if enc.fingerprint != self.fingerprint_:
            raise ValueError(
                "these codes were encoded by a different fit (fingerprint "
                f"{enc.fingerprint} != {self.fingerprint_}); encode them with this quantizer"
            )

    def _validated(self, X, name: str, *, allow_1d: bool = False) -> np.ndarray:
        """Validated float32 rows with the similarity's rules applied (normalized for cosine)."""
        self._check_fitted()
        X = check_vectors(X, name, dim=self.dim_, allow_1d=allow_1d)
        return prepare_for_similarity(X, self.similarity_, name)

    def _cached_doc_codes(self, enc: EncodedVectors) -> DocCodes:
        key = ("doc_codes", self.fingerprint_)
        if key not in enc._cache:
            enc._cache[key] = self._doc_codes(enc)
        return enc._cache[key]

    def query_codes(self, Q) -> QueryCodes:
        """Quantize queries (1-D or 2-D) as the kernels take them."""
        return self._query_codes(self._validated(Q, "Q", allow_1d=True))

    def estimate(self, Q, enc: EncodedVectors, *, return_bounds: bool = False, eps0=None):
        """Raw estimates [nq, n]: squared L2 (euclidean) or inner product (the others).

        ``return_bounds=True`` needs a quantizer with ``has_error_bound``
        (:class:`~bbqlib.RaBitQQuantizer`, :class:`~bbqlib.SAQQuantizer`): it also returns
        ``estimate ∓ eps0 · σ`` (``eps0`` a z-score, None: the family's default).
        """
        self._check_encoded(enc)
        return self.scanner().estimate(Q, enc, return_bounds=return_bounds, eps0=eps0)

    def similarity_scores(self, Q, enc: EncodedVectors) -> np.ndarray:
        """Lucene-mapped scores [nq, n], higher is better (see :mod:`bbqlib.similarity`)."""
        return scores_from_raw(self.similarity_, self.estimate(Q, enc))

    def search(self, Q, enc: EncodedVectors, k: int, *, allowed=None, id_base: int = 0,
               **scan):  # fmt: skip
        """Top ``k`` per query by estimate: ``(raw, ids)`` [nq, k], best first.

        ``raw`` holds estimated d² (euclidean) or inner products; padding is ``nan`` / ``-1``.
        ``scan``: the family's scan options (SAQ's ``scan=``), passed to its scanner.
        """
        k = check_k(k)
        keys, ids = self.topk_keys(self._validated(Q, "Q", allow_1d=True), enc, k,
                                   allowed=allowed, id_base=id_base, **scan)  # fmt: skip
        raw = self.similarity_.raw(keys)
        raw[ids < 0] = np.nan
        return raw, ids

    def topk_keys(self, Qp: np.ndarray, enc: EncodedVectors, k: int, *, allowed=None,
                  id_base: int = 0, **scan) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        """Top ``k`` per prepared query (validated, normalized for cosine): ranking keys.

        The hook indexes call (queries are validated once, by the index): ``(keys, ids)``
        float64 / int64 [nq, k], higher keys better, ``-inf`` / ``-1`` padding; the
        scanner's scan (:meth:`bbqlib.quantizers.scanner.Scanner.topk_keys`).
        """
        self._check_encoded(enc)
        return self.scanner().topk_keys(Qp, enc, k, allowed=allowed, id_base=id_base, **scan)

    def scorer(self, query, enc: EncodedVectors):
        """A callable ``score_ids(ids) -> float32`` of one query's estimates for chosen docs.

        For engines that bring their own candidates (graphs, IVF lists): the query is quantized
        once, here; each call scores only ``ids`` in one numba kernel. The values equal
        ``self.estimate(query, enc)[0, ids]`` exactly (raw: squared L2 or inner product).

        Parameters
        ----------
        query : float array [d] (or [1, d])
        enc : EncodedVectors from :meth:`encode`

        Returns
        -------
        bbqlib.search.candidates.CandidateScorer
            ``score_ids(ids)`` takes integer ids in ``[0, len(enc))`` (any integer dtype).
        """
        self._check_encoded(enc)
        return self.scanner().scorer(query, enc)

    # -- codes against list centres (IVF) -------------------------------------------------
    def transform_rows(self, X: np.ndarray) -> np.ndarray:
        """Prepared rows (validated, normalized for cosine) in the space the codes live in:
        the fitted transform applied (an IVF clusters and ranks lists there)."""
        self._check_fitted()
        return np.ascontiguousarray(self._rotated(X), dtype=np.float32)

    def fit_residuals(self, R: np.ndarray) -> None:
        """Adapt the fit to residuals ``R = W - centre`` before :meth:`encode_pairs` (an IVF
        calls it with a sample). Families whose grid depends on the data range refit it."""

    def encode_pairs(self, W, rows, centres, lists) -> tuple[np.ndarray, np.ndarray]:
        """Codes of transformed rows ``W[rows[p]]`` against ``centres[lists[p]]``, per pair.

        Returns ``(codes uint8 [m, encoding_.doc_bytes(d)], factors float32 [m, 4])``:
        packed as the registry row says, and the factor rows ``(a_x, l_x, ΣX, add_x)`` of the
        correction algebra with ``<c, c>`` of each pair's centre left to the scan.
        """
        raise NotImplementedError(f"{type(self).__name__} cannot code against list centres")

    def query_pairs(self, Qt, centres, pair_query, pair_list, *, lut: bool = False):
        """Queries ``Qt[pair_query[p]]`` (transformed) against ``centres[pair_list[p]]``.

        Returns ``(data, factors float64 [P, 4])``: ``data`` as the row's query kind (uint64
        plane words, uint8 bytes, or float32), or with ``lut`` one uint8 code per byte padded
        to ``padded_dim(d)`` (what the lookup-table scan builds its tables from).
        """
        raise NotImplementedError(f"{type(self).__name__} cannot code against list centres")

    def _float_query_pairs(self, Qt, centres, pair_query, pair_list):
        """Float residual queries ``y = q - c`` with rows ``(0, 1, Σy, ||y||² or <q, c>)``
        (:func:`bbqlib._kernels.pairs.residual_pairs`, which the one-query path calls too)."""
        from .._kernels.pairs import residual_pairs

        y = np.empty((len(pair_query), Qt.shape[1]), dtype=np.float32)
        factors = np.empty((len(pair_query), 4), dtype=np.float64)
        if len(y):
            residual_pairs(*_pair_args(Qt, centres, pair_query, pair_list),
                           bool(self.similarity_.is_distance), y, factors)  # fmt: skip
        return y, factors

    def _pair_query_data(self, codes: np.ndarray, lut: bool) -> np.ndarray:
        """uint8 query codes [P, d] as the scan reads them (packed, or padded for ``lut``)."""
        from ..encoding import padded_dim
        from ..packing import kernel_codes, pack_codes

        row = self.encoding_
        if lut:
            out = np.zeros((codes.shape[0], padded_dim(codes.shape[1])), dtype=np.uint8)
            out[:, : codes.shape[1]] = codes
            return out
        return kernel_codes(pack_codes(codes, row.layout, row.query_bits), row.layout)

    # -- files ----------------------------------------------------------------------------
    def _state(self) -> tuple[dict, dict]:
        """The family's fitted state beyond the common one: ``(params, arrays)``."""
        return {}, {}

    def _restore(self, params: dict, arrays: dict) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def get_state(self) -> tuple[dict, dict]:
        """``(params, arrays)`` that :meth:`from_state` turns back into this fitted quantizer.

        ``params`` holds the constructor parameters (``bits`` and ``query_bits`` resolved,
        the transform as its own state), ``dim``, ``fingerprint`` and the family's fitted
        scalars; ``arrays`` its fitted arrays and ``transform.*``.
        """
        self._check_fitted()
        params = {"class": type(self).__name__}
        for name in self._param_names:
            if name != self._transform_param:
                params[name] = getattr(self, name)
        params.update(
            bits=self.encoding_.doc_bits,
            query_bits=self.encoding_.query_bits,
            similarity=self.similarity_.value,
            dim=self.dim_,
            fingerprint=self.fingerprint_,
            transform=None,
        )
        extra_params, arrays = self._state()
        params.update(extra_params)
        arrays = dict(arrays)
        if self.transform_ is not None:
            t_params, t_arrays = self.transform_.get_state()
            params["transform"] = t_params
            arrays.update({f"transform.{k}": v for k, v in t_arrays.items()})
        return params, arrays

    @classmethod
    def from_state(cls, params: dict, arrays: dict):
        """Rebuild a fitted quantizer from :meth:`get_state` output (files of every version)."""
        transform = None
        if params.get("transform"):
            from ..transforms import transform_from_state

            t_arrays = {
                k.split(".", 1)[1]: v for k, v in arrays.items() if k.startswith("transform.")
            }
            transform = transform_from_state(params["transform"], t_arrays)
        init = {k: params[k] for k in cls._param_names if k in params}
        if cls._transform_param:
            init[cls._transform_param] = transform
        q = cls(**init)
        q._set_common(
            cls._encoding_for_state(params),
            resolve_similarity(params["similarity"]),
            params["dim"],
            transform,
        )
        q._restore(params, arrays)
        q._seal()
        if q.fingerprint_ != params["fingerprint"]:
            raise ValueError("quantizer state is inconsistent (fingerprint mismatch)")
        return q

    @classmethod
    def _encoding_for_state(cls, params: dict) -> Encoding:
        """The registry row a file's ``params`` name (a family whose fit specialises its row
        overrides this; its ``_restore`` specialises it again)."""
        return ENCODINGS.lookup(cls.family, params["bits"], params["query_bits"])

    def with_query_bits(self, query_bits):
        """A copy of this fitted quantizer scoring queries at another bit width.

        The doc codes stay valid (the fingerprint does not depend on the query bits).
        """
        self._check_fitted()
        params, arrays = self.get_state()
        params["query_bits"] = query_bits
        return type(self).from_state(params, arrays)

    def _fingerprint(self, *parts) -> str:
        h = hashlib.blake2b(digest_size=8)
        h.update((self._fingerprint_name or type(self).__name__).encode())
        for p in parts:
            if isinstance(p, np.ndarray):
                h.update(np.ascontiguousarray(p).tobytes())
            else:
                h.update(repr(p).encode())
        return h.hexdigest()

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items())
        return f"{type(self).__name__}({params})"


def _pair_args(Qt, centres, pair_query, pair_list) -> tuple:
    """The pair coders' first arguments (:mod:`bbqlib._kernels.pairs`) as they take them."""
    return (
        np.ascontiguousarray(Qt, dtype=np.float32),
        np.ascontiguousarray(centres, dtype=np.float32),
        np.ascontiguousarray(pair_query, dtype=np.int64),
        np.ascontiguousarray(pair_list, dtype=np.int64),
    )
