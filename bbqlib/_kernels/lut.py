"""Lookup-table scan of plane-packed docs against queries of at most 4 bits (FastScan-style).

The popcount kernels spend ``query planes × doc planes`` POPCNTs per 64 dimensions and doc.
Here the doc codes of 32 docs are transposed into a block, one byte per doc for every 8
dimensions of a plane, and each query becomes a table per 4 dimensions: for nibble pattern
``v``, ``T_g[v] = Σ_u bit(v, 3 - u) · y[4g + u]`` (``y``: the query's integer codes). Then

    <X_t, Y> = Σ_p T_{hi(p)}[byte_p >> 4] + T_{lo(p)}[byte_p & 15]

and a byte shuffle (``vpshufb``) looks up 32 docs at once. With 4-bit queries a table entry
is at most 60, four of them at most 240: they are summed in bytes and widened to 16-bit
accumulators (even and odd docs split, as faiss's FastScan does), which hold up to 256 steps
of four tables before they are flushed. The result is the exact integer ``<X, Y>`` of the
plane kernels, so keys and rankings are bit for bit those of
:func:`bbqlib._kernels.scoring.scan_planes`.

Layouts (built once per set of codes by :func:`bbqlib.scoring.DocCodes.lut_layout`):

* docs: uint8 ``[n_blocks, planes * P * 32]`` with ``P = padded_dim / 8``; byte
  ``(t * P + p) * 32 + j`` of block ``b`` is byte ``p`` of plane ``t`` of doc ``32 b + j``
  (the packed bytes of :mod:`bbqlib.packing`, transposed; missing docs are zero);
* tables: uint8 ``[nq, 2 * P * 32]``; table ``2p`` serves the low nibble of byte ``p``
  (dimensions ``8p + 4 .. 8p + 7``), table ``2p + 1`` the high nibble (``8p .. 8p + 3``),
  each 16 entries stored twice (one copy per 128-bit lane of the shuffle).

The shuffle is emitted as LLVM IR (numba has no byte-shuffle intrinsic), so these kernels
compile only where numba targets this CPU and it has AVX2: :func:`avx2_available` says so,
and :mod:`bbqlib.scoring` falls back to the popcount scan elsewhere (same results).
``tests/reference/lut.py`` is the NumPy reference.
"""

from __future__ import annotations

import functools
import os

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ..encoding import LUT_LANES
from .policy import kernel, parallel_kernel, prange
from .scoring import BLOCK, _offer_block, _offer_entries

__all__ = [
    "LANES",
    "MAX_STEPS",
    "avx2_available",
    "build_tables",
    "tables_from_codes",
    "lut_block_dot",
    "scan_lut",
    "ivf_scan_lut",
]

#: Docs per block (one byte lane each in a 256-bit register).
LANES = LUT_LANES
#: Steps of four tables (16 dimensions) the 16-bit accumulators hold: 256 · 240 < 2^16.
MAX_STEPS = 256
_BLOCKS_PER_TILE = BLOCK // LANES


def avx2_available() -> bool:
    """True when numba compiles for this CPU and the CPU has AVX2 (``vpshufb`` on 32 bytes).

    ``BBQLIB_NO_AVX2=1`` turns the lookup-table scan off (the popcount scan serves instead).
    """
    if os.environ.get("BBQLIB_NO_AVX2", "") not in ("", "0"):
        return False
    return _host_has_avx2()


@functools.cache
def _host_has_avx2() -> bool:
    # Asked once per process: LLVM's feature query is not free, and the answer never changes.
    import numba
    from llvmlite import binding

    if numba.config.CPU_NAME not in (None, "host") or numba.config.CPU_FEATURES:
        return False
    return bool(binding.get_host_cpu_features().get("avx2", False))


_I8 = ir.IntType(8)
_I16 = ir.IntType(16)
_I32 = ir.IntType(32)
_V32I8 = ir.VectorType(_I8, 32)
_V16I16 = ir.VectorType(_I16, 16)
_V16I32 = ir.VectorType(_I32, 16)
_V32I32 = ir.VectorType(_I32, 32)


def _splat(ty, value):
    return ir.Constant(ty, [ir.Constant(ty.element, value)] * ty.count)


