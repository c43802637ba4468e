"""Extract each cluster as a self-contained subgraph with ordered inputs and outputs.

For a cluster C (from ``cluster``) of a marked graph (from ``mark``):

- inputs: tensors produced outside C and read inside it, in order of first use (cluster nodes in
  GraphDef order, each node's data inputs in order). A ``ReadVariableOp`` is never in a cluster, so a
  variable's value arrives as an input;
- compile-time constants: an outside tensor that C needs as a constant (a ``const_inputs`` slot of a
  lowering rule, directly or through nodes of C that compute it) is not an input: its producer chain is
  copied into the subgraph (``Shape``/``Size``/``Rank``/``ShapeN`` of a static shape become ``Const``
  nodes), so the lowering can fold it; a small outside ``Const`` (``SMALL_CONSTANT_ELEMENTS``) is copied
  in too, rather than passed;
- outputs: tensors produced inside C and read outside it (other nodes and clusters, the graph's fetches),
  ordered by producer position then output index; a use by a cluster that copies the tensor in does not
  count. A value written to a variable is read by the ``Assign*VariableOp`` left in TensorFlow, so it is
  an output; a fetched node's outputs 0..k all are, so the rewrite can keep its name;
- ``graph_def``: copies of C's nodes (control inputs from outside dropped; the rewrite moves them to the
  launch node), the copied constants, and the library functions C's nodes call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple, Sequence

import numpy as np

from graph_passes._graph import GraphIndex
from graph_passes.inline import referenced_functions
from graph_passes.mark import CONST_OPS, SHAPE_OPS
from hlo.lowering import InputSpec
from hlo.lowering.registry import rule_for
from hlo.lowering.tensor_names import data_inputs, is_control, node_name, parse_input, tensor


SMALL_CONSTANT_ELEMENTS = 1024  # an outside Const up to this size is copied into a cluster, not passed in


class Port(NamedTuple):
    tensor: str  # "node:i"
    dtype: int  # TF DataType enum
    shape: tuple[int, ...]


@dataclass
class ClusterSpec:
    name: str
    node_names: tuple[str, ...]  # the cluster's nodes, GraphDef order
    inputs: list[Port]
    outputs: list[Port]
    graph_def: object  # GraphDef: the cluster's nodes, copied constants, called functions
    device: str = ""
    control_inputs: tuple[str, ...] = ()  # outside nodes with a control edge into the cluster
    control_outputs: tuple[str, ...] = ()  # outside nodes with a control edge from the cluster
    constants: tuple[str, ...] = ()  # outside tensors copied in (compile-time constants, small Consts)
    op_types: dict[str, int] = field(default_factory=dict)  # op histogram

    def input_specs(self) -> list[InputSpec]:
        return [InputSpec(p.tensor, p.dtype, p.shape) for p in self.inputs]

    def output_tensors(self) -> list[str]:
        return [p.tensor for p in self.outputs]


def _const_node(name: str, value: np.ndarray):
    import tensorflow as tf

    node = tf.compat.v1.NodeDef(name=name, op="Const")
    node.attr["dtype"].type = tf.as_dtype(value.dtype).as_datatype_enum
    node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value))
    return node


def _shape_value(node, dims: tuple[int, ...]) -> np.ndarray:
    out_type = node.attr["out_type"].type if "out_type" in node.attr else 3  # DT_INT32
    dtype = np.int64 if out_type == 9 else np.int32
    if node.op == "Rank":
        return np.asarray(len(dims), dtype)
    if node.op == "Size":
        return np.asarray(int(np.prod(dims, dtype=np.int64)), dtype)
    return np.asarray(dims, dtype)


class _Extractor:
    def __init__(self, marking, clustering, fetches: Sequence[str]):
        self.marking = marking
        self.cluster_of = clustering.cluster_of
        self.index = GraphIndex(marking.graph_def.node)
        self.library = {f.signature.name: f for f in marking.graph_def.library.function}
        self.fetched: dict[str, int] = {}  # fetched node -> highest output index fetched
        for f in fetches:
            node, idx, control = parse_input(f)
            if not control and node in self.index.by_name:
                self.fetched[node] = max(self.fetched.get(node, -1), idx)
        # first, for every cluster: a tensor another cluster copies in is not an output for that use
        self.copied = {c.name: self.needed_constants(set(c.nodes)) for c in clustering.clusters}
        self.copied_sets = {name: set(tensors) for name, tensors in self.copied.items()}

    def port(self, t: str) -> Port:
        info = self.marking.tensors[t]
        return Port(t, info.dtype, tuple(info.dims))

    def _small_const(self, t: str) -> bool:
        node = self.index.by_name[parse_input(t)[0]]
        info = self.marking.tensors.get(t)
        return (node.op in CONST_OPS and t in self.marking.constants and info is not None and info.static
                and int(np.prod(info.dims, dtype=np.int64)) <= SMALL_CONSTANT_ELEMENTS)

    def needed_constants(self, members: set[str]) -> list[str]:
        """Outside tensors copied into the cluster: those it needs as compile-time constants, then
        small ``Const`` nodes (cheaper copied than passed in), in first-need order."""
        work: list[str] = []
        for name in sorted(members, key=self.index.position.__getitem__):
            rule = rule_for(self.index.by_name[name].op)
            edges = self.index.data_in[name]
            for i in rule.const_inputs if rule else ():
                i = i + len(edges) if i < 0 else i
                if 0 <= i < len(edges):
                    work.append(tensor(edges[i].producer, edges[i].index))
        for name in sorted(members, key=self.index.position.__getitem__):  # small constants: sunk, not passed
            for e in self.index.data_in[name]:
                t = tensor(e.producer, e.index)
                if e.producer not in members and self._small_const(t):
                    work.append(t)
        seen: set[str] = set()
        outside: list[str] = []
        work.reverse()
        while work:
            t = work.pop()
            if t in seen:
                continue
            seen.add(t)
            producer = parse_input(t)[0]
            if producer not in members:
                outside.append(t)
            elif self.index.by_name[producer].op not in SHAPE_OPS:
                work.extend(reversed([tensor(e.producer, e.index) for e in self.index.data_in[producer]]))
        for t in outside:
            if t not in self.marking.constants:
                raise ValueError(f"tensor '{t}' must be a compile-time constant for a cluster but is not one")
        return outside

    def copy_constants(self, tensors: list[str]) -> list:
        """Copies of the producer chains of ``tensors`` (Shape-like ops of static shapes as Consts)."""
        out: dict[str, object] = {}
        work = [parse_input(t)[0] for t in tensors]
        while work:
            name = work.pop()
            if name in out:
                continue
            node = self.index.by_name[name]
            if node.op in SHAPE_OPS:
                ins = self.index.data_in[name]
                values = [_shape_value(node, tuple(self.marking.tensors[tensor(e.producer, e.index)].dims))
                          for e in (ins if node.op == "ShapeN" else ins[:1])]
                if node.op == "ShapeN":
                    import tensorflow as tf

                    consts = [_const_node(f"{name}/tfxla_const_{k}", v) for k, v in enumerate(values)]
                    ident = tf.compat.v1.NodeDef(name=name, op="IdentityN", input=[tensor(c.name, 0) for c in consts])
                    ident.attr["T"].list.type.extend(c.attr["dtype"].type for c in consts)
                    out.update({c.name: c for c in consts})
                    out[name] = ident
                else:
                    out[name] = _const_node(name, values[0])
                continue
            copy = type(node)()
            copy.CopyFrom(node)
            del copy.input[:]
            copy.input.extend(data_inputs(node.input))
            out[name] = copy
            if node.op not in CONST_OPS:
                work.extend(e.producer for e in self.index.data_in[name])
        return sorted(out.values(), key=lambda n: (self.index.position.get(n.name, -1), n.name))

    def extract(self, cluster) -> ClusterSpec:
        import tensorflow as tf

        members = set(cluster.nodes)
        constants = self.copied[cluster.name]
        constant_set = set(constants)
        inputs: dict[str, None] = {}
        control_in: dict[str, None] = {}
        control_out: dict[str, None] = {}
        outputs: set[str] = set()
        for name in cluster.nodes:
            for e in self.index.data_in[name]:
                t = tensor(e.producer, e.index)
                if e.producer not in members and t not in constant_set:
                    inputs.setdefault(t)
            control_in.update((c, None) for c in self.index.control_in[name] if c not in members)
            control_out.update((c, None) for c in self.index.control_out[name] if c not in members)
            outputs.update(tensor(name, e.index) for e in self.index.data_out[name] if e.consumer not in members
                           and tensor(name, e.index) not in self.copied_sets.get(self.cluster_of.get(e.consumer), ()))
            outputs.update(tensor(name, k) for k in range(self.fetched.get(name, -1) + 1))
        gd = tf.compat.v1.GraphDef()
        gd.versions.CopyFrom(self.marking.graph_def.versions)
        gd.node.extend(self.copy_constants(constants))
        histogram: dict[str, int] = {}
        for name in cluster.nodes:
            node = self.index.by_name[name]
            copy = gd.node.add()
            copy.CopyFrom(node)
            del copy.input[:]
            copy.input.extend(i for i in node.input if not is_control(i) or node_name(i) in members)
            histogram[node.op] = histogram.get(node.op, 0) + 1
        called = referenced_functions(gd.node, self.library)
        gd.library.function.extend(f for f in self.marking.graph_def.library.function if f.signature.name in called)
        order = sorted(outputs, key=lambda t: (self.index.position[parse_input(t)[0]], parse_input(t)[1]))
        return ClusterSpec(cluster.name, cluster.nodes, [self.port(t) for t in inputs], [self.port(t) for t in order],
                           gd, cluster.device, tuple(control_in), tuple(control_out), tuple(constants),
                           dict(sorted(histogram.items())))


def extract_clusters(marking, clustering, fetches: Sequence[str] = ()) -> list[ClusterSpec]:
    """One ``ClusterSpec`` per cluster of ``clustering``, in cluster order."""
    extractor = _Extractor(marking, clustering, fetches)
    return [extractor.extract(c) for c in clustering.clusters]


__all__ = ["ClusterSpec", "Port", "extract_clusters"]
