"""Reads announced ahead: file ranges to the operating system (``madvise(MADV_WILLNEED)``),
rows of codes to the CPU's caches (:func:`prefetch_row`).

A cold search of an index served from disk reads a few posting lists and a few dozen rerank
rows, scattered over files mapped with ``MADV_RANDOM`` (no read-around: each page fault
reads its own page, nothing the search does not need). Faulting them one after another waits
for the disk once per page; announcing them all first lets the device serve the reads
together, and the faults that follow wait for reads already in flight. The check kernels
(:mod:`bbqlib._kernels.crc32`), which read every list and row the first time a search needs
it, announce what they are about to read this way, so reranks and scans that follow find it
in memory. Announcing costs a system call per range, which a warm process need not pay: the
row checks announce only while their reads come from the disk (:func:`cycles` tells), and
start again as soon as one does. The advice is a hint: it is not an error when it cannot be
followed (memory that is not a file map, a range past the end), and it changes no result.

:func:`willneed` calls the C library's ``madvise`` from compiled code (an LLVM call to the
external symbol, registered with llvmlite here, so kernels that use it stay cacheable);
where there is no ``madvise`` (Windows) it does nothing.

:func:`prefetch_row` asks the CPU to bring a row of a 2-d array into its caches (LLVM's
``llvm.prefetch``, a hint that never faults): a scan of one query streams its codes once,
and asking for the rows a few ahead keeps the loads of the dots from waiting on memory.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import platform
import sys

import llvmlite.binding as ll
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .policy import kernel

__all__ = [
    "HAS_CYCLES", "HAS_MADVISE", "PAGE", "SLOW_CYCLES", "cycles", "prefetch_row", "willneed",
]  # fmt: skip

#: The page size ``madvise`` aligns to.
PAGE = mmap.PAGESIZE
#: ``MADV_WILLNEED`` (3 on Linux and the BSDs, macOS included).
_WILLNEED = getattr(mmap, "MADV_WILLNEED", 3)


def _register_madvise() -> bool:
    if sys.platform == "win32":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None)
        address = ctypes.cast(libc.madvise, ctypes.c_void_p).value
    except (OSError, AttributeError):
        return False
    ll.add_symbol("madvise", address)  # cached kernels find it by name at load
    return True


#: Whether :func:`willneed` reaches ``madvise`` in this process.
HAS_MADVISE = _register_madvise()
#: Cycles (:func:`cycles`) beyond which reading and checking one row or list means it came
#: from the disk, not from memory: data in memory is read and checked well within it, a read
#: from a disk takes an order of magnitude or more longer (``benchmarks/serving/cold_checks.py``
#: measures cold queries).
SLOW_CYCLES = 60_000


#: Whether :func:`cycles` reads a cycle counter here: ``rdtsc`` on x86. Elsewhere LLVM's
#: counter may be a register user code cannot read (AArch64's ``PMCCNTR_EL0``), so it is
#: never emitted, and the row checks always announce their reads.
HAS_CYCLES = platform.machine().lower() in ("x86_64", "amd64", "i386", "i686", "x86")


#: LLVM's name of the prefetch intrinsic: overloaded on the pointer type, opaque from LLVM 15.
_PREFETCH = "llvm.prefetch.p0" if ll.llvm_version_info[0] >= 15 else "llvm.prefetch.p0i8"


@intrinsic
def prefetch_row(typingctx, arr, row):
    """Prefetch the first cache line of ``arr[row]`` (a C-contiguous 2-d array) for reading
    into every cache level; a hint: no fault, no result. The CPU's adjacent-line prefetchers
    follow the rest of a row of a few hundred bytes."""
    if not isinstance(arr, types.Array) or arr.ndim != 2 or not isinstance(row, types.Integer):
        return None
    sig = types.void(arr, row)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        zero = context.get_constant(types.intp, 0)
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1], zero])
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, _PREFETCH)
        # read (0), high temporal locality (3), data cache (1)
        builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def _readcyclecounter(typingctx):
    """``llvm.readcyclecounter`` (``rdtsc`` on x86)."""
    sig = types.int64()

    def codegen(context, builder, signature, args):
        fnty = ir.FunctionType(ir.IntType(64), [])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.readcyclecounter")
        return builder.call(fn, [])

    return sig, codegen


if HAS_CYCLES:

    @kernel(inline="always")
    def cycles():
        """The CPU's cycle counter, to tell a read from memory from a read from the disk."""
        return _readcyclecounter()

else:  # pragma: no cover - not x86

    @kernel(inline="always")
    def cycles():
        """No readable cycle counter here: 0 (callers check :data:`HAS_CYCLES`)."""
        return np.int64(0)


@intrinsic
def _madvise(typingctx, addr, length, advice):
    """``madvise((void *) addr, length, advice)``: the C call, its int result."""
    sig = types.int32(types.intp, types.intp, types.int32)

    def codegen(context, builder, signature, args):
        i8p = ir.IntType(8).as_pointer()
        fnty = ir.FunctionType(ir.IntType(32), [i8p, ir.IntType(64), ir.IntType(32)])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "madvise")
        return builder.call(fn, [builder.inttoptr(args[0], i8p), args[1], args[2]])

    return sig, codegen


if HAS_MADVISE:

    @kernel(inline="always")
    def willneed(address, nbytes):
        """Ask for bytes ``address : address + nbytes`` of a map to be read ahead."""
        start = address - address % PAGE
        _madvise(start, address + nbytes - start, np.int32(_WILLNEED))

else:  # pragma: no cover - Windows

    @kernel(inline="always")
    def willneed(address, nbytes):
        """No ``madvise`` here: nothing to ask."""
        return
