"""reduce, reduce-window and select-and-scatter in the evaluator.

Fast-path tests (one-op reducers) need no other evaluator rule: they compare a
single op taken from XLA's own HLO with XLA's result, or a hand-written module
with NumPy. The generic-path tests at the end evaluate reducer bodies with
compare/select/tuple/... and so need the elementwise and structural rules.
"""

import os
import sys

import ml_dtypes
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tensorflow as tf  # noqa: E402
from tensorflow.compiler.tf2xla.python import xla  # noqa: E402

import hlo  # noqa: E402
from hlo.opcodes import Opcode  # noqa: E402
from tests.xla_oracle import assert_close, evaluate_single, scalar_fn  # noqa: E402

RNG = np.random.default_rng(7)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def binary(name: str, op: str, t: str = "f32") -> str:
    return f"""
%{name} (a: {t}[], b: {t}[]) -> {t}[] {{
  %a = {t}[] parameter(0)
  %b = {t}[] parameter(1)
  ROOT %r = {t}[] {op}({t}[] %a, {t}[] %b)
}}
"""


def pick(name: str, k: int, t: str = "f32") -> str:
    """A body returning parameter k: the generic, evaluator-driven path with no other rule needed."""
    return f"""
%{name} (a: {t}[], b: {t}[]) -> {t}[] {{
  %a = {t}[] parameter(0)
  ROOT %b = {t}[] parameter({k})
}}
""" if k == 1 else f"""
%{name} (a: {t}[], b: {t}[]) -> {t}[] {{
  ROOT %a = {t}[] parameter(0)
  %b = {t}[] parameter(1)
}}
"""


def one_op(comps: str, x: str, init: str, out: str, op: str, attrs: str) -> hlo.HloModule:
    return hlo.parse_module(f"""
HloModule m
{comps}
ENTRY %main (x: {x}, i: {init}) -> {out} {{
  %x = {x} parameter(0)
  %i = {init} parameter(1)
  ROOT %r = {out} {op}({x} %x, {init} %i), {attrs}
}}
""")


# --- reduce: fast path against XLA ---------------------------------------------------------


@pytest.mark.parametrize("tf_fn,axis", [
    (tf.reduce_sum, 1), (tf.reduce_sum, [0, 2]), (tf.reduce_max, 2), (tf.reduce_min, [0, 1, 2]),
    (tf.reduce_prod, 0),
])
def test_reduce_against_xla(tf_fn, axis):
    got, want = evaluate_single(lambda x: tf_fn(x, axis=axis), [f32(3, 4, 5)], Opcode.REDUCE)
    assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("tf_fn", [tf.reduce_all, tf.reduce_any])
def test_reduce_pred_and_or_against_xla(tf_fn):
    x = RNG.random((4, 6)) < 0.6
    got, want = evaluate_single(lambda x: tf_fn(x, axis=1), [x], Opcode.REDUCE)
    assert_close(got, want)


def test_reduce_int32_sum_against_xla():
    x = RNG.integers(-50, 50, (4, 6)).astype(np.int32)
    got, want = evaluate_single(lambda x: tf.reduce_sum(x, axis=0), [x], Opcode.REDUCE)
    assert_close(got, want)


# --- reduce: semantics ------------------------------------------------------------------------


def test_reduce_nan_propagates_through_max_and_min():
    x = np.array([[1, np.nan, 3], [4, 5, 6]], np.float32)
    for op, want in (("maximum", [np.nan, 6]), ("minimum", [np.nan, 4])):
        m = one_op(binary("f", op), "f32[2,3]", "f32[]", "f32[2]", "reduce",
                   "dimensions={1}, to_apply=%f")
        (got,) = hlo.evaluate(m, x, np.float32(-np.inf if op == "maximum" else np.inf))
        np.testing.assert_array_equal(got, np.array(want, np.float32))


