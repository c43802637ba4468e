"""graph_passes.mark: verdicts with reasons, real dtypes and shapes, compile-time constants."""

import tensorflow as tf

from graph_passes.inline import inline_calls
from graph_passes.mark import mark_compilable
from graph_passes.pipeline import resource_shapes_of


def v1_graph(build):
    graph = tf.Graph()
    with graph.as_default():
        build()
    return graph.as_graph_def()


def reasons(marking) -> dict[str, str]:
    return marking.excluded()


def test_every_excluded_node_has_a_reason_and_ops_are_judged_by_rule():
    def build():
        x = tf.compat.v1.placeholder(tf.float32, [2, 3], name="x")
        y = tf.nn.relu(x, name="relu") * 2.0
        s = tf.strings.as_string(y, name="as_string")
        r = tf.random.uniform([2, 3], name="rnd")
        p = tf.compat.v1.Print(y, [y], name="print")
        tf.identity(p + r, name="out")
        tf.strings.length(s, name="len")
    marking = mark_compilable(v1_graph(build))
    why = reasons(marking)
    assert all(why.values())
    assert marking.verdicts["relu"].ok and marking.verdicts["out"].ok
    assert why["x"] == "graph inputs are cluster inputs"
    assert why["as_string"].startswith("string tensor 'as_string:0'")
    assert why["len"].startswith("string tensor 'as_string:0'")
    assert why["rnd/RandomUniform"].startswith("stateful random op")
    assert why["print"].startswith("side effect")


def test_dynamic_shapes_are_left_out():
    def build():
        x = tf.compat.v1.placeholder(tf.float32, [None, 3], name="x")
        y = tf.nn.relu(x, name="relu")
        tf.reduce_sum(y, name="sum")
        z = tf.compat.v1.placeholder(tf.float32, [4], name="z")
        tf.exp(z, name="exp")
    why = reasons(mark_compilable(v1_graph(build)))
    assert why["relu"] == "dynamic shape: 'x:0' has shape [?,3]"
    assert why["sum"].startswith("dynamic shape")
    assert "exp" not in why


def test_non_cpu_devices_are_left_out():
    def build():
        x = tf.compat.v1.placeholder(tf.float32, [3], name="x")
        with tf.device("/device:GPU:0"):
            tf.exp(x, name="gpu_exp")
        with tf.device("/cpu:0"):
            tf.exp(x, name="cpu_exp")
    why = reasons(mark_compilable(v1_graph(build)))
    assert why["gpu_exp"].startswith("placed on '/device:GPU:0'")
    assert "cpu_exp" not in why


def test_const_inputs_must_be_compile_time_constants():
    def build():
        x = tf.compat.v1.placeholder(tf.float32, [2, 3], name="x")
        n = tf.compat.v1.placeholder(tf.int32, [2], name="n")
        tf.reshape(x, n, name="by_placeholder")
        shape = tf.shape(x)  # Shape of a static shape, then arithmetic on constants
        tf.reshape(x, tf.stack([shape[1], shape[0] * 1]), name="by_shape_arith")
        tf.reshape(x, tf.cast(tf.stack([3.0, 2.0]), tf.int32), name="by_cast")
    marking = mark_compilable(v1_graph(build))
    why = reasons(marking)
    assert why["by_placeholder"] == "input 1 of Reshape must be a compile-time constant"
    assert "by_shape_arith" not in why and "by_cast" not in why
    assert "Shape:0" in marking.constants and "n:0" not in marking.constants


def test_string_and_random_in_a_traced_function():
    @tf.function
    def f(x):
        y = tf.nn.relu(x) + 1.0
        return tf.strings.as_string(y), y * tf.random.uniform([4])
    cf = f.get_concrete_function(tf.TensorSpec([4], tf.float32))
    marking = mark_compilable(cf.graph.as_graph_def())
    by_op = {}
    for name, verdict in marking.verdicts.items():
        by_op.setdefault(verdict.op, []).append(verdict)
    assert by_op["AsString"][0].reason.startswith("string tensor")
    assert by_op["RandomUniform"][0].reason.startswith("stateful random op")
    assert all(v.ok for v in by_op["Relu"] + by_op["AddV2"] + by_op["Mul"])


def test_variables_need_their_shapes_bound():
    v = tf.Variable(tf.ones([3, 4]))

    @tf.function
    def f(x):
        return tf.matmul(x, v) + 1.0
    cf = f.get_concrete_function(tf.TensorSpec([2, 3], tf.float32))
    gd = cf.graph.as_graph_def()
    unbound = mark_compilable(gd)
    matmul = next(n for n, vd in unbound.verdicts.items() if vd.op == "MatMul")
    assert unbound.verdicts[matmul].reason.startswith("dynamic shape")
    bound = mark_compilable(gd, resource_shapes=resource_shapes_of(cf))
    assert bound.verdicts[matmul].ok
    read = next(vd for vd in bound.verdicts.values() if vd.op == "ReadVariableOp")
    assert read.reason.startswith("variable reads stay in TensorFlow")
    handle = next(vd for vd in bound.verdicts.values() if vd.op == "Placeholder" and "resource" in vd.name)
    assert not handle.ok


def test_function_bodies_are_checked():
    @tf.function
    def f(x):
        def body(i, acc):
            return i + 1, acc + tf.random.uniform([3])
        return tf.while_loop(lambda i, acc: i < 3, body, [0, x])[1]

    @tf.function
    def g(x):
        return tf.while_loop(lambda i, acc: i < 3, lambda i, acc: (i + 1, acc * 2.0), [0, x])[1]
    for fn, ok in ((f, False), (g, True)):
        cf = fn.get_concrete_function(tf.TensorSpec([3], tf.float32))
        marking = mark_compilable(inline_calls(cf.graph.as_graph_def()).graph_def)
        (loop,) = [vd for vd in marking.verdicts.values() if vd.op in ("While", "StatelessWhile")]
        assert loop.ok is ok, loop.reason
        if not ok:
            assert "RandomUniform" in loop.reason and "stateful random op" in loop.reason


def test_tensor_list_ops_are_compilable_unless_unknown_shape_enters_a_loop():
    @tf.function
    def f(x):
        ta = tf.TensorArray(tf.float32, size=2)  # no element_shape: the first write fixes it
        ta = ta.write(0, x).write(1, x * 2.0)
        return ta.stack()
    cf = f.get_concrete_function(tf.TensorSpec([3], tf.float32))
    marking = mark_compilable(cf.graph.as_graph_def())
    lists = [vd for vd in marking.verdicts.values() if vd.op.startswith("TensorList")]
    assert lists and all(vd.ok for vd in lists), lists

    def looped(x):
        ta = tf.TensorArray(tf.float32, size=3)
        return tf.while_loop(lambda i, t: i < 3, lambda i, t: (i + 1, t.write(i, x)), (0, ta))[1].stack()
    graph_def = tf.function(looped, autograph=False).get_concrete_function(tf.TensorSpec([2], tf.float32)).graph.as_graph_def()
    verdicts = mark_compilable(graph_def).verdicts
    reserve = next(vd for vd in verdicts.values() if vd.op == "TensorListReserve")
    assert not reserve.ok and "has an unknown element shape and enters 'while'" in reserve.reason, reserve
    # the loop and the stack mark fine: clustering leaves them out with the list (tests/test_tensor_list.py)
    assert [vd.ok for vd in verdicts.values() if vd.op == "TensorListStack"] == [True]
