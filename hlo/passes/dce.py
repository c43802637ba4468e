"""Dead code elimination: drop instructions the ROOT does not need and computations nothing calls.

Side-effecting instructions (per the opcode table) are kept. Parameters are
kept even when unused: a computation's signature never changes.
"""

from __future__ import annotations

from dataclasses import dataclass

from hlo.ir import HloComputation, HloModule
from hlo.opcodes import Opcode
from hlo.passes.editor import map_computations


def _live_instructions(comp: HloComputation) -> set[str]:
    live: set[str] = set()
    work = [comp.root_name] + [i.name for i in comp.instructions
                               if i.opcode.has_side_effect or i.opcode is Opcode.PARAMETER]
    while work:
        name = work.pop()
        if name in live:
            continue
        live.add(name)
        work.extend(comp[name].operands)
        ctrl = comp[name].attr("control-predecessors", ())
        work.extend(r.name for r in ctrl)
    return live


@dataclass(frozen=True)
class DeadCodeElimination:
    name: str = "dce"
    remove_dead_computations: bool = True

    def run(self, module: HloModule) -> HloModule:
        def prune(comp: HloComputation) -> HloComputation:
            live = _live_instructions(comp)
            if len(live) == len(comp.instructions):
                return comp
            return comp.replace(instructions=tuple(i for i in comp.instructions if i.name in live))

        module = map_computations(module, prune)
        if not self.remove_dead_computations:
            return module
        reachable: set[str] = set()
        work = [module.entry_name]
        while work:
            name = work.pop()
            if name in reachable:
                continue
            reachable.add(name)
            for inst in module.computation(name).instructions:
                work.extend(inst.called_computations)
        if len(reachable) == len(module.computations):
            return module
        return module.replace(computations=tuple(c for c in module.computations if c.name in reachable))
