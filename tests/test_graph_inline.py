"""graph_passes.inline: nested tf.function calls inlined; the graph computes the same values."""

import numpy as np
import tensorflow as tf

from graph_passes.inline import CALL_OPS, inline_calls
from tests.graph_passes_util import run_graph


@tf.function
def leaf(x):
    return tf.sin(x) + 1.0, x * 3.0


@tf.function
def middle(x, y):
    a, b = leaf(x)
    return tf.nn.relu(a) * y + b


@tf.function
def top(x, y):
    z = middle(x, y)
    return middle(z, x) + 1.0, leaf(y)[1]


SPEC = tf.TensorSpec([3], tf.float32)
X = np.array([1.0, -2.0, 3.0], np.float32)
Y = np.array([0.5, 2.0, -1.0], np.float32)


def calls(gd) -> list:
    return [n for n in gd.node if n.op in CALL_OPS]


def test_nested_calls_are_inlined_and_compute_the_same():
    cf = top.get_concrete_function(SPEC, SPEC)
    gd = cf.graph.as_graph_def()
    fetches = [t.name for t in cf.graph.outputs]
    before = gd.SerializeToString(deterministic=True)
    result = inline_calls(gd, fetches)
    assert gd.SerializeToString(deterministic=True) == before  # the input is not modified
    assert not calls(result.graph_def) and result.inlined == 5 and not result.skipped
    assert len(result.graph_def.library.function) == 0
    names = [n.name for n in result.graph_def.node]
    assert len(names) == len(set(names))
    assert "PartitionedCall/PartitionedCall/Sin" in names
    want = [t.numpy() for t in top(X, Y)]
    for got, expected in zip(run_graph(result.graph_def, fetches, {"x:0": X, "y:0": Y}), want):
        np.testing.assert_allclose(got, expected, rtol=1e-6)


def test_inlining_is_deterministic():
    cf = top.get_concrete_function(SPEC, SPEC)
    a = inline_calls(cf.graph.as_graph_def()).graph_def.SerializeToString(deterministic=True)
    b = inline_calls(cf.graph.as_graph_def()).graph_def.SerializeToString(deterministic=True)
    assert a == b


def test_fetched_call_and_control_dependents_keep_the_call_name():
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [3], name="x")
        y = tf.compat.v1.placeholder(tf.float32, [3], name="y")
        first = tf.identity(x * 2.0, name="first")
        with tf.control_dependencies([first]):
            out = middle(x, y)  # a PartitionedCall with a control input
        with tf.control_dependencies([out.op]):
            after = tf.identity(y, name="after")
    gd = graph.as_graph_def()
    call = out.op.name
    fetches = [out.name, after.name]
    result = inline_calls(gd, fetches)
    nodes = {n.name: n for n in result.graph_def.node}
    assert nodes[call].op == "IdentityN" and nodes[call].attr["T"].list.type == [tf.float32.as_datatype_enum]
    # body nodes with no producer inside the body inherit the call's control input
    sin = nodes[f"{call}/PartitionedCall/Sin"]
    assert "^first" in sin.input or "^first" in nodes[f"{call}/PartitionedCall/add/y"].input
    assert all("^first" in n.input for name, n in nodes.items()
               if name.startswith(call + "/") and n.op == "Const")
    assert nodes["after"].input[-1] == f"^{call}"
    got = run_graph(result.graph_def, fetches, {"x:0": X, "y:0": Y})
    with tf.compat.v1.Session(graph=graph) as sess:
        want = sess.run(fetches, {x: X, y: Y})
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-6)


def test_name_collisions_get_a_fresh_prefix():
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [3], name="x")
        out = leaf(x)[0]
        tf.identity(x, name=f"{out.op.name}/Sin")  # squats on the name the body's Sin would get
        tf.identity(out, name="result")
    result = inline_calls(graph.as_graph_def(), ["result:0"])
    names = [n.name for n in result.graph_def.node]
    assert len(names) == len(set(names))
    assert f"{out.op.name}_1/Sin" in names
    np.testing.assert_allclose(run_graph(result.graph_def, ["result:0"], {"x:0": X})[0], np.sin(X) + 1, rtol=1e-6)


def test_stateful_body_keeps_its_ordering():
    v = tf.Variable(tf.zeros([3]))

    @tf.function
    def bump(x):
        v.assign_add(x)
        return v.read_value() * 2.0

    @tf.function
    def f(x):
        return bump(x) + 1.0
    cf = f.get_concrete_function(SPEC)
    result = inline_calls(cf.graph.as_graph_def(), [t.name for t in cf.graph.outputs])
    nodes = {n.name: n for n in result.graph_def.node}
    assign = next(n for n in nodes.values() if n.op == "AssignAddVariableOp")
    read = next(n for n in nodes.values() if n.op == "ReadVariableOp")
    assert f"^{assign.name}" in read.input  # the body's automatic control dependency survived renaming
    assert not calls(result.graph_def)


def test_while_bodies_stay_in_the_library():
    @tf.function
    def f(x):
        return tf.while_loop(lambda i, a: i < 3, lambda i, a: (i + 1, middle(a, a)), [0, x])[1]
    cf = f.get_concrete_function(SPEC)
    gd = cf.graph.as_graph_def()
    result = inline_calls(gd, [t.name for t in cf.graph.outputs])
    kept = {fn.signature.name for fn in result.graph_def.library.function}
    loop = next(n for n in result.graph_def.node if n.op in ("While", "StatelessWhile"))
    assert loop.attr["body"].func.name in kept and loop.attr["cond"].func.name in kept
    got = run_graph(result.graph_def, [t.name for t in cf.graph.outputs], {"x:0": X})[0]
    np.testing.assert_allclose(got, f(X).numpy(), rtol=1e-6)


def test_missing_function_is_skipped_with_a_reason():
    gd = tf.compat.v1.GraphDef()
    gd.node.add(name="x", op="Placeholder").attr["dtype"].type = tf.float32.as_datatype_enum
    call = gd.node.add(name="call", op="PartitionedCall", input=["x"])
    call.attr["f"].func.name = "nowhere"
    result = inline_calls(gd)
    assert result.inlined == 0 and "not in the graph's function library" in result.skipped["call"]


def test_inlining_twice_changes_nothing():
    cf = top.get_concrete_function(SPEC, SPEC)
    once = inline_calls(cf.graph.as_graph_def()).graph_def
    twice = inline_calls(once)
    assert twice.inlined == 0
    assert twice.graph_def.SerializeToString(deterministic=True) == once.SerializeToString(deterministic=True)
