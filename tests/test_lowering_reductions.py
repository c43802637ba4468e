"""Reduction lowerings against TF eager: ops x dtypes (each trace covering several shapes and axes:
rank 0, negative and empty axes, size-0 dims, keep_dims), then NaN/inf, integer means, ArgMax/ArgMin
ties and NaNs, f16 accumulation, and the errors TF raises."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

import hlo
import tfxla_plugin
from hlo.dtypes import PrimitiveType as P
from hlo.lowering import InvalidArgumentLoweringError, LoweringError
from hlo.lowering.registry import rule_for
from tests.lowering_harness import check_lowering, lower_fn

R = tf.raw_ops
BF16 = P.BF16.numpy
FLOATS = (np.float32, np.float64, np.float16, BF16)
INTS = (np.int32, np.int64, np.int8, np.int16, np.uint8, np.uint16, np.uint32, np.uint64)
ALL = FLOATS + INTS + (np.bool_,)


def _is_float(dtype) -> bool:
    return np.dtype(dtype) in {np.dtype(t) for t in FLOATS}


def dtypes_of(op: str) -> list:
    declared = rule_for(op).dtypes
    return [t for t in ALL if declared is None or P.from_numpy(np.dtype(t)) in declared]


def data(dtype, shape, seed: int = 0, low: float = -3.0, high: float = 3.0) -> np.ndarray:
    """Seeded inputs: floats uniform in [low, high), ints in a small range (clipped to the type)."""
    rng = np.random.default_rng(seed)
    if dtype == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if _is_float(dtype):
        return rng.uniform(low, high, shape).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(int(low), info.min), min(int(high), info.max), shape, endpoint=True).astype(dtype)


def ids(v):
    return v if isinstance(v, str) else np.dtype(v).name


# (input dims, axes, keep_dims): one trace evaluates all of them.
CASES = [
    ((), [], False),
    ((5,), [0], False),
    ((5,), [-1], True),
    ((5,), [], False),
    ((3, 4), [0], False),
    ((3, 4), [1], True),
    ((3, 4), [-1, 0], False),
    ((2, 3, 4), [0, 2], True),
    ((2, 3, 4), [-2], False),
    ((0, 3), [0], False),
    ((2, 0, 3), [1], True),
    ((2, 0, 3), [0, 2], False),
]

SIMPLE = ["Sum", "Prod", "Max", "Min", "Mean", "EuclideanNorm"]
# Value ranges keeping products and f16 sums far from overflow, and integer sums of squares small.
RANGES = {"Prod": (0.5, 1.5), "EuclideanNorm": (-3.0, 3.0)}


def reduction(op: str):
    f = getattr(R, op)
    return lambda *xs: tuple(f(input=x, axis=axes, keep_dims=keep) for x, (_, axes, keep) in zip(xs, CASES))


@pytest.mark.parametrize("op,dtype", [(op, dt) for op in SIMPLE for dt in dtypes_of(op)], ids=ids)
def test_reduction_sweep(op, dtype) -> None:
    low, high = RANGES.get(op, (-3.0, 3.0))
    if not _is_float(dtype) and op == "Prod":
        low, high = -2, 2
    if np.dtype(dtype).kind == "u":
        low = max(low, 0)
    xs = [data(dtype, dims, seed=i, low=low, high=high) for i, (dims, _, _) in enumerate(CASES)]
    check_lowering(reduction(op), *xs, atol=1e-5 if dtype == np.float32 else None)


@pytest.mark.parametrize("op", ["All", "Any"])
def test_boolean_reductions(op) -> None:
    xs = [data(np.bool_, dims, seed=i) for i, (dims, _, _) in enumerate(CASES)]
    xs[4] = np.array([[True] * 4, [False] * 4, [True, False, True, True]])
    check_lowering(reduction(op), *xs)


def test_dtype_declarations_are_tf_kernels() -> None:
    assert dtypes_of("Sum") == list(FLOATS + INTS)
    assert np.bool_ not in dtypes_of("Max") and np.bool_ in dtypes_of("ArgMax")
    assert dtypes_of("L2Loss") == list(FLOATS)


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
@pytest.mark.parametrize("op", ["Sum", "Prod", "Max", "Min", "Mean", "EuclideanNorm"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nan_and_inf(op, dtype) -> None:
    x = np.array([[np.nan, 1.0, 2.0], [np.inf, 1.0, -2.0], [-np.inf, np.inf, 1.0], [-np.inf, -1.0, 0.5]], dtype)
    check_lowering(lambda t: (getattr(R, op)(input=t, axis=[1]), getattr(R, op)(input=t, axis=[0])), x)


@pytest.mark.parametrize("dtype", [np.int8, np.uint8, np.int16, np.int32, np.uint32])
def test_integer_mean_accumulates_wide_and_truncates(dtype) -> None:
    info = np.iinfo(dtype)
    x = np.array([[info.max, info.max, info.max - 1], [info.min, info.min, info.min + 1], [1, 2, 2],
                  [0, 0, 1]], dtype)
    if info.min < 0:
        x = np.concatenate([x, np.array([[-1, -2, -2]], dtype)])
    check_lowering(lambda t: (tf.reduce_mean(t, axis=1), tf.reduce_mean(t)), x)


def test_int64_mean_wraps_like_tf() -> None:
    big = np.iinfo(np.int64).max
    check_lowering(lambda t: tf.reduce_mean(t), np.array([big, big], np.int64))


def test_mean_over_nothing() -> None:
    check_lowering(lambda a, b: (tf.reduce_mean(a, axis=1), tf.reduce_mean(b, axis=1), tf.reduce_mean(b)),
                   np.zeros((3, 0), np.int32), np.zeros((3, 0), np.float32))


def test_reduction_indices_int64_scalar() -> None:
    check_lowering(lambda t: R.Sum(input=t, axis=tf.constant(-1, tf.int64)), data(np.float32, (3, 4)))


def test_half_sums_accumulate_in_f32() -> None:
    """XLA's rule: f16 sums accumulate in f32 (TF CPU sums f16 in f16 and gets 408.5 here)."""
    x = np.full((4096,), 0.1, np.float16)
    module = lower_fn(lambda t: (tf.reduce_sum(t), tf.reduce_mean(t), R.L2Loss(t=t)), x)
    total, mean, l2 = hlo.evaluate(module, x)
    wide = x.astype(np.float32)
    assert total == np.float16(wide.sum()) == np.float16(409.5)
    assert mean == np.float16(wide.mean()) and l2 == np.float16((wide * wide).sum() / 2)
    assert any(i.opcode is hlo.Opcode.REDUCE and i.shape.dtype is P.F32 for _, i in module.instructions())


