"""Elementwise lowerings against TF eager: unary and binary sweeps (ops x dtypes, each trace covering
several shapes: broadcasting, rank 0, size 0), then the attributes and special values that matter."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest
import tensorflow as tf

import hlo
from hlo.dtypes import PrimitiveType as P
from hlo.lowering.registry import rule_for
from tests.lowering_harness import check_lowering, lower_fn

R = tf.raw_ops
BF16 = P.BF16.numpy
FLOATS = (np.float32, np.float64, np.float16, BF16)
SIGNED = (np.int32, np.int64, np.int8, np.int16)
UNSIGNED = (np.uint8, np.uint16, np.uint32, np.uint64)
REAL = FLOATS + SIGNED + UNSIGNED
SPECIALS = [np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.5, 2.5, -2.5, 1.0, -1.0]


def _is_float(dtype) -> bool:
    return np.dtype(dtype).kind == "f" or np.dtype(dtype) == np.dtype(BF16)


def data(dtype, shape, seed: int = 0, specials: bool = True, low: int = -20, high: int = 20) -> np.ndarray:
    """Seeded inputs; floats start with NaN, infs, signed zeros and halves, ints with the type's extremes."""
    rng = np.random.default_rng(seed)
    size = int(np.prod(shape))
    if dtype == np.bool_:
        return rng.integers(0, 2, size).astype(bool).reshape(shape)
    if _is_float(dtype):
        flat = rng.normal(scale=3.0, size=size).astype(dtype)
        head = np.array(SPECIALS).astype(dtype)
    else:
        info = np.iinfo(dtype)
        flat = rng.integers(max(low, info.min), min(high, info.max), size, endpoint=True).astype(dtype)
        head = np.array([info.min, info.max], dtype)
    if specials:
        k = min(len(head), size)
        flat[:k] = rng.permutation(head)[:k]
    return flat.reshape(shape)


def dtypes_of(op: str) -> list:
    """The dtypes the rule declares, as NumPy types (the sweep tests every one)."""
    declared = rule_for(op).dtypes
    return [t for t in REAL + (np.bool_,) if P.from_numpy(np.dtype(t)) in declared]


# --- unary sweep ----------------------------------------------------------------------------

_FEATURES = {"Relu", "Relu6", "Elu", "Selu", "LeakyRelu", "Softplus", "Softsign"}
UNARY = ["Abs", "Neg", "Sign", "Floor", "Ceil", "Round", "Rint", "Exp", "Expm1", "Log", "Log1p", "Sqrt", "Rsqrt",
         "Square", "Reciprocal", "Inv", "Sin", "Cos", "Tan", "Tanh", "Sigmoid", "Erf", "Erfc", "Softplus",
         "Softsign", "Relu", "Relu6", "Elu", "Selu", "LeakyRelu", "IsNan", "IsInf", "IsFinite", "LogicalNot",
         "ZerosLike", "OnesLike"]


def unary_fn(op: str, **attrs):
    f = getattr(R, op)
    arg = "features" if op in _FEATURES else "x"
    return lambda t: f(**{arg: t}, **attrs)


def _unary_cases():
    for op in UNARY:
        for dt in dtypes_of(op):
            if not (op == "Round" and not _is_float(dt)):  # TF's kernel is broken there, see below
                yield op, dt


@pytest.mark.parametrize("op,dtype", list(_unary_cases()), ids=lambda v: v if isinstance(v, str) else np.dtype(v).name)
def test_unary(op, dtype) -> None:
    f = unary_fn(op)
    args = [data(dtype, (4, 6)), data(dtype, (), seed=1), data(dtype, (0, 3))]
    if (op, dtype) == ("Erf", np.float64):  # TF's f64 erf(+-inf) is NaN (an Eigen bug); see below
        args = [np.where(np.isinf(a), np.copysign(30.0, a), a) for a in args]
    check_lowering(lambda a, s, e: (f(a), f(s), f(e)), *args)


