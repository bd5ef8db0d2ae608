"""Float query × bit-plane doc dots straight from the planes, as LLVM vector IR.

A doc of ``P`` bit planes has codes ``X_i = Σ_p 2^p b_pi``, so ``<y, X> = Σ_i Σ_p 2^p y_i b_pi``:
the query's entries, scaled by ``2^p`` (exact), added where plane ``p`` has a 1 bit (masked
adds), with no unpacking of the codes. :func:`plane_float_dot` fixes the order of every sum,
so the value does not depend on the machine, the caller or the number of queries scored
together (:func:`plane_float_dots` scores several queries or several docs in one pass):

* the query is read in *lanes*: lane ``8j + b`` holds dimension ``8j + 7 - b``, the one whose
  bit is bit ``b`` of byte ``j`` of each plane (:mod:`bbqlib.packing` packs MSB first), zero
  past the true dimension (:func:`pad_query`), ``64 · words`` lanes (``words`` uint64 words
  per plane);
* ``LANES`` (64) float32 accumulators start at ``+0.0``; for each word ``w`` in order and
  each plane ``p`` in order, accumulator ``l`` of lane ``64 w + l`` becomes ``fma(2^p, y, a)``
  where the bit is set (one rounding: ``2^p y`` is exact) and stays where it is not;
* the 64 accumulators are folded in halves: ``v[:32] + v[32:]``, then ``[:16] + [16:]``, ...
  to one float32, returned as float64.

Each dot is a float32 summation tree of the terms ``2^p y_i b_pi`` (``Σ |terms| = Σ |y_i| X_i``)
of height ``h = P · words + 6``, so its error is within ``γ_h Σ |y_i| X_i`` (Higham): the
bound of a float32 dot of ``h`` terms, well below the ``γ_d`` of a dot summed in order
(``d = 384``, 2 planes: ``h = 18``).

The IR is generic (16-lane masks from two bytes, selects, ``llvm.fmuladd``): with AVX-512 a
mask register and one masked FMA per 16 lanes and plane; AVX2 and other targets get LLVM's
lowering of the same operations, with the same values. NumPy twin:
``tests/reference/plane_float.py``.
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.errors import TypingError
from numba.extending import intrinsic

from .policy import kernel

__all__ = ["LANES", "plane_float_dot", "plane_float_dots", "pad_query"]

#: Lanes of a plane sum: one uint64 word of a plane, 64 dimensions.
LANES = 64
#: Plane counts compiled without a loop over planes.
UNROLLED_PLANES = 4

_F32 = ir.FloatType()
_F64 = ir.DoubleType()
_I16 = ir.IntType(16)
_I32 = ir.IntType(32)
_I64 = ir.IntType(64)
#: A plane word is read as four 16-bit masks of 16 lanes each.
_GROUP = 16
_V16 = ir.VectorType(_F32, _GROUP)
_M16 = ir.VectorType(ir.IntType(1), _GROUP)


def _halves(builder, vec, width):
    lo = builder.shuffle_vector(
        vec, vec, ir.Constant(ir.VectorType(_I32, width // 2), list(range(width // 2)))
    )
    hi = builder.shuffle_vector(
        vec, vec, ir.Constant(ir.VectorType(_I32, width // 2), list(range(width // 2, width)))
    )
    return builder.fadd(lo, hi)


def _fold(builder, parts):
    """The accumulators (``parts``: 16-lane vectors, lanes in order) folded in halves."""
    while len(parts) > 1:
        half = len(parts) // 2
        parts = [builder.fadd(parts[i], parts[i + half]) for i in range(half)]
    vec, width = parts[0], _GROUP
    while width > 1:
        vec = _halves(builder, vec, width)
        width //= 2
    return builder.extract_element(vec, ir.Constant(_I32, 0))


def _mask16(builder, ptr):
    """16 bits at ``ptr`` (two bytes, the first in the low half: no dependence on the
    target's byte order) as 16 lane flags, lane ``l`` from bit ``l``."""
    lo = builder.zext(builder.load(ptr, align=1), _I16)
    hi = builder.zext(builder.load(builder.gep(ptr, [ir.Constant(_I64, 1)]), align=1), _I16)
    bits = builder.or_(lo, builder.shl(hi, ir.Constant(_I16, 8)))
    if builder.module.data_layout.startswith("E"):  # element 0 is the top bit there
        bits = builder.call(
            cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(_I16, [_I16]), "llvm.bitreverse.i16"
            ),
            [bits],
        )
    return builder.bitcast(bits, _M16)


