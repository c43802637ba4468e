"""Pooling (max, average, their gradients) and fused batch norm lowerings against TF eager."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

import hlo
from hlo.lowering import UnsupportedOpError
from tests.lowering_harness import check_lowering, lower_fn

R = tf.raw_ops
BF16 = hlo.PrimitiveType.BF16.numpy
TOL = {"rtol": 1e-4, "atol": 1e-4}
_rng = np.random.default_rng(7)


def _normal(*dims, dtype=np.float32, scale=1.0, shift=0.0):
    return (_rng.standard_normal(dims) * scale + shift).astype(dtype)


def _nchw(x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.transpose(0, 3, 1, 2))


X = _normal(2, 9, 7, 3)  # odd spatial sizes
X_SPECIAL = X.copy()
X_SPECIAL[0, 0, 0, 0] = np.nan
X_SPECIAL[0, 2:4, 2:4, 1] = np.nan  # an all-NaN 2x2 window
X_SPECIAL[1, 4:6, 0:2, 2] = -np.inf  # an all -inf window
X_SPECIAL[1, 0, 6, 0] = np.inf
X_TIES = np.round(X * 1.5).astype(np.float32)  # many equal values per window


def _pool_attrs(fmt: str, k, s, padding: str) -> dict:
    kh, kw = (k, k) if isinstance(k, int) else k
    sh, sw = (s, s) if isinstance(s, int) else s
    put = (lambda h, w: [1, h, w, 1]) if fmt == "NHWC" else (lambda h, w: [1, 1, h, w])
    return {"ksize": put(kh, kw), "strides": put(sh, sw), "padding": padding, "data_format": fmt}


POOL_GRID = [(2, 2, "SAME"), (2, 2, "VALID"), (3, 2, "SAME"), (3, 2, "VALID"), ((3, 1), (1, 2), "SAME"),
             (3, 1, "VALID"), (2, 3, "SAME"), (1, 1, "VALID")]


def _max_pool_grad(attrs, scale=2.0):
    def fn(x):
        y = R.MaxPool(input=x, **attrs)
        return R.MaxPoolGrad(orig_input=x, orig_output=y, grad=y * scale + 1, **attrs)
    return fn


def _avg_pool_grad(attrs):
    def fn(x):
        y = R.AvgPool(value=x, **attrs)
        return R.AvgPoolGrad(orig_input_shape=tf.shape(x), grad=y * 2 + 1, **attrs)
    return fn


# --- max and average pooling --------------------------------------------------------------------------------


@pytest.mark.parametrize("k,s,padding", POOL_GRID)
def test_pools_nhwc(k, s, padding) -> None:
    attrs = _pool_attrs("NHWC", k, s, padding)
    check_lowering(lambda x: R.MaxPool(input=x, **attrs), X_SPECIAL)
    check_lowering(lambda x: R.AvgPool(value=x, **attrs), X)
    check_lowering(_max_pool_grad(attrs), X_TIES)
    check_lowering(_avg_pool_grad(attrs), X)


@pytest.mark.parametrize("k,s,padding", [(2, 2, "SAME"), (3, 2, "VALID"), ((3, 1), (1, 2), "SAME")])
def test_pools_nchw(k, s, padding) -> None:
    attrs = _pool_attrs("NCHW", k, s, padding)
    x = _nchw(X)
    check_lowering(lambda a: R.MaxPool(input=a, **attrs), _nchw(X_SPECIAL))
    check_lowering(lambda a: R.AvgPool(value=a, **attrs), x)
    check_lowering(_avg_pool_grad(attrs), x)


def test_max_pool_special_values_follow_tf() -> None:
    """TF ignores NaN and starts from -FLT_MAX: all-NaN and all -inf windows give -FLT_MAX."""
    attrs = _pool_attrs("NHWC", 2, 2, "VALID")
    x = np.full((1, 2, 4, 1), np.nan, np.float32)
    x[0, :, 2:, 0] = -np.inf
    (got,) = hlo.evaluate(lower_fn(lambda a: R.MaxPool(input=a, **attrs), x), x)
    np.testing.assert_array_equal(got.ravel(), [np.finfo(np.float32).min] * 2)
    check_lowering(lambda a: R.MaxPool(input=a, **attrs), x)


@pytest.mark.parametrize("dtype", [np.float64, np.float16, BF16], ids=lambda d: np.dtype(d).name)
def test_pool_float_dtypes(dtype) -> None:
    attrs = _pool_attrs("NHWC", 3, 2, "SAME")
    check_lowering(lambda x: R.MaxPool(input=x, **attrs), X_SPECIAL.astype(dtype))
    check_lowering(lambda x: R.AvgPool(value=x, **attrs), X.astype(dtype))
    check_lowering(_max_pool_grad(attrs), X_TIES.astype(dtype))
    check_lowering(_avg_pool_grad(attrs), X.astype(dtype))


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16],
                         ids=lambda d: np.dtype(d).name)
def test_max_pool_int_dtypes(dtype) -> None:
    attrs = _pool_attrs("NHWC", 3, 2, "SAME")
    x = _rng.integers(0 if np.dtype(dtype).kind == "u" else -50, 50, X.shape).astype(dtype)
    check_lowering(lambda a: R.MaxPool(input=a, **attrs), x)
    check_lowering(_max_pool_grad(attrs, scale=1), x)


@pytest.mark.parametrize("dtype", [np.uint32, np.uint64], ids=lambda d: np.dtype(d).name)
def test_max_pool_grad_wide_unsigned(dtype) -> None:
    attrs = _pool_attrs("NHWC", 2, 1, "SAME")
    x = _rng.integers(0, 5, X.shape).astype(dtype)
    y = np.ones((2, 9, 7, 3), dtype)
    check_lowering(lambda a, g: R.MaxPoolGrad(orig_input=a, orig_output=a, grad=g, **attrs), x, y)


def test_max_pool_grad_nan_picks_like_tf() -> None:
    """TF's CPU kernel keeps a NaN picked first and never picks a later NaN (XLA's GE select would)."""
    attrs = _pool_attrs("NHWC", 2, 2, "VALID")
    windows = [[np.nan, 1, 2, 3], [1, np.nan, 2, 3], [3, np.nan, 2, 1], [np.nan] * 4]
    x = np.array(windows, np.float32).reshape(4, 2, 2, 1)
    g = np.array([1, 2, 3, 4], np.float32).reshape(4, 1, 1, 1)
    check_lowering(lambda a, b: R.MaxPoolGrad(orig_input=a, orig_output=b, grad=b, **attrs), x, g)


def test_max_pool_explicit_padding() -> None:
    attrs = {"ksize": [1, 2, 3, 1], "strides": [1, 2, 2, 1], "padding": "EXPLICIT",
             "explicit_paddings": [0, 0, 1, 0, 2, 1, 0, 0]}
    check_lowering(lambda x: R.MaxPool(input=x, **attrs), X_SPECIAL)
    check_lowering(_max_pool_grad(attrs), X_TIES)


def test_max_pool_over_depth() -> None:
    x = _normal(2, 5, 4, 6)
    check_lowering(lambda a: R.MaxPool(input=a, ksize=[1, 1, 1, 3], strides=[1, 1, 1, 3], padding="VALID"), x)


def test_max_pool_v2_and_grad_v2() -> None:
    k, s = [1, 3, 2, 1], [1, 2, 2, 1]

    def fn(x):
        y = R.MaxPoolV2(input=x, ksize=tf.constant(k), strides=tf.constant(s), padding="SAME")
        return y, R.MaxPoolGradV2(orig_input=x, orig_output=y, grad=y * 3, ksize=tf.constant(k),
                                  strides=tf.constant(s), padding="SAME")
    check_lowering(fn, X_TIES)


@pytest.mark.parametrize("pool", ["max", "avg"])
def test_pool_gradient_tape(pool) -> None:
    op = tf.nn.max_pool2d if pool == "max" else tf.nn.avg_pool2d
    dy = _normal(2, 5, 4, 3)

    def grads(x, g):
        with tf.GradientTape() as tape:
            tape.watch(x)
            y = op(x, ksize=3, strides=2, padding="SAME")
        return tape.gradient(y, x, output_gradients=g)
    check_lowering(grads, X, dy)


@pytest.mark.parametrize("padding", ["SAME", "VALID"])
def test_pools_3d(padding) -> None:
    x = _normal(2, 5, 6, 4, 3)
    x[0, 1, 1, 1, 0], x[1, 0, 0, 0, 1] = np.nan, -np.inf
    kw = {"ksize": [1, 2, 3, 2, 1], "strides": [1, 2, 2, 1, 1], "padding": padding}

    def pools(a):
        z = R.AvgPool3D(input=a, **kw)
        return R.MaxPool3D(input=a, **kw), z, R.AvgPool3DGrad(orig_input_shape=tf.shape(a), grad=z * 2 + 1, **kw)
    check_lowering(pools, x)


def test_pools_3d_bf16_and_refused_f16() -> None:
    x = _normal(1, 4, 5, 3, 2, dtype=BF16)
    kw = {"ksize": [1, 2, 2, 2, 1], "strides": [1, 2, 1, 2, 1], "padding": "SAME"}
    check_lowering(lambda a: (R.MaxPool3D(input=a, **kw), R.AvgPool3D(input=a, **kw)), x)
    with pytest.raises(UnsupportedOpError, match="MaxPool3D does not support dtype float16"):
        lower_fn(lambda a: R.MaxPool3D(input=a, **kw), x.astype(np.float16))  # TF's CPU has no such kernel


# --- fused batch norm ---------------------------------------------------------------------------------------

BN_X = _normal(2, 5, 3, 4, scale=2.0, shift=1.0)
BN_SCALE, BN_OFFSET = _normal(4), _normal(4)
BN_MEAN, BN_VAR = _normal(4), (_rng.random(4) + 0.5).astype(np.float32)


def _bn_x(fmt: str, dtype=np.float32) -> np.ndarray:
    return (BN_X if fmt == "NHWC" else _nchw(BN_X)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
@pytest.mark.parametrize("training,factor", [(True, 1.0), (True, 0.3), (False, 1.0), (False, 0.3)])
def test_fused_batch_norm_v3(training, factor, fmt, dtype) -> None:
    """y and the batch statistics against TF in ``dtype``; the reserve spaces against TF in f32.

    The reserve spaces (outputs 3-5, always f32) are TF's private hand-off to the gradient, and TF's
    float16 kernel differs by CPU: where oneDNN computes f16 (AVX-512 FP16) it returns what its f32
    kernel returns (the batch or population statistics, reserve_space_3 of shape [0]); elsewhere the
    Eigen fallback leaves reserve_space_1/2 unwritten in inference and returns a scalar
    reserve_space_3. The specified contents (TF's op docs: the computed batch mean/variance when
    training, the population mean/variance otherwise) are those of the f32 kernel on the same
    values, which every CPU computes alike, so that is the oracle for them.
    """
    def fn(x, scale, offset, mean, var):
        return R.FusedBatchNormV3(x=x, scale=scale, offset=offset, mean=mean, variance=var, epsilon=1e-3,
                                  exponential_avg_factor=factor, is_training=training, data_format=fmt)
    x = _bn_x(fmt, dtype)
    check_lowering(lambda *a: fn(*a)[:3], x, BN_SCALE, BN_OFFSET, BN_MEAN, BN_VAR, **TOL)
    got = hlo.evaluate(lower_fn(fn, x, BN_SCALE, BN_OFFSET, BN_MEAN, BN_VAR), x, BN_SCALE, BN_OFFSET, BN_MEAN,
                       BN_VAR)[3:]
    want = fn(tf.constant(x.astype(np.float32)), BN_SCALE, BN_OFFSET, BN_MEAN, BN_VAR)[3:]
    for i, (g, w) in enumerate(zip(got, want), start=3):
        assert g.dtype == np.float32 and g.shape == tuple(w.shape), f"reserve space {i}: {g.dtype}{g.shape}"
        # x is rounded to dtype before the statistics: f32 sums of the same rounded values
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-4, atol=1e-4, err_msg=f"reserve space {i}")


@pytest.mark.parametrize("op", ["FusedBatchNorm", "FusedBatchNormV2"])
@pytest.mark.parametrize("training", [True, False])
def test_fused_batch_norm_v1_v2(op, training) -> None:
    def fn(x, scale, offset, mean, var):
        return getattr(R, op)(x=x, scale=scale, offset=offset, mean=mean, variance=var, epsilon=1e-3,
                              is_training=training)
    check_lowering(fn, BN_X, BN_SCALE, BN_OFFSET, BN_MEAN, BN_VAR, **TOL)


@pytest.mark.parametrize("dims", [(1, 1, 1, 4), (0, 3, 3, 4), (2, 5, 3, 4)], ids=["n=1", "n=0", "n=30"])
def test_fused_batch_norm_training_edge_counts(dims) -> None:
    """n == 1: Bessel factor 1 (variance 0); n == 0: NaN running statistics, zero reserves."""
    x = _normal(*dims, scale=2.0)
    x[..., 0] = 1e-3  # a constant feature: zero variance

    def fn(a, scale, offset, mean, var):
        return R.FusedBatchNormV3(x=a, scale=scale, offset=offset, mean=mean, variance=var, epsilon=1e-3,
                                  exponential_avg_factor=0.5, is_training=True)
    check_lowering(fn, x, BN_SCALE, BN_OFFSET, BN_MEAN, BN_VAR, **TOL)


def test_fused_batch_norm_training_with_empty_running_stats() -> None:
    empty = np.zeros(0, np.float32)

    def fn(x, scale, offset, mean, var):
        return R.FusedBatchNormV3(x=x, scale=scale, offset=offset, mean=mean, variance=var, is_training=True)
    check_lowering(fn, BN_X, BN_SCALE, BN_OFFSET, empty, empty, **TOL)


def _bn_grad(op: str, training: bool, fmt: str):
    extra = {"reserve_space_3": None} if op.endswith("V3") else {}

    def fn(dy, x, scale, mean, var):
        if extra:
            extra["reserve_space_3"] = var
        outs = getattr(R, op)(y_backprop=dy, x=x, scale=scale, reserve_space_1=mean, reserve_space_2=var,
                              epsilon=1e-3, is_training=training, data_format=fmt, **extra)
        return outs[:3]  # outputs 3 and 4 are placeholders (see test_batch_norm_grad_placeholders)
    return fn


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
@pytest.mark.parametrize("training", [True, False])
def test_fused_batch_norm_grad_v3(training, fmt, dtype) -> None:
    if dtype == np.float16 and fmt == "NCHW" and not training:
        pytest.skip("TF's CPU kernel rejects f16 NCHW inference gradients")
    x = _bn_x(fmt, dtype)
    dy = _normal(*x.shape, dtype=dtype)
    # Random (not batch) statistics: TF's kernels use reserve_space_1/2 as given.
    check_lowering(_bn_grad("FusedBatchNormGradV3", training, fmt), dy, x, BN_SCALE, BN_MEAN, BN_VAR, **TOL)


@pytest.mark.parametrize("op", ["FusedBatchNormGrad", "FusedBatchNormGradV2"])
def test_fused_batch_norm_grad_v1_v2(op) -> None:
    dy = _normal(*BN_X.shape)
    check_lowering(_bn_grad(op, True, "NHWC"), dy, BN_X, BN_SCALE, BN_MEAN, BN_VAR, **TOL)


def test_batch_norm_grad_placeholders() -> None:
    """reserve_space_4/5 have TF's static shape [0] (f16 runs TF's native kernel, which agrees)."""
    dy = _normal(*BN_X.shape, dtype=np.float16)

    def fn(g, x, scale, mean, var):
        return R.FusedBatchNormGradV3(y_backprop=g, x=x, scale=scale, reserve_space_1=mean, reserve_space_2=var,
                                      reserve_space_3=var, epsilon=1e-3, is_training=True)
    check_lowering(fn, dy, BN_X.astype(np.float16), BN_SCALE, BN_MEAN, BN_VAR, **TOL)


@pytest.mark.parametrize("fmt", ["NHWC", "NCHW"])
def test_batch_norm_training_gradient_tape(fmt) -> None:
    x = _bn_x(fmt)
    dy = _normal(*x.shape)

    def grads(a, scale, offset, g):
        with tf.GradientTape() as tape:
            tape.watch([a, scale, offset])
            y = R.FusedBatchNormV3(x=a, scale=scale, offset=offset, mean=tf.zeros([0]), variance=tf.zeros([0]),
                                   epsilon=1e-3, is_training=True, data_format=fmt)[0]
        return tape.gradient(y, [a, scale, offset], output_gradients=g)
    check_lowering(grads, x, BN_SCALE, BN_OFFSET, dy, **TOL)