@intrinsic
def _tables_avx2(typingctx, codes, code_off, tables, table_off, steps, out):
    """``out[j] += Σ`` over ``steps`` steps of two code bytes and four tables (see module doc).

    codes, tables: uint8 1-D arrays; code_off / table_off: byte offsets of the first step;
    out: int32 1-D array of at least 32. ``steps <= MAX_STEPS`` (the caller chunks).
    """
    sig = types.void(codes, types.int64, tables, types.int64, types.int64, out)

    def codegen(context, builder, signature, args):
        codes_v, coff, tables_v, toff, nsteps, out_v = args
        code_ptr = context.make_array(signature.args[0])(context, builder, codes_v).data
        table_ptr = context.make_array(signature.args[2])(context, builder, tables_v).data
        out_ptr = context.make_array(signature.args[5])(context, builder, out_v).data
        if not avx2_available():
            raise RuntimeError("the lookup-table kernel needs AVX2 on the CPU numba targets")
        shuffle = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(_V32I8, [_V32I8, _V32I8]), "llvm.x86.avx2.pshuf.b"
        )
        low4 = _splat(_V32I8, 15)
        four = _splat(_V32I8, 4)
        eight = _splat(_V16I16, 8)
        acc_even = cgutils.alloca_once_value(builder, _splat(_V16I16, 0))
        acc_odd = cgutils.alloca_once_value(builder, _splat(_V16I16, 0))

        def vec_at(base, offset):
            ptr = builder.gep(base, [offset])
            return builder.load(builder.bitcast(ptr, _V32I8.as_pointer()), align=1)

        with cgutils.for_range(builder, nsteps) as loop:
            i = loop.index
            c0 = builder.add(coff, builder.mul(i, ir.Constant(ir.IntType(64), 64)))
            t0 = builder.add(toff, builder.mul(i, ir.Constant(ir.IntType(64), 128)))
            total = None
            for half in range(2):
                v = vec_at(code_ptr, builder.add(c0, ir.Constant(ir.IntType(64), 32 * half)))
                lo = builder.and_(v, low4)
                hi = builder.and_(builder.lshr(v, four), low4)
                for nib, idx in ((0, lo), (1, hi)):
                    table_at = builder.add(t0, ir.Constant(ir.IntType(64), 32 * (2 * half + nib)))
                    looked = builder.call(shuffle, [vec_at(table_ptr, table_at), idx])
                    total = looked if total is None else builder.add(total, looked)
            wide = builder.bitcast(total, _V16I16)
            builder.store(builder.add(builder.load(acc_even), wide), acc_even)
            odd = builder.lshr(wide, eight)
            builder.store(builder.add(builder.load(acc_odd), odd), acc_odd)

        # acc_even holds even + 256 * odd (mod 2^16): subtract the odd part back out.
        odd = builder.load(acc_odd)
        even = builder.sub(builder.load(acc_even), builder.shl(odd, eight))
        even32 = builder.zext(even, _V16I32)
        odd32 = builder.zext(odd, _V16I32)
        interleave = ir.Constant(
            ir.VectorType(_I32, 32), [ir.Constant(_I32, v) for w in range(16) for v in (w, w + 16)]
        )
        sums = builder.shuffle_vector(even32, odd32, interleave)
        out_vec = builder.bitcast(out_ptr, _V32I32.as_pointer())
        builder.store(builder.add(builder.load(out_vec, align=4), sums), out_vec, align=4)
        return context.get_dummy_value()

    return sig, codegen


@kernel(inline="always")
def lut_block_dot(block, tables, planes, pairs, out):
    """Integer ``<X, Y>`` of the 32 docs of ``block`` with one query's ``tables``, into
    ``out`` (int32 [32], overwritten): ``Σ_t 2^t <X_t, Y>`` over the doc planes."""
    for j in range(LANES):
        out[j] = 0
    steps_per_plane = pairs // 2
    for t in range(planes - 1, -1, -1):
        if t < planes - 1:
            for j in range(LANES):
                out[j] *= 2
        for s0 in range(0, steps_per_plane, MAX_STEPS):
            steps = min(MAX_STEPS, steps_per_plane - s0)
            code_off = (t * pairs + 2 * s0) * LANES
            table_off = 4 * s0 * LANES
            _tables_avx2(block, code_off, tables, table_off, steps, out)


