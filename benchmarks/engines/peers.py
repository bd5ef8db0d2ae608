"""Peer libraries built and searched the way ``../shared/spec/peers.md`` says.

Every builder takes the float32 base vectors and a bbqlib similarity name and returns a
:class:`Peer`::

    peer = faiss_rabitq(X, "cosine", bits=1, qb=4, k_factor=3)
    scores, ids = peer.search(Q, 10)     # float32 [nq, k] (higher is better), int64 [nq, k]
    peer.name, peer.build_seconds, peer.bytes_per_vector, peer.params
    peer.set_search_params(k_factor=5)   # search-time knobs, no rebuild

Builders (keyword arguments after the similarity):

=============================  ===============================================================
``faiss_rabitq``               RR + ``IndexRaBitQ`` (bits 1-9, qb, centered), optional
                               ``IndexRefineFlat`` with ``k_factor``
``faiss_rabitq_fastscan``      RR + ``IndexRaBitQFastScan`` (bits, qb, bbs), optional refine
``faiss_sq``                   ``IndexScalarQuantizer`` (``"SQ8"``, ``"SQ4"``, ``"SQfp16"``...)
``faiss_ivf_rabitq``           RR + ``IndexIVFRaBitQ`` (nlist, nprobe, bits, qb), optional
                               refine; ``fastscan=True`` for ``IndexIVFRaBitQFastScan``
``hnswlib_hnsw``               hnswlib float32 HNSW (M, ef_construction, ef)
``usearch_hnsw``               usearch HNSW (dtype f32/f16/i8..., connectivity, expansions;
                               ``exact=True`` for its brute-force scan)
``rabitqlib_ivf``              rabitqlib ``IvfIndex`` over ``RaBitQKMeans`` centroids
=============================  ===============================================================

``build(kind, X, similarity, **params)`` dispatches on those names (``PEERS``).

Conventions (the pitfalls of peers.md handled here, once):

* **Similarity.** ``cosine``: base and queries are normalized (copies) and searched by inner
  product, for every library (rabitqlib has no cosine; usearch ``cos`` is used as is).
  ``dot_product`` and ``max_inner_product``: inner product. ``euclidean``: squared L2.
* **Scores** are float32, higher is better: the inner product (cosine included) or the
  *negative squared distance*. Estimated scores unless a float rerank ran. Ids are int64,
  ``-1`` where a library returned fewer than k results.
* **Rotation.** faiss does not rotate for RaBitQ, so ``rotate=True`` (default) puts a
  ``RandomRotationMatrix`` in front (``IndexPreTransform``, the factory's ``RR``); its seed
  is faiss's default (12345) unless ``seed`` is given.
* **Query bits.** ``qb=4`` is set explicitly (faiss's FastScan default is 8).
* **Rerank.** ``k_factor`` wraps the index in ``IndexRefineFlat`` and sets ``k_factor``
  (faiss's ``RFlat`` factory keeps 1, which refines nothing extra): the quantized scan
  keeps ``int(k * k_factor)`` candidates, exact float scores pick the final k, as
  bbqlib's ``oversample``. ``None`` = no rerank.
* **Threads.** faiss follows its OpenMP setting; hnswlib, usearch and rabitqlib get
  ``num_threads = numba.get_num_threads()`` per call. So ``with common.single_thread():``
  governs every library, builds included.
* **bytes_per_vector** is the code size as the library reports it: faiss ``code_size`` (the
  float copy of a refine and IVF ids are in ``peer.extra``), hnswlib and usearch the
  stored vector (``d * bits / 8``; graph links in ``extra``), rabitqlib the saved file size
  divided by n (its Python API reports no code size).
* **build_seconds** covers everything from float32 vectors to a searchable index (training,
  k-means, rotation, encoding, refine copy; not the wrapper's float32 copy or cosine
  normalization); ``extra`` splits it where the library allows.

Libraries are imported lazily; a missing one raises ImportError naming ``pip install
'bbqlib[bench]'``.
"""

from __future__ import annotations

