"""graph_passes.forward_variables: reads after writes get the written value; results stay TF's."""

import numpy as np
import tensorflow as tf

from graph_passes.cluster import ClusterOptions
from graph_passes.forward_variables import forward_variables
from graph_passes.pipeline import analyze_function, rewrite
from tests.graph_passes_util import FakeLaunch

SPEC = tf.TensorSpec([3], tf.float32)


def make_step():
    w = tf.Variable([1.0, -2.0, 0.5], name="w")
    m = tf.Variable(tf.zeros([3]), name="m")
    count = tf.Variable(0.0, name="count")

    @tf.function
    def step(x):
        g = tf.tanh(w * x) - x
        m.assign_add((g - m) * 0.1)  # read-modify-write, then read back below
        w.assign_sub(m * 0.5)
        count.assign(count + 1.0)
        return tf.reduce_sum(w * m) + count
    return step, (w, m, count)


def imported(graph_def, cf, variables):
    """The GraphDef as a tf.function bound to the live variables (docs/design.md §5)."""
    handles = {ph.name: eager for eager, ph in cf.graph.captures}
    by_handle = {id(v.handle): v for v in variables}

    @tf.function
    def run(x):
        graph = tf.compat.v1.get_default_graph()
        input_map = {"x:0": x}
        input_map.update({name: graph.capture(by_handle[id(eager)].handle) for name, eager in handles.items()})
        return tf.graph_util.import_graph_def(graph_def, input_map=input_map,
                                              return_elements=[t.name for t in cf.graph.outputs])
    return run


def test_reads_after_writes_become_the_written_values():
    step, _ = make_step()
    cf = step.get_concrete_function(SPEC)
    result = forward_variables(cf.graph.as_graph_def())
    nodes = {n.name: n for n in result.graph_def.node}
    assert result.forwarded and not result.skipped
    for name in result.forwarded:
        assert nodes[name].op == "Identity" and not any(i.startswith("^") for i in nodes[name].input)
    # the new values of m (read back by w's update) and of w (read back by the result)
    assert sorted(n.op for n in nodes.values() if n.name.endswith("/tfxla_value")) == ["AddV2", "Sub"]
    assert all(n.op != "AssignVariableOp" or "^" not in n.input[1] for n in nodes.values())


def test_forwarded_graph_updates_variables_like_tf():
    step, variables = make_step()
    cf = step.get_concrete_function(SPEC)
    x = tf.constant([0.3, -0.7, 1.5])
    start = [v.numpy() for v in variables]
    want = [step(x).numpy() for _ in range(3)]
    want_vars = [v.numpy() for v in variables]
    result = analyze_function(cf, ClusterOptions(must_compile=True))
    assert len(result.clusters) == 1 and not result.unsupported()
    fake = FakeLaunch()
    graph_def = fake.install(rewrite(result, fake).graph_def)
    run = imported(graph_def, cf, variables)
    for v, value in zip(variables, start):
        v.assign(value)
    got = [run(x)[0].numpy() for _ in range(3)]
    np.testing.assert_allclose(got, want, rtol=1e-6)
    for v, value in zip(variables, want_vars):
        np.testing.assert_allclose(v.numpy(), value, rtol=1e-6)


def test_unordered_ops_and_direct_handle_uses_are_left_alone():
    graph = tf.Graph()
    with graph.as_default():
        h = tf.compat.v1.placeholder(tf.resource, [], name="h")
        tf.raw_ops.AssignVariableOp(resource=h, value=tf.constant([3.0, 4.0]), name="write")
        tf.raw_ops.ReadVariableOp(resource=h, dtype=tf.float32, name="read")  # no edge orders it and the write
        g = tf.compat.v1.placeholder(tf.resource, [], name="g")
        tf.raw_ops.AssignAddVariableOp(resource=g, value=tf.constant([1.0, 1.0, 1.0]), name="bump")
        tf.raw_ops.ResourceGather(resource=g, indices=[0, 2], dtype=tf.float32, name="gathered")  # a read
        tf.raw_ops.ResourceApplyGradientDescent(var=g, alpha=0.1, delta=[1.0, 1.0, 1.0], name="apply")
        k = tf.compat.v1.placeholder(tf.resource, [], name="k")
        alias = tf.identity(k, name="alias")  # an alias of k: neither may be forwarded
        tf.raw_ops.AssignVariableOp(resource=alias, value=tf.constant(1.0), name="set")
        with tf.control_dependencies([graph.get_operation_by_name("set")]):
            tf.raw_ops.ReadVariableOp(resource=alias, dtype=tf.float32, name="get")
    result = forward_variables(graph.as_graph_def())
    assert not result.forwarded
    assert result.skipped == {"h:0": "'write' and 'read' are not ordered by the graph",
                              "g:0": "ResourceApplyGradientDescent 'apply' uses the handle directly",
                              "k:0": "Identity 'alias' uses the handle directly",
                              "alias:0": "the handle comes from Identity 'alias', not a variable"}


def test_forwarding_twice_changes_nothing():
    step, _ = make_step()
    once = forward_variables(step.get_concrete_function(SPEC).graph.as_graph_def())
    twice = forward_variables(once.graph_def)
    assert not twice.forwarded
    assert twice.graph_def.SerializeToString(deterministic=True) == \
        once.graph_def.SerializeToString(deterministic=True)


