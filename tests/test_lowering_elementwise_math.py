"""The elementwise math XLA expands (hlo/lowering/ops/elementwise_math.py, special_math.py) against TF
eager, with special values (signed zeros, +-1, infinities, NaN, poles, tiny and huge magnitudes) in
every float type TF has kernels for, and once compiled on the CPU backend.

Tolerances: the harness's defaults per dtype (f32 rtol 2e-5 but 4e-6 asked here for the
transcendental formulas, f64 1e-12, f16 2e-3, bf16 2e-2), NaN positions equal; integers exactly."""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from hlo.dtypes import PrimitiveType as P
from tests.lowering_harness import check_lowering

R = tf.raw_ops
FLOATS = (np.float32, np.float64, np.float16, P.BF16.numpy)
SPECIAL = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 0.5, -0.5, 1e-30, -1e-30, 1.0000001, 0.9999999,
           2.0, 10.0, -10.0, 1e20, -1e20, 3e38, 1e-8, 30.0, -30.0]


def ids(v):
    return np.dtype(v).name


def special(dtype) -> np.ndarray:
    x = np.array(SPECIAL + list(np.random.default_rng(0).uniform(-3, 3, 40)), np.float64)
    with np.errstate(over="ignore"):
        return x.astype(dtype)


@pytest.mark.parametrize("dtype", FLOATS, ids=ids)
def test_inverse_and_hyperbolic_trigonometry(dtype) -> None:
    ops = ("Atan", "Asin", "Acos", "Asinh", "Acosh", "Atanh", "Sinh", "Cosh")
    check_lowering(lambda a: [getattr(R, op)(x=a) for op in ops], special(dtype),
                   rtol=4e-6 if dtype == np.float32 else None)


GRID = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 0.5, 2.0, -3.0]
GX = np.array([a for a in GRID for _ in GRID])
GY = np.array([b for _ in GRID for b in GRID])


@pytest.mark.parametrize("dtype", FLOATS, ids=ids)
def test_zero_x_family_and_gradients(dtype) -> None:
    def fn(x, y):
        out = [getattr(R, op)(x=x, y=y) for op in ("Xdivy", "Xlogy", "Xlog1py")]
        out += [R.ReciprocalGrad(y=x, dy=y), R.SoftplusGrad(gradients=x, features=y),
                R.SoftsignGrad(gradients=x, features=y)]
        return out
    check_lowering(fn, GX.astype(dtype), GY.astype(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64], ids=ids)
def test_mod_is_truncated(dtype) -> None:
    x, y = (GX, GY) if np.dtype(dtype).kind == "f" else ([7, -7, 7, -7, 0, 9], [3, 3, -3, -3, 5, 1])
    check_lowering(lambda a, b: R.Mod(x=a, y=b), np.asarray(x, dtype), np.asarray(y, dtype))


@pytest.mark.parametrize("dtype", [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32,
                                   np.uint64], ids=ids)
def test_shifts_clamp_like_tf_and_bit_ops(dtype) -> None:
    info = np.iinfo(dtype)
    x = np.array([0, 1, -1 if info.min < 0 else 2, info.min, info.max, 5, 77] * 9, dtype)
    amounts = np.array(sorted([-3, -1, 0, 1, 3, 7, 8, 15, 16, 31, 32, 63, 64] * 5)[:63])
    s = np.clip(amounts, info.min, info.max).astype(dtype)

    def fn(a, b):
        return [R.LeftShift(x=a, y=b), R.RightShift(x=a, y=b), R.Invert(x=a), R.PopulationCount(x=a)]
    check_lowering(fn, x, s)


SPECIAL_FN = [0.0, -0.0, 1.0, -1.0, 2.0, -2.5, 0.5, 1e-30, 3.3, -7.7, 100.0, 1e10, -1e10, np.inf, -np.inf, np.nan,
              171.0, 0.1, -0.1, 5.0, -3.0, 1e-5]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16], ids=ids)
def test_lgamma_and_digamma(dtype) -> None:
    """XLA's Lanczos formulas: poles (0, negative integers), reflection, +-inf, huge arguments."""
    x = np.array(SPECIAL_FN + list(np.random.default_rng(1).uniform(-10, 10, 40)), np.float64)
    with np.errstate(over="ignore"):
        x = x.astype(dtype)
    check_lowering(lambda a: [R.Lgamma(x=a), R.Digamma(x=a)], x)


@pytest.mark.parametrize("dtype", [np.float32, np.float64], ids=ids)
def test_next_after_and_approximate_equal(dtype) -> None:
    g = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 0.5, 1e-45, -3.0]
    x = np.array([p for p in g for _ in g], dtype)
    y = np.array([q for _ in g for q in g], dtype)
    check_lowering(lambda a, b: [R.NextAfter(x1=a, x2=b), R.ApproximateEqual(x=a, y=b, tolerance=0.6),
                                 R.ApproximateEqual(x=a, y=b)], x, y)


def test_compiled_on_the_cpu_backend_matches_tf() -> None:
    """Every rule of this family through ``tfxla_plugin.function(jit_compile=True)`` (f32: the
    backend's vectorized log/sin/exp are a little less accurate than libm, so lgamma near its zeros,
    where it cancels, gets an absolute tolerance of 5e-6)."""
    import tfxla_plugin

    rng = np.random.default_rng(0)
    x = tf.constant(rng.uniform(-3, 3, 37).astype(np.float32))
    i = tf.constant(np.arange(-18, 19, dtype=np.int32) * 12345)
    s = tf.constant(np.arange(37, dtype=np.int32) - 2)

    def fn(x, i, s):
        return [R.Atan(x=x), R.Asin(x=x / 3), R.Acos(x=x / 3), R.Asinh(x=x), R.Acosh(x=x + 3), R.Atanh(x=x / 4),
                R.Sinh(x=x), R.Cosh(x=x), R.Xdivy(x=x, y=x + 1), R.Xlogy(x=x, y=tf.abs(x)),
                R.Xlog1py(x=x, y=tf.abs(x)), R.Digamma(x=x), R.NextAfter(x1=x, x2=tf.zeros_like(x)),
                R.ApproximateEqual(x=x, y=x * 1.1), R.ReciprocalGrad(y=x, dy=x + 1),
                R.SoftplusGrad(gradients=x, features=x * 2), R.SoftsignGrad(gradients=x, features=x * 2),
                R.LeftShift(x=i, y=s), R.RightShift(x=i, y=s), R.Invert(x=i), R.PopulationCount(x=i),
                R.Mod(x=i, y=s * 0 + 7), R.Lgamma(x=x)]
    got, want = tfxla_plugin.function(fn, jit_compile=True)(x, i, s), fn(x, i, s)
    for k, (g, w) in enumerate(zip(got, want)):
        g, w = g.numpy(), w.numpy()
        if g.dtype.kind == "f":
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=5e-6 if k == len(want) - 1 else 1e-6, err_msg=str(k))
        else:
            np.testing.assert_array_equal(g, w, err_msg=str(k))


def test_erfinv_f32() -> None:
    v = [0.0, -0.0, 1.0, -1.0, 0.5, -0.5, 0.9, 0.99, 0.999, 0.99999, -0.9999999, 1e-30, 1e-5, 1.5, -2.0, np.inf, np.nan]
    x = np.array(v + list(np.random.default_rng(2).uniform(-1, 1, 60)), np.float32)
    check_lowering(lambda a: R.Erfinv(x=a), x)
