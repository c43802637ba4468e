"""The elementwise math XLA expands (hlo/lowering/ops/elementwise_math.py) against TF eager, with
special values (signed zeros, +-1, infinities, NaN, tiny and huge magnitudes) in every float type.

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
