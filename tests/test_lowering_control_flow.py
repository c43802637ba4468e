"""Control flow and calls (hlo/lowering/ops/control_flow.py) against TF eager: tf.cond, tf.while_loop,
tf.switch_case, nested tf.function calls, the raw stateful ops, predicates and the errors."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import hlo
from hlo.lowering import LoweringError, UnsupportedOpError, can_lower
from tests.lowering_harness import check_lowering, lower_fn

RNG = np.random.default_rng(7)
BF16 = hlo.PrimitiveType.BF16.numpy
NUMERIC_DTYPES = [np.float32, np.float64, np.float16, BF16, np.int32, np.int64, np.int8, np.uint8]


def _data(dtype, shape=(3,)) -> np.ndarray:
    if dtype == np.bool_:
        return RNG.random(shape) < 0.5
    if np.dtype(dtype).kind in "iu":
        return RNG.integers(0, 5, shape).astype(dtype)
    return RNG.uniform(-2, 2, shape).astype(dtype)


def _opcodes(module: hlo.HloModule) -> set[hlo.Opcode]:
    return {inst.opcode for _, inst in module.instructions()}


# --- tf.cond --------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES + [np.bool_], ids=lambda d: np.dtype(d).name)
def test_cond_over_dtypes(dtype) -> None:
    x = _data(dtype, (2, 3))

    def f(p, x):
        return tf.cond(p, lambda: (tf.reverse(x, [1]), x), lambda: (x, tf.zeros_like(x)))

    for p in (True, False):
        module = check_lowering(f, np.bool_(p), x)
    assert hlo.Opcode.CONDITIONAL in _opcodes(module)


@pytest.mark.parametrize("shape", [(), (0, 3), (2, 1, 4)])
def test_cond_shapes_nan_inf(shape) -> None:
    x = _data(np.float32, shape)
    x.reshape(-1)[:2] = [np.nan, np.inf][:x.size]
    for p in (3, 0):
        check_lowering(lambda n, x: tf.cond(n > 1, lambda: x * 2.0 + 1.0, lambda: tf.exp(x)), np.int32(p), x)


# TF's ToBool: a scalar is true when non-zero (NaN included), any non-scalar when it has elements.
PREDICATES = [np.float32(0.0), np.float32(-0.0), np.float32(np.nan), np.float32(2.5), np.float64(-1e-300),
              np.int32(0), np.int32(-3), np.int64(7), np.int8(0), np.int16(1), np.uint8(200),
              np.zeros((0,), np.float32), np.zeros((2, 2), np.float16), np.array([False]), np.zeros((0, 2), np.int32)]


@pytest.mark.parametrize("op", [tf.raw_ops.If, tf.raw_ops.StatelessIf], ids=["If", "StatelessIf"])
def test_if_predicate_conversion(op) -> None:
    spec = tf.TensorSpec([2], tf.float32)
    then = tf.function(lambda x: x * 2.0, autograph=False).get_concrete_function(spec)
    other = tf.function(lambda x: x - 1.0, autograph=False).get_concrete_function(spec)
    x = np.array([1.0, 2.0], np.float32)
    for pred in PREDICATES:
        check_lowering(lambda c, x: op(cond=c, input=[x], Tout=[tf.float32], then_branch=then,
                                       else_branch=other)[0], pred, x)


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES + [np.bool_], ids=lambda d: np.dtype(d).name)
def test_to_bool(dtype) -> None:
    scalar_ok = np.dtype(dtype) not in (np.float16, BF16)
    for x in [np.zeros((), dtype), np.ones((), dtype), np.zeros((0, 2), dtype), np.zeros((2,), dtype)]:
        if x.ndim == 0 and not scalar_ok:
            with pytest.raises(LoweringError, match="cannot use a scalar .* as a predicate"):
                lower_fn(lambda t: tf.raw_ops.ToBool(input=t), x)
        else:
            check_lowering(lambda t: tf.raw_ops.ToBool(input=t), x)


def test_if_rejects_predicates_tf_rejects() -> None:
    neg = tf.function(lambda x: -x, autograph=False).get_concrete_function(tf.TensorSpec([2], tf.float32))
    x = np.ones((2,), np.float32)
    with pytest.raises(LoweringError, match="cannot use a scalar float16 as a predicate"):
        lower_fn(lambda c, x: tf.raw_ops.StatelessIf(cond=c, input=[x], Tout=[tf.float32], then_branch=neg,
                                                     else_branch=neg)[0], np.float16(1), x)


def test_cond_uses_a_captured_constant_shape() -> None:
    # The branch reshapes with a shape computed outside it: the constant is rebuilt inside the branch.
    x, y = _data(np.float32, (2, 6)), _data(np.float32, (3, 4))
    for p in (True, False):
        check_lowering(lambda p, x, y: tf.cond(p, lambda: tf.reshape(x, tf.shape(y)) + y, lambda: y), np.bool_(p),
                       x, y)


def test_cond_branches_with_different_shapes_is_an_error() -> None:
    x = np.ones((2,), np.float32)
    with pytest.raises(LoweringError, match=r"output 0 is f32\[2\] in branch .* but f32\[4\]"):
        lower_fn(lambda p, x: tf.cond(p, lambda: x, lambda: tf.concat([x, x], 0)), np.bool_(True), x)


def test_unsupported_op_in_a_branch_names_node_line_and_function() -> None:
    x = np.ones((2,), np.float32)
    with pytest.raises(UnsupportedOpError) as info:
        lower_fn(lambda p, x: tf.cond(p, lambda: tf.raw_ops.Dawsn(x=x), lambda: x), np.bool_(True), x)
    err = info.value
    assert err.op_type == "Dawsn" and err.source is not None and err.source[0] == __file__
    assert "the then_branch of node 'cond' (StatelessIf)" in str(err)


def test_side_effect_in_a_branch_is_not_dropped() -> None:
    x = np.ones((2,), np.float32)

    def f(p, x):
        def then():
            tf.print(x)
            return x * 2.0
        return tf.cond(p, then, lambda: x)

    with pytest.raises(UnsupportedOpError, match="PrintV2 has side effects") as info:
        lower_fn(f, np.bool_(True), x)
    assert info.value.op_type == "PrintV2" and info.value.source[0] == __file__


# --- tf.while_loop -----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=lambda d: np.dtype(d).name)
def test_while_counter_and_accumulators(dtype) -> None:
    x = _data(dtype, (3,))

    def f(n, x):
        def body(i, acc, flag, prod):
            return i + 1, acc + x, tf.logical_not(flag), prod * tf.constant(2, x.dtype)
        init = (tf.constant(0), tf.zeros_like(x), tf.constant(False), tf.ones_like(x))
        return tf.while_loop(lambda i, *_: i < n, body, init)

    for n in (0, 3):
        module = check_lowering(f, np.int32(n), x)
    assert hlo.Opcode.WHILE in _opcodes(module)


@pytest.mark.parametrize("shape", [(), (0, 3), (2, 3)])
def test_while_shapes_and_maximum_iterations(shape) -> None:
    x = _data(np.float32, shape)
    x.reshape(-1)[:1] = [np.inf][:x.size]
    check_lowering(lambda x: tf.while_loop(lambda i, a: i < 10, lambda i, a: (i + 1, a * 0.5 + 1.0), (0, x),
                                           maximum_iterations=4), x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_while_with_matmul(dtype) -> None:
    h, w = _data(dtype, (2, 4)), _data(dtype, (4, 4)) / 2

    def f(h, w):
        return tf.while_loop(lambda i, h: i < 3, lambda i, h: (i + 1, tf.tanh(tf.matmul(h, w))), (0, h))[1]

    check_lowering(f, h, w)


def test_while_with_a_cond_inside() -> None:
    x = _data(np.float32, (3,))

    @tf.function(autograph=False)
    def step(a):
        return a - 1.0

    def f(x):
        def body(i, a):
            return i + 1, tf.cond(tf.equal(i % 2, 0), lambda: a * 2.0, lambda: step(a))
        return tf.while_loop(lambda i, a: i < 5, body, (tf.constant(0, tf.int64), x))

    module = check_lowering(f, x)
    assert {hlo.Opcode.WHILE, hlo.Opcode.CONDITIONAL} <= _opcodes(module)
    assert hlo.parse_module(module.to_text()) == module  # the text round trip holds for nested computations


def test_cond_with_a_while_inside_and_a_captured_shape_in_the_loop() -> None:
    x, y = _data(np.float32, (4,)), _data(np.float32, (2, 2))

    def f(p, x, y):
        shape = tf.shape(y)  # a loop invariant that must stay a compile-time constant inside the loop
        loop = lambda: tf.while_loop(lambda i, a: i < 2, lambda i, a: (i + 1, a + tf.reshape(x, shape)), (0, y))[1]
        return tf.cond(p, loop, lambda: y)

    for p in (True, False):
        check_lowering(f, np.bool_(p), x, y)


def test_while_changing_shape_is_an_error() -> None:
    x = np.ones((2,), np.float32)
    with pytest.raises(LoweringError, match=r"enters the loop as f32\[2\] but the body returns f32\[4\]"):
        lower_fn(lambda x: tf.while_loop(lambda i, a: i < 2, lambda i, a: (i + 1, tf.concat([a, a], 0)), (0, x),
                                         shape_invariants=(tf.TensorShape([]), tf.TensorShape([None])))[1], x)


def test_while_condition_uses_tf_to_bool() -> None:
    ispec, spec = tf.TensorSpec([], tf.int32), tf.TensorSpec([2], tf.float32)
    body = tf.function(lambda i, x: (i + 1, x * 2.0), autograph=False).get_concrete_function(ispec, spec)
    count = tf.function(lambda i, x: 3 - i, autograph=False).get_concrete_function(ispec, spec)  # int32: i != 3
    half = tf.function(lambda i, x: tf.cast(3 - i, tf.float16), autograph=False).get_concrete_function(ispec, spec)
    x = np.array([1.0, -0.5], np.float32)
    check_lowering(lambda x: tf.raw_ops.StatelessWhile(input=[tf.constant(0), x], cond=count, body=body), x)
    with pytest.raises(LoweringError, match="loop condition .* returns f16.*cannot use a scalar float16"):
        lower_fn(lambda x: tf.raw_ops.StatelessWhile(input=[tf.constant(0), x], cond=half, body=body), x)


def test_while_over_a_tensor_list() -> None:
    """A list is loop state (buffer and length, hlo/lowering/lists.py); more in tests/test_tensor_list.py."""
    def f(x):
        ta = tf.TensorArray(tf.float32, size=3, element_shape=[2])
        return tf.while_loop(lambda i, t: i < 3, lambda i, t: (i + 1, t.write(i, x * tf.cast(i, tf.float32))),
                             (0, ta))[1].stack()

    graph = tf.function(f, autograph=False).get_concrete_function(tf.TensorSpec([2], tf.float32)).graph
    node = next(n for n in graph.as_graph_def().node if n.op in ("While", "StatelessWhile"))
    assert can_lower(node), can_lower(node)
    check_lowering(f, np.array([1.5, -2.0], np.float32))


# --- tf.switch_case ----------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.int32, np.bool_], ids=lambda d: np.dtype(d).name)
def test_switch_case(dtype) -> None:
    x = _data(dtype, (2, 2))

    def f(k, x):
        return tf.switch_case(k, [lambda: x, lambda: tf.transpose(x), lambda: tf.reverse(x, [0])])

    for k in (0, 1, 2, 5, -1):  # out of range runs the last branch
        module = check_lowering(f, np.int32(k), x)
    assert hlo.Opcode.CONDITIONAL in _opcodes(module)


# --- calls -----------------------------------------------------------------------------------------------


def test_nested_tf_function_calls_are_inlined() -> None:
    @tf.function(autograph=False)
    def inner(a, shape):
        return tf.cond(tf.reduce_sum(a) > 0, lambda: tf.reshape(a, shape), lambda: -tf.reshape(a, shape))

    @tf.function(autograph=False)
    def middle(a, b):
        return inner(a, tf.shape(b)) + b, tf.cast(inner(a * 2.0, tf.shape(b)), tf.float64)

    x, y = _data(np.float32, (6,)), _data(np.float32, (2, 3))
    module = check_lowering(lambda x, y: middle(x, y), x, y)
    check_lowering(lambda x, y: middle(x, y), -np.abs(x), y)
    assert hlo.Opcode.CALL not in _opcodes(module)


def test_raw_stateful_ops() -> None:
    spec, ispec = tf.TensorSpec([2], tf.float32), tf.TensorSpec([], tf.int32)
    double = tf.function(lambda x: x * 2.0, autograph=False).get_concrete_function(spec)
    dec = tf.function(lambda x: x - 1.0, autograph=False).get_concrete_function(spec)
    cond = tf.function(lambda i, x: i < 3, autograph=False).get_concrete_function(ispec, spec)
    body = tf.function(lambda i, x: (i + 1, x * 2.0), autograph=False).get_concrete_function(ispec, spec)

    def f(p, k, x):
        return (tf.raw_ops.If(cond=p, input=[x], Tout=[tf.float32], then_branch=double, else_branch=dec)[0],
                tf.raw_ops.While(input=[tf.constant(0), x], cond=cond, body=body)[1],
                tf.raw_ops.Case(branch_index=k, input=[x], Tout=[tf.float32], branches=[double, dec])[0],
                tf.raw_ops.StatefulPartitionedCall(args=[x], Tout=[tf.float32], f=dec)[0])

    x = np.array([1.5, -2.0], np.float32)
    for p, k in ((True, 0), (False, 1), (True, 9)):
        check_lowering(f, np.bool_(p), np.int32(k), x)


# --- metadata ------------------------------------------------------------------------------------------


def test_nested_bodies_carry_metadata() -> None:
    x = _data(np.float32, (3,))

    def f(x):
        return tf.while_loop(lambda i, a: i < 2, lambda i, a: (i + 1, tf.cond(i > 0, lambda: tf.exp(a),
                                                                                lambda: tf.tanh(a))), (0, x))[1]

    module = check_lowering(f, x)
    found = {}
    for comp, inst in module.instructions():
        if inst.opcode in (hlo.Opcode.EXPONENTIAL, hlo.Opcode.TANH, hlo.Opcode.COMPARE):
            md = inst.metadata
            assert md is not None and md.op_type and md.op_name, (comp.name, inst.name)
            assert md.source_file == __file__, (comp.name, inst.name, md)
            found[inst.opcode] = comp.name
    assert module.entry_name not in found.values()  # all of them live in the nested computations
    assert set(found) == {hlo.Opcode.EXPONENTIAL, hlo.Opcode.TANH, hlo.Opcode.COMPARE}
