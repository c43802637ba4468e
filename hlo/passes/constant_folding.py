"""Constant folding: an instruction whose operands are all constants becomes a constant.

Values are computed with the reference evaluator, so folding has exactly the
evaluator's (XLA's) semantics. Large results are not folded (they would bloat
the module and its text), nor are broadcasts and iotas (cheap to recompute,
expensive to store), nor instructions with side effects.
"""

from __future__ import annotations

from dataclasses import dataclass

from hlo.attributes import Attrs
from hlo.errors import HloEvaluationError
from hlo.evaluator import Evaluator
from hlo.ir import HloComputation, HloInstruction, HloModule
from hlo.literal import Literal
from hlo.opcodes import Group, Opcode
from hlo.passes.editor import ComputationEditor
from hlo.shapes import Shape

# Computed (so their users can fold) but left in place: cheap to recompute, expensive to store.
_KEEP = {Opcode.BROADCAST, Opcode.IOTA}
_NEVER_FOLD = Group.TUPLE_PLUMBING | Group.DEVICE_ID | Group.RANDOM | {
    Opcode.PARAMETER, Opcode.CONSTANT, Opcode.CUSTOM_CALL, Opcode.AFTER_ALL, Opcode.WHILE}


@dataclass(frozen=True)
class ConstantFolding:
    name: str = "constant-folding"
    max_elements: int = 1 << 16

    def run(self, module: HloModule) -> HloModule:
        evaluator = Evaluator(module)
        comps = []
        changed = False
        for comp in module.computations:
            new = self._fold(comp, evaluator)
            changed |= new is not comp
            comps.append(new)
        return module.replace(computations=tuple(comps)) if changed else module

    def _fold(self, comp: HloComputation, evaluator: Evaluator) -> HloComputation:
        editor = ComputationEditor(comp)
        values: dict[str, object] = {}
        for inst in comp.instructions:
            if inst.opcode is Opcode.CONSTANT and inst.literal is not None and not inst.literal.is_elided:
                values[inst.name] = inst.literal.to_numpy()
                continue
            if (inst.opcode in _NEVER_FOLD or inst.opcode.has_side_effect or not isinstance(inst.shape, Shape)
                    or inst.shape.num_elements > self.max_elements
                    or not all(o in values for o in inst.operands)):
                continue
            folded = self._evaluate(inst, [values[o] for o in inst.operands], evaluator)
            if folded is None:
                continue
            values[inst.name] = folded
            if inst.opcode in _KEEP:
                continue
            attrs = Attrs([("metadata", inst.metadata)] if inst.metadata is not None else [])
            editor.set(HloInstruction(inst.name, Opcode.CONSTANT, inst.shape, (), attrs,
                                      literal=Literal(inst.shape, folded)))
        return editor.build()

    @staticmethod
    def _evaluate(inst: HloInstruction, operands: list, evaluator: Evaluator):
        from hlo.evaluator import EVAL_RULES, _load_rules, conform

        _load_rules()
        rule = EVAL_RULES.get(inst.opcode)
        if rule is None:
            return None
        try:
            return conform(rule(evaluator, inst, operands), inst.shape)
        except (HloEvaluationError, ValueError, TypeError, IndexError, KeyError, ArithmeticError):
            return None
