"""Helpers for the graph_passes tests: hand-built GraphDefs, fake markings, running a GraphDef in TF,
checking lowered clusters against TF, and a fake launch op that makes rewritten graphs runnable."""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import numpy as np
import tensorflow as tf
from tensorflow.python.eager import context

import hlo
from graph_passes.mark import Marking, NodeVerdict
from graph_passes.rewrite import LaunchSpec, standard_attrs
from hlo.lowering import lower_graph
from hlo.lowering.tensor_names import node_name


def make_graph(spec: Sequence[tuple], devices: Mapping[str, str] | None = None):
    """A GraphDef of abstract nodes: ``(name, op, [inputs])``; any op type (the cluster pass reads names
    and edges only). Inputs use GraphDef spelling (``"a"``, ``"a:1"``, ``"^a"``)."""
    gd = tf.compat.v1.GraphDef()
    for name, op, inputs in spec:
        gd.node.add(name=name, op=op, input=list(inputs), device=(devices or {}).get(name, ""))
    return gd


def fake_marking(gd, bad: Iterable[str] = ()) -> Marking:
    """Every node compilable except ``bad`` (reason "test: not compilable")."""
    bad = set(bad)
    verdicts = {n.name: NodeVerdict(n.name, n.op, n.name not in bad, "test: not compilable" if n.name in bad else "",
                                    n.device) for n in gd.node}
    return Marking(gd, verdicts, {}, frozenset())


def run_graph(gd, fetches: Sequence[str], feeds: Mapping[str, np.ndarray]) -> list:
    """Import ``gd`` into a fresh graph and run it in a v1 Session."""
    graph = tf.Graph()
    with graph.as_default():
        tf.graph_util.import_graph_def(gd, name="")
    with tf.compat.v1.Session(graph=graph) as sess:
        return sess.run(list(fetches), dict(feeds))


def acyclic_after_contraction(gd, cluster_of: Mapping[str, str]) -> bool:
    """Whether contracting each cluster to one node leaves the graph (data + control edges) acyclic."""
    rep = {n.name: cluster_of.get(n.name, n.name) for n in gd.node}
    succs: dict[str, set[str]] = {r: set() for r in rep.values()}
    indeg = dict.fromkeys(succs, 0)
    for n in gd.node:
        for i in n.input:
            src = node_name(i)
            a, b = rep[src], rep[n.name]
            if a != b and b not in succs[a]:
                succs[a].add(b)
                indeg[b] += 1
    ready = [r for r, d in indeg.items() if d == 0]
    seen = 0
    while ready:
        r = ready.pop()
        seen += 1
        for s in succs[r]:
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    return seen == len(succs)


def check_clusters_against_tf(result, feeds):
    """Lower every cluster, feed it TF's values of its inputs, compare with TF's values of its outputs."""
    assert result.clusters
    for spec in result.clusters:
        module = lower_graph(spec.graph_def, spec.input_specs(), spec.output_tensors(), name=spec.name)
        values = run_graph(result.graph_def, [p.tensor for p in spec.inputs] + spec.output_tensors(), feeds)
        got = hlo.evaluate(module, *[np.asarray(v) for v in values[:len(spec.inputs)]])
        for port, g, w in zip(spec.outputs, got, values[len(spec.inputs):]):
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-5, err_msg=f"{spec.name} {port.tensor}")


class FakeLaunch:
    """A LaunchSpec callback making each launch node a ``PartitionedCall`` of a function that imports the
    cluster's own GraphDef (the kernel path is an ignored first argument); ``install`` adds the functions."""

    def __init__(self):
        self.functions = []

    def __call__(self, spec) -> LaunchSpec:
        signature = [tf.TensorSpec([], tf.string)] + [tf.TensorSpec(p.shape, tf.as_dtype(p.dtype))
                                                       for p in spec.inputs]

        @tf.function(input_signature=signature)
        def run_cluster(path, *args):
            return tf.graph_util.import_graph_def(spec.graph_def, input_map=dict(zip(
                [p.tensor for p in spec.inputs], args)), return_elements=spec.output_tensors())
        cf = run_cluster.get_concrete_function()
        self.functions.append(cf.function_def)
        context.context().add_function_def(cf.function_def)  # for a graph imported inside a tf.function
        attrs = standard_attrs(spec)
        attrs["Tin"].list.type.insert(0, tf.string.as_datatype_enum)
        del attrs["output_shapes"], attrs["cluster"]
        attrs["f"] = tf.compat.v1.AttrValue(func=tf.compat.v1.NameAttrList(name=cf.function_def.signature.name))
        return LaunchSpec(attrs, kernel_path=f"/kernels/{spec.name}.so", op="PartitionedCall")

    def install(self, gd):
        for fdef in self.functions:
            gd.library.function.add().CopyFrom(fdef)
        return gd


def mixed_graph():
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [2, 3], name="x")
        a = tf.add(x, 1.0, name="a")
        b = tf.nn.relu(a * 2.0, name="b")
        s = tf.strings.as_string(b, name="s")  # string op: stays in TF
        n = tf.strings.to_number(s, name="n")
        c = tf.exp(n - b, name="c")
        with tf.control_dependencies([c]):
            after = tf.identity(x, name="after")  # control edge out of a cluster
        with tf.control_dependencies([after]):
            d = tf.reduce_sum(c * 3.0, name="d")  # control edge into a cluster
        tf.compat.v1.Print(x, [x], name="unused_print")  # stateful and unfetched: must survive
        tf.negative(x, name="unused_pure")  # dead before and after: left alone
        tf.identity(s, name="s_out")
    return graph.as_graph_def(), ["d:0", "after:0", "s_out:0"]
