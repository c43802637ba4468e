"""In-place dynamic-update-slice on the CPU: a DUS (or a loop fusion whose root is one) writes only its
update region into a result buffer that holds its operand.

Buffer assignment decides which buffer that is (``backends/codegen/buffer_assignment.py``): the
operand's own when the operand dies there (``can_write_in_place``), a while body's parameter element
when the loop aliases it (``loop_state_aliases``), else a fresh one. This kernel copies the operand
into the result first unless the two are the same buffer (checked at run time: a while body's
parameter and result are the same buffer exactly when its caller aliases them), then writes the update:
one ``memcpy`` when the update is a buffer's bytes (a fused parameter or an operand, through views)
landing on one contiguous run of the result, else one loop nest over the update's elements.

The reverse, ``emit_slice_copy``: a dynamic-slice (or a loop fusion whose root is one, through views) of
a buffer whose slice is one contiguous run of it, as a TensorList read in a loop is (``[1, 256, 1024]`` of
``[64, 256, 1024]``: an LSTM's recurrent weights per step), is one ``memcpy`` from the clamped start; the
elemental loop nest copied it element by element with the start clamp and index arithmetic inside, and
did not vectorize.
"""

from __future__ import annotations

import math

from backends.codegen.buffer_assignment import in_place_update, is_view
from backends.codegen.elemental import ElementalEmitter
from backends.codegen.elemental_data import slice_starts, update_element, update_starts
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
    update = comp[dus.operands[1]].shape
    value = _viewed_buffer(em, inst, comp, dus.operands[1])
    if value is None or not _row_major(update) or value.shape.dtype != update.dtype or \
            value.shape.num_elements != update.num_elements:
        return None
    return value


def emit_slice_copy(em, inst: HloInstruction, target, readers, checked: frozenset[str]) -> bool:
    """Emit ``inst`` as one ``memcpy`` when it is a dynamic-slice of a buffer (an operand, or a fused
    parameter through views), seen through views from the fusion's root, that is one contiguous run
    wherever it starts; False, having written nothing, otherwise."""
    if not isinstance(target, Buf) or not _row_major(target.shape):
        return False
    module = em.gen.module
    if inst.opcode is Opcode.FUSION:
        comp = module.computation(inst.attr("calls").name)
        name = comp.root_name
        while is_view(comp, comp[name]):
            name = comp[name].operands[0]
        ds = comp[name]
        emitter = ElementalEmitter(C, module, comp, readers, em.buf, em.names, em.gen.constant_ref)
    elif inst.opcode is Opcode.DYNAMIC_SLICE:
        comp, ds = em.comp, inst
        emitter = ElementalEmitter(C, module, comp, [], em.buf, em.names, em.gen.constant_ref,
                                   external=dict(zip(inst.operands, readers)))
    else:
        return False
    if ds.opcode is not Opcode.DYNAMIC_SLICE:
        return False
    operand, sliced = comp[ds.operands[0]].shape, ds.shape
    source = _viewed_buffer(em, inst, comp, ds.operands[0])
    if source is None or not (isinstance(operand, Shape) and isinstance(sliced, Shape)) or \
            len(ds.operands) != 1 + operand.rank or not _row_major(operand) or not _row_major(sliced) or \
            sliced.dtype != target.shape.dtype or sliced.num_elements != target.shape.num_elements or \
            not _contiguous(operand, sliced.dims):
        return False
    emitter.index_checked = checked
    if not sliced.num_elements:
        return True
    with em.buf.block(""):
        offset = linear_index(operand, tuple(slice_starts(emitter, ds)))
        em.buf.line(f"memcpy({target.ptr}, {source.ptr} + ({offset}), {target.shape.byte_size});")
    return True


def _viewed_buffer(em, inst: HloInstruction, comp: HloComputation, name: str) -> Buf | None:
    """The row-major buffer holding value ``name``'s bytes in its order (an operand of ``inst``, or for a
    fusion a fused parameter seen through views), else None."""
    if inst.opcode is Opcode.FUSION:
        while comp[name].opcode is not Opcode.PARAMETER:
            if not is_view(comp, comp[name]):
                return None
            name = comp[name].operands[0]
        value = em.value(inst.operands[comp[name].parameter_number])
    else:
        value = em.value(name)
    shape = comp[name].shape
    if not isinstance(value, Buf) or not isinstance(shape, Shape) or not _row_major(value.shape) or \
            value.shape.dtype != shape.dtype or value.shape.num_elements != shape.num_elements:
        return None
    return value
