"""The GraphDefs a TensorBoard run shows: pure functions from a compilation to ``GraphDef`` protos.

- ``original_graph``: the graph that was clustered, every clustered node carrying ``_XlaCluster`` (the
  attribute TensorBoard's "Color by XLA Cluster" reads) and ``tfxla_cluster``, every node left out a
  ``tfxla_left_out`` reason (and ``tfxla_source``, the Python line, when known);
- ``rewritten_graph``: the graph TensorFlow runs, each ``TfxlaLaunch`` node with short attrs only (cluster,
  TF op count, HLO op count, kernel hash, backend; the serialized cluster graph and its I/O are dropped);
- ``hlo_graph``: one optimized HLO module as a GraphDef: one node per instruction (op = HLO opcode), the
  instructions of each fusion under the fusion's name scope (``fusion.3/multiply.7``, its parameters as
  ``fusion.3/param_0`` fed by the fusion's operands), edges from operands. A fusion has no node of its own:
  its users read the fused computation's root.

Invariant of every graph here: no attribute is 1 KiB or more (``ATTR_LIMIT``; TensorBoard drops larger
ones); ``shorten_attrs`` truncates strings with an ellipsis and replaces other large values (tensors,
long lists) by a one-line description.
"""

from __future__ import annotations

import math
from typing import Mapping

ATTR_LIMIT = 1024  # bytes: TensorBoard's graph dashboard drops attributes of this size or more
ELLIPSIS = "…"
LAUNCH_DROPPED_ATTRS = ("cluster_graph", "cluster_io")  # big: the serialized cluster, its tensor names
MAX_LITERAL_ELEMENTS = 256  # larger HLO constants are described, not printed (printing a weight is slow)


def _graph_def_type():
    import tensorflow as tf

    return tf.compat.v1.GraphDef


def _attr(text: str):
    import tensorflow as tf

    value = tf.compat.v1.AttrValue()
    value.s = truncate(text).encode()
    return value


