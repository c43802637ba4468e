"""Top-level kernels every backend runs as one sequential loop nest: sort, TopK, scatter and
select-and-scatter (the data-dependent opcodes, whose writes depend on values).

Each is written once, against the target's dialect (``em.gen.dialect``: type spellings, how a helper
function is declared) and the small interface of a computation emitter below (``SerialEmitter``),
and registered in ``SERIAL`` by opcode. The CPU backend emits them inside its C functions
(``backends/cpu/computation.py`` reads ``SERIAL`` after its own ``TOP_LEVEL``); the CUDA backend
inside a ``<<<1, 1>>>`` kernel (``backends/cuda/kernel_serial.py``). Semantics are therefore the
same on every backend: scatter applies updates in order, so non-unique indices combine
deterministically; sort is a stable merge sort.

A kernel gets the emitter, the instruction and the value (a ``Buf`` or a tuple of them) it writes;
it reads operands with ``em.value``, writes statements into ``em.buf`` and helper functions
(comparators) into ``em.gen.globals``.
"""

from __future__ import annotations

from typing import Callable, Protocol

from backends.codegen.buffer import IndentedBuffer
from backends.codegen.dialect import Dialect
from backends.codegen.names import Names
from backends.codegen.registry import registrar
from backends.codegen.values import Buf
from hlo.ir import HloInstruction, HloModule
from hlo.opcodes import Opcode
from hlo.shapes import Shape


class SerialModule(Protocol):
    """What a serial kernel reads of the module being generated (``em.gen``)."""

    module: HloModule
    dialect: Dialect
    globals: IndentedBuffer  # helper functions, before the functions that call them
    names: Names  # names of the helpers' temporaries
    constant_ref: Callable[[HloInstruction], str]  # a constant's array, for the elemental emitter


class SerialEmitter(Protocol):
    """What a serial kernel asks of the emitter of the computation it is in."""

    gen: SerialModule
    buf: IndentedBuffer  # where the kernel's statements go
    names: Names

    def value(self, name: str):
        """An operand's value: a ``Buf`` (or a tuple of values)."""

    def gen_tmp(self, ctype: str, expr: str) -> str:
        """A named constant local in the current block."""

    def emit_copy(self, dst: Buf, src: Buf) -> None:
        """Copy ``src``'s elements to ``dst`` before the kernel's own writes."""

    def alloc_bytes(self, nbytes: int, label: str) -> str:
        """A ``char*`` expression to scratch bytes for this instruction only."""

    def emit_scatter_check(self, inst: HloInstruction, operand: Shape, indices: Shape, updates: Shape,
                           read: Callable) -> None:
        """TF's index check of a scatter with ``index_check=`` (nothing for one without), before it
        writes; ``read(idx)`` is an index element. A backend that cannot check refuses the scatter."""


SerialKernel = Callable[[SerialEmitter, HloInstruction, object], None]
SERIAL: dict[Opcode, SerialKernel] = {}
serial_kernel = registrar(SERIAL)


from backends.codegen.serial import scatter, sort, topk  # noqa: E402,F401  (register the kernels)
