"""Rewrite a GraphDef: each cluster becomes ONE launch node (op ``TfxlaLaunch``); the rest stays as it was.

For each ``ClusterSpec`` (from ``extract``), in order:

- a launch node named after the cluster (``cluster_0``; ``cluster_0_1``... if the name is taken) with
  inputs ``[kernel path] + cluster inputs`` in the spec's order. The kernel path is a new scalar string
  ``Const`` (``<launch>/kernel_path``) or a tensor the caller names; op type and attrs come from the
  caller's ``launch`` callback (``standard_attrs`` builds the usual ones);
- every consumer of a cluster output ``t = outputs[k]`` reads ``<launch>:k``; a control edge into the
  cluster becomes one into the launch node, a control edge out of it one out of the launch node;
- a fetched clustered node keeps its name: ``IdentityN`` of its outputs (a ``NoOp`` for a target), so the
  caller's fetches stay valid;
- the clustered nodes are removed, and so is every node that was live before (needed by a fetch or a
  stateful op) and is dead now; stateful ops, fetches and what they need (control edges included) stay;
- a dead cluster (``dead_clusters``: nothing live needs it) gets no launch node: its nodes go, and so
  do the dead nodes that read them;
- ``RewriteResult.launches`` records, per cluster, what was written (the launch node's name, the caller's
  ``LaunchSpec``, its data and control inputs), so later stages read that record, not the GraphDef;
- every other NodeDef is left byte-for-byte as it was (only inputs that named clustered nodes change,
  and ``_class`` colocation entries naming removed nodes are dropped); the library keeps the functions
  the remaining nodes call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping, Sequence

from graph_passes._graph import GraphIndex, fresh_name
from graph_passes.inline import referenced_functions
from hlo.lowering.tensor_names import (canonical, control, control_inputs, data_inputs, fetch_nodes, node_name,
                                       parse_input, tensor)

if TYPE_CHECKING:
    from graph_passes.extract import ClusterSpec

LAUNCH_OP = "TfxlaLaunch"


@dataclass(frozen=True)
class LaunchSpec:
    """What the caller decides about one launch node."""

    attrs: Mapping[str, object] = field(default_factory=dict)  # name -> AttrValue
    kernel_path: str | Sequence[str] | None = None  # the value of a new string Const (a vector for tiles) ...
    kernel_tensor: str | None = None  # ... or an existing string tensor (a placeholder fed from an Asset)
    op: str = LAUNCH_OP


@dataclass(frozen=True)
class LaunchRecord:
    """What the rewrite wrote for one cluster, for later stages to read instead of the GraphDef."""

    cluster: str
    node: str  # the launch node's name
    decided: LaunchSpec  # what the caller's ``launch`` callback decided: attrs, kernel path or tensor
    inputs: tuple[str, ...]  # the launch's data inputs after the kernel path, canonical ("node:k"), spec order
    control_inputs: tuple[str, ...]  # the nodes it waits on


@dataclass
class RewriteResult:
    graph_def: object
    launch_nodes: dict[str, str]  # cluster name -> launch node name
    tensor_map: dict[str, str]  # original cluster output tensor -> "<launch>:k"
    removed: list[str]  # clustered nodes and nodes that became dead, GraphDef order
    launches: dict[str, LaunchRecord] = field(default_factory=dict)  # cluster name -> its launch node


def standard_attrs(spec, **extra) -> dict[str, object]:
    """``Tin``, ``Tout``, ``output_shapes`` and ``cluster`` for ``spec``, plus ``extra`` (str, int, bytes, or a
    list/tuple of ints or of strs); ``output_shapes`` may be passed in ``extra`` to override the specs'."""
    import tensorflow as tf

    attrs = {k: tf.compat.v1.AttrValue() for k in ("Tin", "Tout", "output_shapes", "cluster")}
    attrs["Tin"].list.type.extend(p.dtype for p in spec.inputs)
    attrs["Tout"].list.type.extend(p.dtype for p in spec.outputs)
    attrs["output_shapes"].list.shape.extend(tf.TensorShape(list(p.shape)).as_proto() for p in spec.outputs)
    attrs["cluster"].s = spec.name.encode()
    for key, value in extra.items():
        attr = tf.compat.v1.AttrValue()
        if isinstance(value, bool):
            attr.b = value
        elif isinstance(value, int):
            attr.i = value
        elif isinstance(value, bytes):
            attr.s = value
        elif isinstance(value, (list, tuple)):
            if key == "output_shapes":
                attr.list.shape.extend(tf.TensorShape(list(d)).as_proto() for d in value)
            elif all(isinstance(v, (int, bool)) for v in value):
                attr.list.i.extend(int(v) for v in value)
            else:
                attr.list.s.extend(v.encode() if isinstance(v, str) else v for v in value)
        else:
            attr.s = str(value).encode()
        attrs[key] = attr
    return attrs


