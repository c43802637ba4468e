"""The one way a backend pass writes a kernel-shape annotation (``hlo/annotations.py``).

``annotate(module, key, decide, computations)`` sets attribute ``key`` on the
instructions ``decide(module, comp)`` names and removes it from every other
instruction of those computations (the pass owns its key, so rerunning it
cannot leave a stale decision). It returns ``module`` itself when nothing
changed, as the pass contract asks.
"""

from __future__ import annotations

from typing import Callable, Iterable

from hlo.ir import HloComputation, HloModule

Decide = Callable[[HloModule, HloComputation], dict[str, object]]


def annotate(module: HloModule, key: str, decide: Decide, computations: Iterable[str] | None = None) -> HloModule:
    names = set(computations) if computations is not None else {c.name for c in module.computations}
    new_comps = []
    changed = False
    for comp in module.computations:
        if comp.name not in names:
            new_comps.append(comp)
            continue
        values = decide(module, comp)
        insts = []
        for inst in comp.instructions:
            value = values.get(inst.name)
            if value is None and key in inst.attrs:
                inst = inst.replace(attrs=inst.attrs.remove(key))
            elif value is not None and inst.attrs.get(key) != value:
                inst = inst.with_attr(key, value)
            insts.append(inst)
        if any(a is not b for a, b in zip(insts, comp.instructions)):
            changed = True
            comp = comp.replace(instructions=tuple(insts))
        new_comps.append(comp)
    return module.replace(computations=tuple(new_comps)) if changed else module