import json
import os
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "PEERS",
    "Peer",
    "build",
    "faiss_ivf_rabitq",
    "faiss_rabitq",
    "faiss_rabitq_fastscan",
    "faiss_sq",
    "hnswlib_hnsw",
    "rabitqlib_ivf",
    "usearch_hnsw",
]

_SIMILARITIES = {
    "cosine": "cosine",
    "dot_product": "dot_product",
    "ip": "dot_product",
    "max_inner_product": "max_inner_product",
    "mip": "max_inner_product",
    "euclidean": "euclidean",
    "l2": "euclidean",
    "l2_norm": "euclidean",
}


def _require(module: str, pip_name: str):
    try:
        return __import__(module)
    except ImportError as exc:
        raise ImportError(
            f"{pip_name} is needed for this peer benchmark; install it with "
            f"`pip install 'bbqlib[bench]'` (or `pip install {pip_name}`)."
        ) from exc


def _threads() -> int:
    import numba

    return numba.get_num_threads()


def _similarity(similarity: str) -> str:
    if similarity not in _SIMILARITIES:
        raise ValueError(f"similarity must be one of {sorted(_SIMILARITIES)}; got {similarity!r}.")
    return _SIMILARITIES[similarity]


def _prepare(X, similarity: str, name: str = "X") -> np.ndarray:
    """float32, C-contiguous, a copy; unit rows for cosine. Never touches the caller's array."""
    X = np.array(X, dtype=np.float32, order="C", copy=True)
    if X.ndim != 2 or X.shape[0] == 0:
        raise ValueError(f"{name} must be a non-empty 2-D array [n, d]; got shape {X.shape}.")
    if not np.isfinite(X).all():
        raise ValueError(f"{name} holds NaN or inf; clean the vectors first.")
    if similarity == "cosine":
        norms = np.linalg.norm(X, axis=1, keepdims=True)
        if np.any(norms == 0):
            raise ValueError(f"{name} has zero rows, which have no cosine; drop them.")
        X /= norms
    return X


def _is_ip(similarity: str) -> bool:
    return similarity != "euclidean"


