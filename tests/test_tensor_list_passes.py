"""The graph passes that make recurrent loops compilable: graph_passes/loop_reads.py (a loop's, or a
branch's, read-only variable reads hoisted before it) and graph_passes/list_shapes.py (a TensorList's element shape from what
its loop writes). Structure before/after, the input GraphDef untouched, and what is left alone.
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from tensorflow.python.framework import tensor_util

from graph_passes.list_shapes import infer_list_shapes
from graph_passes.loop_reads import SUFFIX, hoist_loop_reads
from graph_passes.pipeline import resource_shapes_of

DT_RESOURCE, DT_FLOAT = 20, 1


def _graph(fn, *specs):
    cf = tf.function(fn).get_concrete_function(*specs)
    return cf.graph.as_graph_def(), resource_shapes_of(cf)


def _loop(gd):
    return next(n for n in gd.node if n.op in ("While", "StatelessWhile"))


def _library(gd):
    return {f.signature.name: f for f in gd.library.function}


def test_read_only_variable_is_hoisted_before_the_loop():
    v = tf.Variable(np.arange(4, dtype=np.float32).reshape(2, 2) / 8.0)

    def f(x):
        for _ in tf.range(3):
            x = tf.matmul(x, v) + 1.0
        return x

    gd, shapes = _graph(f, tf.TensorSpec([2, 2], tf.float32))
    before = gd.SerializeToString()
    types = list(_loop(gd).attr["T"].list.type)
    k = types.index(DT_RESOURCE)
    result = hoist_loop_reads(gd, shapes)
    assert gd.SerializeToString() == before  # the input is not modified
    loop = _loop(result.graph_def)
    assert DT_RESOURCE not in loop.attr["T"].list.type and loop.attr["T"].list.type[k] == DT_FLOAT
    (read,) = result.hoisted
    assert loop.input[k] == read
    read_node = next(n for n in result.graph_def.node if n.name == read)
    assert read_node.op == "ReadVariableOp" and read_node.input[0] == _loop(gd).input[k]
    assert tf.TensorShape(loop.attr["output_shapes"].list.shape[k]).as_list() == [2, 2]
    body = _library(result.graph_def)[loop.attr["body"].func.name]
    assert body.signature.name.endswith(SUFFIX)
    assert body.signature.input_arg[k].type == DT_FLOAT and body.signature.output_arg[k].type == DT_FLOAT
    assert not [n for n in body.node_def if n.op == "ReadVariableOp"]  # (numbers: tests/test_recurrent.py)


def test_variable_shape_of_a_known_variable_is_a_constant():
    """A gradient reads a variable's shape with VariableShape (through the loop that carried the handle)."""
    from tensorflow.python.ops import gen_resource_variable_ops

    v = tf.Variable(np.zeros((2, 5), np.float32))

    def f(x):  # the raw op (the Python wrapper folds it itself), as a gradient's zeros of a variable's shape
        return tf.zeros(gen_resource_variable_ops.variable_shape(v.handle)) + x

    gd, shapes = _graph(f, tf.TensorSpec([2, 5], tf.float32))
    result = hoist_loop_reads(gd, shapes)
    (node,) = [n for n in result.graph_def.node if n.name == next(m.name for m in gd.node if m.op == "VariableShape")]
    assert node.op == "Const" and tensor_util.MakeNdarray(node.attr["value"].tensor).tolist() == [2, 5]


def test_a_loop_that_writes_the_variable_is_left_alone():
    v = tf.Variable([1.0, 2.0])

    def f(x):
        for _ in tf.range(2):
            v.assign_add(x)
        return v.read_value()

    gd, shapes = _graph(f, tf.TensorSpec([2], tf.float32))
    result = hoist_loop_reads(gd, shapes)
    assert result.hoisted == []
    assert DT_RESOURCE in _loop(result.graph_def).attr["T"].list.type


def _if(gd):
    return next(n for n in gd.node if n.op in ("If", "StatelessIf"))


