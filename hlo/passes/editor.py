"""A mutable working copy of one computation, for passes that rewrite instructions.

Passes edit through ``ComputationEditor`` and call ``build()`` to get a new
immutable ``HloComputation``: instructions come out in a stable topological
order (original order wherever the edit allows), so the result is a valid
schedule for the evaluator and the backends.
"""

from __future__ import annotations

from hlo.ir import HloComputation, HloInstruction, HloModule


class ComputationEditor:
    def __init__(self, comp: HloComputation):
        self.comp = comp
        self.insts: dict[str, HloInstruction] = {i.name: i for i in comp.instructions}
        self.order: list[str] = [i.name for i in comp.instructions]
        self.root = comp.root_name
        self.changed = False
        self._counter = 0

    def __getitem__(self, name: str) -> HloInstruction:
        return self.insts[name]

    def __contains__(self, name: str) -> bool:
        return name in self.insts

    def fresh_name(self, base: str) -> str:
        while True:
            self._counter += 1
            name = f"{base}.{self._counter}" if not base.endswith(f".{self._counter}") else f"{base}_{self._counter}"
            if name not in self.insts:
                return name

    def users(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {n: [] for n in self.order}
        for n in self.order:
            for op in self.insts[n].operands:
                out.setdefault(op, []).append(n)
        return out

    def add(self, inst: HloInstruction) -> HloInstruction:
        """Add a new instruction (its position is fixed by ``build``'s topological order)."""
        if inst.name in self.insts:
            raise ValueError(f"instruction %{inst.name} already exists")
        self.insts[inst.name] = inst
        self.order.append(inst.name)
        self.changed = True
        return inst

    def set(self, inst: HloInstruction) -> None:
        """Replace the instruction of the same name."""
        if self.insts[inst.name] != inst:
            self.insts[inst.name] = inst
            self.changed = True

    def replace_uses(self, old: str, new: str) -> None:
        """Make every user of ``old`` (and the ROOT, if it is ``old``) use ``new`` instead."""
        if old == new:
            return
        for n in self.order:
            inst = self.insts[n]
            if old in inst.operands and n != new:
                self.insts[n] = inst.replace(operands=tuple(new if o == old else o for o in inst.operands))
                self.changed = True
        if self.root == old:
            self.root = new
            self.changed = True

    def replace_all_uses(self, mapping: dict[str, str]) -> None:
        """``replace_uses(old, new)`` for every item of ``mapping`` in one pass over the instructions (a
        pass replacing many calls this, not ``replace_uses`` per name: that is quadratic). No ``new`` may
        itself be an ``old``, nor use its ``old``."""
        mapping = {old: new for old, new in mapping.items() if old != new}
        if not mapping:
            return
        for n in self.order:
            inst = self.insts[n]
            if any(o in mapping for o in inst.operands):
                self.insts[n] = inst.replace(operands=tuple(mapping.get(o, o) for o in inst.operands))
                self.changed = True
        if self.root in mapping:
            self.root = mapping[self.root]
            self.changed = True

    def remove(self, name: str) -> None:
        del self.insts[name]
        self.order.remove(name)
        self.changed = True

    def remove_all(self, names) -> None:
        """``remove`` each of ``names`` (one pass over the order)."""
        gone = set(names)
        if not gone:
            return
        for name in gone:
            del self.insts[name]
        self.order = [n for n in self.order if n not in gone]
        self.changed = True

    def build(self) -> HloComputation:
        if not self.changed:
            return self.comp
        position = {n: i for i, n in enumerate(self.order)}
        emitted: set[str] = set()
        out: list[HloInstruction] = []
        for n in self.order:  # stable DFS topological order
            stack = [(n, False)]
            while stack:
                name, ready = stack.pop()
                if name in emitted:
                    continue
                inst = self.insts[name]
                if ready:
                    emitted.add(name)
                    out.append(inst)
                    continue
                stack.append((name, True))
                deps = [o for o in inst.operands if o in self.insts and o not in emitted]
                for d in sorted(deps, key=position.__getitem__, reverse=True):
                    stack.append((d, False))
        return self.comp.replace(instructions=tuple(out), root_name=self.root)


def map_computations(module: HloModule, fn) -> HloModule:
    """Apply ``fn(comp) -> comp`` to every computation; returns ``module`` itself if nothing changed."""
    new = tuple(fn(c) for c in module.computations)
    if all(a is b for a, b in zip(new, module.computations)):
        return module
    return module.replace(computations=new)
