"""8-lane float64 row sums as LLVM vector IR, shared by the OSQ and rerank kernels.

A *lane sum* of ``d`` terms: lane ``j`` of 8 adds the terms ``8t + j`` in order, starting from
``+0.0``; the lanes are combined as ``((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))``
(:func:`combine`); then the ``d mod 8`` trailing terms are added one by one. The order is
fixed, so a sum does not depend on the machine or the thread count, and it is one 8-wide
vector, so the loop runs in SIMD registers without fastmath: numba compiles with the SLP
vectorizer off and the loop vectorizer may not reorder float sums, so the block loop is
written as generic LLVM vector IR (:func:`lane_loop`; no target-specific intrinsics). It
becomes one ``zmm`` register per accumulator with AVX-512, two ``ymm`` with AVX2. Products
and sums are separate ``fmul`` / ``fadd`` (no contraction into FMA), as in scalar code.

:func:`lane_dots` and :func:`lane_sqdists` are the inner products and squared distances of a
query row with a tuple of rows in this order; :mod:`bbqlib._kernels.osq` builds its row
statistics and optimizer passes from :func:`lane_loop`. NumPy twins:
``tests/reference/osq.py::lane_sum`` and ``tests/reference/rerank.py``.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.errors import TypingError
from numba.extending import intrinsic

__all__ = [
    "LANES",
    "F32",
    "F64",
    "I64",
    "V8F32",
    "V8F64",
    "check_rows",
    "combine",
    "lane_dots",
    "lane_loop",
    "lane_sqdists",
    "row_args",
    "splat",
    "widen",
]

#: Lanes of every row sum (one 8-wide vector; module docstring).
LANES = 8

F16 = ir.HalfType()
F32 = ir.FloatType()
F64 = ir.DoubleType()
I16 = ir.IntType(16)
I64 = ir.IntType(64)
V8F32 = ir.VectorType(F32, LANES)
V8F64 = ir.VectorType(F64, LANES)

#: Row dtypes of the lane loops. numba has no float16 type, so float16 rows come as their
#: ``uint16`` bit patterns (``arr.view(np.uint16)``) and are widened as IEEE halves.
_ROW_DTYPES = (types.float32, types.float64, types.uint16)


def splat(builder, value):
    """An LLVM double (or a Python float) in all 8 lanes."""
    if not isinstance(value, ir.Value):
        return ir.Constant(V8F64, [ir.Constant(F64, value)] * LANES)
    vec = builder.insert_element(ir.Constant(V8F64, ir.Undefined), value, ir.Constant(I64, 0))
    mask = ir.Constant(ir.VectorType(ir.IntType(32), LANES), None)  # all lanes from lane 0
    return builder.shuffle_vector(vec, vec, mask)


def widen(builder, value):
    """A float32 value or 8-lane vector as float64 (exact); float64 as it is; 16-bit integers
    are float16 bit patterns (``_ROW_DTYPES``), widened exactly too."""
    if isinstance(value.type, ir.VectorType):
        if value.type.element == I16:
            value = builder.bitcast(value, ir.VectorType(F16, LANES))
        return builder.fpext(value, V8F64) if value.type.element in (F16, F32) else value
    if value.type == I16:
        value = builder.bitcast(value, F16)
    return builder.fpext(value, F64) if value.type in (F16, F32) else value


def combine(builder, vec, op):
    """``op(op(op(l0, l1), op(l2, l3)), op(op(l4, l5), op(l6, l7)))`` of an 8-lane vector."""
    lanes = [builder.extract_element(vec, ir.Constant(I64, j)) for j in range(LANES)]
    while len(lanes) > 1:
        lanes = [op(lanes[j], lanes[j + 1]) for j in range(0, len(lanes), 2)]
    return lanes[0]


def check_rows(dtypes=_ROW_DTYPES, **rows):
    """Typing guard: the lane loops load 8 elements at a time from contiguous 1-D rows."""
    for name, arr in rows.items():
        ok = isinstance(arr, types.Array) and arr.ndim == 1 and arr.layout == "C"
        if not (ok and arr.dtype in dtypes):
            allowed = " or ".join(str(dt) for dt in dtypes)
            raise TypingError(f"{name} must be a C-contiguous 1-D {allowed} array, got {arr}")


def row_args(signature, args, n):
    """The first ``n`` arguments of an intrinsic as ``(numba type, LLVM value)`` rows."""
    return list(zip(signature.args[:n], args[:n], strict=True))


def _row_pointers(context, builder, rows):
    return [context.make_array(ty)(context, builder, arr).data for ty, arr in rows]


def lane_loop(context, builder, rows, n_blocks, init, body):
    """Emit ``for t in range(n_blocks)`` over 8 elements of each of the 1-D ``rows``.

    ``rows`` are ``(numba array type, LLVM array value)`` pairs checked by
    :func:`check_rows`; ``init`` the start vectors of the accumulators; ``body(vecs, accs)``
    returns the new accumulators from the rows' 8-element vectors (in the rows' dtypes;
    :func:`widen` makes them float64). Returns the final accumulator vectors.
    """
    loads = []
    for (ty, _), ptr in zip(rows, _row_pointers(context, builder, rows), strict=True):
        vec_type = ir.VectorType(context.get_data_type(ty.dtype), LANES)
        loads.append((ptr, vec_type.as_pointer(), ty.dtype.bitwidth // 8))
    accs = [cgutils.alloca_once_value(builder, vec) for vec in init]
    with cgutils.for_range(builder, n_blocks) as loop:
        at = builder.mul(loop.index, ir.Constant(I64, LANES))
        vecs = [
            builder.load(builder.bitcast(builder.gep(ptr, [at]), vec_ptr), align=size)
            for ptr, vec_ptr, size in loads
        ]
        new = body(vecs, [builder.load(acc) for acc in accs])
        for acc, vec in zip(accs, new, strict=True):
            builder.store(vec, acc)
    return [builder.load(acc) for acc in accs]


# ------------------------------------------------------------------------------ query x rows
def _query_rows_sums(q, vs, term):
    """Typing and codegen of ``(q, vs) -> (float64, ...)``: one full lane sum per row.

    Sum ``r`` adds ``term(q_i, v_i)`` of ``q`` and ``vs[r]`` (both widened to float64) over
    ``d = len(q)`` elements: 8 lanes over the first ``8 * (d // 8)``, combined, then the
    trailing elements in order. The rows of ``vs`` are interleaved, which keeps several
    accumulator chains and several rows' cache misses in flight; each sum is the one of
    ``q`` and that row alone. Rows must be at least ``d`` long (not checked).
    """
    if not (isinstance(vs, types.UniTuple) and vs.count >= 1):
        raise TypingError(f"vs must be a tuple of rows of one type, got {vs}")
    check_rows(q=q, v=vs.dtype)
    n = vs.count
    sig = types.UniTuple(types.float64, n)(q, vs)

    def codegen(context, builder, signature, args):
        rows = [(q, args[0])] + [(vs.dtype, v) for v in cgutils.unpack_tuple(builder, args[1])]
        d = cgutils.unpack_tuple(builder, context.make_array(q)(context, builder, args[0]).shape)
        blocks = builder.udiv(d[0], ir.Constant(I64, LANES))

        def body(vecs, accs):
            q8 = widen(builder, vecs[0])
            terms = (term(builder, q8, widen(builder, v8)) for v8 in vecs[1:])
            return [builder.fadd(acc, t) for acc, t in zip(accs, terms, strict=True)]

        out = lane_loop(context, builder, rows, blocks, [splat(builder, 0.0)] * n, body)
        sums = [cgutils.alloca_once_value(builder, combine(builder, v, builder.fadd)) for v in out]
        ptrs = _row_pointers(context, builder, rows)
        start = builder.mul(blocks, ir.Constant(I64, LANES))
        with cgutils.for_range_slice(builder, start, d[0], ir.Constant(I64, 1)) as (i, _):
            qi = widen(builder, builder.load(builder.gep(ptrs[0], [i])))
            for acc, ptr in zip(sums, ptrs[1:], strict=True):
                t = term(builder, qi, widen(builder, builder.load(builder.gep(ptr, [i]))))
                builder.store(builder.fadd(builder.load(acc), t), acc)
        values = [builder.load(acc) for acc in sums]
        return context.make_tuple(builder, signature.return_type, values)

    return sig, codegen


def _product(builder, q, v):
    return builder.fmul(q, v)


def _squared_difference(builder, q, v):
    diff = builder.fsub(q, v)
    return builder.fmul(diff, diff)


@intrinsic
def lane_dots(typingctx, q, vs):
    """``(<q, v> for v in vs)``: float64 terms ``q_i v_i``, lane sums.

    ``q`` and the rows of ``vs`` (a tuple of one type) C-contiguous 1-D float32/float64, or
    uint16 holding float16 bit patterns.
    """
    return _query_rows_sums(q, vs, _product)


@intrinsic
def lane_sqdists(typingctx, q, vs):
    """``(||q - v||² for v in vs)``: terms ``(float64(q_i) - float64(v_i))²``, lane sums."""
    return _query_rows_sums(q, vs, _squared_difference)