def _emit_words(builder, qptrs, rptrs, nbytes, accs, planes):
    """The loop over plane words: ``acc_g = bit ? fma(y, 2^p, acc_g) : acc_g`` for each
    16-lane group ``g`` and plane ``p`` in order (``2^p y`` is exact, so fused or not the
    sum rounds once), for each doc (``rptrs``) and query (``qptrs``) in
    ``accs[doc][query][group]``: a doc word's masks read once for all queries, a query's
    lanes once for all docs. ``planes``: a Python int (unrolled) or an LLVM value (a loop)."""
    fmuladd = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(_V16, [_V16, _V16, _V16]), "llvm.fmuladd.v16f32"
    )
    words = builder.udiv(nbytes, ir.Constant(_I64, 8))

    def step(qvs, byte0, plane, scale, slot):
        at = builder.add(builder.mul(plane, nbytes), byte0)
        for rptr, row_accs in zip(rptrs, accs, strict=True):
            mask = _mask16(builder, builder.gep(rptr, [at]))
            for qv, acc_row in zip(qvs, row_accs, strict=True):
                old = builder.load(acc_row[slot])
                new = builder.call(fmuladd, [qv, scale, old])
                builder.store(builder.select(mask, new, old), acc_row[slot])

    def group(word, g, slot):
        lane0 = builder.add(builder.mul(word, ir.Constant(_I64, LANES)),
                            ir.Constant(_I64, g * _GROUP))  # fmt: skip
        qvs = [builder.load(builder.bitcast(builder.gep(qptr, [lane0]), _V16.as_pointer()),
                            align=4) for qptr in qptrs]  # fmt: skip
        byte0 = builder.add(builder.mul(word, ir.Constant(_I64, 8)), ir.Constant(_I64, 2 * g))
        if isinstance(planes, int):
            for p in range(planes):
                scale = ir.Constant(_V16, [float(2**p)] * _GROUP)
                step(qvs, byte0, ir.Constant(_I64, p), scale, slot)
            return
        scale = cgutils.alloca_once_value(builder, ir.Constant(_V16, [1.0] * _GROUP))
        with cgutils.for_range(builder, planes) as plane:
            step(qvs, byte0, plane.index, builder.load(scale), slot)
            old = builder.load(scale)
            builder.store(builder.fadd(old, old), scale)

    with cgutils.for_range(builder, words) as word:
        for g in range(LANES // _GROUP):
            group(word.index, g, g)


def _check(q, row, planes, plane_bytes):
    for name, arr, dtype in (("queries", q, types.float32), ("row", row, types.uint8)):
        if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.dtype == dtype):
            raise TypingError(f"{name} must be 1-D {dtype} arrays, got {arr}")
        if arr.layout != "C":
            raise TypingError(f"{name} must be C-contiguous, got {arr}")
    if not (isinstance(planes, types.Integer) and isinstance(plane_bytes, types.Integer)):
        raise TypingError("planes and plane_bytes must be integers")


