"""The stages of ``f.experimental_get_compiler_ir(*args)(stage=...)``, one table.

TensorFlow's own method returns, for a ``jit_compile=True`` function, HLO text (``hlo``,
``optimized_hlo``), a Graphviz graph of the optimized HLO (``optimized_hlo_dot``) and serialized
``xla.HloModuleProto`` bytes (``hlo_serialized``, ``optimized_hlo_serialized``,
``optimized_hlo_proto_serialized``). Ours returns the same text stages for every compiled cluster (one
module per cluster, in cluster order), the dot graph rendered here from our HLO (one ``digraph`` per
cluster), and our own stages: ``c`` (the generated kernel sources), ``clusters`` (the clustering summary)
and ``graph`` (the rewritten GraphDef as text).

The serialized stages are refused with a ``NotImplementedError`` naming the stage: the proto definition
is installed with TensorFlow (``tensorflow.compiler.xla.service.hlo_pb2``), but our IR is not XLA's: some
attributes are kept as text we do not interpret (``hlo.attributes.Raw``), and instruction ids, layouts
and the schedule would have to be invented, so the bytes would not be an honest ``HloModuleProto``.
Their text stage (``hlo`` / ``optimized_hlo``) is what XLA's own HLO parser reads.
"""

from __future__ import annotations

from typing import Callable

from hlo.ir import HloComputation, HloModule

# stages CompiledGraph.ir renders (its own table)
_GRAPH_STAGES = ("hlo", "optimized_hlo", "c", "clusters", "graph")
_SERIALIZED = {"hlo_serialized": "hlo", "optimized_hlo_serialized": "optimized_hlo",
               "optimized_hlo_proto_serialized": "optimized_hlo"}


def _quote(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _node_id(computation: HloComputation, name: str) -> str:
    return _quote(f"{computation.name}/{name}")


def module_dot(module: HloModule) -> str:
    """A Graphviz ``digraph`` of ``module``: one box per instruction (name, opcode, shape), an edge per operand
    (operand -> user, labelled with the operand's position when there are several), each computation a
    ``subgraph cluster_`` and a dashed edge from an instruction to each computation it calls."""
    lines = [f"digraph {_quote(module.name)} {{", "  rankdir=TB;", "  node [shape=box, fontname=monospace];"]
    for index, computation in enumerate(module.computations):
        entry = " (ENTRY)" if computation.name == module.entry_name else ""
        lines.append(f"  subgraph cluster_{index} {{")
        lines.append(f"    label={_quote(computation.name + entry)};")
        for inst in computation.instructions:
            style = ", style=bold" if inst.name == computation.root_name else ""
            label = _quote(inst.name)[:-1] + "\\n" + _quote(f"{inst.opcode.text} {inst.shape}")[1:]  # two lines
            lines.append(f"    {_node_id(computation, inst.name)} [label={label}{style}];")
        for inst in computation.instructions:
            for k, operand in enumerate(inst.operands):
                label = f" [label={k}]" if len(inst.operands) > 1 else ""
                lines.append(f"    {_node_id(computation, operand)} -> {_node_id(computation, inst.name)}{label};")
        lines.append("  }")
    by_name = module.by_name
    for computation in module.computations:
        for inst in computation.instructions:
            for callee in inst.called_computations:
                if callee in by_name:
                    lines.append(f"  {_node_id(computation, inst.name)} -> "
                                 f"{_node_id(by_name[callee], by_name[callee].root_name)} [style=dashed];")
    lines.append("}")
    return "\n".join(lines)


def _refuse_serialized(stage: str) -> Callable:
    def refuse(_compiled):
        raise NotImplementedError(
            f"experimental_get_compiler_ir: stage {stage!r} (serialized xla.HloModuleProto bytes) is not "
            f"available: tfxla-plugin's HLO is its own IR and cannot fill an HloModuleProto faithfully; use "
            f"stage={_SERIALIZED[stage]!r} for the HLO text (which XLA's HLO parser reads) or "
            f"'optimized_hlo_dot' for a Graphviz graph")
    return refuse


def _graph_stage(stage: str) -> Callable:
    return lambda compiled: compiled.ir(stage)


STAGES: dict[str, Callable] = {
    **{stage: _graph_stage(stage) for stage in _GRAPH_STAGES},
    "optimized_hlo_dot": lambda compiled: "\n".join(module_dot(c.optimized) for c in compiled.clusters),
    **{stage: _refuse_serialized(stage) for stage in _SERIALIZED},
}


def compiler_ir(compiled, stage: str = "hlo") -> str:
    """Stage ``stage`` of ``compiled`` (a ``CompiledGraph``); an unknown stage is a ``ValueError`` listing them."""
    render = STAGES.get(stage)
    if render is None:
        raise ValueError(f"unknown stage {stage!r}; stages: {', '.join(STAGES)}")
    return render(compiled)


__all__ = ["STAGES", "compiler_ir", "module_dot"]