def truncate(text: str, limit: int = ATTR_LIMIT - 24) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes, ending in an ellipsis when cut."""
    data = text.encode()
    if len(data) <= limit:
        return text
    cut = data[:limit - len(ELLIPSIS.encode())].decode(errors="ignore")
    return cut + ELLIPSIS


def _describe(value) -> str:
    """A one-line description of a large non-string AttrValue."""
    import tensorflow as tf

    kind = value.WhichOneof("value")
    if kind == "tensor":
        t = value.tensor
        dims = [d.size for d in t.tensor_shape.dim]
        return f"<{tf.dtypes.as_dtype(t.dtype).name} tensor {dims}, {value.ByteSize()} bytes, not shown>"
    if kind == "list":
        return f"<list attr, {value.ByteSize()} bytes, not shown>"
    return f"<{kind} attr, {value.ByteSize()} bytes, not shown>"


def shorten_attrs(graph_def) -> None:
    """In place: every attribute of ``ATTR_LIMIT`` bytes or more becomes a short string."""
    for node in graph_def.node:
        for key in list(node.attr):
            value = node.attr[key]
            if value.ByteSize() < ATTR_LIMIT:
                continue
            if value.WhichOneof("value") == "s":
                text = value.s.decode(errors="replace")
            else:
                text = _describe(value)
            node.attr[key].CopyFrom(_attr(text))


def _copy(graph_def):
    gd = _graph_def_type()()
    gd.CopyFrom(graph_def)
    return gd


def original_graph(analysis, sources: Mapping[str, tuple[str, int]] | None = None):
    """The clustered graph (``ClusteringResult.graph_def``) annotated with cluster ids and left-out reasons."""
    import os

    gd = _copy(analysis.graph_def)
    del gd.library.function[:]  # called functions were inlined; TensorBoard shows only the top graph
    sources = analysis.sources if sources is None else sources
    excluded = analysis.excluded
    for node in gd.node:
        cluster = analysis.cluster_of(node.name)
        if cluster:
            node.attr["_XlaCluster"].CopyFrom(_attr(cluster))
            node.attr["tfxla_cluster"].CopyFrom(_attr(cluster))
        elif node.name in excluded:
            node.attr["tfxla_left_out"].CopyFrom(_attr(excluded[node.name]))
        if node.name in sources:
            file, line = sources[node.name]
            node.attr["tfxla_source"].CopyFrom(_attr(f"{os.path.basename(file)}:{line}"))
    shorten_attrs(gd)
    return gd


def rewritten_graph(graph_def, launch_info: Mapping[str, Mapping[str, object]] | None = None,
                    launch_op: str = "TfxlaLaunch"):
    """The rewritten graph with short launch attrs; ``launch_info``: cluster name -> extra attrs to set."""
    import tensorflow as tf

    gd = _copy(graph_def)
    for node in gd.node:
        if node.op != launch_op:
            continue
        for key in LAUNCH_DROPPED_ATTRS:
            if key in node.attr:
                del node.attr[key]
        cluster = node.attr["cluster"].s.decode() if "cluster" in node.attr else node.name
        node.attr["_XlaCluster"].CopyFrom(_attr(cluster))
        for key, value in (launch_info or {}).get(cluster, {}).items():
            attr = tf.compat.v1.AttrValue()
            if isinstance(value, bool):
                attr.b = value
            elif isinstance(value, int):
                attr.i = value
            else:
                attr = _attr(str(value))
            node.attr[key].CopyFrom(attr)
    shorten_attrs(gd)
    return gd


def _instruction_attrs(node, inst) -> None:
    import tensorflow as tf

    from hlo.shapes import Shape

    node.attr["shape"].CopyFrom(_attr(str(inst.shape)))
    if isinstance(inst.shape, Shape):
        shapes = tf.compat.v1.AttrValue()
        shapes.list.shape.add().CopyFrom(tf.TensorShape(list(inst.shape.dims)).as_proto())
        node.attr["_output_shapes"].CopyFrom(shapes)  # TensorBoard labels edges with these
    meta = inst.metadata
    if meta is not None and meta.get("op_name"):
        node.attr["tf_op"].CopyFrom(_attr(f"{meta.get('op_type', '')} {meta.get('op_name')}".strip()))
    if inst.literal is not None:
        from hlo.literal import format_literal

        elements = math.prod(inst.shape.dims) if isinstance(inst.shape, Shape) else 0
        text = (format_literal(inst.literal) if elements <= MAX_LITERAL_ELEMENTS
                else f"<{inst.shape} constant, {elements} elements, not shown>")
        node.attr["value"].CopyFrom(_attr(text))
    if inst.parameter_number is not None:
        node.attr["parameter_number"].i = inst.parameter_number
    for key, value in inst.attrs.items():
        if key == "metadata":
            continue
        from hlo.text.attr_codecs import format_value

        node.attr[key].CopyFrom(_attr(format_value(value)))


def hlo_graph(module):
    """``module`` (optimized HLO) as a GraphDef: entry instructions, fused instructions under fusion scopes."""
    from hlo.opcodes import Opcode

    gd = _graph_def_type()()
    entry = module.entry
    output_of: dict[str, str] = {}  # entry instruction -> the node its users read

    def add(name: str, inst, inputs: list[str]):
        node = gd.node.add()
        node.name = name
        node.op = inst.opcode.text
        node.input.extend(inputs)
        _instruction_attrs(node, inst)
        return node

    for inst in entry.instructions:
        operands = [output_of[o] for o in inst.operands]
        if inst.opcode is Opcode.FUSION and inst.called_computations:
            fused = module.computation(inst.called_computations[0])
            scope = inst.name
            inner = {i.name: f"{scope}/{i.name}" for i in fused.instructions}
            for f in fused.instructions:
                if f.opcode is Opcode.PARAMETER:
                    inputs = [operands[f.parameter_number]]
                else:
                    inputs = [inner[o] for o in f.operands]
                node = add(inner[f.name], f, inputs)
                if f.name == fused.root_name:
                    node.attr["fusion"].CopyFrom(_attr(inst.name))
                    node.attr["fusion_kind"].CopyFrom(_attr(str(inst.attr("kind", ""))))
            output_of[inst.name] = inner[fused.root_name]
        else:
            add(inst.name, inst, operands)
            output_of[inst.name] = inst.name
    shorten_attrs(gd)
    return gd


__all__ = ["ATTR_LIMIT", "LAUNCH_DROPPED_ATTRS", "hlo_graph", "original_graph", "rewritten_graph",
           "shorten_attrs", "truncate"]
