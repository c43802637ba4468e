"""graph_passes.extract: ordered cluster inputs/outputs, variables, copied constants; each cluster lowers
with hlo.lowering.lower_graph and evaluates to TF's values."""

import numpy as np
import tensorflow as tf

from graph_passes.cluster import ClusterOptions
from graph_passes.extract import Port
from graph_passes.pipeline import analyze, analyze_function
from tests.graph_passes_util import check_clusters_against_tf

F32 = tf.float32.as_datatype_enum


def diamond_graph():
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [2, 3], name="x")
        y = tf.compat.v1.placeholder(tf.float32, [2, 3], name="y")
        a = tf.add(y, x, name="a")
        b = tf.multiply(a, 2.0, name="b")
        p = tf.compat.v1.Print(b, [b], name="p")  # not compilable: splits the graph
        c = tf.subtract(p, x, name="c")
        # a shape computed in the other cluster, needed as a constant (raw Shape: tf.shape would fold it)
        d = tf.reshape(c, tf.reverse(tf.raw_ops.Shape(input=b), [0]), name="d")
        tf.nn.relu(d, name="e")
        tf.exp(a, name="f")
    return graph.as_graph_def()


def test_inputs_outputs_are_ordered_and_stable():
    options = ClusterOptions(min_cluster_size=1)
    first = analyze(diamond_graph(), ["e:0", "f:0"], options)
    second = analyze(diamond_graph(), ["e:0", "f:0"], options)
    assert [(c.inputs, c.outputs) for c in first.clusters] == [(c.inputs, c.outputs) for c in second.clusters]
    c0, c1 = first.clusters
    assert c0.node_names[:3] == ("a", "b/y", "b") and "f" in c0.node_names
    assert c0.inputs == [Port("y:0", F32, (2, 3)), Port("x:0", F32, (2, 3))]  # first use: a = y + x
    assert c0.outputs == [Port("b:0", F32, (2, 3)), Port("f:0", F32, (2, 3))]  # b feeds Print, f is fetched
    assert c1.inputs == [Port("p:0", F32, (2, 3)), Port("x:0", F32, (2, 3))]
    assert c1.outputs == [Port("e:0", F32, (3, 2))]
    # the shape Reshape needs is computed in cluster_0 (ReverseV2 of Shape(b)): cluster_1 copies the chain
    # in as constants (Shape of a static shape becomes a Const), so it is neither an input nor an output
    assert "ReverseV2" in c0.node_names and c1.constants == ("ReverseV2:0",)
    copied = {n.name: n for n in c1.graph_def.node}
    assert copied["Shape"].op == "Const" and copied["ReverseV2"].op == "ReverseV2"
    assert set(copied) == set(c1.node_names) | {"Shape", "ReverseV2", "ReverseV2/axis"}
    assert {n.name for n in c0.graph_def.node} == set(c0.node_names)
    check_clusters_against_tf(first, {"x:0": np.arange(6, dtype=np.float32).reshape(2, 3),
                                      "y:0": np.ones((2, 3), np.float32)})


def test_variable_reads_are_inputs_and_assigned_values_are_outputs():
    v = tf.Variable(tf.fill([3], 2.0))
    w = tf.Variable(tf.ones([3]))

    @tf.function
    def step(x):
        y = tf.nn.relu(x * v + 1.0) - w
        w.assign(y * 0.5)
        return tf.reduce_sum(y * y)
    cf = step.get_concrete_function(tf.TensorSpec([3], tf.float32))
    result = analyze_function(cf, ClusterOptions(min_cluster_size=1))
    nodes = {n.name: n for n in result.graph_def.node}
    reads = [n for n in nodes.values() if n.op == "ReadVariableOp"]
    (assign,) = [n for n in nodes.values() if n.op == "AssignVariableOp"]
    assert all(result.cluster_of(n.name) is None for n in reads + [assign])
    inputs = {p.tensor for c in result.clusters for p in c.inputs}
    outputs = {p.tensor for c in result.clusters for p in c.outputs}
    assert {f"{n.name}:0" for n in reads} <= inputs
    assigned = assign.input[1] if ":" in assign.input[1] else assign.input[1] + ":0"
    assert assigned in outputs


def test_traced_function_clusters_lower_and_match_tf():
    @tf.function
    def f(x, y):
        h = tf.nn.relu(tf.matmul(x, y) + 0.5)
        h = tf.reshape(h, [-1]) * tf.cast(tf.shape(h)[0], tf.float32)
        return tf.reduce_mean(tf.nn.softmax(tf.reshape(h, [4, 2]))), tf.tanh(h)
    cf = f.get_concrete_function(tf.TensorSpec([4, 3], tf.float32), tf.TensorSpec([3, 2], tf.float32))
    result = analyze_function(cf, ClusterOptions(must_compile=True))
    assert not result.unsupported() and len(result.clusters) == 1
    rng = np.random.default_rng(0)
    check_clusters_against_tf(result, {"x:0": rng.standard_normal((4, 3), np.float32),
                                       "y:0": rng.standard_normal((3, 2), np.float32)})
