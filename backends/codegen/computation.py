"""What every backend's emitter of one computation shares: values by instruction name, buffers in an
arena released at their last use, and the instructions that are only other buffers.

A computation is emitted in schedule order (its text order). Parameters, constants, tuples,
get-tuple-element and views (a bitcast or row-major reshape of an operand no one writes) create no
code: ``emit_alias`` records their value, the backend emits everything else. A backend's subclass
allocates (``alloc``) and says how a constant is held (``gen.constant_value``); buffers it lists in
``_temps`` are released after the current instruction, those in ``_owned[name]`` when ``name`` dies.
"""

from __future__ import annotations

from backends.codegen.values import view
from backends.codegen.buffer_assignment import Arena, is_view, last_uses
from backends.codegen.errors import CodegenUnsupported
from hlo.ir import HloComputation, HloInstruction
from hlo.opcodes import Opcode
from hlo.shapes import Shape


class ComputationEmitterBase:
    def __init__(self, gen, comp: HloComputation):
        self.gen = gen
        self.comp = comp
        self.values: dict = {}  # instruction name -> its value (a buffer or a tuple of values)
        self.arena = Arena()
        self.last_use = last_uses(comp)
        self._dying: dict[int, list[str]] = {}
        for owner, step in self.last_use.items():
            self._dying.setdefault(step, []).append(owner)
        self.step = 0  # schedule index of the instruction being emitted
        self._owned: dict[str, list[str]] = {}  # instruction -> arena labels of its buffers
        self._temps: list[str] = []  # arena labels to free after the current instruction

    def value(self, name: str):
        """The value of instruction ``name`` (a constant not yet emitted is read where it is held)."""
        v = self.values.get(name)
        return v if v is not None else self.gen.constant_value(self.comp[name])

    def release_dead(self, step: int) -> None:
        """Free the current instruction's temporaries and the buffers of values whose last use is ``step``."""
        for label in self._temps:
            self.arena.release(label, self.step)
        self._temps.clear()
        for owner in self._dying.get(step, ()):
            for label in self._owned.pop(owner, []):
                self.arena.release(label, self.step)

    def emit_alias(self, inst: HloInstruction, out) -> bool:
        """Record the value of ``inst`` if it is one of existing buffers (see the module docstring);
        False for an instruction that computes (``out``: where the result must go, if fixed)."""
        op = inst.opcode
        if op is Opcode.PARAMETER:
            return True
        if op is Opcode.CONSTANT:
            self.values[inst.name] = self.gen.constant_value(inst)
        elif op is Opcode.TUPLE:
            self.values[inst.name] = tuple(self.value(o) for o in inst.operands)
        elif op is Opcode.GET_TUPLE_ELEMENT:
            src = self.value(inst.operands[0])
            if not isinstance(src, tuple):
                raise CodegenUnsupported(f"%{inst.name}: get-tuple-element of a non-tuple")
            self.values[inst.name] = src[inst.attr("index")]
        elif out is None and is_view(self.comp, inst) and isinstance(inst.shape, Shape):  # a view: no copy
            self.values[inst.name] = view(self.value(inst.operands[0]), inst.shape)
        else:
            return False
        return True