def test_reduce_folds_init_and_handles_empty_dims():
    m = one_op(binary("f", "add"), "f32[2,0]", "f32[]", "f32[2]", "reduce", "dimensions={1}, to_apply=%f")
    (got,) = hlo.evaluate(m, np.zeros((2, 0), np.float32), np.float32(7))
    np.testing.assert_array_equal(got, [7, 7])
    m = one_op(binary("f", "add"), "f32[0,3]", "f32[]", "f32[3]", "reduce", "dimensions={0}, to_apply=%f")
    (got,) = hlo.evaluate(m, np.zeros((0, 3), np.float32), np.float32(-1))
    np.testing.assert_array_equal(got, [-1, -1, -1])
    m = one_op(binary("f", "add"), "f32[2,3]", "f32[]", "f32[2,3]", "reduce", "dimensions={}, to_apply=%f")
    (got,) = hlo.evaluate(m, np.ones((2, 3), np.float32), np.float32(10))
    np.testing.assert_array_equal(got, np.full((2, 3), 11, np.float32))
    m = one_op(binary("f", "maximum"), "f32[0]", "f32[]", "f32[]", "reduce", "dimensions={0}, to_apply=%f")
    (got,) = hlo.evaluate(m, np.zeros((0,), np.float32), np.float32(-np.inf))
    assert got == -np.inf


def test_reduce_stays_in_the_declared_type():
    x = np.full((300,), 100, np.int8)
    m = one_op(binary("f", "add", "s8"), "s8[300]", "s8[]", "s8[]", "reduce", "dimensions={0}, to_apply=%f")
    (got,) = hlo.evaluate(m, x, np.int8(0))
    assert got.dtype == np.int8 and int(got) == np.int8(np.int64(30000).astype(np.int8))
    xb = f32(8, 16).astype(ml_dtypes.bfloat16)
    m = one_op(binary("f", "add", "bf16"), "bf16[8,16]", "bf16[]", "bf16[8]", "reduce",
               "dimensions={1}, to_apply=%f")
    (got,) = hlo.evaluate(m, xb, np.zeros((), ml_dtypes.bfloat16))
    assert got.dtype == ml_dtypes.bfloat16
    np.testing.assert_allclose(got.astype(np.float32), xb.astype(np.float32).sum(1), rtol=2e-2, atol=5e-2)


def test_reduce_generic_path_folds_in_row_major_order():
    # ROOT p1 keeps the last element seen: the last in row-major order over the reduced dims.
    x = f32(2, 3, 4)
    m = one_op(pick("f", 1), "f32[2,3,4]", "f32[]", "f32[3]", "reduce", "dimensions={0,2}, to_apply=%f")
    (got,) = hlo.evaluate(m, x, np.float32(0))
    np.testing.assert_array_equal(got, x[1, :, 3])
    m = one_op(pick("f", 0), "f32[2,3,4]", "f32[]", "f32[3]", "reduce", "dimensions={0,2}, to_apply=%f")
    (got,) = hlo.evaluate(m, x, np.float32(5))
    np.testing.assert_array_equal(got, [5, 5, 5])


# --- reduce-window -------------------------------------------------------------------------------


@pytest.mark.parametrize("padding,k,s", [("VALID", 2, 2), ("SAME", 3, 2), ("SAME", 3, 1), ("VALID", (2, 3), (1, 2))])
def test_max_pool_against_xla(padding, k, s):
    got, want = evaluate_single(lambda x: tf.nn.max_pool2d(x, k, s, padding), [f32(2, 7, 6, 3)],
                                Opcode.REDUCE_WINDOW)
    assert_close(got, want)


def test_avg_pool_sum_window_against_xla():
    # avg_pool's HLO: reduce-window(add) of the input, divided by a reduce-window count; check the sum.
    x = f32(1, 6, 5, 2)
    want = [tf.nn.depthwise_conv2d(x, tf.ones((3, 3, 2, 1)), [1, 2, 2, 1], "SAME").numpy()]  # sum pooling
    got, _ = evaluate_single(lambda x: tf.nn.avg_pool2d(x, 3, 2, "SAME"), [x], Opcode.REDUCE_WINDOW)
    assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_cumsum_window_against_xla():
    for fn in (lambda x: tf.cumsum(x, axis=1), lambda x: tf.cumsum(x, axis=0)):
        got, want = evaluate_single(fn, [f32(4, 6)], Opcode.REDUCE_WINDOW)
        assert_close(got, want)


