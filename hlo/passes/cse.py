"""Common subexpression elimination: instructions computing the same value are merged into the first.

Two instructions are the same when opcode, shape, operands (in canonical order
for commutative opcodes), attributes other than metadata, and literal agree.
Side-effecting instructions and parameters are never merged.
"""

from __future__ import annotations

from dataclasses import dataclass

from hlo.ir import HloComputation, HloInstruction, HloModule
from hlo.opcodes import Opcode
from hlo.passes.editor import ComputationEditor, map_computations

_IGNORED_ATTRS = ("metadata", "frontend_attributes")


def _key(inst: HloInstruction, operands: tuple[str, ...]):
    if inst.opcode.is_commutative:
        operands = tuple(sorted(operands))
    attrs = tuple(sorted((k, v) for k, v in inst.attrs.items() if k not in _IGNORED_ATTRS))
    return (inst.opcode, inst.shape, operands, attrs, inst.literal)


@dataclass(frozen=True)
class CommonSubexpressionElimination:
    name: str = "cse"

    def run(self, module: HloModule) -> HloModule:
        return map_computations(module, self._run_computation)

    def _run_computation(self, comp: HloComputation) -> HloComputation:
        editor = ComputationEditor(comp)
        canonical: dict[str, str] = {}
        seen: dict[tuple, str] = {}
        for inst in comp.instructions:
            operands = tuple(canonical.get(o, o) for o in inst.operands)
            if inst.opcode is Opcode.PARAMETER or inst.opcode.has_side_effect:
                continue
            try:
                key = _key(inst, operands)
                hash(key)
            except TypeError:
                continue
            first = seen.get(key)
            if first is None:
                seen[key] = inst.name
            else:
                canonical[inst.name] = first
        if not canonical:
            return comp
        editor.replace_all_uses(canonical)  # (a first is never a duplicate: its key was seen first)
        editor.remove_all(canonical)
        return editor.build()
