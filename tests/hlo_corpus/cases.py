"""Small TensorFlow functions whose XLA-compiled HLO forms the test corpus.

Every :class:`Case` has

* ``name``       -- unique snake_case identifier (used for file names / test ids),
* ``fn``         -- a function taking TF tensors and returning a tensor or a
  tuple of tensors (traced with ``tf.function(jit_compile=True)``),
* ``make_args``  -- ``make_args(rng) -> tuple[np.ndarray, ...]``; deterministic
  given the generator, small (a few hundred elements at most) so that XLA
  never elides a constant as ``{...}``.  Large arrays are always passed as
  arguments; only scalars / tiny vectors (<= 16 elements) are baked into ``fn``,
* ``rtol``/``atol`` -- tolerance for *floating point* outputs when comparing an
  implementation's result with TF eager.  ``None`` means "default for the
  output dtype" (see :data:`DEFAULT_TOLERANCES`).  Integer and bool outputs are
  always compared exactly, whatever the case says.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Optional

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

__all__ = ["Case", "CASES", "CASES_BY_NAME", "DEFAULT_TOLERANCES", "EXACT"]

#: Default (rtol, atol) per floating output dtype name.  Cases computing
#: transcendental functions or reductions override these with looser values.
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float16": (1e-3, 1e-3),
    "bfloat16": (1e-2, 1e-2),
    "float32": (1e-5, 1e-6),
    "float64": (1e-12, 1e-12),
}

#: Tolerance used for every integer / bool output.
EXACT: tuple[float, float] = (0.0, 0.0)

# Named tolerance presets for float32 cases (rtol, atol).
_TRANSCENDENTAL = dict(rtol=2e-5, atol=1e-5)
_REDUCTION = dict(rtol=1e-4, atol=1e-5)
_LINALG = dict(rtol=1e-4, atol=1e-4)


@dataclass(frozen=True)
class Case:
    """One corpus entry.  See the module docstring."""

    name: str
    fn: Callable[..., Any]
    make_args: Callable[[np.random.Generator], tuple]
    #: Relative tolerance for floating outputs (None: dtype default).
    rtol: Optional[float] = None
    #: Absolute tolerance for floating outputs (None: dtype default).
    atol: Optional[float] = None

    def tolerance(self, dtype) -> tuple[float, float]:
        """(rtol, atol) to use for an output of ``dtype``.

        Integer/bool dtypes are exact.  For floating dtypes the case's own
        ``rtol``/``atol`` win when given, but never drop below the dtype
        default (so a float16 output of an "f32-tolerance" case still gets
        float16 tolerance).
        """
        name = np.dtype(dtype).name
        if name not in DEFAULT_TOLERANCES:
            return EXACT
        d_rtol, d_atol = DEFAULT_TOLERANCES[name]
        rtol = d_rtol if self.rtol is None else max(self.rtol, d_rtol)
        atol = d_atol if self.atol is None else max(self.atol, d_atol)
        return rtol, atol


# --------------------------------------------------------------------------
# Input helpers (all deterministic given rng).
# --------------------------------------------------------------------------


def _f32(rng, shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def _f64(rng, shape, lo=-2.0, hi=2.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float64)


def _i32(rng, shape, lo, hi):
    """Integers in [lo, hi)."""
    return rng.integers(lo, hi, size=shape).astype(np.int32)


def _nonzero_i32(rng, shape, lo, hi):
    a = _i32(rng, shape, lo, hi)
    return np.where(a == 0, 1, a).astype(np.int32)


def _away_from_zero(rng, shape, lo=0.5, hi=2.0):
    mag = rng.uniform(lo, hi, size=shape)
    sgn = np.where(rng.random(shape) < 0.5, -1.0, 1.0)
    return (mag * sgn).astype(np.float32)


def _small_ints_f32(rng, shape, lo=-3, hi=4):
    """float32 values drawn from a small integer set, so ties/equalities occur."""
    return rng.integers(lo, hi, size=shape).astype(np.float32)


def _scalar(value, dtype):
    return np.array(value, dtype=dtype)


def _perm(rng, n, shape_prefix=()):
    """Distinct float32 values (no ties) of shape shape_prefix + (n,)."""
    size = int(np.prod(shape_prefix, dtype=np.int64)) * n
    vals = rng.permutation(size).astype(np.float32) * 0.25 - size * 0.125
    return vals.reshape(tuple(shape_prefix) + (n,))


# --------------------------------------------------------------------------
# Case functions.
# --------------------------------------------------------------------------

# ---- elementwise arithmetic -------------------------------------------------


def _add_sub_broadcast(x, y, z):
    # x: [3,4], y: [4], z: [3,1]
    return x + y, x - z, y - z, x + 1.5


def _mul_div_broadcast(x, y):
    # x: [2,3,4], y: [3,1] (away from zero)
    return x * y, x / y, 2.0 / y, x * 0.5


def _pow_float(x, y):
    # x > 0
    return tf.pow(x, y), tf.pow(x, 2.0), tf.square(y), tf.math.reciprocal(x)


def _pow_int32(x, y):
    return tf.pow(x, y)


def _maximum_minimum(x, y):
    return tf.maximum(x, y), tf.minimum(x, y), tf.maximum(x, 0.0), tf.minimum(y[0], x)


def _abs_neg_sign(x, i):
    return tf.abs(x), tf.negative(x), tf.sign(x), tf.abs(i), -i, tf.sign(i)


def _exp_log(x, p):
    return tf.exp(x), tf.math.log(p), tf.exp(-x * x)


def _log1p_expm1(x):
    return tf.math.log1p(x), tf.math.expm1(x)


def _sqrt_rsqrt(p):
    return tf.sqrt(p), tf.math.rsqrt(p), tf.sqrt(p) * tf.math.rsqrt(p + 1.0)


def _tanh_sigmoid(x):
    return tf.tanh(x), tf.sigmoid(x), tf.math.log_sigmoid(x)


def _erf(x):
    return tf.math.erf(x), tf.math.erfc(x)


def _sin_cos_tan(x):
    return tf.sin(x), tf.cos(x), tf.tan(x * 0.5)


def _atan2(y, x):
    return tf.atan2(y, x)


def _floor_ceil_round(x):
    return tf.floor(x), tf.math.ceil(x), tf.round(x), tf.math.rint(x)


def _float_floordiv_floormod(x, y):
    return tf.math.floordiv(x, y), tf.math.floormod(x, y)


def _int_floordiv_floormod(x, y):
    return tf.math.floordiv(x, y), tf.math.floormod(x, y)


def _int_truncatediv_truncatemod(x, y):
    return tf.truncatediv(x, y), tf.truncatemod(x, y)


def _squared_difference_reciprocal(x, y):
    return tf.math.squared_difference(x, y), tf.math.reciprocal(y), tf.math.xdivy(x, y)


# ---- comparisons / logic / bits --------------------------------------------


def _comparisons(x, y):
    return (
        tf.equal(x, y),
        tf.not_equal(x, y),
        tf.less(x, y),
        tf.less_equal(x, y),
        tf.greater(x, y),
        tf.greater_equal(x, y),
    )


def _logical_ops(a, b):
    return (
        tf.logical_and(a, b),
        tf.logical_or(a, b),
        tf.logical_not(a),
        tf.math.logical_xor(a, b),
    )


def _bitwise_int32(x, y):
    return (
        tf.bitwise.bitwise_and(x, y),
        tf.bitwise.bitwise_or(x, y),
        tf.bitwise.bitwise_xor(x, y),
        tf.bitwise.invert(x),
    )


def _shifts(x, s, u, us):
    return (
        tf.bitwise.left_shift(x, s),
        tf.bitwise.right_shift(x, s),  # arithmetic for int32
        tf.bitwise.right_shift(u, us),  # logical for uint8
        tf.bitwise.left_shift(u, us),
    )


def _popcount_bitcast(x, f):
    return tf.raw_ops.PopulationCount(x=x), tf.bitcast(f, tf.int32), tf.bitcast(x, tf.float32)


# ---- casts ------------------------------------------------------------------


def _cast_f32_to_s32(x):
    return tf.cast(x, tf.int32)


def _cast_s32_to_f32(i):
    return tf.cast(i, tf.float32) * 0.5


def _cast_f32_to_f16(x):
    h = tf.cast(x, tf.float16)
    return h, h * h, tf.cast(h, tf.float32)


def _cast_f32_to_bf16(x):
    b = tf.cast(x, tf.bfloat16)
    return b, tf.cast(b + b, tf.float32)


def _cast_bool_to_f32(b, x):
    return tf.cast(b, tf.float32), tf.cast(x > 0.0, tf.float32) * x, tf.cast(b, tf.int32)


def _cast_f64_to_f32(d):
    return tf.cast(d, tf.float32), tf.cast(tf.cast(d, tf.float32), tf.float64) - d


def _cast_int64(i, l, x):
    # i: int32, l: int64, x: float32
    return (
        tf.cast(i, tf.int64) * l,
        tf.cast(l, tf.int32),
        tf.cast(x, tf.int64),
        tf.cast(l, tf.float32),
    )


def _clip_by_value(x, lo, hi):
    return tf.clip_by_value(x, -0.5, 0.75), tf.clip_by_value(x, lo, hi)


def _where_select(c, x, y):
    # c: bool [3,4], x: [3,4], y: [4]
    return tf.where(c, x, y), tf.where(x > 0.0, x, 0.0), tf.where(c, 1, -1)


def _nan_inf(x):
    nan = tf.constant(np.nan, tf.float32)
    inf = tf.constant(np.inf, tf.float32)
    y = tf.where(x > 1.0, nan, x)
    z = tf.where(x < -1.0, -inf, tf.where(x > 1.5, inf, x))
    return (
        y,
        z,
        tf.math.is_nan(y),
        tf.math.is_finite(z),
        tf.math.is_inf(z),
        tf.where(tf.math.is_nan(y), tf.zeros_like(y), y),
    )


# ---- reductions -------------------------------------------------------------


def _reduce_sum_axes(x):
    # x: [3,4,5]
    return (
        tf.reduce_sum(x, axis=0),
        tf.reduce_sum(x, axis=[0, 2]),
        tf.reduce_sum(x, axis=1, keepdims=True),
        tf.reduce_sum(x),
    )


def _reduce_sum_int32(i):
    return tf.reduce_sum(i, axis=1), tf.reduce_sum(i), tf.reduce_max(i, axis=0)


def _reduce_max_min(x):
    return (
        tf.reduce_max(x, axis=-1),
        tf.reduce_min(x, axis=[0, 1]),
        tf.reduce_max(x, axis=1, keepdims=True),
        tf.reduce_min(x),
    )


def _reduce_prod(x):
    return tf.reduce_prod(x, axis=1), tf.reduce_prod(x, axis=[0, 2], keepdims=True)


def _reduce_mean(x):
    return tf.reduce_mean(x, axis=0), tf.reduce_mean(x, axis=[1, 2]), tf.reduce_mean(x)


def _argmax_argmin(x):
    return (
        tf.argmax(x, axis=0),
        tf.argmax(x, axis=2, output_type=tf.int32),
        tf.argmin(x, axis=1),
        tf.argmin(x, axis=-1, output_type=tf.int32),
    )


def _reduce_all_any(b):
    return (
        tf.reduce_all(b, axis=1),
        tf.reduce_any(b, axis=0),
        tf.reduce_all(b),
        tf.reduce_any(b, axis=[0, 1], keepdims=True),
    )


def _reduce_logsumexp_variance(x):
    return tf.reduce_logsumexp(x, axis=-1), tf.math.reduce_variance(x, axis=0)


def _softmax(x):
    return tf.nn.softmax(x, axis=-1), tf.nn.softmax(x, axis=0)


def _log_softmax(x):
    return tf.nn.log_softmax(x, axis=-1)


def _layer_norm(x, gamma, beta):
    mean, var = tf.nn.moments(x, axes=[-1], keepdims=True)
    return (x - mean) * tf.math.rsqrt(var + 1e-5) * gamma + beta


def _l2_normalize(x):
    return tf.math.l2_normalize(x, axis=-1)


# ---- linear algebra ---------------------------------------------------------


def _matmul(a, b):
    return tf.matmul(a, b)


def _matmul_transpose(a, b, c):
    # a: [4,3], b: [5,3], c: [4,5]
    return (
        tf.matmul(a, c, transpose_a=True),
        tf.matmul(a, b, transpose_b=True),
        tf.matmul(b, c, transpose_a=True, transpose_b=True),
    )


def _batch_matmul(a, b):
    # a: [2,3,4], b: [2,4,5]
    return tf.matmul(a, b), tf.matmul(a, a, transpose_b=True)


def _einsum(q, k, v):
    # q, k: [2,3,4] (b, i, d), v: [4]
    s = tf.einsum("bid,bjd->bij", q, k)
    return s, tf.einsum("bid,d->bi", q, v), tf.einsum("i,j->ij", v, v)


def _conv2d_same_stride2(x, w):
    return tf.nn.conv2d(x, w, strides=2, padding="SAME")


def _conv2d_valid_dilation2(x, w):
    return tf.nn.conv2d(x, w, strides=1, padding="VALID", dilations=2)


def _depthwise_conv2d(x, w):
    return tf.nn.depthwise_conv2d(x, w, strides=[1, 1, 1, 1], padding="SAME")


def _conv2d_transpose(x, w):
    # x: [1,3,3,4], w: [3,3,2,4] (h, w, out, in)
    return tf.nn.conv2d_transpose(x, w, output_shape=[1, 6, 6, 2], strides=2, padding="SAME")


def _conv2d_grad(x, w):
    with tf.GradientTape() as tape:
        tape.watch(x)
        tape.watch(w)
        y = tf.nn.conv2d(x, w, strides=1, padding="SAME")
        loss = tf.reduce_sum(y * y)
    gx, gw = tape.gradient(loss, [x, w])
    return gx, gw


def _max_pool(x):
    return (
        tf.nn.max_pool2d(x, ksize=2, strides=2, padding="VALID"),
        tf.nn.max_pool2d(x, ksize=3, strides=2, padding="SAME"),
    )


def _avg_pool(x):
    return (
        tf.nn.avg_pool2d(x, ksize=2, strides=2, padding="VALID"),
        tf.nn.avg_pool2d(x, ksize=3, strides=2, padding="SAME"),
    )


def _max_pool_grad(x):
    with tf.GradientTape() as tape:
        tape.watch(x)
        y = tf.nn.max_pool2d(x, ksize=2, strides=2, padding="VALID")
        loss = tf.reduce_sum(y * y)
    return tape.gradient(loss, x)


# ---- indexing ---------------------------------------------------------------


def _gather_axis(params, idx):
    # params: [5,6], idx: [4] in [0,6)
    return tf.gather(params, idx, axis=1), tf.gather(params, idx[:3], axis=0)


def _gather_batch_dims(params, idx):
    # params: [3,5,2], idx: [3,4] in [0,5)
    return tf.gather(params, idx, axis=1, batch_dims=1)


def _gather_nd(params, idx):
    # params: [4,5,3], idx: [6,2]
    return tf.gather_nd(params, idx), tf.gather_nd(params, idx[:, :1])


def _scatter_nd(idx, upd):
    # idx: [6,1] with duplicates in [0,5), upd: [6,3]
    return tf.scatter_nd(idx, upd, shape=[5, 3])


def _tensor_scatter_nd_update(t, idx, upd):
    # t: [4,5], idx: [3,2] unique, upd: [3]
    return tf.tensor_scatter_nd_update(t, idx, upd), tf.tensor_scatter_nd_add(t, idx, upd)


def _unsorted_segment_sum(data, seg):
    return tf.math.unsorted_segment_sum(data, seg, num_segments=4), tf.math.unsorted_segment_max(
        data, seg, num_segments=4
    )


def _dynamic_index(x, b, v):
    # x: [5,6], b: int32[2], v: f32[1].  Data-dependent scalar indices: gather
    # in "hlo", dynamic-slice / dynamic-update-slice after optimisation.
    # (tf.slice with an argument `begin` is NOT used: XLA treats `begin` as a
    # compile-time constant and bakes the argument into the module.)
    return (
        tf.gather(x, b[0], axis=0),
        tf.gather(x, b[1], axis=1),
        tf.tensor_scatter_nd_update(x, b[None, :], v),
    )


def _tensor_array_loop(x):
    # x: [4,3]; writes the running sum of rows into a TensorArray
    n = x.shape[0]
    ta = tf.TensorArray(tf.float32, size=n)

    def body(i, acc, ta):
        acc = acc + x[i]
        return i + 1, acc, ta.write(i, acc * tf.cast(i + 1, tf.float32))

    _, acc, ta = tf.while_loop(
        lambda i, acc, ta: i < n, body, (tf.constant(0), tf.zeros([x.shape[1]]), ta)
    )
    return ta.stack(), acc


# ---- shape manipulation -----------------------------------------------------


def _concat(a, b, c):
    return tf.concat([a, b], axis=0), tf.concat([a, c, a], axis=1)


def _stack_unstack(a, b):
    s = tf.stack([a, b], axis=1)
    u0, u1, u2 = tf.unstack(a, axis=0)
    return s, u0, u1 + u2


def _slice(x):
    return tf.slice(x, [1, 0, 2], [2, 3, 2]), x[1:3, :, 1]


def _strided_slice_masks(x):
    # x: [4,5,6]
    return (
        x[1:, ..., ::2],
        x[:, tf.newaxis, 2, 1:5:3],
        x[..., -1],
        tf.strided_slice(
            x, [1, 0, 0], [3, 0, 5], [1, 2, 2], begin_mask=0b010, end_mask=0b010, shrink_axis_mask=0
        ),
    )


def _strided_slice_negative_stride(x):
    return x[::-1, 3:0:-1], x[-1:0:-2, ::-3]


def _reverse(x):
    return tf.reverse(x, axis=[0, 2]), tf.reverse(x, axis=[1])


def _pad_constant(x):
    return tf.pad(x, [[1, 2], [0, 3]]), tf.pad(x, [[2, 0], [1, 1]], constant_values=-1.5)


def _pad_reflect_symmetric(x):
    return tf.pad(x, [[1, 2], [2, 1]], mode="REFLECT"), tf.pad(x, [[2, 1], [3, 0]], mode="SYMMETRIC")


def _transpose(x):
    return tf.transpose(x, [2, 0, 1]), tf.transpose(x[0])


def _reshape(x):
    return tf.reshape(x, [6, 4]), tf.reshape(x, [-1]), tf.reshape(x, [2, 1, 12])


def _expand_squeeze(x):
    return tf.expand_dims(x, 1), tf.squeeze(tf.expand_dims(x, 0), axis=0) * 2.0


def _tile(x):
    return tf.tile(x, [2, 3])


def _broadcast_to(x, y):
    return tf.broadcast_to(x, [4, 3, 5]), tf.broadcast_to(y, [2, 3]) + 1


def _one_hot(i):
    return (
        tf.one_hot(i, depth=5),
        tf.one_hot(i, depth=4, on_value=2.0, off_value=-1.0, axis=0),
        tf.one_hot(i, depth=3, dtype=tf.int32),
    )


def _cumsum_variants(x):
    return (
        tf.math.cumsum(x, axis=1),
        tf.math.cumsum(x, axis=1, exclusive=True),
        tf.math.cumsum(x, axis=0, reverse=True),
        tf.math.cumsum(x, axis=1, exclusive=True, reverse=True),
    )


def _cumsum_int32(i):
    return tf.math.cumsum(i, axis=0), tf.math.cumsum(i, axis=1, reverse=True)


def _cumprod(x):
    return tf.math.cumprod(x, axis=1), tf.math.cumprod(x, axis=0, exclusive=True)


def _range_from_shape(x):
    n = tf.shape(x)[0]
    m = tf.shape(x)[1]
    r = tf.cast(tf.range(n), tf.float32)
    return r[:, None] * x, tf.range(1, m, 2), tf.range(m * 2, 0, -3), tf.size(x) + tf.rank(x)


# ---- control flow -----------------------------------------------------------


def _while_loop_counter_acc(x, n):
    def cond(i, acc):
        return i < n

    def body(i, acc):
        return i + 1, acc * 0.5 + x * tf.cast(i, tf.float32)

    i, acc = tf.while_loop(cond, body, (tf.constant(0), tf.zeros_like(x)))
    return i, acc


def _cond(x):
    return tf.cond(
        tf.reduce_sum(x) > 0.0,
        lambda: x * 2.0 + 1.0,
        lambda: tf.exp(x) - 1.0,
    )


def _switch_case(idx, x):
    return tf.switch_case(
        idx,
        [lambda: x + 1.0, lambda: x * x, lambda: tf.reduce_sum(x) * tf.ones_like(x)],
    )


# ---- sort / top-k -----------------------------------------------------------


def _sort(x, i):
    return (
        tf.sort(x, axis=-1),
        tf.sort(x, axis=0, direction="DESCENDING"),
        tf.sort(i, axis=-1, direction="DESCENDING"),
    )


def _top_k(x):
    v, i = tf.math.top_k(x, k=3)
    return v, i


def _argsort(x):
    return tf.argsort(x, axis=-1), tf.argsort(x, axis=0, direction="DESCENDING")


# ---- small models -----------------------------------------------------------


def _mlp_2layer(x, w1, b1, w2, b2):
    h = tf.nn.relu(tf.matmul(x, w1) + b1)
    return tf.matmul(h, w2) + b2


def _mlp_grad(x, w1, w2, y):
    with tf.GradientTape() as tape:
        tape.watch(w1)
        tape.watch(w2)
        h = tf.tanh(tf.matmul(x, w1))
        pred = tf.matmul(h, w2)
        loss = tf.reduce_mean(tf.square(pred - y))
    g1, g2 = tape.gradient(loss, [w1, w2])
    return loss, g1, g2


def _relu_gelu_chain(x):
    a = tf.nn.relu(x)
    b = tf.nn.gelu(x - 0.5, approximate=False)
    c = tf.nn.gelu(a + b, approximate=True)
    return c, tf.nn.relu6(x * 4.0), tf.nn.leaky_relu(x, alpha=0.1)


def _activations(x):
    return tf.nn.elu(x), tf.nn.selu(x), tf.nn.softplus(x), tf.nn.silu(x)


def _int8_uint8_arith(a, b, u, v):
    # wrap-around arithmetic on 8-bit integers
    return a + b, a * b, a - b, tf.maximum(a, b), u + v, u * v, u - v, tf.math.floordiv(u, v + 1)


def _float64_math(x, y):
    return tf.exp(x), tf.sin(x) * tf.cos(y), tf.sqrt(tf.abs(x)), tf.matmul(x, y), tf.tanh(x) + 1.0


def _resize_bilinear(x):
    return tf.image.resize(x, [6, 6], method="bilinear")


# --------------------------------------------------------------------------
# The case list.
# --------------------------------------------------------------------------


def _round_inputs(rng):
    halves = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -0.0, 0.0], np.float32)
    rest = _f32(rng, (16,), -4.0, 4.0)
    return (np.concatenate([halves, rest]).reshape(4, 6),)


def _sign_inputs(rng):
    x = _f32(rng, (3, 5))
    x[0, :2] = 0.0
    i = _i32(rng, (3, 5), -5, 6)
    i[1, :2] = 0
    return x, i


def _int_div_inputs(rng):
    x = _i32(rng, (4, 6), -20, 21)
    x[0, :4] = [-7, 7, -7, 7]
    y = _nonzero_i32(rng, (4, 6), -6, 7)
    y[0, :4] = [2, -2, -2, 2]
    return x, y


def _float_div_inputs(rng):
    x = _f32(rng, (4, 6), -10.0, 10.0)
    x[0, :4] = [-7.0, 7.0, -7.0, 7.0]
    y = _away_from_zero(rng, (4, 6), 0.5, 4.0)
    y[0, :4] = [2.0, -2.0, -2.0, 2.0]
    return x, y


def _shift_inputs(rng):
    x = _i32(rng, (3, 6), -1000, 1000)
    s = _i32(rng, (3, 6), 0, 20)
    u = rng.integers(0, 256, size=(3, 6)).astype(np.uint8)
    us = rng.integers(0, 8, size=(3, 6)).astype(np.uint8)
    return x, s, u, us


def _cast_f32_s32_inputs(rng):
    x = _f32(rng, (4, 5), -100.0, 100.0)
    x[0, :5] = [-1.9, -0.5, 0.5, 1.9, -0.0]
    return (x,)


def _clip_inputs(rng):
    return _f32(rng, (4, 5)), _f32(rng, (5,), -1.5, -0.25), _f32(rng, (4, 1), 0.25, 1.5)


def _while_inputs(n):
    def make(rng):
        return _f32(rng, (2, 3)), _scalar(n, np.int32)

    return make


def _cond_inputs(positive):
    def make(rng):
        x = np.abs(_f32(rng, (2, 4), 0.1, 2.0))
        return (x if positive else -x,)

    return make


def _int8_inputs(rng):
    a = rng.integers(-128, 128, size=(4, 5)).astype(np.int8)
    b = rng.integers(-128, 128, size=(4, 5)).astype(np.int8)
    u = rng.integers(0, 256, size=(4, 5)).astype(np.uint8)
    v = rng.integers(0, 255, size=(4, 5)).astype(np.uint8)
    return a, b, u, v


def _nan_inf_inputs(rng):
    return (_f32(rng, (3, 6), -2.0, 2.0),)


def _unique_nd_indices(rng, shape, k):
    flat = rng.choice(int(np.prod(shape)), size=k, replace=False)
    return np.stack(np.unravel_index(flat, shape), axis=1).astype(np.int32)


CASES: list[Case] = [
    # elementwise arithmetic
    Case("add_sub_broadcast", _add_sub_broadcast,
         lambda r: (_f32(r, (3, 4)), _f32(r, (4,)), _f32(r, (3, 1)))),
    Case("mul_div_broadcast", _mul_div_broadcast,
         lambda r: (_f32(r, (2, 3, 4)), _away_from_zero(r, (3, 1)))),
    Case("pow_float", _pow_float,
         lambda r: (_f32(r, (3, 4), 0.5, 2.0), _f32(r, (3, 4), -2.0, 2.0)), **_TRANSCENDENTAL),
    Case("pow_int32", _pow_int32,
         lambda r: (_i32(r, (3, 4), -5, 6), _i32(r, (3, 4), 0, 5))),
    Case("maximum_minimum", _maximum_minimum,
         lambda r: (_small_ints_f32(r, (3, 4)), _small_ints_f32(r, (3, 4)))),
    Case("abs_neg_sign", _abs_neg_sign, _sign_inputs),
    Case("exp_log", _exp_log,
         lambda r: (_f32(r, (3, 5), -3.0, 3.0), _f32(r, (3, 5), 0.01, 10.0)), **_TRANSCENDENTAL),
    Case("log1p_expm1", _log1p_expm1,
         lambda r: (np.concatenate([_f32(r, (12,), -0.9, 2.0),
                                    np.array([1e-6, -1e-6, 1e-3, 0.0], np.float32)]),),
         **_TRANSCENDENTAL),
    Case("sqrt_rsqrt", _sqrt_rsqrt, lambda r: (_f32(r, (3, 5), 0.01, 9.0),), **_TRANSCENDENTAL),
    Case("tanh_sigmoid", _tanh_sigmoid, lambda r: (_f32(r, (3, 5), -6.0, 6.0),), **_TRANSCENDENTAL),
    Case("erf", _erf, lambda r: (_f32(r, (3, 6), -3.0, 3.0),), **_TRANSCENDENTAL),
    Case("sin_cos_tan", _sin_cos_tan, lambda r: (_f32(r, (3, 6), -3.0, 3.0),), **_TRANSCENDENTAL),
    Case("atan2", _atan2,
         lambda r: (_away_from_zero(r, (3, 5), 0.1, 3.0), _away_from_zero(r, (3, 5), 0.1, 3.0)),
         **_TRANSCENDENTAL),
    Case("floor_ceil_round", _floor_ceil_round, _round_inputs),
    Case("float_floordiv_floormod", _float_floordiv_floormod, _float_div_inputs,
         rtol=1e-5, atol=1e-5),
    Case("int_floordiv_floormod", _int_floordiv_floormod, _int_div_inputs),
    Case("int_truncatediv_truncatemod", _int_truncatediv_truncatemod, _int_div_inputs),
    Case("squared_difference_reciprocal", _squared_difference_reciprocal,
         lambda r: (_f32(r, (3, 4)), _away_from_zero(r, (3, 4)))),
    # comparisons, logic, bits
    Case("comparisons_float", _comparisons,
         lambda r: (_small_ints_f32(r, (4, 5), -2, 3), _small_ints_f32(r, (5,), -2, 3))),
    Case("comparisons_int", _comparisons,
         lambda r: (_i32(r, (4, 5), -2, 3), _i32(r, (4, 1), -2, 3))),
    Case("logical_ops", _logical_ops,
         lambda r: (r.random((3, 4)) < 0.5, r.random((3, 4)) < 0.5)),
    Case("bitwise_int32", _bitwise_int32,
         lambda r: (_i32(r, (3, 5), -2**31, 2**31 - 1), _i32(r, (3, 5), -1000, 1000))),
    Case("shifts", _shifts, _shift_inputs),
    Case("popcount_bitcast", _popcount_bitcast,
         lambda r: (_i32(r, (2, 5), -2**20, 2**20), _f32(r, (2, 5)))),
    # casts
    Case("cast_f32_to_s32", _cast_f32_to_s32, _cast_f32_s32_inputs),
    Case("cast_s32_to_f32", _cast_s32_to_f32, lambda r: (_i32(r, (3, 5), -1000, 1000),)),
    Case("cast_f32_to_f16", _cast_f32_to_f16, lambda r: (_f32(r, (3, 5), -100.0, 100.0),)),
    Case("cast_f32_to_bf16", _cast_f32_to_bf16, lambda r: (_f32(r, (3, 5), -100.0, 100.0),)),
    Case("cast_bool_to_f32", _cast_bool_to_f32,
         lambda r: (r.random((3, 4)) < 0.5, _f32(r, (3, 4)))),
    Case("cast_f64_to_f32", _cast_f64_to_f32, lambda r: (_f64(r, (3, 4), -1e3, 1e3),)),
    Case("cast_int64", _cast_int64,
         lambda r: (_i32(r, (3, 4), -1000, 1000),
                    r.integers(-100000, 100000, size=(3, 4)).astype(np.int64),
                    _f32(r, (3, 4), -50.0, 50.0))),
    Case("clip_by_value", _clip_by_value, _clip_inputs),
    Case("where_select", _where_select,
         lambda r: (r.random((3, 4)) < 0.5, _f32(r, (3, 4)), _f32(r, (4,)))),
    Case("nan_inf", _nan_inf, _nan_inf_inputs),
    # reductions and normalisations
    Case("reduce_sum_axes", _reduce_sum_axes, lambda r: (_f32(r, (3, 4, 5)),), **_REDUCTION),
    Case("reduce_sum_int32", _reduce_sum_int32, lambda r: (_i32(r, (4, 6), -50, 50),)),
    Case("reduce_max_min", _reduce_max_min, lambda r: (_f32(r, (3, 4, 5)),)),
    Case("reduce_prod", _reduce_prod, lambda r: (_f32(r, (3, 4, 5), 0.7, 1.3),), **_REDUCTION),
    Case("reduce_mean", _reduce_mean, lambda r: (_f32(r, (3, 4, 5)),), **_REDUCTION),
    Case("argmax_argmin", _argmax_argmin, lambda r: (_perm(r, 5, (3, 4)),)),
    Case("reduce_all_any", _reduce_all_any, lambda r: (r.random((3, 4)) < 0.7,)),
    Case("reduce_logsumexp_variance", _reduce_logsumexp_variance,
         lambda r: (_f32(r, (4, 6), -3.0, 3.0),), **_REDUCTION),
    Case("softmax", _softmax, lambda r: (_f32(r, (3, 7), -4.0, 4.0),), **_REDUCTION),
    Case("log_softmax", _log_softmax, lambda r: (_f32(r, (3, 7), -4.0, 4.0),), **_REDUCTION),
    Case("layer_norm", _layer_norm,
         lambda r: (_f32(r, (4, 8)), _f32(r, (8,), 0.5, 1.5), _f32(r, (8,), -0.5, 0.5)),
         **_REDUCTION),
    Case("l2_normalize", _l2_normalize, lambda r: (_f32(r, (3, 6)),), **_REDUCTION),
    # linear algebra / convolution / pooling
    Case("matmul", _matmul, lambda r: (_f32(r, (4, 6)), _f32(r, (6, 5))), **_LINALG),
    Case("matmul_transpose", _matmul_transpose,
         lambda r: (_f32(r, (4, 3)), _f32(r, (5, 3)), _f32(r, (4, 5))), **_LINALG),
    Case("batch_matmul", _batch_matmul,
         lambda r: (_f32(r, (2, 3, 4)), _f32(r, (2, 4, 5))), **_LINALG),
    Case("einsum", _einsum,
         lambda r: (_f32(r, (2, 3, 4)), _f32(r, (2, 3, 4)), _f32(r, (4,))), **_LINALG),
    Case("conv2d_same_stride2", _conv2d_same_stride2,
         lambda r: (_f32(r, (1, 7, 7, 3)), _f32(r, (3, 3, 3, 4), -0.5, 0.5)), **_LINALG),
    Case("conv2d_valid_dilation2", _conv2d_valid_dilation2,
         lambda r: (_f32(r, (2, 7, 6, 2)), _f32(r, (3, 2, 2, 3), -0.5, 0.5)), **_LINALG),
    Case("depthwise_conv2d", _depthwise_conv2d,
         lambda r: (_f32(r, (1, 5, 5, 3)), _f32(r, (3, 3, 3, 2), -0.5, 0.5)), **_LINALG),
    Case("conv2d_transpose", _conv2d_transpose,
         lambda r: (_f32(r, (1, 3, 3, 4)), _f32(r, (3, 3, 2, 4), -0.5, 0.5)), **_LINALG),
    Case("conv2d_grad", _conv2d_grad,
         lambda r: (_f32(r, (1, 4, 4, 2)), _f32(r, (3, 3, 2, 3), -0.5, 0.5)), **_LINALG),
    Case("max_pool", _max_pool, lambda r: (_f32(r, (1, 6, 5, 2)),)),
    Case("avg_pool", _avg_pool, lambda r: (_f32(r, (1, 6, 5, 2)),), **_REDUCTION),
    Case("max_pool_grad", _max_pool_grad, lambda r: (_perm(r, 2, (1, 4, 6)),)),
    # indexing
    Case("gather_axis", _gather_axis, lambda r: (_f32(r, (5, 6)), _i32(r, (4,), 0, 5))),
    Case("gather_batch_dims", _gather_batch_dims,
         lambda r: (_f32(r, (3, 5, 2)), _i32(r, (3, 4), 0, 5))),
    Case("gather_nd", _gather_nd,
         lambda r: (_f32(r, (4, 5, 3)),
                    np.stack([_i32(r, (6,), 0, 4), _i32(r, (6,), 0, 5)], axis=1))),
    Case("scatter_nd", _scatter_nd,
         lambda r: (_i32(r, (6, 1), 0, 5), _f32(r, (6, 3))), **_REDUCTION),
    Case("tensor_scatter_nd_update", _tensor_scatter_nd_update,
         lambda r: (_f32(r, (4, 5)), _unique_nd_indices(r, (4, 5), 3), _f32(r, (3,)))),
    Case("unsorted_segment_sum", _unsorted_segment_sum,
         lambda r: (_f32(r, (6, 3)), np.array([0, 2, 0, 3, 2, 0], np.int32)), **_REDUCTION),
    Case("dynamic_index", _dynamic_index,
         lambda r: (_f32(r, (5, 6)), np.array([3, 4], np.int32), _f32(r, (1,)))),
    Case("tensor_array_loop", _tensor_array_loop, lambda r: (_f32(r, (4, 3)),), **_REDUCTION),
    # shape manipulation
    Case("concat", _concat,
         lambda r: (_f32(r, (2, 3)), _f32(r, (1, 3)), _f32(r, (2, 2)))),
    Case("stack_unstack", _stack_unstack, lambda r: (_f32(r, (3, 4)), _f32(r, (3, 4)))),
    Case("slice", _slice, lambda r: (_f32(r, (4, 3, 5)),)),
    Case("strided_slice_masks", _strided_slice_masks, lambda r: (_f32(r, (4, 5, 6)),)),
    Case("strided_slice_negative_stride", _strided_slice_negative_stride,
         lambda r: (_f32(r, (5, 7)),)),
    Case("reverse", _reverse, lambda r: (_f32(r, (2, 3, 4)),)),
    Case("pad_constant", _pad_constant, lambda r: (_f32(r, (3, 4)),)),
    Case("pad_reflect_symmetric", _pad_reflect_symmetric, lambda r: (_f32(r, (3, 4)),)),
    Case("transpose", _transpose, lambda r: (_f32(r, (2, 3, 4)),)),
    Case("reshape", _reshape, lambda r: (_f32(r, (2, 3, 4)),)),
    Case("expand_squeeze", _expand_squeeze, lambda r: (_f32(r, (3, 4)),)),
    Case("tile", _tile, lambda r: (_f32(r, (2, 3)),)),
    Case("broadcast_to", _broadcast_to,
         lambda r: (_f32(r, (3, 1)), _i32(r, (3,), -5, 5))),
    Case("one_hot", _one_hot, lambda r: (np.array([0, 3, -1, 2, 7, 1], np.int32),)),
    Case("cumsum_variants", _cumsum_variants, lambda r: (_f32(r, (3, 5)),), **_REDUCTION),
    Case("cumsum_int32", _cumsum_int32, lambda r: (_i32(r, (3, 5), -10, 10),)),
    Case("cumprod", _cumprod, lambda r: (_f32(r, (3, 5), 0.5, 1.5),), **_REDUCTION),
    Case("range_from_shape", _range_from_shape, lambda r: (_f32(r, (4, 7)),)),
    # control flow
    Case("while_loop_counter_acc", _while_loop_counter_acc, _while_inputs(5), **_REDUCTION),
    Case("cond_true_branch", _cond, _cond_inputs(True), **_TRANSCENDENTAL),
    Case("cond_false_branch", _cond, _cond_inputs(False), **_TRANSCENDENTAL),
    Case("switch_case", _switch_case,
         lambda r: (_scalar(2, np.int32), _f32(r, (2, 3))), **_REDUCTION),
    # sort / top-k
    Case("sort", _sort, lambda r: (_f32(r, (3, 6)), _i32(r, (3, 6), -3, 3))),
    Case("top_k", _top_k, lambda r: (_perm(r, 8, (3,)),)),
    Case("argsort", _argsort, lambda r: (_perm(r, 6, (4,)),)),
    # small models / activations
    Case("mlp_2layer", _mlp_2layer,
         lambda r: (_f32(r, (4, 8)), _f32(r, (8, 16), -0.5, 0.5), _f32(r, (16,), -0.1, 0.1),
                    _f32(r, (16, 3), -0.5, 0.5), _f32(r, (3,), -0.1, 0.1)), **_LINALG),
    Case("mlp_grad", _mlp_grad,
         lambda r: (_f32(r, (4, 5)), _f32(r, (5, 6), -0.5, 0.5), _f32(r, (6, 2), -0.5, 0.5),
                    _f32(r, (4, 2))), **_LINALG),
    Case("relu_gelu_chain", _relu_gelu_chain, lambda r: (_f32(r, (3, 6), -3.0, 3.0),),
         **_TRANSCENDENTAL),
    Case("activations", _activations, lambda r: (_f32(r, (3, 6), -3.0, 3.0),), **_TRANSCENDENTAL),
    Case("int8_uint8_arith", _int8_uint8_arith, _int8_inputs),
    Case("float64_math", _float64_math,
         lambda r: (_f64(r, (3, 3)), _f64(r, (3, 3))), rtol=1e-10, atol=1e-12),
    Case("resize_bilinear", _resize_bilinear, lambda r: (_f32(r, (1, 3, 3, 2)),), **_LINALG),
]

CASES_BY_NAME: dict[str, Case] = {c.name: c for c in CASES}


def _check_unique() -> None:
    import re

    if len(CASES_BY_NAME) != len(CASES):
        seen: set[str] = set()
        dups = [c.name for c in CASES if c.name in seen or seen.add(c.name)]
        raise AssertionError(f"duplicate case names: {dups}")
    for c in CASES:
        if not re.fullmatch(r"[a-z][a-z0-9_]*", c.name):
            raise AssertionError(f"case name is not snake_case: {c.name!r}")


_check_unique()
