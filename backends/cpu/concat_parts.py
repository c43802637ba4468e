"""A loop fusion whose root is a concatenate, as one loop nest per operand.

The elemental concatenate (``backends/codegen/elemental_data.py``) computes every operand's element at a
clamped index and picks one with a select chain (branch-free on purpose: GCC miscompiled the branchy form),
so a fused concatenate of four expensive operands costs four times their work per output element and its
clamped indices keep the loop from vectorizing. An LSTM's backward step concatenates its four gate
gradients (``[32, 4 * 256]``, each reading several stacked time-step lists): 22% of the train step went
there. When the concatenate is the fusion's root and each part writes runs of at least ``MIN_RUN``
elements, its result is written part by part instead: operand ``k``'s nest runs over the operand's own
dims and stores at the axis offset ``start_k``, reading only that operand, with no select and no clamp
(each nest is parallelized on its own, as any loop nest).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from backends.codegen.elemental import ElementalEmitter, array_shape
from backends.codegen.layout import linear_index
from backends.codegen.values import Buf
from backends.cpu.dialect import C
from backends.cpu.parallel import emit_nest, inner_work, parallel_loops
from hlo.ir import HloInstruction
from hlo.opcodes import Group, Opcode

if TYPE_CHECKING:
    from backends.cpu.computation import ComputationEmitter

_NOT_SPLIT = frozenset({Opcode.REDUCE, Opcode.REDUCE_WINDOW}) | Group.CONTRACTIONS  # kept in one nest
# Elements each part writes contiguously (its size on the axis times the dims after it) for the split to
# pay: narrower parts (a stack of [..., 1] slices, a reflect pad's few columns) would each make a strided
# pass over the output where the one nest writes it once, in order.
MIN_RUN = 16


def emit_concat_parts(em: ComputationEmitter, inst: HloInstruction, out: Buf, readers: list, checked) -> bool:
    """Write ``inst`` (a fusion whose root concatenates at least two non-empty operands) one operand at a
    time into ``out``; False, nothing written, for any other instruction."""
    if inst.opcode is not Opcode.FUSION:
        return False
    fused = em.gen.module.computation(inst.attr("calls").name)
    root = fused.root
    if root.opcode is not Opcode.CONCATENATE or any(i.opcode in _NOT_SPLIT for i in fused.instructions):
        return False
    (axis,) = root.attr("dimensions")
    parts, start = [], 0
    for name in root.operands:
        dims = array_shape(fused[name]).dims
        if dims[axis]:
            if math.prod(dims[axis:]) < MIN_RUN:
                return False
            parts.append((name, start))
        start += dims[axis]
    if len(parts) < 2:
        return False
    threshold = em.gen.options.parallel_threshold
    inner = inner_work(em.gen.module, inst)
    for name, start in parts:
        dims = array_shape(fused[name]).dims
        emitter = ElementalEmitter(C, em.gen.module, fused, readers, em.buf, em.names, em.gen.constant_ref)
        emitter.index_checked = checked
        idx = tuple(em.names.fresh("i") for _ in dims)
        at = tuple(f"({i} + {start})" if d == axis and start else i for d, i in enumerate(idx))
        with em.buf.block(""):
            work = math.prod(dims) * inner
            first, count = parallel_loops(dims) if work >= threshold else (0, 0)
            mark = em.names.counter
            with em.buf.capture() as body:
                value = emitter.emit(name, idx)
                em.buf.line(f"{out.ptr}[{linear_index(out.shape, at)}] = {C.store(out.shape.dtype, value)};")
            emit_nest(em.buf, em.outliner, list(zip(idx, dims)), first + count if count else 0, body,
                      emitter.declared, mark, outline=em.outline_nests)
    return True