@dataclass
class Peer:
    """A built peer index with one search interface.

    Attributes
    ----------
    name : str
        Short label with the parameters, e.g. ``"faiss RR+RaBitQ1 qb4 +RFlat x3"``.
    library : str
    similarity : str
    build_seconds : float
    bytes_per_vector : float
        Code size as the library reports it (see the module docstring).
    params : dict
        Build and search parameters (search ones updated by :meth:`set_search_params`).
    extra : dict
        Library-specific figures: refine bytes, graph bytes, split timings.
    index : object
        The library's own index object (for anything this wrapper does not cover).
    """

    name: str
    library: str
    similarity: str
    build_seconds: float
    bytes_per_vector: float
    params: dict
    index: Any
    extra: dict = field(default_factory=dict)
    _search: Callable = field(default=None, repr=False)
    _set: Callable = field(default=None, repr=False)
    _d: int = field(default=0, repr=False)
    _refs: Any = field(default=None, repr=False)  # keeps SWIG sub-objects alive

    def search(self, queries, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-``k`` per query: ``(scores float32 [nq, k], ids int64 [nq, k])``, best first."""
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"k must be a positive int; got {k!r}.")
        Q = _prepare(queries, self.similarity, "queries")
        if Q.shape[1] != self._d:
            raise ValueError(f"queries have dimension {Q.shape[1]}; the index has {self._d}.")
        scores, ids = self._search(Q, int(k))
        return np.asarray(scores, dtype=np.float32), np.asarray(ids, dtype=np.int64)

    def set_search_params(self, **params) -> Peer:
        """Change search-time parameters (``k_factor``, ``qb``, ``nprobe``, ``ef``...)."""
        unknown = set(params) - set(self.params.get("_search_keys", ()))
        if unknown:
            raise ValueError(
                f"{self.name} has no search parameter(s) {sorted(unknown)}; settable: "
                f"{sorted(self.params.get('_search_keys', ()))}."
            )
        self._set(**params)
        self.params.update(params)
        self.name = self._label()
        return self

    def _label(self) -> str:
        return self.params.get("_label", lambda p: self.name)(self.params)


def _make(
    label, library, similarity, t_build, bpv, params, index, search, setter, d, refs=None, **extra
):
    params = dict(params)
    params["_label"] = label
    return Peer(
        name=label(params),
        library=library,
        similarity=similarity,
        build_seconds=t_build,
        bytes_per_vector=float(bpv),
        params=params,
        index=index,
        extra=extra,
        _search=search,
        _set=setter,
        _d=d,
        _refs=refs,
    )


# ----------------------------------------------------------------------------- faiss
def _faiss_metric(faiss, similarity: str):
    return faiss.METRIC_INNER_PRODUCT if _is_ip(similarity) else faiss.METRIC_L2


def _faiss_scores(D: np.ndarray, similarity: str) -> np.ndarray:
    return D if _is_ip(similarity) else -D


def _faiss_wrap(faiss, inner, d: int, rotate: bool, seed: int | None):
    """Put a random rotation in front of ``inner`` (faiss's RaBitQ does not rotate)."""
    if not rotate:
        return inner, None
    rr = faiss.RandomRotationMatrix(d, d)
    if seed is not None:
        rr.init(int(seed))  # marks it trained, so train() keeps this seed
    return faiss.IndexPreTransform(rr, inner), rr


def _faiss_build(faiss, top, X: np.ndarray, k_factor):
    """Train and add, with an optional IndexRefineFlat; returns (index, seconds, add seconds)."""
    t0 = time.perf_counter()
    index = top
    if k_factor is not None:
        index = faiss.IndexRefineFlat(top)
        index.k_factor = float(k_factor)
    index.train(X)
    t1 = time.perf_counter()
    index.add(X)
    t2 = time.perf_counter()
    return index, t2 - t0, t2 - t1


def _faiss_peer(faiss, label, similarity, X, top, holder, code_size, params, setter, k_factor):
    index, seconds, add_seconds = _faiss_build(faiss, top, X, k_factor)
    holder["index"] = index
    d = X.shape[1]

    def search(Q, k):
        D, I = holder["index"].search(Q, k)
        return _faiss_scores(D, similarity), I

    def set_params(**kw):
        if "k_factor" in kw:
            if not isinstance(holder["index"], faiss.IndexRefineFlat):
                raise ValueError(
                    "k_factor needs a refine stage; build with k_factor=... (1 = exact "
                    "rescoring of the k candidates)."
                )
            holder["index"].k_factor = float(kw.pop("k_factor"))
        setter(**kw)

    extra = {"add_seconds": add_seconds, "train_seconds": seconds - add_seconds}
    if k_factor is not None:
        extra["refine_bytes_per_vector"] = 4 * d
    keys = ("k_factor",) + tuple(params.pop("_keys", ()))
    return _make(
        label,
        "faiss",
        similarity,
        seconds,
        code_size,
        {**params, "k_factor": k_factor, "_search_keys": keys},
        index,
        search,
        set_params,
        d,
        refs=holder,
        **extra,
    )


def _refine_label(p) -> str:
    return "" if p.get("k_factor") is None else f" +RFlat x{p['k_factor']:g}"


def faiss_rabitq(
    X,
    similarity: str = "cosine",
    *,
    bits: int = 1,
    qb: int = 4,
    centered: bool = False,
    k_factor: float | None = None,
    rotate: bool = True,
    seed: int | None = None,
) -> Peer:
    """faiss ``IndexRaBitQ`` (``RR{d},RaBitQ{bits}``), ``qb`` query bits, optional refine.

    Search parameters: ``qb``, ``centered``, ``k_factor`` (only if built with one).
    ``peer.extra["add_seconds"]`` is the encode time (rotation included when ``rotate``).
    """
    faiss = _require("faiss", "faiss-cpu")
    sim = _similarity(similarity)
    X = _prepare(X, sim)
    d = X.shape[1]
    rbq = faiss.IndexRaBitQ(d, _faiss_metric(faiss, sim), int(bits))
    rbq.qb = int(qb)
    rbq.centered = bool(centered)
    top, rr = _faiss_wrap(faiss, rbq, d, rotate, seed)
    holder = {"rbq": rbq, "rr": rr, "top": top}  # keep SWIG objects alive

    def setter(qb=None, centered=None):
        if qb is not None:
            rbq.qb = int(qb)
        if centered is not None:
            rbq.centered = bool(centered)

    def label(p):
        rot = "RR+" if p["rotate"] else ""
        cen = " centered" if p["centered"] else ""
        return f"faiss {rot}RaBitQ{p['bits']} qb{p['qb']}{cen}{_refine_label(p)}"

    params = dict(
        bits=bits, qb=qb, centered=centered, rotate=rotate, seed=seed, _keys=("qb", "centered")
    )
    return _faiss_peer(faiss, label, sim, X, top, holder, rbq.code_size, params, setter, k_factor)


def faiss_rabitq_fastscan(
    X,
    similarity: str = "cosine",
    *,
    bits: int = 1,
    qb: int = 4,
    bbs: int = 32,
    k_factor: float | None = None,
    rotate: bool = True,
    seed: int | None = None,
) -> Peer:
    """faiss ``IndexRaBitQFastScan`` (``RR{d},RaBitQfs{bits}``); faiss's default qb is 8.

    Search parameters: ``qb`` (1-8; FastScan has no float query), ``k_factor``.
    ``peer.extra["aux_bytes_per_vector"]`` is faiss's ``compute_per_vector_storage_size``.
    """
    faiss = _require("faiss", "faiss-cpu")
    sim = _similarity(similarity)
    X = _prepare(X, sim)
    d = X.shape[1]
    fs = faiss.IndexRaBitQFastScan(d, _faiss_metric(faiss, sim), int(bbs), int(bits))
    fs.qb = int(qb)
    top, rr = _faiss_wrap(faiss, fs, d, rotate, seed)
    holder = {"fs": fs, "rr": rr, "top": top}

    def setter(qb=None):
        if qb is not None:
            fs.qb = int(qb)

    def label(p):
        rot = "RR+" if p["rotate"] else ""
        return f"faiss {rot}RaBitQFastScan{p['bits']} qb{p['qb']}{_refine_label(p)}"

    params = dict(bits=bits, qb=qb, bbs=bbs, rotate=rotate, seed=seed, _keys=("qb",))
    peer = _faiss_peer(faiss, label, sim, X, top, holder, fs.code_size, params, setter, k_factor)
    peer.extra["aux_bytes_per_vector"] = fs.compute_per_vector_storage_size()
    return peer


_SQ_TYPES = {
    "SQ8": "QT_8bit",
    "SQ6": "QT_6bit",
    "SQ4": "QT_4bit",
    "SQ8_uniform": "QT_8bit_uniform",
    "SQ4_uniform": "QT_4bit_uniform",
    "SQfp16": "QT_fp16",
    "SQbf16": "QT_bf16",
    "SQ8_direct": "QT_8bit_direct",
}


def faiss_sq(
    X,
    similarity: str = "cosine",
    *,
    qtype: str = "SQ8",
    k_factor: float | None = None,
    rotate: bool = False,
    seed: int | None = None,
) -> Peer:
    """faiss ``IndexScalarQuantizer``: per-dimension min/max scales (``SQ8``, ``SQ4``, ...).

    The float query is scored against decoded codes. ``qtype`` is a factory name from
    ``SQ8``, ``SQ6``, ``SQ4``, ``SQ8_uniform``, ``SQ4_uniform``, ``SQfp16``, ``SQbf16``.
    """
    faiss = _require("faiss", "faiss-cpu")
    if qtype not in _SQ_TYPES:
        raise ValueError(f"qtype must be one of {sorted(_SQ_TYPES)}; got {qtype!r}.")
    sim = _similarity(similarity)
    X = _prepare(X, sim)
    d = X.shape[1]
    qt = getattr(faiss.ScalarQuantizer, _SQ_TYPES[qtype])
    sq = faiss.IndexScalarQuantizer(d, qt, _faiss_metric(faiss, sim))
    top, rr = _faiss_wrap(faiss, sq, d, rotate, seed)
    holder = {"sq": sq, "rr": rr, "top": top}

    def label(p):
        return f"faiss {'RR+' if p['rotate'] else ''}{p['qtype']}{_refine_label(p)}"

    params = dict(qtype=qtype, rotate=rotate, seed=seed)
    return _faiss_peer(
        faiss, label, sim, X, top, holder, sq.code_size, params, lambda: None, k_factor
    )


def faiss_ivf_rabitq(
    X,
    similarity: str = "cosine",
    *,
    nlist: int,
    nprobe: int = 1,
    bits: int = 1,
    qb: int = 4,
    k_factor: float | None = None,
    rotate: bool = True,
    fastscan: bool = False,
    bbs: int = 32,
    seed: int | None = None,
) -> Peer:
    """faiss ``IndexIVFRaBitQ`` (``RR{d},IVF{nlist},RaBitQ{bits}``), optional refine.

    The coarse quantizer is an exact ``IndexFlat`` of the same metric (as the factory
    builds it), trained by faiss's k-means; codes are residuals to the list centroid.
    ``fastscan=True`` builds ``IndexIVFRaBitQFastScan``. Search parameters: ``nprobe``,
    ``qb``, ``k_factor``. IVF also stores an 8-byte id per vector
    (``extra["id_bytes_per_vector"]``).
    """
    faiss = _require("faiss", "faiss-cpu")
    sim = _similarity(similarity)
    X = _prepare(X, sim)
    d = X.shape[1]
    metric = _faiss_metric(faiss, sim)
    quantizer = faiss.IndexFlat(d, metric)
    if fastscan:
        ivf = faiss.IndexIVFRaBitQFastScan(
            quantizer, d, int(nlist), metric, int(bbs), True, int(bits)
        )
    else:
        ivf = faiss.IndexIVFRaBitQ(quantizer, d, int(nlist), metric, True, int(bits))
    ivf.nprobe = int(nprobe)
    ivf.qb = int(qb)
    top, rr = _faiss_wrap(faiss, ivf, d, rotate, seed)
    holder = {"ivf": ivf, "quantizer": quantizer, "rr": rr, "top": top}

    def setter(nprobe=None, qb=None):
        if nprobe is not None:
            ivf.nprobe = int(nprobe)
        if qb is not None:
            ivf.qb = int(qb)

    def label(p):
        kind = "IVFRaBitQFastScan" if p["fastscan"] else "IVFRaBitQ"
        rot = "RR+" if p["rotate"] else ""
        return (
            f"faiss {rot}{kind}{p['bits']} nlist{p['nlist']} nprobe{p['nprobe']} qb{p['qb']}"
            f"{_refine_label(p)}"
        )

    params = dict(
        nlist=nlist,
        nprobe=nprobe,
        bits=bits,
        qb=qb,
        rotate=rotate,
        fastscan=fastscan,
        seed=seed,
        _keys=("nprobe", "qb"),
    )
    peer = _faiss_peer(faiss, label, sim, X, top, holder, ivf.code_size, params, setter, k_factor)
    peer.extra["id_bytes_per_vector"] = 8
    return peer


def faiss_ivf_sq(
    X,
    similarity: str = "cosine",
    *,
    nlist: int,
    nprobe: int = 1,
    qtype: str = "SQ8",
    k_factor: float | None = None,
    seed: int | None = None,
) -> Peer:
    """faiss ``IndexIVFScalarQuantizer`` (``IVF{nlist},SQ8``): per-dimension scales trained on
    residuals to the list centroids (``by_residual``), float queries against decoded codes."""
    faiss = _require("faiss", "faiss-cpu")
    if qtype not in _SQ_TYPES:
        raise ValueError(f"qtype must be one of {sorted(_SQ_TYPES)}; got {qtype!r}.")
    sim = _similarity(similarity)
    X = _prepare(X, sim)
    d = X.shape[1]
    metric = _faiss_metric(faiss, sim)
    quantizer = faiss.IndexFlat(d, metric)
    qt = getattr(faiss.ScalarQuantizer, _SQ_TYPES[qtype])
    ivf = faiss.IndexIVFScalarQuantizer(quantizer, d, int(nlist), qt, metric, True)
    ivf.nprobe = int(nprobe)
    top, rr = _faiss_wrap(faiss, ivf, d, False, seed)
    holder = {"ivf": ivf, "quantizer": quantizer, "rr": rr, "top": top}

    def setter(nprobe=None):
        if nprobe is not None:
            ivf.nprobe = int(nprobe)

    def label(p):
        return f"faiss IVF{p['nlist']},{p['qtype']} nprobe{p['nprobe']}{_refine_label(p)}"

    params = dict(nlist=nlist, nprobe=nprobe, qtype=qtype, rotate=False, seed=seed,
                  _keys=("nprobe",))  # fmt: skip
    peer = _faiss_peer(faiss, label, sim, X, top, holder, ivf.code_size, params, setter, k_factor)
    peer.extra["id_bytes_per_vector"] = 8
    return peer


def faiss_hnsw_flat(
    X,
    similarity: str = "cosine",
    *,
    M: int = 16,
    ef_construction: int = 200,
    ef: int = 64,
) -> Peer:
    """faiss ``IndexHNSWFlat`` on float32 vectors: search parameter ``ef`` (``efSearch``)."""
    faiss = _require("faiss", "faiss-cpu")
    sim = _similarity(similarity)
    X = _prepare(X, sim)
    d = X.shape[1]
    index = faiss.IndexHNSWFlat(d, int(M), _faiss_metric(faiss, sim))
    index.hnsw.efConstruction = int(ef_construction)
    index.hnsw.efSearch = int(ef)
    holder = {"index": index}

    def setter(ef=None):
        if ef is not None:
            index.hnsw.efSearch = int(ef)

    def label(p):
        return f"faiss HNSWFlat M{p['M']} efC{p['ef_construction']} ef{p['ef']}"

    params = dict(M=M, ef_construction=ef_construction, ef=ef, rotate=False, seed=None,
                  _keys=("ef",))  # fmt: skip
    return _faiss_peer(faiss, label, sim, X, index, holder, 4 * d, params, setter, None)


# ----------------------------------------------------------------------------- hnswlib
def hnswlib_hnsw(
    X,
    similarity: str = "cosine",
    *,
    M: int = 16,
    ef_construction: int = 200,
    ef: int = 64,
    seed: int = 100,
    saved: str | os.PathLike | None = None,
) -> Peer:
    """hnswlib HNSW on float32 vectors (no quantization): ``space`` ip or l2.

    Search parameter: ``ef`` (hnswlib searches with ``max(ef, k)``). ``saved``: a folder
    that keeps the built graph (``save_index``) and its build seconds for later runs; a
    graph already there is loaded instead of built (a 1M graph takes minutes).
    ``bytes_per_vector`` is the float vector (4 d); ``extra["graph_bytes_per_vector"]`` is
    hnswlib's level-0 record overhead, ``2 M`` links of 4 bytes + a 4-byte count + an 8-byte
    label (upper levels, about 1/M of the nodes, excluded).
    """
    hnswlib = _require("hnswlib", "hnswlib")
    sim = _similarity(similarity)
    X = _prepare(X, sim)
    n, d = X.shape
    space = "ip" if _is_ip(sim) else "l2"
    folder = None if saved is None else Path(saved)
    index = hnswlib.Index(space=space, dim=d)
    if folder is not None and (folder / "build.json").exists():
        index.load_index(str(folder / "hnswlib.bin"), max_elements=n)
        seconds = json.loads((folder / "build.json").read_text())["seconds"]
    else:
        t0 = time.perf_counter()
        index.init_index(
            max_elements=n, ef_construction=int(ef_construction), M=int(M), random_seed=int(seed)
        )
        index.add_items(X, np.arange(n), num_threads=_threads())
        seconds = time.perf_counter() - t0
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
            index.save_index(str(folder / "hnswlib.bin"))
            (folder / "build.json").write_text(json.dumps({"seconds": seconds}))
    index.set_ef(int(ef))

    def search(Q, k):
        labels, dist = index.knn_query(Q, k=k, num_threads=_threads())
        return (1.0 - dist if space == "ip" else -dist), labels.astype(np.int64)

    def setter(ef=None):
        if ef is not None:
            index.set_ef(int(ef))

    def label(p):
        return f"hnswlib M{p['M']} efC{p['ef_construction']} ef{p['ef']}"

    params = dict(M=M, ef_construction=ef_construction, ef=ef, seed=seed, _search_keys=("ef",))
    return _make(
        label,
        "hnswlib",
        sim,
        seconds,
        4 * d,
        params,
        index,
        search,
        setter,
        d,
        graph_bytes_per_vector=8 * M + 4 + 8,
    )


# ----------------------------------------------------------------------------- usearch
_USEARCH_BITS = {
    "f64": 64,
    "f32": 32,
    "f16": 16,
    "bf16": 16,
    "i8": 8,
    "u8": 8,
    "e4m3": 8,
    "e5m2": 8,
    "b1": 1,
}


def usearch_hnsw(
    X,
    similarity: str = "cosine",
    *,
    dtype: str = "f32",
    connectivity: int = 16,
    expansion_add: int = 128,
    expansion_search: int = 64,
    exact: bool = False,
) -> Peer:
    """usearch HNSW (metric ``cos``, ``ip`` or ``l2sq``) with the stored ``dtype``.

    Pitfall: ``i8`` normalizes every vector to unit length and scales by 127 whatever the
    metric, so it is only meaningful for cosine; other similarities warn. ``exact=True``
    searches by brute force over the stored dtype. Search parameters: ``expansion_search``,
    ``exact``. ``extra["graph_bytes_per_vector"]`` is ``memory_usage / n`` minus the vector.
    """
    _require("usearch", "usearch")
    from usearch.index import Index

    sim = _similarity(similarity)
    if dtype not in _USEARCH_BITS:
        raise ValueError(f"dtype must be one of {sorted(_USEARCH_BITS)}; got {dtype!r}.")
    if dtype in ("i8", "u8") and sim != "cosine":
        warnings.warn(
            f"usearch {dtype} normalizes vectors (magnitude lost): results for {sim} are not "
            "meaningful; use similarity='cosine' or dtype='f16'/'f32'.",
            stacklevel=2,
        )
    X = _prepare(X, sim)
    n, d = X.shape
    metric = {"cosine": "cos", "euclidean": "l2sq"}.get(sim, "ip")
    t0 = time.perf_counter()
    index = Index(
        ndim=d,
        metric=metric,
        dtype=dtype,
        connectivity=int(connectivity),
        expansion_add=int(expansion_add),
        expansion_search=int(expansion_search),
    )
    index.add(np.arange(n, dtype=np.uint64), X, threads=_threads())
    seconds = time.perf_counter() - t0
    state = {"exact": bool(exact)}

    def search(Q, k):
        m = index.search(Q, k, threads=_threads(), exact=state["exact"])
        keys = np.asarray(m.keys).reshape(len(Q), -1)[:, :k].astype(np.int64)
        dist = np.asarray(m.distances, dtype=np.float32).reshape(len(Q), -1)[:, :k]
        counts = np.asarray(m.counts).reshape(-1, 1)
        absent = np.arange(keys.shape[1])[None, :] >= counts
        keys[absent] = -1
        scores = -dist if metric == "l2sq" else 1.0 - dist
        scores[absent] = -np.inf
        return scores, keys

    def setter(expansion_search=None, exact=None):
        if expansion_search is not None:
            index.expansion_search = int(expansion_search)
        if exact is not None:
            state["exact"] = bool(exact)

    def label(p):
        mode = " exact" if p["exact"] else f" conn{p['connectivity']} efS{p['expansion_search']}"
        return f"usearch {p['dtype']} {metric}{mode}"

    bpv = d * _USEARCH_BITS[dtype] / 8
    params = dict(
        dtype=dtype,
        connectivity=connectivity,
        expansion_add=expansion_add,
        expansion_search=expansion_search,
        exact=exact,
        _search_keys=("expansion_search", "exact"),
    )
    return _make(
        label,
        "usearch",
        sim,
        seconds,
        bpv,
        params,
        index,
        search,
        setter,
        d,
        graph_bytes_per_vector=index.memory_usage / n - bpv,
    )


# ----------------------------------------------------------------------------- rabitqlib
def rabitqlib_ivf(
    X,
    similarity: str = "cosine",
    *,
    nlist: int,
    nprobe: int = 1,
    bits: int = 1,
    high_accuracy: bool | None = None,
    fast_quantization: bool = False,
    kmeans_params: dict | None = None,
) -> Peer:
    """rabitqlib ``IvfIndex`` (official RaBitQ library; rotation internal), ``nbits=bits``.

    Centroids and assignments come from ``RaBitQKMeans(d, nlist, final_assignment=Exact,
    **kmeans_params)``, as peers.md shows; rabitqlib accepts only ``l2`` and ``ip``, so cosine
    is normalized + ``ip``. Search parameters: ``nprobe``, ``high_accuracy`` (16- vs 8-bit
    FastScan LUT; None = automatic). ``bytes_per_vector`` = saved file bytes / n (ids,
    centroids and list headers included: rabitqlib reports no code size).
    """
    rq = _require("rabitqlib", "rabitqlib")
    sim = _similarity(similarity)
    X = _prepare(X, sim)
    n, d = X.shape
    metric = "ip" if _is_ip(sim) else "l2"
    km_kw = {"final_assignment": rq.FinalAssignmentMode.Exact, **(kmeans_params or {})}
    t0 = time.perf_counter()
    km = rq.RaBitQKMeans(d, int(nlist), num_threads=_threads(), **km_kw)
    km.train(X)
    t1 = time.perf_counter()
    index = rq.IvfIndex(
        dim=d, max_elements=n, num_clusters=int(nlist), nbits=int(bits), metric=metric
    )
    index.build(
        X,
        km.centroids,
        km.assignments,
        num_threads=_threads(),
        fast_quantization=bool(fast_quantization),
    )
    t2 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "ivf.bin")
        index.save(path)
        file_bytes = os.path.getsize(path)
    state = {"nprobe": int(nprobe), "high_accuracy": high_accuracy}

    def search(Q, k):
        ids, dist = index.search(
            Q,
            k=k,
            nprobe=state["nprobe"],
            high_accuracy=state["high_accuracy"],
            num_threads=_threads(),
        )
        ids = np.asarray(ids)
        absent = ids == np.iinfo(np.uint32).max
        out = ids.astype(np.int64)
        out[absent] = -1
        # Estimated squared L2, or negative inner product: smaller first in both cases.
        scores = -np.asarray(dist, dtype=np.float32)
        scores[absent] = -np.inf
        return scores, out

    def setter(nprobe=None, high_accuracy="keep"):
        if nprobe is not None:
            state["nprobe"] = int(nprobe)
        if high_accuracy != "keep":
            state["high_accuracy"] = high_accuracy

    def label(p):
        return f"rabitqlib IVF{p['nlist']} {p['bits']}-bit nprobe{p['nprobe']} ({metric})"

    params = dict(
        nlist=nlist,
        nprobe=nprobe,
        bits=bits,
        high_accuracy=high_accuracy,
        fast_quantization=fast_quantization,
        _search_keys=("nprobe", "high_accuracy"),
    )
    return _make(
        label,
        "rabitqlib",
        sim,
        t2 - t0,
        file_bytes / n,
        params,
        index,
        search,
        setter,
        d,
        kmeans_seconds=t1 - t0,
        kmeans=km,
    )


# ----------------------------------------------------------------------------- registry
PEERS: dict[str, Callable[..., Peer]] = {
    "faiss_rabitq": faiss_rabitq,
    "faiss_rabitq_fastscan": faiss_rabitq_fastscan,
    "faiss_sq": faiss_sq,
    "faiss_ivf_rabitq": faiss_ivf_rabitq,
    "hnswlib_hnsw": hnswlib_hnsw,
    "usearch_hnsw": usearch_hnsw,
    "rabitqlib_ivf": rabitqlib_ivf,
}


def build(kind: str, X, similarity: str = "cosine", **params) -> Peer:
    """Build the peer ``kind`` (a key of ``PEERS``) on ``X`` with ``params``."""
    if kind not in PEERS:
        raise ValueError(f"kind must be one of {sorted(PEERS)}; got {kind!r}.")
    return PEERS[kind](X, similarity, **params)
