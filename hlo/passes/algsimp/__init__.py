"""Algebraic simplification: a table of small rewrite rules driven to a capped fixed point.

Rules live in the ``rules_*.py`` files, one function per identity, registered
under the opcode they match (see ``context.py`` for the rule API). The driver
visits each computation's live instructions in order (operands before users)
and applies the first rule of the instruction's opcode that fires; rounds
repeat until one changes nothing, at most ``max_rounds`` times.

Invariants: every rewrite keeps the instruction's shape exactly (element type,
dims, layout) and the evaluator's semantics bit for bit, NaN, infinities and
the sign of zero included (so ``x + 0.0 -> x`` is not a rule, ``x + -0.0 -> x``
is); a rule that cannot prove that does not fire. Instructions made dead by a
rewrite are left for DCE; fused computations and instructions with control
dependencies are not touched; signatures never change. The module returned
verifies whenever the input did, and is the input object itself when no rule
applied.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from hlo.ir import HloComputation, HloModule
from hlo.opcodes import Opcode
from hlo.passes.algsimp import (  # noqa: F401  (imported for their rule registrations)
    rules_arith, rules_conv, rules_convert, rules_data, rules_dot, rules_logic, rules_reduce, rules_shape,
)
from hlo.passes.algsimp.context import RULES, RewriteContext, Rule, RuleError, all_rules, rule
from hlo.passes.editor import ComputationEditor

__all__ = ["AlgebraicSimplifier", "RewriteContext", "Rule", "RuleError", "all_rules", "rule"]


@dataclass
class AlgebraicSimplifier:
    """The ``algsimp`` pass. ``applied`` counts rule applications by rule name, over all runs."""

    name: str = "algsimp"
    max_rounds: int = 25
    disabled_rules: frozenset[str] = frozenset()
    applied: Counter = field(default_factory=Counter, compare=False, repr=False)

    def __post_init__(self) -> None:
        known = {r.name for r in all_rules()}
        unknown = sorted(set(self.disabled_rules) - known)
        if unknown:
            raise ValueError(f"unknown algsimp rule(s) {unknown}; known rules: {sorted(known)}")
        if self.max_rounds < 1:
            raise ValueError(f"max_rounds must be at least 1, got {self.max_rounds}")

    def run(self, module: HloModule) -> HloModule:
        fused = {callee for _, inst in module.instructions() if inst.opcode is Opcode.FUSION
                 for callee in inst.called_computations}
        signatures = {c.name: c.program_shape for c in module.computations}
        comps = tuple(c if c.name in fused else self._simplify(module, c, signatures) for c in module.computations)
        if all(a is b for a, b in zip(comps, module.computations)):
            return module
        return module.replace(computations=comps)

    def _simplify(self, module: HloModule, comp: HloComputation, signatures) -> HloComputation:
        editor = ComputationEditor(comp)
        ctx = RewriteContext(module, editor, signatures)
        for _ in range(self.max_rounds):
            if not self._round(ctx):
                break
        return editor.build()

    def _round(self, ctx: RewriteContext) -> bool:
        """One pass over the computation; True if any rule fired."""
        editor = ctx.editor
        live = _live(editor)
        fired = False
        i = 0
        while i < len(editor.order):  # instructions added during the round are visited too
            name = editor.order[i]
            i += 1
            if name not in live:
                continue
            inst = editor[name]
            if "control-predecessors" in inst.attrs:
                continue
            for r in RULES.get(inst.opcode, ()):
                if r.name in self.disabled_rules:
                    continue
                ctx.begin(inst)
                result = r.fn(ctx, inst)
                if result is None:
                    continue
                ctx.check(inst, result, r.name)
                added = ctx.commit(inst, result)
                live.update(added)
                if isinstance(result, str):
                    live.discard(inst.name)
                self.applied[r.name] += 1
                fired = True
                break
        return fired


def _live(editor: ComputationEditor) -> set[str]:
    """Instructions the ROOT (or a side effect, or a control dependency) needs."""
    work = [editor.root] + [n for n in editor.order if editor[n].opcode.has_side_effect]
    live: set[str] = set()
    while work:
        n = work.pop()
        if n in live:
            continue
        live.add(n)
        inst = editor[n]
        work.extend(inst.operands)
        work.extend(r.name for r in inst.attrs.get("control-predecessors", ()))
    return live