def live_nodes(graph_def, clusters: Sequence, fetches: Iterable[str] = ()) -> set[str]:
    """The nodes a fetch or a stateful op needs, directly or through other nodes; a cluster counts as one
    unit (needing one of its nodes needs the inputs of all)."""
    by_name = {n.name: n for n in graph_def.node}
    members = {spec.name: spec.node_names for spec in clusters}
    cluster_of = {n: spec.name for spec in clusters for n in spec.node_names}
    live: set[str] = set()
    work = [r for r in _roots(graph_def.node, fetch_nodes(fetches)) if r in by_name]
    while work:
        name = work.pop()
        if name in live:
            continue
        for member in members.get(cluster_of.get(name), (name,)):
            live.add(member)
            work.extend(node_name(i) for i in by_name[member].input if node_name(i) in by_name)
    return live


def dead_clusters(graph_def, clusters: Sequence, fetches: Iterable[str] = ()) -> list[str]:
    """The clusters that are dead code: none of their nodes is live (``live_nodes``). They get no launch
    node; their nodes, and the dead nodes reading them, are removed."""
    live = live_nodes(graph_def, clusters, fetches)
    return [spec.name for spec in clusters if not live & set(spec.node_names)]


def is_stateful(op: str) -> bool:
    """Whether TF runs ``op`` for its effect (a fetch need not read it); an op TF does not know counts."""
    from tensorflow.python.framework import op_def_registry

    op_def = op_def_registry.get(op)
    return op_def is None or op_def.is_stateful  # an op TF does not know (our launch op) counts as stateful


def reachable(nodes: Sequence, roots: Iterable[str]) -> set[str]:
    """The nodes among ``nodes`` that ``roots`` read, directly or through others (the roots included)."""
    by_name = {n.name: n for n in nodes}
    live: set[str] = set()
    work = [r for r in roots if r in by_name]
    while work:
        name = work.pop()
        if name in live:
            continue
        live.add(name)
        work.extend(node_name(i) for i in by_name[name].input)
    return live


def _roots(nodes: Sequence, fetched: set[str]) -> set[str]:
    return fetched | {n.name for n in nodes if is_stateful(n.op)}


def _drop_colocation(node, removed: set[str]) -> None:
    if "_class" not in node.attr:
        return
    entries = list(node.attr["_class"].list.s)
    kept = [e for e in entries if not (e.startswith(b"loc:@") and e[5:].decode() in removed)]
    if len(kept) == len(entries):
        return
    if kept:
        del node.attr["_class"].list.s[:]
        node.attr["_class"].list.s.extend(kept)
    else:
        del node.attr["_class"]


