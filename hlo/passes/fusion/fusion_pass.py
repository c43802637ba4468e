"""``FusionPass``: producer-consumer then multi-output fusion over every scheduled computation.

Scheduled computations are the ENTRY and the bodies of while loops,
conditionals and calls reached from it; reducers, comparators, map bodies and
existing fused computations are scalar code and are left alone, as are
existing fusion instructions (they are neither producers nor consumers).
The pass is deterministic; after ``run`` the instance holds ``decisions``
(every pair considered, with the reason for each refusal) and ``fusions``
(what each new fusion holds); ``decision_text()`` renders both.

Contract: a verified module in, a verified module out, same entry signature
and the same values (``hlo.evaluate`` gives identical results before and
after: fusion moves instructions, it never changes one).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hlo.ir import HloComputation, HloModule
from hlo.opcodes import Group, Opcode
from hlo.passes.fusion.decisions import DecisionLog, FusionDecision, FusionRecord, render, rename
from hlo.passes.fusion.graph import FusionGraph
from hlo.passes.fusion.loop_fusion import LoopFusion
from hlo.passes.fusion.materialize import Namer, materialize
from hlo.passes.fusion.multi_output import MultiOutputFusion
from hlo.passes.fusion.policy import FusionOptions

# Callers whose called computations run as sequential code (and so are fused themselves).
_SEQUENTIAL_CALLERS = Group.CONTROL_FLOW


def scheduled_computations(module: HloModule) -> list[str]:
    """The ENTRY and the computations it runs as sequential code, in module order."""
    scalar: set[str] = set()
    sequential: set[str] = {module.entry_name}
    for _, inst in module.instructions():
        target = sequential if inst.opcode in _SEQUENTIAL_CALLERS else scalar
        target.update(inst.called_computations)
    reachable: set[str] = set()
    work = [module.entry_name]
    while work:
        name = work.pop()
        if name in reachable or name in scalar:
            continue
        reachable.add(name)
        for inst in module.computation(name).instructions:
            if inst.opcode in _SEQUENTIAL_CALLERS:
                work.extend(inst.called_computations)
    return [c.name for c in module.computations if c.name in reachable and c.name in sequential]


def existing_copies(module: HloModule, comp: HloComputation) -> dict[str, int]:
    """How many existing fused computations called from ``comp`` hold an instruction named like one of
    ``comp``'s (the fusions this pass makes copy instructions under their own names)."""
    counts: dict[str, int] = {}
    for inst in comp.instructions:
        if inst.opcode is Opcode.FUSION and "calls" in inst.attrs:
            for fused in module.computation(inst.attr("calls").name).instructions:
                if fused.opcode is not Opcode.PARAMETER and fused.name in comp.by_name:
                    counts[fused.name] = counts.get(fused.name, 0) + 1
    return counts


@dataclass
class FusionPass:
    options: FusionOptions = field(default_factory=FusionOptions)
    name: str = "fusion"
    decisions: list[FusionDecision] = field(default_factory=list, init=False)
    fusions: list[FusionRecord] = field(default_factory=list, init=False)

    def run(self, module: HloModule) -> HloModule:
        self.decisions, self.fusions = [], []
        targets = set(scheduled_computations(module))
        namer = Namer(module)
        out: list[HloComputation] = []
        changed = False
        for comp in module.computations:
            if comp.name not in targets:
                out.append(comp)
                continue
            graph = FusionGraph(comp, existing_copies(module, comp))
            start = len(self.decisions)
            log = DecisionLog(comp.name, self.decisions)
            LoopFusion(graph, self.options, log).run()
            if self.options.multi_output:
                MultiOutputFusion(graph, self.options, log).run()
            if not graph.changed:
                out.append(comp)
                continue
            new, fused, records, names = materialize(graph, namer)
            self.decisions[start:] = rename(self.decisions[start:], names)
            self.fusions.extend(records)
            out.extend(fused)  # callees before callers, as XLA prints modules
            out.append(new)
            changed = True
        return module.replace(computations=tuple(out)) if changed else module

    def decision_text(self, refused_only: bool = False) -> str:
        return render(self.decisions, self.fusions, refused_only)
