"""Byte dots of 7-bit codes with AVX-512 VNNI (``vpdpbusd``) where the CPU has it.

``vpdpbusd`` multiplies 64 unsigned bytes by 64 signed bytes and adds each group of four
products into a 32-bit lane: one instruction per 64 bytes of a dot. The loop LLVM vectorizes
from :func:`bbqlib._kernels.scoring.byte_dot` widens to 16 bits first (``vpmovzxbw`` +
``vpmaddwd``), several instructions where ``vpdpbusd`` takes one; the IVF plan scores every
centroid code this way (``tests/test_vnni.py`` checks the two agree).

:func:`byte_dot7` reads its second row as *signed* bytes, so it is exact only where that row's
values are below 128 (7-bit codes: the IVF plan's centroid codes); the first may hold any
byte. Sums stay exact in 32 bits while ``255 · 127 · d < 2³¹`` (``d <= BYTE_RUN``; longer rows
take ``byte_dot``). The instruction is used when numba compiles for this machine's CPU
(``NUMBA_CPU_NAME`` unset or ``host``) and the CPU has AVX-512 VNNI and BW; otherwise
:func:`byte_dot7` *is* ``byte_dot``. numba's cache is keyed by the CPU and its features, so a
cached VNNI kernel never loads on a CPU without them.
"""

from __future__ import annotations

import llvmlite.binding as ll
import numba
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.errors import TypingError
from numba.extending import intrinsic

from .policy import kernel, parallel_kernel, prange
from .scoring import BYTE_RUN, _raw, byte_dot, estimate_bytes

__all__ = ["HAS_VNNI", "byte_dot7", "estimate_bytes7"]

I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)


def _host_has_vnni() -> bool:
    if numba.config.CPU_NAME not in (None, "host") or numba.config.CPU_FEATURES:
        return False  # code for another CPU than this one: no CPU-specific instructions
    try:
        features = ll.get_host_cpu_features()
    except RuntimeError:  # the host's features are unknown
        return False
    return bool(features.get("avx512vnni")) and bool(features.get("avx512bw"))


#: Whether :func:`byte_dot7` uses ``vpdpbusd`` in this process.
HAS_VNNI = _host_has_vnni()

# (bytes per step, i32 lanes, LLVM intrinsic): the full width, then one half-width and one
# quarter-width step for the tail, then bytes one at a time.
_STEPS = (
    (64, 16, "llvm.x86.avx512.vpdpbusd.512"),
    (32, 8, "llvm.x86.avx512.vpdpbusd.256"),
    (16, 4, "llvm.x86.avx512.vpdpbusd.128"),
)


def _vpdpbusd(builder, width, lanes, name, qptr, dptr, at, acc):
    vec = ir.VectorType(I32, lanes)
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vec, [vec] * 3), name)
    qv = builder.load(builder.bitcast(builder.gep(qptr, [at]), vec.as_pointer()), align=1)
    dv = builder.load(builder.bitcast(builder.gep(dptr, [at]), vec.as_pointer()), align=1)
    return builder.call(fn, [acc, qv, dv])


def _reduce(builder, vec, lanes):
    fn = cgutils.get_or_insert_function(
        builder.module,
        ir.FunctionType(I32, [ir.VectorType(I32, lanes)]),
        f"llvm.vector.reduce.add.v{lanes}i32",
    )
    return builder.call(fn, [vec])


@intrinsic
def _dot_vnni(typingctx, q, d):
    """int64 dot over the ``len(d)`` bytes of uint8 rows ``q`` and ``d`` (``d`` read as
    signed bytes; ``q`` at least as long), both C-contiguous: 64-byte ``vpdpbusd`` steps,
    then at most one 32-byte and one 16-byte step, then single bytes."""
    for name, arr in (("q", q), ("d", d)):
        if not (isinstance(arr, types.Array) and arr.ndim == 1 and arr.layout == "C"):
            raise TypingError(f"{name} must be a C-contiguous 1-D uint8 array, got {arr}")
        if arr.dtype != types.uint8:
            raise TypingError(f"{name} must be a C-contiguous 1-D uint8 array, got {arr}")

    def codegen(context, builder, signature, args):
        qa = context.make_array(signature.args[0])(context, builder, args[0])
        da = context.make_array(signature.args[1])(context, builder, args[1])
        n = cgutils.unpack_tuple(builder, da.shape)[0]
        width, lanes, name = _STEPS[0]
        acc = cgutils.alloca_once_value(builder, ir.Constant(ir.VectorType(I32, lanes), None))
        blocks = builder.udiv(n, ir.Constant(I64, width))
        with cgutils.for_range(builder, blocks) as loop:
            at = builder.mul(loop.index, ir.Constant(I64, width))
            step = _vpdpbusd(builder, width, lanes, name, qa.data, da.data, at, builder.load(acc))
            builder.store(step, acc)
        total = cgutils.alloca_once_value(builder, _reduce(builder, builder.load(acc), lanes))
        done = cgutils.alloca_once_value(builder, builder.mul(blocks, ir.Constant(I64, width)))
        for width, lanes, name in _STEPS[1:]:
            at = builder.load(done)
            fits = builder.icmp_unsigned("<=", builder.add(at, ir.Constant(I64, width)), n)
            with builder.if_then(fits):
                zero = ir.Constant(ir.VectorType(I32, lanes), None)
                step = _vpdpbusd(builder, width, lanes, name, qa.data, da.data, at, zero)
                part = _reduce(builder, step, lanes)
                builder.store(builder.add(builder.load(total), part), total)
                builder.store(builder.add(at, ir.Constant(I64, width)), done)
        tail = cgutils.for_range_slice(builder, builder.load(done), n, ir.Constant(I64, 1))
        with tail as (i, _):
            a = builder.zext(builder.load(builder.gep(qa.data, [i])), I32)
            b = builder.sext(builder.load(builder.gep(da.data, [i])), I32)
            builder.store(builder.add(builder.load(total), builder.mul(a, b)), total)
        return builder.sext(builder.load(total), I64)

    return types.int64(q, d), codegen


if HAS_VNNI:

    @kernel(inline="always")
    def byte_dot7(q, d):
        """``byte_dot(q, d)`` for rows ``d`` of values below 128 (module docstring)."""
        if d.shape[0] > BYTE_RUN:
            return byte_dot(q, d)
        return _dot_vnni(q, d)

    @parallel_kernel
    def estimate_bytes7(qb, qf, db, df, dim, cc, is_l2, out):
        """``estimate_bytes`` (raw estimates [nq, n]) for doc codes of values below 128
        (the IVF plan's 7-bit centroid codes): the same integers, by :func:`byte_dot7`."""
        for j in prange(db.shape[0]):
            for q in range(qb.shape[0]):
                out[q, j] = _raw(dim, df[j], qf[q], byte_dot7(qb[q], db[j]), cc, is_l2)

else:  # the generic kernels themselves: nothing more to compile
    byte_dot7 = byte_dot
    estimate_bytes7 = estimate_bytes