@pytest.mark.parametrize("dtype", FLOATS, ids=lambda t: np.dtype(t).name)
def test_erf_of_infinity_is_one(dtype) -> None:
    """TF's f64 kernel gives NaN for |x| > sqrt(DBL_MAX) (Eigen's generic_fast_erf<double> misses a
    clamp, tensorflow/tensorflow#125596); we keep erf(+-inf) = +-1 as in every other dtype."""
    x = np.array([np.inf, -np.inf, 1e300 if dtype == np.float64 else 6e4], dtype)
    (got,) = hlo.evaluate(lower_fn(lambda t: R.Erf(x=t), x), x)
    np.testing.assert_array_equal(got.astype(np.float64), [1.0, -1.0, 1.0])


@pytest.mark.parametrize("dtype", [np.int32, np.int64])
def test_round_of_integers_is_identity(dtype) -> None:
    """TF >= 2.17's CPU kernel returns zeros (tensorflow/tensorflow#74789); TF documents, and
    tf.math.round computes, the identity."""
    x = data(dtype, (2, 5))
    (got,) = hlo.evaluate(lower_fn(lambda t: R.Round(x=t), x), x)
    np.testing.assert_array_equal(got, tf.math.round(x).numpy())


def _tf_has_kernel(op: str, dtype) -> bool:
    one = tf.ones([2], tf.as_dtype(dtype))
    args = {"BiasAdd": dict(value=tf.ones([2, 2], one.dtype), bias=one), "AddN": dict(inputs=[one, one]),
            "ClipByValue": dict(t=one, clip_value_min=one, clip_value_max=one),
            "Select": dict(condition=tf.ones([2], tf.bool), x=one, y=one),
            "SelectV2": dict(condition=tf.ones([2], tf.bool), t=one, e=one)}
    try:
        if op in args:
            getattr(R, op)(**args[op])
        elif op in UNARY:
            unary_fn(op)(one)
        else:
            getattr(R, op)(x=one, y=one)
    except (tf.errors.NotFoundError, tf.errors.InvalidArgumentError, TypeError):
        return False
    return True


def test_declared_dtypes_are_tf_cpu_kernels() -> None:
    """Each rule declares exactly the dtypes (of those we test) that TF has a CPU kernel for."""
    for op in UNARY + BINARY + ["BiasAdd", "AddN", "ClipByValue", "Select", "SelectV2"]:
        assert dtypes_of(op) == [t for t in REAL + (np.bool_,) if _tf_has_kernel(op, t)], op


# --- binary sweep -----------------------------------------------------------------------------

BINARY = ["Add", "AddV2", "Sub", "Mul", "MulNoNan", "Div", "RealDiv", "DivNoNan", "FloorDiv", "FloorMod",
          "TruncateDiv", "TruncateMod", "Pow", "Maximum", "Minimum", "SquaredDifference", "Atan2", "Equal",
          "NotEqual", "Less", "LessEqual", "Greater", "GreaterEqual", "LogicalAnd", "LogicalOr", "BitwiseAnd",
          "BitwiseOr", "BitwiseXor"]
_INT_DIVISIONS = {"Div", "FloorDiv", "FloorMod", "TruncateDiv", "TruncateMod"}
# (x dims, y dims) pairs that one trace covers: equal, two-sided broadcast, rank 0, size 0.
SHAPE_PAIRS = [((3, 4), (3, 4)), ((3, 1), (1, 4)), ((), (2, 3)), ((0, 3), (1, 3))]


def binary_inputs(op: str, dtype, xdims, ydims, seed: int) -> tuple[np.ndarray, np.ndarray]:
    x = data(dtype, xdims, seed)
    if op == "Pow" and not _is_float(dtype):  # TF rejects negative integer exponents
        x = data(dtype, xdims, seed, specials=False, low=-5, high=5)
        return x, data(dtype, ydims, seed + 1, specials=False, low=0, high=6)
    y = data(dtype, ydims, seed + 1)
    if op in _INT_DIVISIONS and not _is_float(dtype):  # TF raises on integer division by zero
        y = np.where(y == 0, np.ones((), dtype), y)
    return x, y