@pytest.mark.parametrize("reducer,init", [(tf.math.add, 0.0), (tf.math.maximum, -np.inf)])
def test_xla_reduce_window_dilations_negative_padding(reducer, init):
    x = f32(5, 7)

    def fn(x):
        return xla.reduce_window(x, tf.constant(init, tf.float32), scalar_fn(reducer),
                                 window_dimensions=[2, 3], window_strides=[2, 1], base_dilations=[2, 1],
                                 window_dilations=[1, 2], padding=[(1, -1), (-2, 3)])
    got, want = evaluate_single(fn, [x], Opcode.REDUCE_WINDOW)
    assert_close(got, want)


def rw_module(body: str, x: str, out: str, window: str) -> hlo.HloModule:
    return one_op(body, x, "f32[]", out, "reduce-window", f"window={{{window}}}, to_apply=%f")


def test_reduce_window_nan_and_empty():
    x = np.array([[1, np.nan, 3, 4]], np.float32)
    (got,) = hlo.evaluate(rw_module(binary("f", "maximum"), "f32[1,4]", "f32[1,3]", "size=1x2"),
                          x, np.float32(-np.inf))
    np.testing.assert_array_equal(got, [[np.nan, np.nan, 4]])
    (got,) = hlo.evaluate(rw_module(binary("f", "add"), "f32[0,4]", "f32[0,3]", "size=1x2"),
                          np.zeros((0, 4), np.float32), np.float32(0))
    assert got.shape == (0, 3)
    # all-padding windows reduce to the init value
    (got,) = hlo.evaluate(rw_module(binary("f", "add"), "f32[2]", "f32[4]", "size=1 pad=1_1"),
                          np.array([1, 2], np.float32), np.float32(0.5))
    np.testing.assert_array_equal(got, [0.5, 1.5, 2.5, 0.5])


def test_reduce_window_generic_path_skips_padding_and_holes():
    # ROOT p1 keeps the last valid element of each window: the position of each output's last real tap.
    x = f32(5, 4)
    m = rw_module(pick("f", 1), "f32[5,4]", "f32[4,4]", "size=3x2 stride=2x1 pad=2_-1x0_1 lhs_dilate=2x1")
    (got,) = hlo.evaluate(m, x, np.float32(99))
    dil = np.full((9, 4), np.nan, np.float32)
    dil[::2] = x
    padded = np.full((2 + 9 - 1, 5), np.nan, np.float32)
    padded[2:, :4] = dil[:-1]
    want = np.empty((4, 4), np.float32)
    for i in range(4):
        for j in range(4):
            win = padded[2 * i:2 * i + 3, j:j + 2].reshape(-1)
            real = win[~np.isnan(win)]
            want[i, j] = real[-1] if real.size else 99
    np.testing.assert_array_equal(got, want)


# --- select-and-scatter ------------------------------------------------------------------------------


@pytest.mark.parametrize("padding,k,s", [("VALID", 2, 2), ("SAME", 3, 2), ("VALID", 2, 1)])
def test_max_pool_grad_against_xla(padding, k, s):
    x = RNG.integers(0, 4, (1, 6, 5, 2)).astype(np.float32)  # ties: the first maximum wins (GE)
    y = tf.nn.max_pool2d(x, k, s, padding)
    g = f32(*y.shape)

    def fn(x, g):
        return tf.raw_ops.MaxPoolGrad(orig_input=x, orig_output=tf.nn.max_pool2d(x, k, s, padding), grad=g,
                                      ksize=[1, k, k, 1], strides=[1, s, s, 1], padding=padding)
    got, want = evaluate_single(fn, [x, g], Opcode.SELECT_AND_SCATTER)
    assert_close(got, want)


def test_select_and_scatter_gt_picks_the_last_tie():
    x = np.array([3, 3, 1, 3], np.float32)
    src = np.array([1, 10, 100], np.float32)

    def fn(x, src):
        return xla.select_and_scatter(x, [2], [1], [[0, 0]], src, tf.constant(0.0),
                                      scalar_fn(tf.math.greater), scalar_fn(tf.math.add))
    got, want = evaluate_single(fn, [x, src], Opcode.SELECT_AND_SCATTER)
    assert_close(got, want)
    np.testing.assert_array_equal(got[0], [0, 11, 0, 100])


