"""The ``ColumnReductions`` pass: reduces of the leading dims that the C backend streams once.

A reduce whose reduced dims are exactly the leading (outer) dims of a
row-major input, with one binary reducer the C backend vectorizes
(``SIMD_REDUCTIONS``), whose compute type is its storage type and whose input
is not empty, is annotated ``column_reduce=true``; ``column_reduce.py`` emits
it with interchanged loops (the output set to the init value, the input
walked in memory order). Annotated: every such reduce of a computation the
backend runs as code, the root reduce of a fused computation (a fusion
whose root it is becomes that loop), and the other such reduces of a fused
computation with a row-major result of at most ``MEMBER_ELEMENTS`` elements,
in instruction order while a fusion's stay within ``FUSION_MEMBER_ELEMENTS``
together (each is streamed into a local array before the fusion's loop,
which reads it there: bias and BatchNorm gradients fused with what consumes
them). Valid IR in, valid IR out: only the annotation changes.
"""

from __future__ import annotations

from dataclasses import dataclass

from backends.codegen.elemental_data import simple_reducer
from backends.codegen.errors import CodegenUnsupported
from backends.cpu.column_reduce import FUSION_MEMBER_ELEMENTS, MEMBER_ELEMENTS
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


def _members(module: HloModule, comp: HloComputation) -> list[HloInstruction]:
    """The column reduces of a fused computation other than its root whose results have a row-major layout
    and, in instruction order, fit the local arrays' budget: at most ``MEMBER_ELEMENTS`` each and
    ``FUSION_MEMBER_ELEMENTS`` together (the arrays live on the calling thread's stack)."""
    out, total = [], 0
    for inst in comp.instructions:
        shape = inst.shape
        if (inst is comp.root or not isinstance(shape, Shape) or shape.layout not in (None, Layout.default(shape.rank))
                or not is_column_reduce(module, comp, inst)):
            continue
        if shape.num_elements <= MEMBER_ELEMENTS and total + shape.num_elements <= FUSION_MEMBER_ELEMENTS:
            out.append(inst)
            total += shape.num_elements
    return out


def _fused_computations(module: HloModule) -> set[str]:
    return {inst.attr("calls").name for _, inst in module.instructions() if inst.opcode is Opcode.FUSION}


@dataclass(frozen=True)
class ColumnReductions:
    """Annotates the column reductions of a module (``column_reduce=true``)."""

    name: str = "column-reductions"

    def run(self, module: HloModule) -> HloModule:
        fused = _fused_computations(module)

        def decide(module: HloModule, comp: HloComputation) -> dict[str, object]:
            if comp.name not in fused:
                return {i.name: True for i in comp.instructions if is_column_reduce(module, comp, i)}
            taken = _members(module, comp)
            if is_column_reduce(module, comp, comp.root):
                taken.append(comp.root)
            return {i.name: True for i in taken}

        return annotate(module, COLUMN_REDUCE, decide)