@pytest.mark.parametrize("op,dtype", [(op, dt) for op in BINARY for dt in dtypes_of(op)],
                         ids=lambda v: v if isinstance(v, str) else np.dtype(v).name)
def test_binary(op, dtype) -> None:
    f = getattr(R, op)
    args = [a for i, (xd, yd) in enumerate(SHAPE_PAIRS) for a in binary_inputs(op, dtype, xd, yd, 2 * i)]
    check_lowering(lambda *t: [f(x=t[i], y=t[i + 1]) if op != "Atan2" else f(y=t[i], x=t[i + 1])
                               for i in range(0, len(t), 2)], *args)


def test_integer_division_edge_cases() -> None:
    x = np.array([7, -7, 7, -7, 0, -2**31, -2**31, 2**31 - 1, -1, 1], np.int32)
    y = np.array([2, 2, -2, -2, 3, -1, 3, -5, 2**31 - 1, -2**31], np.int32)
    for op in _INT_DIVISIONS:
        check_lowering(lambda a, b, op=op: getattr(R, op)(x=a, y=b), x, y)


def test_float_division_special_values() -> None:
    x = np.array([7.5, -7.5, 7.5, -7.5, 0.0, -0.0, 1.0, np.inf, np.nan, 3.0, 1.0, -0.0, 4.0], np.float32)
    y = np.array([2., 2., -2., -2., 3., 3., 0., 2., 1., np.inf, -np.inf, 2.0, -2.0], np.float32)
    for op in ("FloorDiv", "FloorMod", "TruncateDiv", "TruncateMod", "Div", "DivNoNan", "MulNoNan"):
        module = lower_fn(lambda a, b, op=op: getattr(R, op)(x=a, y=b), x, y)
        (got,) = hlo.evaluate(module, x, y)
        want = getattr(R, op)(x=x, y=y).numpy()
        np.testing.assert_array_equal(got, want, err_msg=op)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want), err_msg=f"{op}: sign of zero")


@pytest.mark.parametrize("op,dtype", [(op, np.int32) for op in sorted(_INT_DIVISIONS)] + [("Pow", np.int64)])
def test_undefined_integer_cases_lower_and_evaluate(op, dtype) -> None:
    """TF raises on x / 0 and on negative integer powers; we must not crash (values are XLA's)."""
    x, y = np.array([5, -5, 0], dtype), np.array([0, 0, 0], dtype) if op != "Pow" else np.array([-1, -2, -3], dtype)
    (got,) = hlo.evaluate(lower_fn(lambda a, b: getattr(R, op)(x=a, y=b), x, y), x, y)
    assert got.shape == (3,) and got.dtype == dtype


def test_maximum_minimum_propagate_nan_from_either_side() -> None:
    x = np.array([np.nan, 1.0, np.nan, -0.0, 0.0], np.float32)
    y = np.array([1.0, np.nan, np.nan, 0.0, -0.0], np.float32)
    for op in ("Maximum", "Minimum"):
        module = lower_fn(lambda a, b, op=op: getattr(R, op)(x=a, y=b), x, y)
        (got,) = hlo.evaluate(module, x, y)
        want = getattr(R, op)(x=x, y=y).numpy()
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(np.signbit(got), np.signbit(want))


@pytest.mark.parametrize("op", ["Equal", "NotEqual"])
@pytest.mark.parametrize("xdims,ydims", [((3,), (2,)), ((1, 3), (1, 1, 2)), ((2, 1), (1, 3)), ((2,), (2,))])
def test_equality_without_incompatible_shape_error(op, xdims, ydims) -> None:
    x, y = data(np.int32, xdims, low=0, high=2), data(np.int32, ydims, seed=1, low=0, high=2)
    check_lowering(lambda a, b: getattr(R, op)(x=a, y=b, incompatible_shape_error=False), x, y)


