"""The stages of ``f.experimental_get_compiler_ir(*args)(stage=...)``, one table.

TensorFlow's own method returns, for a ``jit_compile=True`` function, HLO text (``hlo``,
``optimized_hlo``), a Graphviz graph of the optimized HLO (``optimized_hlo_dot``) and serialized
``xla.HloModuleProto`` bytes (``hlo_serialized``, ``optimized_hlo_serialized``,
``optimized_hlo_proto_serialized``). Ours returns the same text stages for every compiled cluster (one
module per cluster, in cluster order), the dot graph rendered here from our HLO (one ``digraph`` per
cluster), and our own stages: ``c`` (the generated kernel sources), ``clusters`` (the clustering summary)
and ``graph`` (the rewritten GraphDef as text).

The serialized stages are ``xla.HloModuleProto.SerializeToString()`` bytes (``hlo/serialize``; the proto
definition is installed with TensorFlow, ``tensorflow.compiler.xla.service.hlo_pb2``): ``hlo_serialized`` of
the module as lowered, ``optimized_hlo_serialized`` and ``optimized_hlo_proto_serialized`` (TensorFlow's
two names for the same bytes) of the optimized one. A function of one cluster gets ``bytes``, as from
TensorFlow; one of several clusters a list of ``bytes``, one per cluster in cluster order (protos cannot be
concatenated as the text stages' modules are). Our own attributes (``index_check=`` of a TF gather/scatter,
the backends' kernel-shape annotations such as ``row_program=``) travel as ``frontend_attributes``
``tfxla.<key>``. A module that holds what an ``HloModuleProto`` cannot carry faithfully (an attribute kept
as uninterpreted text, ``hlo.attributes.Raw``; an elided constant; tiled layouts) is refused with a
``NotImplementedError`` naming the stage, the cluster, the instruction and the attribute; its text stage is
what XLA's own HLO parser reads.
"""

from __future__ import annotations

from typing import Callable

from hlo.ir import HloComputation, HloModule
from hlo.serialize import ProtoConversionError, serialize_module

# stages CompiledGraph.ir renders (its own table)
_GRAPH_STAGES = ("hlo", "optimized_hlo", "c", "clusters", "graph")
_SERIALIZED = {"hlo_serialized": "hlo", "optimized_hlo_serialized": "optimized_hlo",
               "optimized_hlo_proto_serialized": "optimized_hlo"}
_MODULE = {"hlo": "hlo", "optimized_hlo": "optimized"}  # text stage -> the CompiledCluster field holding its module


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


def _serialized(stage: str) -> Callable:
    def render(compiled):
        blobs = []
        for cluster in compiled.clusters:
            try:
                blobs.append(serialize_module(getattr(cluster, _MODULE[_SERIALIZED[stage]])))
            except ProtoConversionError as e:
                raise NotImplementedError(
                    f"experimental_get_compiler_ir: stage {stage!r} (serialized xla.HloModuleProto bytes) of "
                    f"cluster {cluster.name}: {e}; use stage={_SERIALIZED[stage]!r} for the HLO text (which XLA's "
                    f"HLO parser reads)") from e
        return blobs[0] if len(blobs) == 1 else blobs
    return render


def _graph_stage(stage: str) -> Callable:
    return lambda compiled: compiled.ir(stage)


STAGES: dict[str, Callable] = {
    **{stage: _graph_stage(stage) for stage in _GRAPH_STAGES},
    "optimized_hlo_dot": lambda compiled: "\n".join(module_dot(c.optimized) for c in compiled.clusters),
    **{stage: _serialized(stage) for stage in _SERIALIZED},
}


def compiler_ir(compiled, stage: str = "hlo") -> str | bytes | list[bytes]:
    """Stage ``stage`` of ``compiled`` (a ``CompiledGraph``); an unknown stage is a ``ValueError`` listing them."""
    render = STAGES.get(stage)
    if render is None:
        raise ValueError(f"unknown stage {stage!r}; stages: {', '.join(STAGES)}")
    return render(compiled)


__all__ = ["STAGES", "compiler_ir", "module_dot"]