#: ``_NIBBLE_MASK[u, v]`` is 0xFF where nibble pattern ``v % 16`` has bit ``3 - u`` set: a
#: table is ``Σ_u y_u & mask_u``, 32 bytes at a time (LLVM vectorizes the loop).
_NIBBLE_MASK = np.array(
    [[0xFF if ((v % 16) >> (3 - u)) & 1 else 0 for v in range(2 * 16)] for u in range(4)],
    dtype=np.uint8,
)


@kernel(inline="always")
def tables_from_codes(y, pairs, out):
    """One query's tables (module doc) from its integer codes ``y`` (uint8, >= 8 * pairs)."""
    for t in range(2 * pairs):
        first = 8 * (t >> 1) + (4 if (t & 1) == 0 else 0)
        y0 = y[first]
        y1 = y[first + 1]
        y2 = y[first + 2]
        y3 = y[first + 3]
        base = 2 * 16 * t
        for v in range(2 * 16):
            out[base + v] = (
                (y0 & _NIBBLE_MASK[0, v])
                + (y1 & _NIBBLE_MASK[1, v])
                + (y2 & _NIBBLE_MASK[2, v])
                + (y3 & _NIBBLE_MASK[3, v])
            )


#: Query-pairs (8 dimensions of a query) per thread: enough work to outweigh a parallel
#: region's fork and join (``policy.threads_for``; docs/threads.md lists every such constant,
#: ``benchmarks/serving/serving.py --sections contention`` measures searches under load).
TABLE_PAIRS_PER_THREAD = 330_000


def _table_work(codes, pairs, out) -> int:
    return codes.shape[0] * pairs


@parallel_kernel(work=_table_work, min_work=TABLE_PAIRS_PER_THREAD)
def build_tables(codes, pairs, out):
    """Tables uint8 [nq, 2 * pairs * 32] of query codes ``codes`` uint8 [nq, >= 8 * pairs]."""
    for q in prange(codes.shape[0]):
        tables_from_codes(codes[q], pairs, out[q])


@kernel(inline="always")
def _tile_keys(dots, m, row0, cols, qf, dim, cc, is_l2, worst, out):
    """Keys of ``m`` docs from row ``row0`` (``_block_keys``'s arithmetic, operation for
    operation, on factor columns ``cols`` float32 [4, n]); returns how many reach ``worst``.

    Column reads and an integer count keep the loop vectorizable; a tile none of whose keys
    reaches the heap's worst entry (most tiles, once the heap is warm) is then not offered.
    """
    ay = qf[0]
    ly = qf[1]
    add_y = qf[3]
    x_term = dim * ay + ly * qf[2]
    a_col = cols[0]
    l_col = cols[1]
    sum_col = cols[2]
    add_col = cols[3]
    hits = 0
    for j in range(m):
        row = row0 + j
        ax = np.float64(a_col[row])
        lx = np.float64(l_col[row])
        s = ax * x_term + lx * (ay * sum_col[row] + ly * np.float64(dots[j]))
        if is_l2:
            key = -(add_y + add_col[row] - 2.0 * s)
        else:
            key = s + add_y + add_col[row] - cc
        out[j] = key
        hits += key >= worst
    return hits


def _scan_lut_one_thread(*args) -> None:
    """:func:`scan_lut` on the calling thread: its chunks one after the other through the
    compiled body (no single-threaded twin to compile)."""
    blocks, out_keys, out_ids = args[2], args[12], args[13]
    n_blocks = blocks.shape[0]
    chunks = out_keys.shape[0]
    per = (n_blocks + chunks - 1) // chunks
    for c in range(chunks):
        _scan_lut_range(*args[:12], out_keys[c], out_ids[c], c * per, min(n_blocks, (c + 1) * per))


