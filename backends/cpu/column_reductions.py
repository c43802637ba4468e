"""The ``ColumnReductions`` pass: reduces of the leading dims that the C backend streams once.

A reduce whose reduced dims are exactly the leading (outer) dims of a
row-major input, with one binary reducer the C backend vectorizes
(``SIMD_REDUCTIONS``), whose compute type is its storage type and whose input
is not empty, is annotated ``column_reduce=true``; ``column_reduce.py`` emits
it with interchanged loops (the output set to the init value, the input
walked in memory order). Annotated: every such reduce of a computation the
backend runs as code, the root reduce of a fused computation (a fusion
whose root it is becomes that loop), and the other such reduces of a fused
computation whose result has at most ``MEMBER_ELEMENTS`` elements, row-major
(streamed into a local array before the fusion's loop, which reads them
there: bias and BatchNorm gradients fused with what consumes them). Valid
IR in, valid IR out: only the annotation changes.
"""

from __future__ import annotations

from dataclasses import dataclass

from backends.codegen.elemental_data import simple_reducer
from backends.codegen.errors import CodegenUnsupported
from backends.cpu.column_reduce import MEMBER_ELEMENTS
from backends.cpu.dialect import C, SIMD_REDUCTIONS
from hlo.annotations import COLUMN_REDUCE
from hlo.ir import HloComputation, HloInstruction, HloModule
from hlo.opcodes import Opcode
from hlo.passes.annotate import annotate
from hlo.shapes import Layout, Shape


def is_column_reduce(module: HloModule, comp: HloComputation, inst: HloInstruction) -> bool:
    if inst.opcode is not Opcode.REDUCE or len(inst.operands) != 2 or not isinstance(inst.shape, Shape):
        return False
    src = comp[inst.operands[0]].shape
    if not isinstance(src, Shape) or (src.layout is not None and src.layout != Layout.default(src.rank)):
        return False
    dims = sorted(inst.attr("dimensions"))
    if not dims or dims != list(range(len(dims))) or len(dims) == src.rank or 0 in src.dims:
        return False
    dtype = inst.shape.dtype
    try:
        if C.compute(dtype) != C.storage(dtype):
            return False
    except CodegenUnsupported:
        return False  # an element type the backend refuses: the generic loop says so
    op = simple_reducer(module, inst.attr("to_apply").name)
    return op is not None and (op, C.compute(dtype)) in SIMD_REDUCTIONS


def _member(inst: HloInstruction) -> bool:
    """A reduce inside a fused computation, not its root, small and row-major enough for a local array."""
    shape = inst.shape
    return (isinstance(shape, Shape) and shape.num_elements <= MEMBER_ELEMENTS
            and shape.layout in (None, Layout.default(shape.rank)))


def _fused_computations(module: HloModule) -> set[str]:
    return {inst.attr("calls").name for _, inst in module.instructions() if inst.opcode is Opcode.FUSION}


@dataclass(frozen=True)
class ColumnReductions:
    """Annotates the column reductions of a module (``column_reduce=true``)."""

    name: str = "column-reductions"

    def run(self, module: HloModule) -> HloModule:
        fused = _fused_computations(module)

        def decide(module: HloModule, comp: HloComputation) -> dict[str, object]:
            candidates = [i for i in comp.instructions if comp.name not in fused or i is comp.root or _member(i)]
            return {i.name: True for i in candidates if is_column_reduce(module, comp, i)}

        return annotate(module, COLUMN_REDUCE, decide)
