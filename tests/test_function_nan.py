"""NaN and +-inf through a matmul or convolution fused with relu, relu6, clip or maximum.

``tfxla_plugin.function(jit_compile=True)`` compiles each function to one output fusion run by oneDNN
(the dot or convolution, bias as a post-op); the clamp keeps NaN as TF eager (and TF's XLA) do, where
oneDNN's relu/clip post-ops would return the bound. Inputs hold a NaN, a +inf and a -inf in different
rows or pixels, so results hold NaN, +-inf and clamped values; they must equal TF eager's, NaN positions
included (rtol 1e-5, atol 1e-5 on the finite ones).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
import tensorflow as tf

import tfxla_plugin
from backends.cpu import dnnl

pytestmark = pytest.mark.skipif(dnnl.find_install() is None, reason="oneDNN is not installed")

RNG = np.random.default_rng(7)


def _special(shape, spots) -> tf.Tensor:
    x = RNG.standard_normal(shape).astype(np.float32)
    for index, value in zip(spots, (np.nan, np.inf, -np.inf)):
        x[index] = value
    return tf.constant(x)


W = tf.constant(RNG.standard_normal((12, 20)).astype(np.float32))
B = tf.constant(RNG.standard_normal(20).astype(np.float32))
K = tf.constant(RNG.standard_normal((3, 3, 4, 8)).astype(np.float32))
KB = tf.constant(RNG.standard_normal(8).astype(np.float32))

MATMUL = {  # (x, weights, bias) -> result
    "relu": lambda x, w, b: tf.nn.relu(tf.matmul(x, w) + b),
    "relu6": lambda x, w, b: tf.nn.relu6(tf.matmul(x, w) + b),
    "maximum0": lambda x, w, b: tf.maximum(tf.matmul(x, w) + b, 0.0),
    "minimum": lambda x, w, b: tf.minimum(tf.matmul(x, w) + b, 0.5),
    "clip": lambda x, w, b: tf.clip_by_value(tf.matmul(x, w), -1.0, 1.0),
}
CONV = {
    "relu": lambda x, k, b: tf.nn.relu(tf.nn.conv2d(x, k, 1, "SAME") + b),
    "relu6": lambda x, k, b: tf.nn.relu6(tf.nn.conv2d(x, k, 1, "SAME") + b),
    "clip": lambda x, k, b: tf.clip_by_value(tf.nn.conv2d(x, k, 1, "VALID") + b, -0.5, 2.0),
}


def _check(fn, *args) -> None:
    want = fn(*args).numpy()
    got = tfxla_plugin.function(jit_compile=True)(fn)(*args).numpy()
    assert np.isnan(want).any()  # the NaN reaches the clamp (so do the +-inf rows or pixels)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)


@pytest.mark.parametrize("name", list(MATMUL))
def test_matmul_epilogue_keeps_nan_like_tf(name: str) -> None:
    _check(MATMUL[name], _special((6, 12), [(0, 3), (2, 5), (4, 1)]), W, B)


@pytest.mark.parametrize("name", list(CONV))
def test_conv_epilogue_keeps_nan_like_tf(name: str) -> None:
    _check(CONV[name], _special((1, 9, 9, 4), [(0, 1, 1, 0), (0, 4, 7, 2), (0, 7, 3, 1)]), K, KB)


# Finite activations with NaN arising before the clamp: oneDNN's fast primitive (the clamp as a post-op)
# is chosen per call only when a bound on the inputs proves every intermediate finite; these must not take it.
def _with_nan(t: tf.Tensor, index) -> tf.Tensor:
    a = t.numpy().copy()
    a[index] = np.nan
    return tf.constant(a)


def _finite(shape) -> tf.Tensor:
    return tf.constant(RNG.standard_normal(shape).astype(np.float32))


def test_nan_weight_and_bias_are_kept_like_tf() -> None:
    _check(MATMUL["relu"], _finite((6, 12)), _with_nan(W, (4, 7)), B)
    _check(MATMUL["relu6"], _finite((6, 12)), W, _with_nan(B, 3))
    _check(CONV["relu6"], _finite((1, 9, 9, 4)), _with_nan(K, (1, 1, 2, 5)), KB)
    _check(CONV["clip"], _finite((1, 9, 9, 4)), K, _with_nan(KB, 6))


def test_overflow_to_inf_then_nan_is_kept_like_tf() -> None:
    """3e38 * 10 overflows to +inf (all products of one sign: any summation order), times 0 is NaN."""
    x = RNG.standard_normal((6, 12)).astype(np.float32)
    x[2, :2] = 3e38
    w = W.numpy().copy()
    w[:2] = 10.0
    _check(lambda x, w, s: tf.nn.relu(tf.matmul(x, w) * s), tf.constant(x), tf.constant(w), tf.constant(0.0))


def test_ordinary_inputs_match_tf() -> None:
    """Finite, bounded inputs (the fast primitive's case): the same numbers as TF eager."""
    for fn, args in ((MATMUL["relu6"], (_finite((6, 12)), W, B)), (CONV["clip"], (_finite((1, 9, 9, 4)), K, KB))):
        want = fn(*args).numpy()
        got = tfxla_plugin.function(jit_compile=True)(fn)(*args).numpy()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _block(x, w, b, k, c):
    """MobileNetV2's expansion (1x1, relu6) feeding its depthwise 3x3 (relu6): two guarded output fusions."""
    y = tf.nn.relu6(tf.nn.conv2d(x, w, 1, "SAME") + b)
    return tf.nn.relu6(tf.nn.depthwise_conv2d(y, k, [1, 1, 1, 1], "SAME") + c)


BLOCK = (tf.constant(RNG.standard_normal((1, 1, 4, 16)).astype(np.float32)), _finite(16),
         tf.constant(RNG.standard_normal((3, 3, 16, 1)).astype(np.float32)), _finite(16))


def test_block_reuses_the_expansion_bound() -> None:
    """The depthwise layer's check takes max|input| from the expansion's guard (finite only when that ran
    its fast primitive, whose result it bounds) instead of reading the input again."""
    from backends.cpu import CompileOptions, compile as compile_module
    from backends.cpu.pipeline import optimize
    from hlo.lowering.tf_function import lower_concrete_function

    specs = [tf.TensorSpec((1, 9, 9, 4))] + [tf.TensorSpec(t.shape) for t in BLOCK]
    module = optimize(lower_concrete_function(tf.function(_block, autograph=False).get_concrete_function(*specs)))
    src = compile_module(module, CompileOptions()).source
    guards = re.findall(r"double b_ = (.*?) \* ", src)
    assert len(guards) == 2 and "tfxla_absmax_f32" in guards[0]
    assert re.fullmatch(r"\((bound\d+) < INFINITY \? \1 : tfxla_absmax_f32\(.*\)\)", guards[1])


def test_block_keeps_nan_like_tf() -> None:
    # NaN/inf in the input: the expansion runs NaN-keeping, so its bound is +inf and the depthwise checks
    # its own input; a NaN bias in the depthwise after a fast expansion
    _check(_block, _special((1, 9, 9, 4), [(0, 1, 1, 0), (0, 4, 7, 2), (0, 7, 3, 1)]), *BLOCK)
    _check(_block, _finite((1, 9, 9, 4)), *BLOCK[:3], _with_nan(BLOCK[3], 5))