def test_bf16_sum_matches_tf_f32_accumulation() -> None:
    check_lowering(lambda t: (tf.reduce_sum(t), tf.reduce_mean(t)), np.full((30000,), 4, BF16))


def test_integer_euclidean_norm_truncates() -> None:
    x = np.array([[3, 4], [3, 5], [-3, -4], [0, 0], [1, 1]], np.int32)
    check_lowering(lambda t: tf.math.reduce_euclidean_norm(t, axis=1), x)


@pytest.mark.parametrize("dtype", FLOATS)
def test_l2_loss(dtype) -> None:
    check_lowering(lambda a, b, c: (R.L2Loss(t=a), R.L2Loss(t=b), R.L2Loss(t=c)),
                   data(dtype, (3, 5)), data(dtype, (), seed=1), data(dtype, (0, 2)))


# --- ArgMax / ArgMin ----------------------------------------------------------------------------

ARG_CASES = [((5,), 0), ((3, 4), 0), ((3, 4), -1), ((2, 3, 4), 1), ((0, 4), 1)]


@pytest.mark.parametrize("op,dtype", [(op, dt) for op in ("ArgMax", "ArgMin") for dt in dtypes_of(op)], ids=ids)
def test_arg_sweep(op, dtype) -> None:
    f = getattr(R, op)
    # A small range makes ties common: the first index must win.
    xs = [data(dtype, dims, seed=i, low=-2, high=2) for i, (dims, _) in enumerate(ARG_CASES)]
    check_lowering(lambda *ts: tuple(f(input=t, dimension=axis) for t, (_, axis) in zip(ts, ARG_CASES)), *xs)


@pytest.mark.parametrize("op", ["ArgMax", "ArgMin"])
@pytest.mark.parametrize("output_type", [tf.int32, tf.int64])
def test_arg_output_type_and_int64_dimension(op, output_type) -> None:
    f = getattr(R, op)
    check_lowering(lambda t: f(input=t, dimension=tf.constant(1, tf.int64), output_type=output_type),
                   data(np.float32, (3, 4)))


