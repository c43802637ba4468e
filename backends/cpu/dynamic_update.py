"""In-place dynamic-update-slice on the CPU: a DUS (or a loop fusion whose root is one) writes only its
update region into a result buffer that holds its operand.

Buffer assignment decides which buffer that is (``backends/codegen/buffer_assignment.py``): the
operand's own when the operand dies there (``can_write_in_place``), a while body's parameter element
when the loop aliases it (``loop_state_aliases``), else a fresh one. This kernel copies the operand
into the result first unless the two are the same buffer (checked at run time: a while body's
parameter and result are the same buffer exactly when its caller aliases them), then writes the update:
one ``memcpy`` when the update is a buffer's bytes (a fused parameter or an operand, through views)
landing on one contiguous run of the result, else one loop nest over the update's elements.
"""

from __future__ import annotations

import math

from backends.codegen.buffer_assignment import in_place_update, is_view
from backends.codegen.elemental import ElementalEmitter
from backends.codegen.elemental_data import update_element, update_starts
from backends.codegen.layout import linear_index
from backends.codegen.values import Buf
from backends.cpu.dialect import C
from backends.cpu.parallel import emit_nest, inner_work, parallel_loops
from hlo.ir import HloComputation, HloInstruction
from hlo.opcodes import Opcode
from hlo.shapes import Layout, Shape


def emit_in_place_update(em, inst: HloInstruction, target, readers, checked: frozenset[str]) -> bool:
    """Emit ``inst`` as an in-place update of ``target`` (``em``: the CPU ``ComputationEmitter``);
    False, having written nothing, when ``inst`` is not one (the generic loop nest then runs)."""
    position = in_place_update(em.gen.module, inst)
    if position is None or not isinstance(target, Buf):
        return False
    operand = em.value(inst.operands[position])
    if not isinstance(operand, Buf) or operand.shape != target.shape:
        return False
    module, buf = em.gen.module, em.buf
    if inst.opcode is Opcode.FUSION:
        fused = module.computation(inst.attr("calls").name)
        emitter = ElementalEmitter(C, module, fused, readers, buf, em.names, em.gen.constant_ref)
        dus = fused.root
    else:
        emitter = ElementalEmitter(C, module, em.comp, [], buf, em.names, em.gen.constant_ref,
                                   external=dict(zip(inst.operands, readers)))
        dus = inst
    emitter.index_checked = checked
    em.emit_copy_unless_same(target, operand)
    dims = emitter.comp[dus.operands[1]].shape.dims
    if 0 in dims:
        return True
    source = _copied_update(em, inst, emitter.comp, dus)
    if source is not None and _contiguous(target.shape, dims):
        with buf.block(""):
            offset = linear_index(target.shape, tuple(update_starts(emitter, dus)))
            buf.line(f"memcpy({target.ptr} + ({offset}), {source.ptr}, {source.shape.byte_size});")
        return True
    idx = tuple(em.names.fresh("i") for _ in dims)
    with buf.block(""):
        work = math.prod(dims) * inner_work(module, inst)
        first, count = parallel_loops(dims) if work >= em.gen.options.parallel_threshold else (0, 0)
        mark = em.names.counter
        with buf.capture() as body:
            where, value = update_element(emitter, dus, idx)
            buf.line(f"{target.ptr}[{linear_index(target.shape, where)}] = {C.store(target.shape.dtype, value)};")
        emit_nest(buf, em.outliner, list(zip(idx, dims)), first + count if count else 0, body,
                  emitter.declared, mark)
    return True


def _row_major(shape: Shape) -> bool:
    return shape.layout is None or shape.layout == Layout.default(shape.rank)


def _contiguous(out: Shape, dims) -> bool:
    """Whether an update of ``dims`` is one contiguous run of row-major ``out`` wherever it starts: after
    its leading size-1 dims, it spans every later dim whole."""
    if not _row_major(out):
        return False
    first = next((d for d, n in enumerate(dims) if n > 1), len(dims))
    return all(dims[d] == out.dims[d] for d in range(first + 1, len(dims)))


def _copied_update(em, inst: HloInstruction, comp: HloComputation, dus: HloInstruction) -> Buf | None:
    """The buffer whose bytes are the update, in row-major order (the update is a parameter of the
    fusion or an operand of the instruction, seen through views), else None."""
    name = dus.operands[1]
    if inst.opcode is Opcode.FUSION:
        while comp[name].opcode is not Opcode.PARAMETER:
            if not is_view(comp, comp[name]):
                return None
            name = comp[name].operands[0]
        value = em.value(inst.operands[comp[name].parameter_number])
    else:
        value = em.value(name)
    update = comp[dus.operands[1]].shape
    if not isinstance(value, Buf) or not _row_major(value.shape) or not _row_major(update) or \
            value.shape.dtype != update.dtype or value.shape.num_elements != update.num_elements:
        return None
    return value