def test_add_and_sub_writes_become_assigns_of_the_computed_value():
    step, _ = make_step()
    cf = step.get_concrete_function(SPEC)
    original = {n.name: n.op for n in cf.graph.as_graph_def().node}
    result = forward_variables(cf.graph.as_graph_def())
    nodes = {n.name: n for n in result.graph_def.node}
    subs = [name for name, op in original.items() if op in ("AssignAddVariableOp", "AssignSubVariableOp")]
    assert sorted(result.assigned) == sorted(subs) and len(subs) == 2
    for name in subs:
        node = nodes[name]
        value = nodes[node.input[1].split(":")[0]]
        assert node.op == "AssignVariableOp" and value.op == {"AssignAddVariableOp": "AddV2",
                                                              "AssignSubVariableOp": "Sub"}[original[name]]
    kept = forward_variables(cf.graph.as_graph_def(), assign_values=False)
    assert not kept.assigned and {nodes[n].op for n in subs} != {kept_n.op for kept_n in kept.graph_def.node
                                                                  if kept_n.name in subs}


def _sparse_step():
    table = tf.Variable(np.arange(15, dtype=np.float32).reshape(5, 3), name="table")
    counts = tf.Variable(np.zeros(5, np.int32), name="counts")

    @tf.function
    def step(ids, delta):
        rows = tf.gather(table, ids)  # ResourceGather
        table.scatter_sub(tf.IndexedSlices(delta * rows, ids))  # ResourceScatterSub, duplicate ids accumulate
        table.scatter_max(tf.IndexedSlices(tf.fill([2, 3], 4.0), ids[:2]))
        tf.compat.v1.scatter_add(counts, ids, 1)  # scalar updates, broadcast
        tf.compat.v1.scatter_nd_update(counts, [[4]], [7])
        tf.compat.v1.scatter_update(table, ids[-1:], delta[:1] * 0.0 - 1.0)
        return tf.reduce_sum(tf.gather(table, ids)), tf.gather(counts, ids)
    return step, (table, counts)


def test_sparse_variable_updates_compile_and_update_variables_like_tf():
    step, variables = _sparse_step()
    ids = tf.constant([1, 3, 1, 0])
    delta = tf.constant(np.linspace(0.1, 0.4, 12, dtype=np.float32).reshape(4, 3))
    cf = step.get_concrete_function(ids, delta)
    start = [v.numpy() for v in variables]
    want = [[t.numpy() for t in step(ids, delta)] for _ in range(2)]
    want_vars = [v.numpy() for v in variables]
    result = analyze_function(cf, ClusterOptions(must_compile=True))
    assert len(result.clusters) == 1 and not result.unsupported(), result.unsupported()
    ops = {n.op for n in result.graph_def.node}
    assert not any(op.startswith("ResourceScatter") or op == "ResourceGather" for op in ops)
    fake = FakeLaunch()
    graph_def = fake.install(rewrite(result, fake).graph_def)
    handles = {ph.name: eager for eager, ph in cf.graph.captures}
    by_handle = {id(v.handle): v for v in variables}

    @tf.function
    def run(a, b):
        graph = tf.compat.v1.get_default_graph()
        input_map = {"ids:0": a, "delta:0": b}
        input_map.update({name: graph.capture(by_handle[id(eager)].handle) for name, eager in handles.items()})
        return tf.graph_util.import_graph_def(graph_def, input_map=input_map,
                                              return_elements=[t.name for t in cf.graph.outputs])
    for v, value in zip(variables, start):
        v.assign(value)
    got = [[t.numpy() for t in run(ids, delta)] for _ in range(2)]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g[0], w[0], rtol=1e-6)
        np.testing.assert_array_equal(g[1], w[1])
    np.testing.assert_allclose(variables[0].numpy(), want_vars[0], rtol=1e-6)
    np.testing.assert_array_equal(variables[1].numpy(), want_vars[1])


def test_scatter_mul_and_div_compile_and_update_variables_like_tf():
    """ResourceScatterMul/Div (no dense TF op): the value times (over) the per-row product of the updates,
    duplicate ids included; integers exactly (Div truncates), floats within rounding."""
    import tfxla_plugin

    table = tf.Variable(np.linspace(-2.0, 3.0, 15, dtype=np.float32).reshape(5, 3))
    counts = tf.Variable(np.array([7, -9, 20, 5, 100], np.int32))

    def step(ids, scale):
        table.scatter_mul(tf.IndexedSlices(scale, ids))  # duplicate ids multiply twice
        table.scatter_div(tf.IndexedSlices(scale[:2] + 1.0, ids[:2]))
        tf.compat.v1.scatter_mul(counts, ids, 3)  # scalar updates, broadcast
        tf.compat.v1.scatter_div(counts, ids[1:], tf.constant([2, -4, 3]))
        return tf.reduce_sum(table), counts.read_value()
    ids = tf.constant([1, 3, 1, 0])
    scale = tf.constant(np.linspace(0.5, 2.0, 12, dtype=np.float32).reshape(4, 3))
    start = [v.numpy() for v in (table, counts)]
    want = [t.numpy() for t in tf.function(step)(ids, scale)]
    want_vars = [v.numpy() for v in (table, counts)]
    for v, value in zip((table, counts), start):
        v.assign(value)
    ops = {n.op for n in tf.function(step).get_concrete_function(ids, scale).graph.as_graph_def().node}
    assert {"ResourceScatterMul", "ResourceScatterDiv"} <= ops
    got = [t.numpy() for t in tfxla_plugin.function(step, jit_compile=True)(ids, scale)]
    np.testing.assert_allclose(got[0], want[0], rtol=1e-6)
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_allclose(table.numpy(), want_vars[0], rtol=1e-6)
    np.testing.assert_array_equal(counts.numpy(), want_vars[1])
