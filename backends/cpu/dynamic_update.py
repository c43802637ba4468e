"""In-place dynamic-update-slice on the CPU: a DUS (or a loop fusion whose root is one) writes only its
update region into a result buffer that holds its operand.

Buffer assignment decides which buffer that is (``backends/codegen/buffer_assignment.py``): the
operand's own when the operand dies there (``can_write_in_place``), a while body's parameter element
when the loop aliases it (``loop_state_aliases``), else a fresh one. This kernel copies the operand
into the result first unless the two are the same buffer (checked at run time: a while body's
parameter and result are the same buffer exactly when its caller aliases them), then runs one loop
nest over the update's elements.
"""

from __future__ import annotations

import math

from backends.codegen.buffer_assignment import in_place_update
from backends.codegen.elemental import ElementalEmitter
from backends.codegen.elemental_data import update_element
from backends.codegen.layout import linear_index
from backends.codegen.values import Buf
from backends.cpu.dialect import C
from backends.cpu.parallel import emit_nest, inner_work, parallel_loops
from hlo.ir import HloInstruction
from hlo.opcodes import Opcode


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
