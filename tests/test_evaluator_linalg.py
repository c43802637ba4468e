"""dot and convolution in the evaluator, against real XLA (single ops taken from XLA's own HLO)
and against NumPy references for the forms TF does not reach (reversal, integers, empty dims)."""

import os
import sys

import ml_dtypes
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import tensorflow as tf  # noqa: E402
from tensorflow.compiler.tf2xla.python import xla  # noqa: E402
from tensorflow.compiler.xla import xla_data_pb2  # noqa: E402

import hlo  # noqa: E402
from hlo.opcodes import Opcode  # noqa: E402
from tests.xla_oracle import assert_close, evaluate_single  # noqa: E402

RNG = np.random.default_rng(1234)


def f32(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def conv_dims(inp: str, ker: str, out: str) -> xla_data_pb2.ConvolutionDimensionNumbers:
    """Dimension numbers from labels like ``bf01``, ``oi01``, ``bf01``."""
    d = xla_data_pb2.ConvolutionDimensionNumbers()
    n = len(inp) - 2
    d.input_batch_dimension, d.input_feature_dimension = inp.index("b"), inp.index("f")
    d.input_spatial_dimensions.extend(inp.index(str(i)) for i in range(n))
    d.kernel_output_feature_dimension, d.kernel_input_feature_dimension = ker.index("o"), ker.index("i")
    d.kernel_spatial_dimensions.extend(ker.index(str(i)) for i in range(n))
    d.output_batch_dimension, d.output_feature_dimension = out.index("b"), out.index("f")
    d.output_spatial_dimensions.extend(out.index(str(i)) for i in range(n))
    return d


def check_conv(fn, *args, rtol=1e-5, atol=1e-5, which=0):
    got, want = evaluate_single(fn, list(args), Opcode.CONVOLUTION, which)
    assert_close(got, want[:1], rtol, atol)


# --- convolution against XLA -----------------------------------------------------


@pytest.mark.parametrize("padding,strides,dilations", [
    ("SAME", 2, 1), ("VALID", 1, 2), ("SAME", 1, 1), ("VALID", (2, 3), 1),
])
def test_conv2d_nhwc(padding, strides, dilations):
    x, w = f32(2, 16, 16, 8), f32(3, 3, 8, 5)
    check_conv(lambda x, w: tf.nn.conv2d(x, w, strides, padding, dilations=dilations), x, w, atol=1e-4)


def test_depthwise_conv2d_uses_feature_groups():
    x, w = f32(2, 7, 6, 3), f32(3, 3, 3, 2)
    check_conv(lambda x, w: tf.nn.depthwise_conv2d(x, w, [1, 1, 1, 1], "SAME"), x, w)


def test_conv2d_transpose_lhs_dilation():
    x, w = f32(1, 4, 3, 4), f32(3, 3, 2, 4)
    check_conv(lambda x, w: tf.nn.conv2d_transpose(x, w, [1, 8, 6, 2], 2, "SAME"), x, w)


def test_conv2d_backprop_filter_dim_labels():
    x, dy = f32(2, 6, 5, 3), f32(2, 6, 5, 4)

    def fn(x, dy):
        return tf.raw_ops.Conv2DBackpropFilter(input=x, filter_sizes=[3, 3, 3, 4], out_backprop=dy,
                                               strides=[1, 1, 1, 1], padding="SAME")
    check_conv(fn, x, dy, atol=1e-4)


def test_conv2d_backprop_input():
    w, dy = f32(3, 3, 3, 4), f32(2, 3, 3, 4)

    def fn(w, dy):
        return tf.raw_ops.Conv2DBackpropInput(input_sizes=[2, 6, 5, 3], filter=w, out_backprop=dy,
                                              strides=[1, 2, 2, 1], padding="SAME")
    check_conv(fn, w, dy)


def test_xla_conv_nchw_negative_padding_both_dilations():
    x, w = f32(2, 3, 5, 6), f32(4, 3, 2, 3)

    def fn(x, w):
        return xla.conv(x, w, window_strides=[1, 2], padding=[(1, 0), (-1, 2)], lhs_dilation=[2, 1],
                        rhs_dilation=[1, 2], dimension_numbers=conv_dims("bf01", "oi01", "bf01"))
    check_conv(fn, x, w)


def test_xla_conv_batch_group_count():
    x, w = f32(4, 3, 5, 6), f32(6, 3, 2, 3)

    def fn(x, w):
        return xla.conv(x, w, window_strides=[1, 1], padding=[(0, 0), (1, 1)], lhs_dilation=[1, 1],
                        rhs_dilation=[1, 1], dimension_numbers=conv_dims("bf01", "oi01", "bf01"),
                        batch_group_count=2)
    check_conv(fn, x, w)


def test_xla_conv_feature_groups_odd_layouts():
    def fn(x, w):
        return xla.conv(x, w, window_strides=[2, 1], padding=[(1, 1), (0, 1)], lhs_dilation=[1, 1],
                        rhs_dilation=[1, 1], dimension_numbers=conv_dims("01fb", "i01o", "f0b1"),
                        feature_group_count=2)
    x = f32(6, 5, 4, 2)  # [0, 1, f, b]
    w = f32(2, 3, 2, 6)  # [i, 0, 1, o]
    check_conv(fn, x, w)


def test_xla_conv_1d_and_3d():
    def c1(x, w):
        return xla.conv(x, w, [3], [(2, 1)], [1], [2], conv_dims("b0f", "0io", "b0f"))
    check_conv(c1, f32(2, 11, 3), f32(3, 3, 4))

    def c3(x, w):
        return xla.conv(x, w, [1, 2, 1], [(1, 1), (0, 0), (1, 0)], [1, 1, 2], [1, 1, 1],
                        conv_dims("b012f", "012io", "b012f"))
    check_conv(c3, f32(1, 4, 5, 3, 2), f32(2, 2, 2, 2, 3))


# --- convolution against NumPy ----------------------------------------------------------


def conv_module(lhs: str, rhs: str, out: str, attrs: str) -> hlo.HloModule:
    return hlo.parse_module(f"""
HloModule m
ENTRY %main (x: {lhs}, w: {rhs}) -> {out} {{
  %x = {lhs} parameter(0)
  %w = {rhs} parameter(1)
  ROOT %c = {out} convolution({lhs} %x, {rhs} %w), {attrs}
}}
""")


def naive_conv_nhwc(x, w, stride=1, pad=((0, 0), (0, 0))):
    """Reference: f64 loops over output positions (NHWC x HWIO)."""
    x = np.pad(x.astype(np.float64), ((0, 0), pad[0], pad[1], (0, 0)))
    kh, kw = w.shape[:2]
    oh, ow = (x.shape[1] - kh) // stride + 1, (x.shape[2] - kw) // stride + 1
    out = np.zeros((x.shape[0], oh, ow, w.shape[3]))
    for i in range(oh):
        for j in range(ow):
            patch = x[:, i * stride:i * stride + kh, j * stride:j * stride + kw, :]
            out[:, i, j, :] = np.tensordot(patch, w.astype(np.float64), axes=([1, 2, 3], [0, 1, 2]))
    return out


def test_conv_rhs_reversal_flips_the_kernel():
    x, w = f32(1, 5, 4, 2), f32(3, 2, 2, 3)
    m = conv_module("f32[1,5,4,2]", "f32[3,2,2,3]", "f32[1,3,3,3]",
                    "window={size=3x2 rhs_reversal=1x1}, dim_labels=b01f_01io->b01f")
    (got,) = hlo.evaluate(m, x, w)
    np.testing.assert_allclose(got, naive_conv_nhwc(x, w[::-1, ::-1]), rtol=1e-5, atol=1e-5)


def test_conv_integer_and_wide_accumulation():
    x = RNG.integers(-100, 100, (1, 4, 4, 3)).astype(np.int8)
    w = RNG.integers(-100, 100, (2, 2, 3, 2)).astype(np.int8)
    m = conv_module("s8[1,4,4,3]", "s8[2,2,3,2]", "s32[1,2,2,2]",
                    "window={size=2x2 stride=2x2}, dim_labels=b01f_01io->b01f")
    (got,) = hlo.evaluate(m, x, w)
    assert got.dtype == np.int32
    np.testing.assert_array_equal(got, naive_conv_nhwc(x, w, stride=2).astype(np.int32))


def test_conv_bf16_accumulates_in_f32():
    x, w = f32(1, 6, 6, 8), f32(3, 3, 8, 4)
    xb, wb = x.astype(ml_dtypes.bfloat16), w.astype(ml_dtypes.bfloat16)
    m = conv_module("bf16[1,6,6,8]", "bf16[3,3,8,4]", "bf16[1,6,6,4]",
                    "window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f")
    (got,) = hlo.evaluate(m, xb, wb)
    assert got.dtype == ml_dtypes.bfloat16
    want = naive_conv_nhwc(xb.astype(np.float32), wb.astype(np.float32), pad=((1, 1), (1, 1)))
    np.testing.assert_array_equal(got, want.astype(np.float32).astype(ml_dtypes.bfloat16))


def test_conv_empty_batch_and_oversized_window():
    m = conv_module("f32[0,4,4,2]", "f32[3,3,2,5]", "f32[0,2,2,5]",
                    "window={size=3x3}, dim_labels=b01f_01io->b01f")
    (got,) = hlo.evaluate(m, np.zeros((0, 4, 4, 2), np.float32), f32(3, 3, 2, 5))
    assert got.shape == (0, 2, 2, 5)
    m = conv_module("f32[1,2,2,2]", "f32[3,3,2,5]", "f32[1,0,0,5]",
                    "window={size=3x3}, dim_labels=b01f_01io->b01f")
    (got,) = hlo.evaluate(m, f32(1, 2, 2, 2), f32(3, 3, 2, 5))
    assert got.shape == (1, 0, 0, 5)


# --- dot ------------------------------------------------------------------------------


def check_dot(fn, *args, which=0):
    got, want = evaluate_single(fn, list(args), Opcode.DOT, which)
    assert_close(got, want[:1], 1e-5, 1e-5)


@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_matmul_transposes(ta, tb):
    a = f32(6, 4) if ta else f32(4, 6)
    b = f32(5, 6) if tb else f32(6, 5)
    check_dot(lambda a, b: tf.matmul(a, b, transpose_a=ta, transpose_b=tb), a, b)


@pytest.mark.parametrize("eq,shapes", [
    ("bij,bkj->bik", [(2, 3, 4), (2, 5, 4)]),
    ("abc,cd->abd", [(2, 3, 4), (4, 5)]),
    ("i,j->ij", [(3,), (4,)]),
    ("bij,bj->bi", [(3, 2, 5), (3, 5)]),
])
def test_einsum(eq, shapes):
    check_dot(lambda a, b: tf.einsum(eq, a, b), *[f32(*s) for s in shapes])


def test_dot_general_batch_and_contracting_dims_anywhere():
    a, b = f32(3, 2, 4, 5), f32(5, 2, 4, 6)
    dn = xla_data_pb2.DotDimensionNumbers()
    dn.lhs_batch_dimensions.extend([1])
    dn.rhs_batch_dimensions.extend([1])
    dn.lhs_contracting_dimensions.extend([3, 2])
    dn.rhs_contracting_dimensions.extend([0, 2])
    check_dot(lambda a, b: xla.dot_general(a, b, dn), a, b)


def dot_module(lhs, rhs, out, attrs):
    return hlo.parse_module(f"""
HloModule m
ENTRY %main (a: {lhs}, b: {rhs}) -> {out} {{
  %a = {lhs} parameter(0)
  %b = {rhs} parameter(1)
  ROOT %d = {out} dot({lhs} %a, {rhs} %b), {attrs}
}}
""")


def test_dot_output_order_batch_lhs_free_rhs_free():
    a, b = f32(4, 2, 3), f32(5, 3, 2)
    m = dot_module("f32[4,2,3]", "f32[5,3,2]", "f32[2,4,5]",
                   "lhs_batch_dims={1}, lhs_contracting_dims={2}, rhs_batch_dims={2}, rhs_contracting_dims={1}")
    (got,) = hlo.evaluate(m, a, b)
    np.testing.assert_allclose(got, np.einsum("ibk,jkb->bij", a, b), rtol=1e-5, atol=1e-6)


def test_dot_int8_to_s32_and_empty_contraction():
    a = RNG.integers(-128, 127, (3, 64)).astype(np.int8)
    b = RNG.integers(-128, 127, (64, 2)).astype(np.int8)
    m = dot_module("s8[3,64]", "s8[64,2]", "s32[3,2]", "lhs_contracting_dims={1}, rhs_contracting_dims={0}")
    (got,) = hlo.evaluate(m, a, b)
    np.testing.assert_array_equal(got, a.astype(np.int64) @ b.astype(np.int64))
    m = dot_module("f32[3,0]", "f32[0,2]", "f32[3,2]", "lhs_contracting_dims={1}, rhs_contracting_dims={0}")
    (got,) = hlo.evaluate(m, np.zeros((3, 0), np.float32), np.zeros((0, 2), np.float32))
    np.testing.assert_array_equal(got, np.zeros((3, 2), np.float32))


def test_dot_f16_rounds_once():
    a, b = f32(4, 300).astype(np.float16), f32(300, 3).astype(np.float16)
    m = dot_module("f16[4,300]", "f16[300,3]", "f16[4,3]", "lhs_contracting_dims={1}, rhs_contracting_dims={0}")
    (got,) = hlo.evaluate(m, a, b)
    want = (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float16)
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=2e-3, atol=2e-3)
