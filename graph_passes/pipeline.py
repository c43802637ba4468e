"""The clustering driver: inline -> hoist loop reads -> infer list shapes -> forward variables -> mark ->
cluster -> extract (``analyze``), then ``rewrite``.

A cluster that no fetch and no stateful op needs is dead code: ``analyze`` moves it from ``clusters`` to
``dead`` (it is never compiled), and ``rewrite`` removes its nodes (and the dead nodes reading them) with
no launch node. Must-compile does not report dead nodes it cannot compile: TF prunes them.

``summary`` / ``summary_json`` explain the result in the spirit of XLA's clustering summary: clusters
built, compute nodes clustered out of all compute nodes, an op histogram per cluster, every node left
out with its op type and reason, and the merges that were refused. Coverage leaves out the op types of
``NON_COMPUTE_OPS`` (graph inputs, variable handles, reads and writes, control-only nodes, constants and
identities) and dead code, so a fully compiled function reads 100%. (TF's own auto-clustering summary
counts every node, its ``_Arg``/``_Retval``/``NoOp`` too, so it never does.)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from graph_passes.cluster import ZERO_COST_OPS, ClusterOptions, Clustering, RefusedMerge, cluster_nodes
from graph_passes.extract import ClusterSpec, extract_clusters
from graph_passes.forward_variables import forward_variables
from graph_passes.inline import inline_calls
from graph_passes.fold_shapes import fold_shapes, needs_fold
from graph_passes.list_shapes import infer_list_shapes
from graph_passes.loop_reads import hoist_loop_reads
from graph_passes.mark import Marking, analysis_graph, mark_compilable
from graph_passes.rewrite import LaunchSpec, RewriteResult, dead_clusters, live_nodes, rewrite_clusters, standard_attrs
from hlo.lowering.tensor_names import control

# Op types that stay in TensorFlow by design, never reported as unsupported (``_Arg``/``_Retval``: a function
# body's inputs and outputs, as the graph-optimizer hook sees them).
STRUCTURAL_OPS = frozenset({"Placeholder", "_Arg", "_Retval", "NoOp", "VarHandleOp", "ReadVariableOp", "AssignVariableOp",
                            "AssignAddVariableOp", "AssignSubVariableOp"})
# Op types that compute nothing: coverage counts neither them clustered nor them left out.
NON_COMPUTE_OPS = STRUCTURAL_OPS | ZERO_COST_OPS
MAX_REFUSED_LINES = 50  # refused merges listed in the text summary


@dataclass
class ClusteringResult:
    original: Any  # the GraphDef given (TensorFlow ships no type stubs)
    graph_def: Any  # after inlining and forwarding: what was marked, clustered and is rewritten
    fetches: list[str]
    options: ClusterOptions
    marking: Marking
    clustering: Clustering
    clusters: list[ClusterSpec]
    inlined: int = 0
    not_inlined: dict[str, str] = field(default_factory=dict)
    forwarded: list[str] = field(default_factory=list)  # variable reads replaced by the value last written
    origins: dict[str, str] = field(default_factory=dict)  # inlined node -> "<function>::<node>"
    sources: dict[str, tuple[str, int]] = field(default_factory=dict)  # node -> Python (file, line), if known
    dead: list[ClusterSpec] = field(default_factory=list)  # dead clusters: removed, never compiled
    dead_nodes: set[str] = field(default_factory=set)  # every node no fetch and no stateful op needs

    @property
    def refused(self) -> list[RefusedMerge]:
        return self.clustering.refused

    @property
    def excluded(self) -> dict[str, str]:
        """Every node in no cluster -> why, in GraphDef order."""
        return self.clustering.excluded

    def cluster_of(self, node: str) -> str | None:
        return self.clustering.cluster_of.get(node)

    def node_sources(self, sources: Mapping[str, tuple[str, int]]) -> dict[str, tuple[str, int]]:
        """``sources`` (as ``python_sources`` of the traced graph gives them) keyed by this graph's nodes:
        an inlined node is found under its ``"<function>::<node>"`` origin."""
        out = {}
        for node in self.graph_def.node:
            key = self.origins.get(node.name, node.name)
            if key in sources:
                out[node.name] = sources[key]
        return out

    def unsupported(self) -> dict[str, str]:
        """Nodes that cannot be compiled (what must-compile reports), leaving out the nodes that stay in
        TensorFlow by design (graph inputs, variable handles, reads and writes, control-only nodes),
        compilable nodes whose cluster was too small, and dead code (TF prunes it)."""
        ops = {n.name: n.op for n in self.graph_def.node}
        return {n: r for n, r in self.excluded.items()
                if ops[n] not in STRUCTURAL_OPS and not r.startswith("cluster too small") and n not in self.dead_nodes}


def drop_clusters(result: ClusteringResult, reasons: Mapping[str, str]) -> None:
    """Leave the clusters named in ``reasons`` in TensorFlow (in place): their nodes become excluded
    nodes with that reason, so the summary and the rewrite agree."""
    if not reasons:
        return
    c = result.clustering
    for spec in result.clusters:
        if spec.name in reasons:
            for node in spec.node_names:
                c.cluster_of.pop(node, None)
                c.excluded[node] = reasons[spec.name]
    order = {n.name: k for k, n in enumerate(result.graph_def.node)}
    c.excluded = dict(sorted(c.excluded.items(), key=lambda kv: order.get(kv[0], len(order))))
    result.clusters[:] = [s for s in result.clusters if s.name not in reasons]
    c.clusters[:] = [s for s in c.clusters if s.name not in reasons]


def resource_shapes_of(concrete_function) -> dict[str, tuple[int, tuple[int, ...]]]:
    """Resource placeholder name -> (dtype enum, dims) of the variable a ConcreteFunction captured or takes
    as an argument."""
    from tensorflow.python.ops import handle_data_util

    out = {}
    for placeholder in concrete_function.graph.inputs:
        if placeholder.dtype.name != "resource":
            continue
        data = handle_data_util.get_resource_handle_data(placeholder)
        if data.is_set and len(data.shape_and_type) == 1:
            st = data.shape_and_type[0]
            if not st.shape.unknown_rank:
                out[placeholder.op.name] = (st.dtype, tuple(d.size for d in st.shape.dim))
    return out


def analyze(graph_def, fetches: Sequence[str], options: ClusterOptions = ClusterOptions(), *,
            resource_shapes: Mapping[str, tuple[int, Sequence[int]]] | None = None,
            input_shapes: Mapping[str, Sequence[int]] | None = None,
            forward: bool = True) -> ClusteringResult:
    """Inline calls, hoist loops' variable reads, give TensorLists the element shapes their loops write,
    forward variable values (``forward``), fold shape arithmetic TF's shape inference cannot see
    (``fold_shapes``), mark compilable nodes, cluster them and extract each cluster.

    ``fetches``: the tensors (``node:i``) and target nodes (``^node``) the caller needs;
    ``resource_shapes``: resource placeholder -> (dtype, dims) of its variable (see ``resource_shapes_of``);
    ``input_shapes``: placeholder -> static dims used for shape inference only (the graph keeps its own).
    """
    inlined = inline_calls(graph_def, fetches)
    graph = hoist_loop_reads(inlined.graph_def, resource_shapes).graph_def
    graph, forwarded = infer_list_shapes(graph, resource_shapes, input_shapes).graph_def, []
    if forward:
        fwd = forward_variables(graph)
        graph, forwarded = fwd.graph_def, fwd.forwarded
    analysis = None
    if input_shapes is None and needs_fold(graph):  # folding reads static shapes: the graph's own only
        graph, analysis = _fold(graph, resource_shapes)
    marking = mark_compilable(graph, resource_shapes=resource_shapes, input_shapes=input_shapes, graph=analysis)
    clustering = cluster_nodes(marking, options, fetches)
    clusters = extract_clusters(marking, clustering, fetches)
    result = ClusteringResult(graph_def, graph, list(fetches), options, marking, clustering, clusters,
                              inlined.inlined, inlined.skipped, forwarded, inlined.origins)
    _set_aside_dead(result)
    return result


def _fold(graph, resource_shapes):
    """``fold_shapes`` until nothing changes: a slice it sizes gives the nodes after it static shapes, which
    may fold next (a gradient's ``BroadcastGradientArgs``); at most 3 rounds. Returns the graph and its
    analysis import."""
    analysis = analysis_graph(graph, resource_shapes)
    for _ in range(3):
        fold = fold_shapes(graph, analysis)
        if not fold.changed:
            return graph, analysis
        graph, analysis = fold.graph_def, analysis_graph(fold.graph_def, resource_shapes)
    return graph, analysis


def _set_aside_dead(result: ClusteringResult) -> None:
    """Move the dead clusters (``rewrite.dead_clusters``: nothing a fetch or a stateful op needs) from
    ``clusters`` to ``dead`` (in place), and record every dead node."""
    live = live_nodes(result.graph_def, result.clusters, result.fetches)
    result.dead_nodes = {n.name for n in result.graph_def.node if n.name not in live}
    names = set(dead_clusters(result.graph_def, result.clusters, result.fetches))
    if not names:
        return
    dead = [spec for spec in result.clusters if spec.name in names]
    c = result.clustering
    for spec in dead:
        for node in spec.node_names:
            c.cluster_of.pop(node, None)
    result.dead = dead
    result.clusters[:] = [s for s in result.clusters if s.name not in names]
    c.clusters[:] = [s for s in c.clusters if s.name not in names]


def batched_inputs(concrete_function) -> dict[str, tuple[int | None, ...]]:
    """Data placeholders whose leading dim is unknown and others known: name -> dims (None first)."""
    graph = concrete_function.graph
    n_data = len(graph.inputs) - len(graph.captures)
    out = {}
    for t in graph.inputs[:n_data]:
        dims = t.shape.as_list() if t.shape.rank is not None else None
        if dims and dims[0] is None and all(d is not None for d in dims[1:]):
            out[t.op.name] = tuple(dims)
    return out


def analyze_function(concrete_function, options: ClusterOptions = ClusterOptions(), *,
                     batch_size: int | None = None) -> ClusteringResult:
    """``analyze`` a traced ``tf.function``: its outputs and control outputs are the fetches.

    ``batch_size``: infer shapes as if every input with an unknown leading dim (``batched_inputs``) had
    this batch size; the clusters are then extracted at that size while the graph keeps its ``None``.
    """
    from hlo.lowering.tf_function import python_sources

    graph = concrete_function.graph
    fetches = [t.name for t in graph.outputs] + [control(op.name) for op in graph.control_outputs]
    input_shapes = None
    if batch_size is not None:  # batched_inputs: only the leading dim is unknown
        input_shapes = {name: (batch_size, *(d for d in dims[1:] if d is not None))
                        for name, dims in batched_inputs(concrete_function).items()}
    result = analyze(graph.as_graph_def(), fetches, options, resource_shapes=resource_shapes_of(concrete_function),
                     input_shapes=input_shapes)
    result.sources = result.node_sources(python_sources(graph))
    return result


def default_launch(spec: ClusterSpec) -> LaunchSpec:
    return LaunchSpec(standard_attrs(spec), kernel_path="")


def rewrite(result: ClusteringResult, launch: Callable[[ClusterSpec], LaunchSpec] = default_launch, *,
            keep_fetch_names: bool = True) -> RewriteResult:
    """Replace each cluster of ``result`` by one launch node (see ``graph_passes.rewrite``)."""
    return rewrite_clusters(result.graph_def, [*result.clusters, *result.dead], launch, fetches=result.fetches,
                            keep_fetch_names=keep_fetch_names)


def summary_json(result: ClusteringResult) -> dict:
    ops = {n.name: n.op for n in result.graph_def.node}
    compute = {n for n, op in ops.items() if op not in NON_COMPUTE_OPS and n not in result.dead_nodes}
    total = len(compute)
    clustered = sum(1 for c in result.clusters for n in c.node_names if n in compute)
    not_counted: dict[str, int] = {}
    for n, op in ops.items():
        if n not in compute:
            key = "dead code" if n in result.dead_nodes and op not in NON_COMPUTE_OPS else op
            not_counted[key] = not_counted.get(key, 0) + 1
    return {
        "clusters": [{"name": c.name, "nodes": len(c.node_names), "size": s.size, "device": c.device,
                      "inputs": len(c.inputs), "outputs": len(c.outputs), "op_types": dict(c.op_types)}
                     for c, s in zip(result.clusters, result.clustering.clusters)],
        "nodes_total": total,  # compute nodes: not NON_COMPUTE_OPS, not dead code
        "nodes_clustered": clustered,
        "percent_clustered": round(100.0 * clustered / total, 1) if total else 0.0,
        "nodes_in_graph": len(ops),
        "not_counted": dict(sorted(not_counted.items(), key=lambda kv: (-kv[1], kv[0]))),
        "excluded": [{"node": n, "op": ops[n], "reason": r,
                      **({"source": "%s:%d" % result.sources[n]} if n in result.sources else {})}
                     for n, r in result.excluded.items()],
        "dead_clusters": [{"name": c.name, "nodes": len(c.node_names)} for c in result.dead],
        "refused_merges": [{"producer": r.producer, "consumer": r.consumer, "reason": r.reason}
                           for r in result.refused],
        "merges": result.clustering.merges,
        "inlined_calls": result.inlined,
        "options": {"min_cluster_size": result.options.min_cluster_size,
                    "max_cluster_size": result.options.max_cluster_size, "fuel": result.options.fuel,
                    "must_compile": result.options.must_compile},
    }


def summary(result: ClusteringResult) -> str:
    return render(summary_json(result))


def render(data: dict) -> str:
    """The text of a ``summary_json`` dict (also one stored in a wrapped SavedModel's manifest)."""
    lines = [f"Clustering summary: {len(data['clusters'])} cluster(s) built, {data['nodes_clustered']} of "
             f"{data['nodes_total']} {'compute ' if 'not_counted' in data else ''}nodes clustered "
             f"({data['percent_clustered']:.1f}%)"]
    if data.get("not_counted"):  # absent in manifests written before coverage counted compute nodes only
        lines[0] += (f"; {data['nodes_in_graph']} nodes in all, not counted: "
                     + ", ".join(f"{op} {n}" for op, n in data["not_counted"].items()))
    for c in data["clusters"]:
        device = f", device {c['device']}" if c["device"] else ""
        lines.append(f"  {c['name']}: {c['nodes']} nodes ({c['size']} counted ops), {c['inputs']} inputs, "
                     f"{c['outputs']} outputs{device}")
        for op, count in sorted(c["op_types"].items(), key=lambda kv: (-kv[1], kv[0])):
            lines.append(f"    {op}: {count}")
    if data["excluded"]:
        lines.append(f"Nodes left in TensorFlow ({len(data['excluded'])}):")
        width = max(len(e["op"]) for e in data["excluded"])
        lines.extend(f"  {e['op']:<{width}}  {e['node']}: {e['reason']}"
                     + (f" ({os.path.basename(e['source'])})" if "source" in e else "") for e in data["excluded"])
    dead = data.get("dead_clusters", [])  # absent in manifests written before it was recorded
    if dead:
        lines.append(f"Dead code removed ({len(dead)} cluster(s): no output, control output or stateful op needs "
                     "them; not compiled):")
        lines.extend(f"  {d['name']}: {d['nodes']} nodes" for d in dead)
    refused = data["refused_merges"]
    if refused:
        lines.append(f"Refused merges ({len(refused)}):")
        lines.extend(f"  {r['producer']} -> {r['consumer']}: {r['reason']}" for r in refused[:MAX_REFUSED_LINES])
        if len(refused) > MAX_REFUSED_LINES:
            lines.append(f"  ... and {len(refused) - MAX_REFUSED_LINES} more (summary_json lists them all)")
    return "\n".join(lines)


__all__ = ["NON_COMPUTE_OPS", "STRUCTURAL_OPS", "ClusteringResult", "analyze", "analyze_function", "batched_inputs", "drop_clusters", "default_launch", "render", "resource_shapes_of", "rewrite",
           "summary", "summary_json"]
