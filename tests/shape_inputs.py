"""Seeded test inputs for the shape/data-movement lowering tests: every dtype the rules declare,
floats sprinkled with NaN, +-inf and -0.0 so data movement is seen to carry them unchanged."""

from __future__ import annotations

import numpy as np

import hlo

BF16 = np.dtype(hlo.PrimitiveType.BF16.numpy)
FLOAT_DTYPES = [np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16), BF16]
INT_DTYPES = [np.dtype(np.int32), np.dtype(np.int64), np.dtype(np.int8), np.dtype(np.uint8)]
ALL_DTYPES = FLOAT_DTYPES + INT_DTYPES + [np.dtype(np.bool_)]
NUMERIC_DTYPES = FLOAT_DTYPES + INT_DTYPES
SPECIALS = np.array([np.nan, np.inf, -np.inf, -0.0])


def dtype_id(dtype) -> str:
    return "bfloat16" if np.dtype(dtype) == BF16 else np.dtype(dtype).name


def sample(dtype, shape, seed: int = 0, specials: bool = True, low: int = -50, high: int = 50) -> np.ndarray:
    """Random values of ``dtype``: normals for floats (with specials), integers in [low, high) for ints
    (clipped to the type's range), coin flips for bool."""
    rng = np.random.default_rng(seed)
    dtype = np.dtype(dtype)
    shape = tuple(shape)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype in FLOAT_DTYPES:
        x = rng.standard_normal(shape) * 4
        if specials and x.size >= 4:
            flat = x.reshape(-1)
            flat[rng.choice(flat.size, 4, replace=False)] = SPECIALS
        return x.astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(max(low, info.min), min(high, int(info.max) + 1), shape).astype(dtype)