# --- generic path: needs the elementwise / structural rules --------------------------------------


def test_argmax_variadic_reduce_against_xla():
    x = RNG.integers(0, 3, (4, 6)).astype(np.float32)  # ties: XLA's body keeps the lowest index
    x[1, 2] = np.nan
    for axis in (0, 1):
        got, want = evaluate_single(lambda x: tf.math.argmax(x, axis=axis, output_type=tf.int32), [x], Opcode.REDUCE)
        np.testing.assert_array_equal(got[1], want[0])


def test_generic_reducer_body():
    body = """
%f (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  %two = f32[] constant(2)
  %m = f32[] multiply(f32[] %a, f32[] %two)
  ROOT %r = f32[] add(f32[] %m, f32[] %b)
}
"""
    x = f32(3, 4)
    (got,) = hlo.evaluate(one_op(body, "f32[3,4]", "f32[]", "f32[3]", "reduce", "dimensions={1}, to_apply=%f"),
                          x, np.float32(1))
    want = np.ones(3, np.float32)
    for k in range(4):
        want = want * 2 + x[:, k]
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_select_and_scatter_generic_select_body():
    module = hlo.parse_module("""
HloModule m
%not_lt (a: f32[], b: f32[]) -> pred[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  %lt = pred[] compare(f32[] %a, f32[] %b), direction=LT
  ROOT %ge = pred[] not(pred[] %lt)
}
%ge (a: f32[], b: f32[]) -> pred[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %ge = pred[] compare(f32[] %a, f32[] %b), direction=GE
}
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %r = f32[] add(f32[] %a, f32[] %b)
}
ENTRY %main (x: f32[5,6], s: f32[3,3], i: f32[]) -> f32[5,6] {
  %x = f32[5,6] parameter(0)
  %s = f32[3,3] parameter(1)
  %i = f32[] parameter(2)
  ROOT %r = f32[5,6] select-and-scatter(f32[5,6] %x, f32[3,3] %s, f32[] %i), window={size=3x2 stride=2x2 pad=1_1x0_0}, select=%not_lt, scatter=%add
}
""")
    x, src = RNG.integers(0, 3, (5, 6)).astype(np.float32), f32(3, 3)
    (got,) = hlo.evaluate(module, x, src, np.float32(0))
    fast = module.with_computation(module.entry.replace(instructions=tuple(
        i.with_attr("select", hlo.CompRef("ge")) if i.name == "r" else i for i in module.entry.instructions)))
    (want,) = hlo.evaluate(fast, x, src, np.float32(0))
    np.testing.assert_array_equal(got, want)
    assert np.count_nonzero(got) > 0


def test_variadic_reduce_window_against_numpy():
    module = hlo.parse_module("""
HloModule m
%f (a: f32[], i: s32[], b: f32[], j: s32[]) -> (f32[], s32[]) {
  %a = f32[] parameter(0)
  %i = s32[] parameter(1)
  %b = f32[] parameter(2)
  %j = s32[] parameter(3)
  %ge = pred[] compare(f32[] %a, f32[] %b), direction=GE
  %v = f32[] select(pred[] %ge, f32[] %a, f32[] %b)
  %k = s32[] select(pred[] %ge, s32[] %i, s32[] %j)
  ROOT %t = (f32[], s32[]) tuple(f32[] %v, s32[] %k)
}
ENTRY %main (x: f32[6], ix: s32[6], a: f32[], b: s32[]) -> (f32[3], s32[3]) {
  %x = f32[6] parameter(0)
  %ix = s32[6] parameter(1)
  %a = f32[] parameter(2)
  %b = s32[] parameter(3)
  ROOT %r = (f32[3], s32[3]) reduce-window(f32[6] %x, s32[6] %ix, f32[] %a, s32[] %b), window={size=3 stride=2 pad=1_0}, to_apply=%f
}
""")
    x = np.array([1, 5, 2, 5, 0, 3], np.float32)
    vals, idx = hlo.evaluate(module, x, np.arange(6, dtype=np.int32), np.float32(-np.inf), np.int32(-1))
    np.testing.assert_array_equal(vals, [5, 5, 5])
    np.testing.assert_array_equal(idx, [1, 1, 3])  # GE keeps the first of equal maxima