# --- unary special cases ----------------------------------------------------------------------


@pytest.mark.parametrize("op,want_negative_zero", [("Sign", False), ("Relu", True), ("Relu6", True),
                                                   ("Elu", True), ("Selu", True), ("Round", True)])
def test_sign_of_zero(op, want_negative_zero) -> None:
    x = np.array([-0.0, 0.0, np.nan], np.float32)
    (got,) = hlo.evaluate(lower_fn(unary_fn(op), x), x)
    want = unary_fn(op)(x).numpy()
    assert bool(np.signbit(want[0])) == want_negative_zero
    np.testing.assert_array_equal(np.signbit(got[:2]), np.signbit(want[:2]))
    assert np.isnan(got[2]) and np.isnan(want[2])


@pytest.mark.parametrize("alpha", [0.2, 0.0, 1.0, 2.0, -1.0])
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_leaky_relu_alpha(alpha, dtype) -> None:
    x = data(dtype, (3, 5))
    check_lowering(lambda t: R.LeakyRelu(features=t, alpha=alpha), x)
    (got,) = hlo.evaluate(lower_fn(lambda t: R.LeakyRelu(features=t, alpha=alpha), x), x)
    np.testing.assert_array_equal(np.signbit(got), np.signbit(R.LeakyRelu(features=x, alpha=alpha).numpy()))


