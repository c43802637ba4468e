"""Turn a fusion graph back into HLO: fusion instructions, fused computations, deterministic names.

Each cluster becomes ``%fusion.N = fusion(operands), kind=..., calls=%fused_<root-opcode>.N``
(``fused_tuple.N`` for a multi-output fusion), numbered module-wide in
instruction order, skipping names already taken. The fused computation holds
``param_K`` parameters for the cluster's external operands (in order of first
use), copies of every scalar constant it reads (those are never parameters),
the fused instructions under their original names in original order, and a
``tuple`` ROOT when there are several outputs. The computation's instructions
come out in a stable topological order.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TypeGuard

from hlo.attributes import Attrs, CompRef
from hlo.ir import HloComputation, HloInstruction, HloModule
from hlo.opcodes import Opcode
from hlo.passes.fusion.decisions import FusionRecord
from hlo.passes.fusion.graph import Cluster, FusionGraph, external_operands, stable_topological_order
from hlo.shapes import Shape, TupleShape


@dataclass
class Namer:
    """Module-wide numbering of new fusions."""

    module: HloModule
    next_number: int = 0
    taken_computations: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.taken_computations |= {c.name for c in self.module.computations}

    def names(self, root_opcode: str, taken_instructions: set[str]) -> tuple[str, str]:
        while True:
            n = self.next_number
            self.next_number += 1
            inst, comp = f"fusion.{n}", f"fused_{root_opcode}.{n}"
            if inst not in taken_instructions and comp not in self.taken_computations:
                self.taken_computations.add(comp)
                taken_instructions.add(inst)
                return inst, comp


def _unique(base: str, taken: set[str]) -> str:
    name, k = base, 0
    while name in taken:
        k += 1
        name = f"{base}.{k}"
    taken.add(name)
    return name


def _is_scalar_constant(node: HloInstruction | Cluster) -> TypeGuard[HloInstruction]:
    return (isinstance(node, HloInstruction) and node.opcode is Opcode.CONSTANT and isinstance(node.shape, Shape)
            and not node.shape.dims)


def fused_computation(graph: FusionGraph, cluster: Cluster, name: str) -> tuple[HloComputation, list[str]]:
    """The fused computation of ``cluster`` and the top-level operands of its fusion instruction."""
    taken = set(cluster.insts)
    params: list[HloInstruction] = []
    copies: list[HloInstruction] = []
    operands: list[str] = []
    rename: dict[str, str] = {}
    for op in external_operands(cluster, graph.position):
        node = graph.nodes[op]
        if _is_scalar_constant(node):
            copies.append(node)
            taken.add(op)
            continue
        pname = _unique(f"param_{len(params)}", taken)
        params.append(HloInstruction(pname, Opcode.PARAMETER, node.shape, parameter_number=len(params)))
        rename[op] = pname
        operands.append(op)
    body = []
    for n in graph.ordered(cluster.insts):
        inst = cluster.insts[n]
        if any(o in rename for o in inst.operands):
            inst = inst.replace(operands=tuple(rename.get(o, o) for o in inst.operands))
        body.append(inst)
    root = cluster.outputs[0]
    if cluster.multi_output:
        root = _unique("tuple", taken)
        body.append(HloInstruction(root, Opcode.TUPLE, cluster.shape, tuple(cluster.outputs)))
    return HloComputation(name, tuple(params + copies + body), root), operands


def materialize(graph: FusionGraph, namer: Namer) -> tuple[HloComputation, list[HloComputation],
                                                             list[FusionRecord], dict[str, str]]:
    """(new computation, fused computations in instruction order, records, temporary -> final names)."""
    comp = graph.comp
    order = stable_topological_order(graph.ordered(graph.nodes), graph.operands)
    # A top-level scalar constant that only clusters read is copied into each of them.
    order = [n for n in order if not (_is_scalar_constant(graph.nodes[n]) and n != graph.root and graph.users[n]
                                      and all(isinstance(graph.nodes[u], Cluster) for u in graph.users[n]))]
    taken = set(graph.nodes) | {i.name for i in comp.instructions}
    final: dict[str, str] = {}
    computations: dict[str, str] = {}
    for n in order:
        node = graph.nodes[n]
        if isinstance(node, Cluster):
            root_op = "tuple" if node.multi_output else node.insts[node.outputs[0]].opcode.text
            final[n], computations[n] = namer.names(root_op, taken)

    instructions: list[HloInstruction] = []
    fused: list[HloComputation] = []
    records: list[FusionRecord] = []
    for n in order:
        node = graph.nodes[n]
        if isinstance(node, Cluster):
            body, operands = fused_computation(graph, node, computations[n])
            metadata = node.insts[node.outputs[0]].metadata
            attrs = [("kind", node.kind), ("calls", CompRef(body.name))]
            if metadata is not None:
                attrs.append(("metadata", metadata))
            shape = TupleShape(tuple(node.insts[o].shape for o in node.outputs)) if node.multi_output \
                else node.shape
            inst = HloInstruction(final[n], Opcode.FUSION, shape, tuple(final.get(o, o) for o in operands),
                                  Attrs(attrs))
            fused.append(body)
            records.append(FusionRecord(comp.name, final[n], node.kind.value, body.name, tuple(node.outputs),
                                        tuple(graph.ordered(node.insts))))
        else:
            inst = node
            if any(o in final for o in inst.operands):
                inst = inst.replace(operands=tuple(final.get(o, o) for o in inst.operands))
        instructions.append(inst)
    new = comp.replace(instructions=tuple(instructions), root_name=final.get(graph.root, graph.root))
    temporary = {}
    for old, new_name in graph.aliases.items():
        while new_name in graph.aliases:
            new_name = graph.aliases[new_name]
        temporary[old] = final.get(new_name, new_name)
    temporary.update({n: f for n, f in final.items()
                      if isinstance(node := graph.nodes[n], Cluster) and node.multi_output})
    return new, fused, records, temporary
