"""graph_passes.rewrite: one launch node per cluster, consumers rewired, the rest byte-identical.

``FakeLaunch`` makes the rewritten graph runnable (each launch node a ``PartitionedCall`` of the
cluster's own GraphDef), so TF itself checks the wiring of inputs, outputs and control edges.
"""

import numpy as np
import tensorflow as tf

from graph_passes.cluster import ClusterOptions
from graph_passes.pipeline import analyze, analyze_function, rewrite, summary
from graph_passes.rewrite import LAUNCH_OP, LaunchSpec, standard_attrs
from hlo.lowering.tensor_names import node_name
from tests.graph_passes_util import FakeLaunch, mixed_graph, run_graph


def test_rewrite_runs_like_the_original_and_keeps_other_nodes_byte_identical():
    gd, fetches = mixed_graph()
    result = analyze(gd, fetches, ClusterOptions(min_cluster_size=2))
    assert [c.node_names for c in result.clusters] == [("a/y", "a", "mul/y", "mul", "b"), ("sub", "c"),
                                                       ("mul_1/y", "mul_1", "Const", "d")]
    fake = FakeLaunch()
    rewritten = rewrite(result, fake)
    out = fake.install(rewritten.graph_def)
    x = np.array([[1.0, -2.0, 3.0], [0.5, 0.0, -1.0]], np.float32)
    for got, want in zip(run_graph(out, fetches, {"x:0": x}), run_graph(gd, fetches, {"x:0": x})):
        np.testing.assert_array_equal(got, want)

    clustered = {n for c in result.clusters for n in c.node_names}
    after = {n.name: n for n in out.node}
    launch = rewritten.launch_nodes
    assert launch == {"cluster_0": "cluster_0", "cluster_1": "cluster_1", "cluster_2": "cluster_2"}
    for node in gd.node:  # untouched: not clustered, and no input named a clustered node
        if node.name not in clustered and not any(node_name(i) in clustered for i in node.input):
            assert after[node.name].SerializeToString(deterministic=True) == \
                node.SerializeToString(deterministic=True), node.name
    assert not clustered & set(after) - {"d"}  # d is fetched: its name survives as IdentityN
    assert after["d"].op == "IdentityN" and after["d"].input == ["cluster_2:0"]
    assert after["s"].input == ["cluster_0:0"]  # consumer rewired to the launch output
    assert after["after"].input == ["x", "^cluster_1"]  # control edge out of a cluster moved
    assert after["cluster_2"].input == ["cluster_2/kernel_path:0", "cluster_1:0", "^after"]  # ... and into one
    assert after["cluster_0/kernel_path"].op == "Const"
    assert "unused_print" in after and "unused_pure" in after

    # The record says what was written, so later stages need not read the GraphDef back.
    assert list(rewritten.launches) == list(launch)
    for cluster, record in rewritten.launches.items():
        node = after[record.node]
        assert record.cluster == cluster and record.node == launch[cluster] and node.op == record.decided.op
        assert list(record.inputs) == node.input[1:1 + len(record.inputs)]
        assert [f"^{c}" for c in record.control_inputs] == node.input[1 + len(record.inputs):]
        assert all(node.attr[k] == v for k, v in record.decided.attrs.items())
    assert rewritten.launches["cluster_2"].inputs == ("cluster_1:0",)
    assert rewritten.launches["cluster_2"].control_inputs == ("after",)


def test_control_edges_move_to_the_launch_node():
    gd, fetches = mixed_graph()
    result = analyze(gd, fetches, ClusterOptions(min_cluster_size=2))
    out = rewrite(result, lambda spec: LaunchSpec(standard_attrs(spec), kernel_tensor="x")).graph_def
    nodes = {n.name: n for n in out.node}
    owner = result.cluster_of("c")
    assert f"^{owner}" in nodes["after"].input
    d_owner = result.cluster_of("d")
    assert "^after" in nodes[d_owner].input
    assert nodes[d_owner].op == LAUNCH_OP and nodes[d_owner].input[0] == "x"
    assert nodes[d_owner].attr["cluster"].s == d_owner.encode()


def test_dead_nodes_are_removed_but_not_stateful_ones():
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [4], name="x")
        k = tf.constant([1.0, 2.0, 3.0, 4.0], name="k")
        feeder = tf.identity(k, name="feeder")  # only feeds the cluster: dead once it is replaced
        y = tf.exp(tf.sin(x * feeder) + 1.0, name="y")
        tf.compat.v1.Print(y, [y], name="p")
        tf.exp(tf.cos(x) * 2.0, name="unobserved")  # a cluster nobody reads: no launch node
    gd = graph.as_graph_def()
    result = analyze(gd, ["y:0"], ClusterOptions(min_cluster_size=2))
    (spec,), (unobserved,) = result.clusters, result.dead  # the dead one is set aside, never compiled
    assert "feeder" in spec.node_names and "unobserved" in unobserved.node_names
    assert result.cluster_of("unobserved") is None
    assert "Dead code removed (1 cluster(s)" in summary(result) and f"  {unobserved.name}: " in summary(result)
    rewritten = rewrite(result)
    names = {n.name for n in rewritten.graph_def.node}
    assert "p" in names and "x" in names and "y" in names and "k" not in names and "feeder" not in names
    assert not names & set(unobserved.node_names) and list(rewritten.launch_nodes) == ["cluster_0"]
    assert [n.op for n in rewritten.graph_def.node].count(LAUNCH_OP) == 1


def test_traced_function_with_variables_rewrites_and_runs():
    v = tf.Variable([1.0, 2.0, 3.0])

    @tf.function
    def f(x):
        y = tf.tanh(x * v) + 1.0
        v.assign_add(y * 0.1)
        return y * 2.0, tf.strings.as_string(y)
    cf = f.get_concrete_function(tf.TensorSpec([3], tf.float32))
    result = analyze_function(cf, ClusterOptions(min_cluster_size=1))
    fake = FakeLaunch()
    out = fake.install(rewrite(result, fake).graph_def)
    handle = next(ph for eager, ph in cf.graph.captures)

    @tf.function
    def imported(x):
        fetches = [t.name for t in cf.graph.outputs]
        captured = tf.compat.v1.get_default_graph().capture(v.handle)  # input_map does not capture
        return tf.graph_util.import_graph_def(out, input_map={"x:0": x, handle.name: captured},
                                              return_elements=fetches)
    x = tf.constant([0.5, -1.0, 2.0])
    start = v.numpy()
    want = f(x)
    after_original = v.numpy()
    v.assign(start)
    got = imported(x)
    np.testing.assert_allclose(got[0].numpy(), want[0].numpy(), rtol=1e-6)
    np.testing.assert_allclose(v.numpy(), after_original, rtol=1e-6)