def test_read_only_variable_is_hoisted_before_a_branch_and_it_compiles():
    """Keras SpectralNormalization's form: a cond whose branches read variables, the result assigned after."""
    import tfxla_plugin

    v = tf.Variable(np.arange(4, dtype=np.float32).reshape(2, 2) / 8.0)
    u = tf.Variable(np.ones((2,), np.float32))

    def f(x):
        new = tf.cond(tf.reduce_all(tf.equal(v, 0.0)), lambda: v + 0.0, lambda: tf.matmul(x, v) * u)
        v.assign(new)
        return v.read_value() * 2.0

    gd, shapes = _graph(f, tf.TensorSpec([2, 2], tf.float32))
    branch = _if(gd)
    result = hoist_loop_reads(gd, shapes)
    node = _if(result.graph_def)
    assert len(result.hoisted) == 2 and DT_RESOURCE not in node.attr["Tin"].list.type
    assert [i for i in node.input if i in result.hoisted] == result.hoisted
    assert not set(branch.input) & set(result.hoisted)
    library = _library(result.graph_def)
    for attr in ("then_branch", "else_branch"):
        body = library[node.attr[attr].func.name]
        assert body.signature.name.endswith(SUFFIX) and not [n for n in body.node_def if n.op == "ReadVariableOp"]
    x = tf.constant(np.array([[1.0, -2.0], [0.5, 3.0]], np.float32))
    start = v.numpy()
    want, want_v = f(x).numpy(), v.numpy()
    v.assign(start)
    got = tfxla_plugin.function(f, jit_compile=True)(x).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-6)
    np.testing.assert_allclose(v.numpy(), want_v, rtol=1e-6)


def test_a_branch_that_writes_the_variable_is_left_alone():
    v = tf.Variable([1.0, 2.0])

    def f(x):
        def write():
            v.assign_add(x)
            return x
        return tf.cond(x[0] > 0, write, lambda: x + 1.0)

    gd, shapes = _graph(f, tf.TensorSpec([2], tf.float32))
    result = hoist_loop_reads(gd, shapes)
    assert result.hoisted == [] and DT_RESOURCE in _if(result.graph_def).attr["Tin"].list.type


def test_element_shape_comes_from_the_loop_writes():
    def f(x):
        ta = tf.TensorArray(tf.float32, size=3)
        for i in tf.range(3):
            ta = ta.write(i, tf.tile(x, [2]) * tf.cast(i, tf.float32))
        return ta.stack()

    gd, _ = _graph(f, tf.TensorSpec([4], tf.float32))
    result = infer_list_shapes(gd)
    (name,) = result.inferred
    assert result.inferred[name] == (8,)
    reserve = next(n for n in result.graph_def.node if n.name == name)
    const = next(n for n in result.graph_def.node if n.name == reserve.input[0])
    assert tensor_util.MakeNdarray(const.attr["value"].tensor).tolist() == [8]
    original = next(n for n in gd.node if n.name == name)
    assert original.input[0] != reserve.input[0]  # the input GraphDef keeps its own element_shape


def test_items_without_a_static_shape_leave_the_list_alone():
    def f(x):
        ta = tf.TensorArray(tf.float32, size=3)
        for i in tf.range(3):
            ta = ta.write(i, tf.boolean_mask(x, x > 0.0))
        return ta.stack()

    gd, _ = _graph(f, tf.TensorSpec([4], tf.float32))
    result = infer_list_shapes(gd)
    assert result.inferred == {}
    reserve = next(n for n in result.graph_def.node if n.op == "TensorListReserve")
    assert reserve.input[0] == next(n for n in gd.node if n.op == "TensorListReserve").input[0]


def test_nothing_to_infer_imports_nothing():
    gd, _ = _graph(lambda x: x * 2.0, tf.TensorSpec([2], tf.float32))
    assert infer_list_shapes(gd).graph_def is gd