def _dots_codegen(context, builder, queries, rows, planes, nbytes):
    """The dots of every (row, query) pair, row-major; ``queries`` / ``rows``: (numba type,
    LLVM value) pairs, ``planes`` / ``nbytes`` the same."""
    qptrs = [context.make_array(ty)(context, builder, value).data for ty, value in queries]
    rptrs = [context.make_array(ty)(context, builder, value).data for ty, value in rows]
    n_planes = context.cast(builder, planes[1], planes[0], types.int64)
    nbytes = context.cast(builder, nbytes[1], nbytes[0], types.int64)
    accs = [[[cgutils.alloca_once_value(builder, ir.Constant(_V16, None))
              for _ in range(LANES // _GROUP)] for _ in qptrs] for _ in rptrs]  # fmt: skip
    # the plane count unrolled in the common cases, a loop beyond them: the same sums
    for count in range(1, UNROLLED_PLANES + 1):
        with builder.if_then(builder.icmp_signed("==", n_planes, ir.Constant(_I64, count))):
            _emit_words(builder, qptrs, rptrs, nbytes, accs, count)
    many = builder.icmp_signed(">", n_planes, ir.Constant(_I64, UNROLLED_PLANES))
    with builder.if_then(many):
        _emit_words(builder, qptrs, rptrs, nbytes, accs, n_planes)
    return [builder.fpext(_fold(builder, [builder.load(a) for a in query_accs]), _F64)
            for row_accs in accs for query_accs in row_accs]  # fmt: skip


def _tuple(items, name):
    if not (isinstance(items, types.UniTuple) and items.count >= 1):
        raise TypingError(f"{name} must be a tuple of arrays of one type, got {items}")
    return items.dtype, items.count


@intrinsic
def plane_float_dot(typingctx, q, row, planes, plane_bytes):
    """``<q, X>`` (float64) of a float32 query ``q`` [plane_bytes · 8] in the lane order of
    :func:`pad_query` and the doc ``row`` (uint8, ``planes`` bit planes of ``plane_bytes``
    bytes each, ``plane_bytes`` a multiple of 8), in the fixed order of the module
    docstring. Lengths are not checked."""
    _check(q, row, planes, plane_bytes)
    sig = types.float64(q, row, planes, plane_bytes)

    def codegen(context, builder, signature, args):
        pairs = list(zip(signature.args, args, strict=True))
        return _dots_codegen(context, builder, [pairs[0]], [pairs[1]], pairs[2], pairs[3])[0]

    return sig, codegen


@intrinsic
def plane_float_dots(typingctx, qs, rows, planes, plane_bytes):
    """``(<q, X_r> for r in rows for q in qs)``: :func:`plane_float_dot` of each query of the
    tuple ``qs`` and each doc of the tuple ``rows`` (the same values), a doc's plane words
    read once for all queries and a query's lanes once for all docs."""
    qty, nq = _tuple(qs, "qs")
    rowty, nrows = _tuple(rows, "rows")
    _check(qty, rowty, planes, plane_bytes)
    sig = types.UniTuple(types.float64, nq * nrows)(qs, rows, planes, plane_bytes)

    def codegen(context, builder, signature, args):
        queries = [(qty, v) for v in cgutils.unpack_tuple(builder, args[0])]
        docs = [(rowty, v) for v in cgutils.unpack_tuple(builder, args[1])]
        tys = signature.args
        values = _dots_codegen(context, builder, queries, docs, (tys[2], args[2]),
                               (tys[3], args[3]))  # fmt: skip
        return context.make_tuple(builder, signature.return_type, values)

    return sig, codegen


@kernel(inline="always")
def pad_query(query, out):
    """``query`` float32 [dim] into ``out`` float32 [plane_bytes · 8] in the lanes' order:
    the planes' bit ``b`` of byte ``j`` is lane ``8j + b`` and dimension ``8j + 7 - b``
    (:mod:`bbqlib.packing`'s bit order), so each group of 8 entries is reversed; zero past
    the query's ``dim`` entries."""
    n = query.shape[0]
    for i in range(out.shape[0]):
        src = i ^ 7  # 8j + b <-> 8j + 7 - b
        out[i] = query[src] if src < n else np.float32(0.0)