@pytest.mark.parametrize("dtype", FLOATS)
def test_softplus_thresholds(dtype) -> None:
    """Around TF's switch points log(eps) + 2 and its negation, and far out."""
    thr = float(np.log(ml_dtypes.finfo(dtype).eps)) + 2
    pts = np.concatenate([thr + np.linspace(-0.5, 0.5, 11), -thr + np.linspace(-0.5, 0.5, 11), [-100, -30, 30, 100]])
    check_lowering(lambda t: R.Softplus(features=t), pts.astype(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_erfc_tail_is_relatively_accurate(dtype) -> None:
    x = np.linspace(-6, 27, 661).astype(dtype)
    (got,) = hlo.evaluate(lower_fn(lambda t: R.Erfc(x=t), x), x)
    ref = np.array([math.erfc(float(v)) for v in x])
    normal = ref > np.finfo(dtype).tiny
    rel = np.abs(got[normal].astype(np.float64) / ref[normal] - 1)
    assert rel.max() < (1e-6 if dtype == np.float32 else 1e-13)
    assert np.all(got[~normal] <= np.finfo(dtype).tiny)
    check_lowering(lambda t: R.Erfc(x=t), x, rtol=1e-5 if dtype == np.float32 else 1e-13, atol=1e-30)


# --- cast -----------------------------------------------------------------------------------

ALL = REAL + (np.bool_,)


def cast_source(src) -> tuple[np.ndarray, np.ndarray]:
    """(values every destination represents, same but nonnegative); float values are fractional."""
    if src == np.bool_:
        v = data(np.bool_, (8,))
        return v, v
    if _is_float(src):
        v = np.concatenate([[0.0, -0.0, 0.5, -0.5, 2.7, -2.7, 99.9, -99.9, 127.0],
                            data(np.float64, (7,), 3, specials=False) * 10])
        return np.clip(v, -100, 100).astype(src), np.clip(np.abs(v), 0, 100).astype(src)
    v = data(src, (16,), low=-100, high=100)  # starts with the extremes: int -> int wraps
    return v, np.abs(data(src, (16,), specials=False, low=0, high=100)).astype(src)


@pytest.mark.parametrize("src", ALL, ids=lambda t: np.dtype(t).name)
def test_cast_to_every_dtype(src) -> None:
    """One trace per source dtype casts in-range values to every destination."""
    v, nonneg = cast_source(src)
    dsts = [t for t in ALL if t != src]
    float_src = _is_float(src)

    def fn(a, b):
        return [R.Cast(x=b if (float_src and np.dtype(d).kind == "u") else a, DstT=tf.as_dtype(d)) for d in dsts]
    check_lowering(fn, v, nonneg)
    if float_src:  # NaN and infinities go to every float type and to bool
        special = np.array(SPECIALS, np.float64).astype(src)
        check_lowering(lambda a: [R.Cast(x=a, DstT=tf.as_dtype(d)) for d in FLOATS + (np.bool_,)], special)


_TRUNCATE_VALUES = [1 + 2**-8 + 2**-9 + 2**-30, 65520.0, 1e5, 1 + 2**-11 + 2**-12, 2**-20 + 2**-21 + 2**-22,
                    3e38, np.inf, -np.inf, np.nan, -(1 + 2**-11 + 2**-12), 1.75 * 2**-24, 0.0]


@pytest.mark.parametrize("src,dst", [(s, d) for s in (np.float64, np.float32, np.float16, BF16)
                                     for d in (np.float32, np.float16, BF16, np.int32) if s != d],
                         ids=lambda t: np.dtype(t).name)
@pytest.mark.parametrize("truncate", [True, False])
def test_cast_truncate(src, dst, truncate) -> None:
    """Bit-exact: truncation changes the last bit, which tolerances would hide."""
    with np.errstate(over="ignore"):
        x = np.array(_TRUNCATE_VALUES if dst != np.int32 else [2.7, -2.7, 0.5, 100.25], np.float64).astype(src)
    fn = lambda t: R.Cast(x=t, DstT=tf.as_dtype(dst), Truncate=truncate)  # noqa: E731
    (got,) = hlo.evaluate(lower_fn(fn, x), x)
    want = fn(x).numpy()
    assert got.dtype == want.dtype
    np.testing.assert_array_equal(got.astype(np.float64), want.astype(np.float64))


@pytest.mark.parametrize("dst", [tf.bfloat16, tf.float16])
def test_cast_truncate_keeps_nan_with_low_payload(dst) -> None:
    x = np.array([0x7F800001, 0xFF800010, 0x7FC00000], np.uint32).view(np.float32)  # masking would give inf
    (got,) = hlo.evaluate(lower_fn(lambda t: R.Cast(x=t, DstT=dst, Truncate=True), x), x)
    assert np.isnan(got.astype(np.float32)).all()


def test_cast_float_to_int_out_of_range_saturates() -> None:
    """TF's C++ cast is undefined here (x86 gives INT_MIN); ours is HLO convert: saturate, NaN -> 0."""
    x = np.array([np.nan, np.inf, -np.inf, 3e9, -3e9, 300.0, -300.0], np.float32)
    (i32,) = hlo.evaluate(lower_fn(lambda t: tf.cast(t, tf.int32), x), x)
    (u8,) = hlo.evaluate(lower_fn(lambda t: tf.cast(t, tf.uint8), x), x)
    np.testing.assert_array_equal(i32, [0, 2**31 - 1, -2**31, 2**31 - 1, -2**31, 300, -300])
    np.testing.assert_array_equal(u8, [0, 255, 0, 255, 0, 255, 0])


# --- n-ary and layout ops ---------------------------------------------------------------------


@pytest.mark.parametrize("dtype", dtypes_of("AddN"), ids=lambda t: np.dtype(t).name)
def test_add_n(dtype) -> None:
    xs = [data(dtype, (2, 3), seed=i) for i in range(5)]
    check_lowering(lambda *t: (R.AddN(inputs=list(t)), R.AddN(inputs=[t[0]]), R.AddN(inputs=list(t[:2]))), *xs)


@pytest.mark.parametrize("dtype", dtypes_of("BiasAdd"), ids=lambda t: np.dtype(t).name)
def test_bias_add_dtypes(dtype) -> None:
    check_lowering(lambda v, b: R.BiasAdd(value=v, bias=b), data(dtype, (2, 3, 4)), data(dtype, (4,), seed=1))


@pytest.mark.parametrize("fmt,dims", [("NHWC", (2, 3)), ("NHWC", (2, 3, 4)), ("NCHW", (2, 3, 4)),
                                      ("NHWC", (2, 3, 4, 5)), ("NCHW", (2, 3, 4, 5)), ("NHWC", (2, 3, 1, 4, 2)),
                                      ("NCHW", (2, 3, 1, 4, 2)), ("NHWC", (0, 3, 2)), ("NCHW", (0, 3, 2))])
def test_bias_add_layouts(fmt, dims) -> None:
    """(TF's graph-mode shape function rejects NCHW below rank 3, so that case is not traced.)"""
    channels = dims[1] if fmt == "NCHW" else dims[-1]
    v, b = data(np.float32, dims), data(np.float32, (channels,), seed=1)
    check_lowering(lambda v, b: R.BiasAdd(value=v, bias=b, data_format=fmt), v, b)


def test_bias_add_v1() -> None:
    check_lowering(lambda v, b: R.BiasAddV1(value=v, bias=b), data(np.float32, (2, 5)), data(np.float32, (5,), 1))


SELECT_CASES = [((2, 3), (2, 3)), ((2,), (2, 3)), ((), (2, 3)), ((2,), (2,)), ((), ()), ((0,), (0, 4)),
                ((2,), (2, 3, 4))]


@pytest.mark.parametrize("dtype", dtypes_of("Select"), ids=lambda t: np.dtype(t).name)
def test_select(dtype) -> None:
    args = []
    for i, (cdims, xdims) in enumerate(SELECT_CASES):
        args += [data(np.bool_, cdims, seed=i), data(dtype, xdims, seed=i), data(dtype, xdims, seed=i + 50)]
    check_lowering(lambda *t: [R.Select(condition=t[i], x=t[i + 1], y=t[i + 2]) for i in range(0, len(t), 3)], *args)


SELECT_V2_CASES = [((2, 3), (2, 3), (2, 3)), ((2, 1), (1, 3), ()), ((), (2, 3), (3,)), ((3,), (2, 1), (1,)),
                   ((0, 1), (1, 3), (3,))]


@pytest.mark.parametrize("dtype", dtypes_of("SelectV2"), ids=lambda t: np.dtype(t).name)
def test_select_v2(dtype) -> None:
    args = []
    for i, (cdims, tdims, edims) in enumerate(SELECT_V2_CASES):
        args += [data(np.bool_, cdims, seed=i), data(dtype, tdims, seed=i), data(dtype, edims, seed=i + 50)]
    check_lowering(lambda *t: [R.SelectV2(condition=t[i], t=t[i + 1], e=t[i + 2]) for i in range(0, len(t), 3)],
                   *args)


@pytest.mark.parametrize("dtype", dtypes_of("ClipByValue"), ids=lambda t: np.dtype(t).name)
def test_clip_by_value(dtype) -> None:
    t = data(dtype, (3, 4))
    lo, hi = data(dtype, (3, 4), seed=1), data(dtype, (3, 4), seed=2)  # lo > hi in places, NaN bounds too
    s_lo, s_hi = np.asarray(-1, dtype) if dtype not in UNSIGNED else np.asarray(3, dtype), np.asarray(5, dtype)
    check_lowering(lambda t, a, b, c, d: (R.ClipByValue(t=t, clip_value_min=a, clip_value_max=b),
                                          R.ClipByValue(t=t, clip_value_min=c, clip_value_max=d),
                                          R.ClipByValue(t=t, clip_value_min=d, clip_value_max=c)),
                   t, lo, hi, s_lo, s_hi)


def test_clip_by_value_nan_bounds() -> None:
    t = np.array([np.nan, 0.0, 1.0, 5.0, -5.0], np.float32)
    nan = np.float32(np.nan)
    for lo, hi in [(nan, np.float32(2)), (np.float32(-1), nan), (nan, nan)]:
        check_lowering(lambda t, a, b: R.ClipByValue(t=t, clip_value_min=a, clip_value_max=b), t, lo, hi)