@parallel_kernel(serial=_scan_lut_one_thread)
def scan_lut(
    tables,
    qf,
    blocks,
    cols,
    planes,
    pairs,
    n,
    dim,
    cc,
    is_l2,
    allowed,
    id_base,
    out_keys,
    out_ids,
):
    """Top-k scan (as :func:`bbqlib._kernels.scoring.scan_planes`) over the block layout.

    ``cols`` holds the doc factors as columns, float32 [4, n]. Threads take contiguous
    ranges of blocks; each walks tiles of ``BLOCK`` docs and, per query, fills the tile's
    integer dots, then its keys, then offers those that can enter the heap.
    """
    n_blocks = blocks.shape[0]
    chunks = out_keys.shape[0]
    per = (n_blocks + chunks - 1) // chunks
    for c in prange(chunks):
        _scan_lut_range(
            tables, qf, blocks, cols, planes, pairs, n, dim, cc, is_l2, allowed, id_base,
            out_keys[c], out_ids[c], c * per, min(n_blocks, (c + 1) * per),
        )  # fmt: skip


@kernel
def _scan_lut_range(
    tables, qf, blocks, cols, planes, pairs, n, dim, cc, is_l2, allowed, id_base,
    out_keys, out_ids, start, stop,
):  # fmt: skip
    """Blocks ``start:stop`` of :func:`scan_lut` into one set of heaps (``[nq, k]``).

    Not inlined: one compiled body serves the multi-threaded scan and one-thread calls
    (:func:`_scan_lut_one_thread`), and the parallel compiler only wraps a call.
    """
    dots = np.empty(BLOCK, dtype=np.int32)
    tile_keys = np.empty(BLOCK, dtype=np.float64)
    for t0 in range(start, stop, _BLOCKS_PER_TILE):
        t1 = min(stop, t0 + _BLOCKS_PER_TILE)
        row0 = t0 * LANES
        m = min(n, t1 * LANES) - row0
        if m <= 0:
            break
        for q in range(tables.shape[0]):
            for b in range(t0, t1):
                lut_block_dot(blocks[b], tables[q], planes, pairs, dots[(b - t0) * LANES :])
            heap_keys = out_keys[q]
            worst = heap_keys[0]
            if _tile_keys(dots, m, row0, cols, qf[q], dim, cc, is_l2, worst, tile_keys):
                _offer_block(heap_keys, out_ids[q], tile_keys, m, row0, allowed, id_base)


@parallel_kernel
def ivf_scan_lut(
    qb,
    qf,
    pair_list,
    pair_start,
    list_start,
    list_block_start,
    blocks,
    df,
    ids,
    list_cc,
    planes,
    pairs,
    dim,
    is_l2,
    allowed,
    out_keys,
    out_ids,
):
    """:func:`bbqlib._kernels.ivf.ivf_scan_planes` over per-list blocks (same heaps, same keys).

    ``qb`` uint8 [P, >= 8 * pairs]: each pair's integer query codes (zero past ``dim``); the
    pair's tables are built here, in a buffer that stays in L1. List ``j``'s entries
    ``list_start[j] : list_start[j + 1]`` sit in ``blocks[list_block_start[j] :
    list_block_start[j + 1]]``, 32 to a block in entry order (the last block zero-padded).
    """
    nq = pair_start.shape[0] - 1
    cols = df.T
    for q in prange(nq):
        tables = np.empty(2 * pairs * LANES, dtype=np.uint8)
        dots = np.empty(BLOCK, dtype=np.int32)
        tile_keys = np.empty(BLOCK, dtype=np.float64)
        keys = out_keys[q]
        heap_ids = out_ids[q]
        for p in range(pair_start[q], pair_start[q + 1]):
            lst = pair_list[p]
            tables_from_codes(qb[p], pairs, tables)
            e0 = list_start[lst]
            size = list_start[lst + 1] - e0
            first_block = list_block_start[lst]
            for t0 in range(0, size, BLOCK):
                m = min(size - t0, BLOCK)
                b0 = first_block + t0 // LANES
                for bi in range((m + LANES - 1) // LANES):
                    lut_block_dot(blocks[b0 + bi], tables, planes, pairs, dots[bi * LANES :])
                row0 = e0 + t0
                if _tile_keys(
                    dots, m, row0, cols, qf[p], dim, list_cc[lst], is_l2, keys[0], tile_keys
                ):
                    _offer_entries(keys, heap_ids, tile_keys, m, row0, ids, allowed)
