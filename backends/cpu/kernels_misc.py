"""Top-level kernels for the small structural opcodes, and explicit refusals.

* opt-barrier: a copy of its (tuple) operand; after-all: nothing (a token has
  no data, see ``ComputationEmitter.alloc_value``).
* rng, rng-bit-generator, rng-get-and-update-state are refused with a reason
  (``backends/codegen/refusals.py``).

topk, sort, scatter and select-and-scatter are the serial kernels every backend shares
(``backends/codegen/serial/``).
"""

from __future__ import annotations

from backends.codegen.refusals import RNG_OPCODES, refuse_rng
from backends.cpu.computation import ComputationEmitter, Value, leaves, top_level
from backends.cpu.dialect import C
from hlo.ir import HloInstruction
from hlo.opcodes import Opcode


@top_level(Opcode.OPTIMIZATION_BARRIER)
def _opt_barrier(em: ComputationEmitter, inst: HloInstruction, target: Value) -> None:
    for dst, src in zip(leaves(target), leaves(em.value(inst.operands[0]))):
        em.emit_copy(dst, src)


@top_level(Opcode.AFTER_ALL)
def _after_all(em: ComputationEmitter, inst: HloInstruction, target: Value) -> None:
    return None


@top_level(*RNG_OPCODES)
def _rng(em: ComputationEmitter, inst: HloInstruction, target: Value) -> None:
    refuse_rng(inst, C.backend)