def rewrite_clusters(graph_def, clusters: Sequence[ClusterSpec], launch: Callable[[ClusterSpec], LaunchSpec], *,
                     fetches: Sequence[str] = (), keep_fetch_names: bool = True) -> RewriteResult:
    """Replace each cluster of ``graph_def`` (``ClusterSpec`` objects from ``extract``) by one launch node."""
    import tensorflow as tf

    index = GraphIndex(graph_def.node)
    taken = set(index.by_name)
    launch_of: dict[str, str] = {}  # clustered node -> launch node
    launch_nodes: dict[str, str] = {}
    tensor_map: dict[str, str] = {}
    dtypes: dict[str, int] = {}
    fetched = fetch_nodes(fetches)
    dead_names = set(dead_clusters(graph_def, clusters, fetched))
    for spec in clusters:
        if spec.name in dead_names:
            continue  # dead code: its nodes go, no launch node replaces them
        name = fresh_name(taken, spec.name)
        launch_nodes[spec.name] = name
        launch_of.update((n, name) for n in spec.node_names)
        tensor_map.update((p.tensor, tensor(name, k)) for k, p in enumerate(spec.outputs))
        dtypes.update((p.tensor, p.dtype) for p in spec.outputs)

    def data_input(t: str) -> str:
        t = canonical(t)
        if node_name(t) not in launch_of:
            return t
        if t not in tensor_map:
            raise ValueError(f"tensor '{t}' is read outside its cluster but is not one of the cluster's outputs")
        return tensor_map[t]

    def control_input(node: str) -> str:
        return control(launch_of.get(node, node))

    before = reachable(graph_def.node, _roots(graph_def.node, fetched))
    unobserved = {n for spec in clusters if spec.name in dead_names for n in spec.node_names}
    work = list(unobserved)  # and the dead nodes that read them (the graph must stay whole)
    while work:
        for consumer in index.successors(work.pop()):
            if consumer not in before and consumer not in unobserved:
                unobserved.add(consumer)
                work.append(consumer)
    new_nodes: dict[int, list] = {}  # GraphDef position of the replaced node -> nodes placed there
    records: dict[str, LaunchRecord] = {}
    for spec in clusters:
        if spec.name not in launch_nodes:
            continue
        name = launch_nodes[spec.name]
        decided = launch(spec)
        first = index.position[spec.node_names[0]]
        placed = new_nodes.setdefault(first, [])
        node = tf.compat.v1.NodeDef(name=name, op=decided.op, device=spec.device)
        if decided.kernel_tensor is not None:
            node.input.append(decided.kernel_tensor)
        else:
            const = tf.compat.v1.NodeDef(name=fresh_name(taken, f"{name}/kernel_path"), op="Const", device=spec.device)
            const.attr["dtype"].type = tf.string.as_datatype_enum
            path = decided.kernel_path or ""
            paths = path.encode() if isinstance(path, str) else [p.encode() for p in path]
            const.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(paths, dtype=tf.string))
            placed.append(const)
            node.input.append(tensor(const.name, 0))
        inputs = tuple(data_input(p.tensor) for p in spec.inputs)
        node.input.extend(inputs)
        controls = dict.fromkeys(control_input(c) for c in spec.control_inputs)
        controls.pop(control(name), None)
        node.input.extend(controls)
        records[spec.name] = LaunchRecord(spec.name, name, decided, inputs, tuple(node_name(c) for c in controls))
        for key, value in decided.attrs.items():
            node.attr[key].CopyFrom(value)
        placed.append(node)

    nodes: list[Any] = []  # NodeDefs
    for i, original in enumerate(graph_def.node):
        nodes.extend(new_nodes.get(i, ()))
        if original.name in unobserved:
            continue
        if original.name in launch_of:
            if keep_fetch_names and original.name in fetched:
                nodes.append(_name_keeper(original, fetches, data_input, launch_of[original.name], dtypes))
            continue
        refs = [node_name(t) for t in original.input]
        if not any(r in launch_of for r in refs):
            nodes.append(original)
            continue
        node = type(original)()
        node.CopyFrom(original)
        data = [data_input(t) if node_name(t) in launch_of else t for t in data_inputs(original.input)]
        controls = dict.fromkeys(control_input(node_name(t)) for t in control_inputs(original.input))
        del node.input[:]
        node.input.extend(data + list(controls))
        nodes.append(node)

    after = reachable(nodes, _roots(nodes, fetched) | set(launch_nodes.values()))
    dead = {n.name for n in nodes if n.name in before and n.name not in after and n.name in index.by_name}
    removed_set = (set(launch_of) - fetched) | dead | unobserved
    out = type(graph_def)()
    out.versions.CopyFrom(graph_def.versions)
    for node in nodes:
        if node.name not in dead:
            copy = out.node.add()
            copy.CopyFrom(node)
            _drop_colocation(copy, removed_set)
    GraphIndex(out.node)  # every input must name a node that exists
    library = {f.signature.name: f for f in graph_def.library.function}
    keep = referenced_functions(out.node, library)  # bodies only clustered nodes called go with them
    out.library.function.extend(f for f in graph_def.library.function if f.signature.name in keep)
    out.library.gradient.extend(g for g in graph_def.library.gradient if g.function_name in keep)
    removed = [n.name for n in graph_def.node if n.name in removed_set]
    return RewriteResult(out, launch_nodes, tensor_map, removed, records)


def _name_keeper(original, fetches: Sequence[str], data_input, launch: str, dtypes: Mapping[str, int]):
    """The node that keeps a fetched clustered node's name: IdentityN of its outputs, or a NoOp."""
    import tensorflow as tf

    wanted = [parse_input(f) for f in fetches if node_name(f) == original.name]
    top = max((idx for _, idx, control in wanted if not control), default=-1)
    if top < 0:
        return tf.compat.v1.NodeDef(name=original.name, op="NoOp", input=[control(launch)], device=original.device)
    outputs = [tensor(original.name, k) for k in range(top + 1)]
    node = tf.compat.v1.NodeDef(name=original.name, op="IdentityN", device=original.device,
                                input=[data_input(t) for t in outputs])
    node.attr["T"].list.type.extend(dtypes[t] for t in outputs)
    return node


__all__ = ["LAUNCH_OP", "LaunchRecord", "LaunchSpec", "RewriteResult", "dead_clusters", "live_nodes", "rewrite_clusters", "standard_attrs"]