F32_MAX = np.finfo(np.float32).max
# Rows where TF CPU's Eigen reducer gives answers a plain "first index of the max" would not.
ARG_SPECIAL_ROWS = [
    [1.0, np.nan, 3.0, 0.0], [np.nan, 1.0, 3.0, 3.0], [np.nan, np.nan, np.nan, np.nan],
    [np.nan, -np.inf, -np.inf, 2.0], [-np.inf, -F32_MAX, -F32_MAX, -np.inf], [np.inf, np.nan, np.inf, F32_MAX],
    [-np.inf, -np.inf, -np.inf, -np.inf], [np.inf, np.inf, np.inf, np.inf], [F32_MAX, np.inf, -F32_MAX, 0.0],
    [np.nan, np.inf, np.nan, -np.inf],
]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16, BF16], ids=ids)
def test_arg_nan_inf_and_extremes(dtype) -> None:
    x = np.array(ARG_SPECIAL_ROWS, np.float64)
    finite = np.isfinite(x)
    x[finite] = np.sign(x[finite]) * np.minimum(np.abs(x[finite]), float(ml_dtypes.finfo(dtype).max))
    x = x.astype(dtype)
    check_lowering(lambda t: (tf.argmax(t, axis=1), tf.argmin(t, axis=1), tf.argmax(-t, axis=1)), x)


def test_arg_of_bools() -> None:
    x = np.array([[False, True, True], [False, False, False], [True, True, False]])
    check_lowering(lambda t: (R.ArgMax(input=t, dimension=1), R.ArgMin(input=t, dimension=1)), x)


# --- errors --------------------------------------------------------------------------------------

def _lower_with_axes(fn, x: np.ndarray, axes) -> None:
    """Trace ``fn`` with valid axes, then put ``axes`` into its axis constant (TF's own shape inference
    rejects bad constant axes while tracing) and lower the graph."""
    from tensorflow.python.framework import tensor_util

    from hlo.lowering import InputSpec, lower_graph

    cf = tf.function(fn).get_concrete_function(tf.TensorSpec(x.shape, tf.float32))
    gd = cf.graph.as_graph_def()
    const = next(n for n in gd.node if n.op == "Const")
    const.attr["value"].tensor.CopyFrom(tensor_util.make_tensor_proto(np.array(axes, np.int32)))
    lower_graph(gd, [InputSpec(cf.graph.inputs[0].name, 1, x.shape)], [cf.graph.outputs[0].name])


@pytest.mark.parametrize("fn,axes,match", [
    (lambda t: R.Sum(input=t, axis=[0, 1]), [0, -2], "dimension 0 twice"),
    (lambda t: R.Max(input=t, axis=[0]), [2], "invalid reduction dimension 2"),
    (lambda t: R.ArgMax(input=t, dimension=0), -3, "invalid reduction dimension -3"),
])
def test_bad_axes_are_rejected(fn, axes, match) -> None:
    with pytest.raises(LoweringError, match=match):
        _lower_with_axes(fn, np.zeros((2, 3), np.float32), axes)


def test_argmax_over_empty_axis_is_rejected() -> None:
    with pytest.raises(InvalidArgumentLoweringError, match="reduction axis 0 is empty"):
        lower_fn(lambda t: tf.argmax(t, axis=0), np.zeros((0, 3), np.float32))


def test_argmax_over_empty_axis_raises_invalid_argument_like_tf_eager() -> None:
    """TF eager raises InvalidArgumentError; the compiled function raises the same class, naming the node
    (it raised a bare LoweringError, which callers catching tf.errors did not see)."""
    fn = lambda t: tf.argmax(t, axis=0, output_type=tf.int32) + 1  # noqa: E731
    x = tf.zeros((0, 3))
    with pytest.raises(tf.errors.InvalidArgumentError, match="Reduction axis 0 is empty"):
        fn(x)
    with pytest.raises(tf.errors.InvalidArgumentError, match="node 'ArgMax'.*reduction axis 0 is empty"):
        tfxla_plugin.function(fn, jit_compile=True)(x)


def test_non_constant_axes_are_rejected() -> None:
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(LoweringError, match="must be a compile-time constant"):
        lower_fn(lambda t, a: R.Sum(input=t, axis=a), x, np.array([0], np.int32))
