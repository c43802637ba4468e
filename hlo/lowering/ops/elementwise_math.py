"""Elementwise math that XLA expands into other HLO ops: inverse and hyperbolic trigonometry, the
``x == 0 ? 0 : ...`` family, shifts and bit counts, and a few activation gradients.

Formulas are XLA's (xla/client/lib/math.cc and the functional_algorithms expansions XLA uses), so
NaN, infinities and signed zeros behave as under ``jit_compile=True``; f16/bf16 compute in f32:

* ``Atan(x) = atan2(x, 1)``; ``Asin(x) = 2 atan2(x, 1 + sqrt(1 - x^2))``;
  ``Acos(x) = 2 atan2(sqrt(1 - x^2), 1 + x)`` (pi at x = -1). |x| > 1 gives NaN.
* ``Asinh(x) = sign(x) * log1p(a + a^2 / (1 + sqrt(1 + a^2)))``, ``a = |x|``, and
  ``sign(x) * (log 2 + log a)`` once ``a^2`` would overflow (``a >= sqrt(max)``).
* ``Acosh(x) = log1p(sqrt(x - 1) * (sqrt(x + 1) + sqrt(x - 1)))``, ``log 2 + log x`` for
  ``x >= max / 2``; NaN below 1.
* ``Atanh(x) = (log1p(x) - log1p(-x)) / 2``: +-inf at +-1, NaN beyond.
* ``Sinh(x) = e/2 + e / (2 (e + 1))`` with ``e = expm1(x)`` for ``|x| < 1`` (keeps accuracy near 0 and
  the sign of -0), else ``exp(x + log 1/2) - exp(-x + log 1/2)``; ``Cosh(x) = exp(x + log 1/2) +
  exp(-x + log 1/2)`` (no overflow before the result does).
* ``Xdivy``/``Xlogy``/``Xlog1py``: +0 where ``x == 0`` (also for y = 0, inf or NaN), else
  ``x / y``, ``x * log(y)``, ``x * log1p(y)``.
* ``LeftShift``/``RightShift`` clamp the shift amount to ``[0, bits - 1]`` as TF's kernels do (HLO's
  shifts give 0 or the sign fill beyond the width); RightShift is arithmetic for signed types.
* ``Mod`` is C's ``%`` / ``fmod`` (TF's Mod is TruncateMod).
"""

from __future__ import annotations

import math
from typing import Callable

import ml_dtypes
import numpy as np

from hlo.builder import Value
from hlo.dtypes import PrimitiveType as P
from hlo.lowering.context import LoweringContext
from hlo.lowering.registry import register_lowering
from hlo.lowering.tf_types import FLOATS, INTS
from hlo.opcodes import Opcode

_F32_OR_WIDER = frozenset({P.F32, P.F64})


def upcast(fn: Callable) -> Callable:
    """A unary float rule computed in f32 for f16/bf16 inputs, rounded once."""
    def lower(ctx: LoweringContext) -> Value:
        (x,) = ctx.inputs
        dtype = ctx.dtype(x)
        wide = ctx.convert(x, dtype if dtype in _F32_OR_WIDER else P.F32)
        return ctx.convert(fn(ctx, wide), dtype)
    lower.__name__ = fn.__name__
    lower.__doc__ = fn.__doc__
    return lower


def _max_finite(dtype: P) -> float:
    return float(ml_dtypes.finfo(dtype.numpy).max)


def _unary(*names: str) -> Callable[[Callable], Callable]:
    def register(fn: Callable) -> Callable:
        return register_lowering(*names, dtypes=FLOATS)(upcast(fn))
    return register


@_unary("Atan")
def atan(ctx: LoweringContext, x: Value) -> Value:
    return ctx.b.atan2(x, ctx.full(1, x))


def _sqrt_one_minus_square(ctx: LoweringContext, x: Value) -> Value:
    one = ctx.full(1, x)
    return ctx.b.sqrt(ctx.b.multiply(ctx.b.subtract(one, x), ctx.b.add(one, x)))


@_unary("Asin")
def asin(ctx: LoweringContext, x: Value) -> Value:
    one = ctx.full(1, x)
    denominator = ctx.b.add(one, _sqrt_one_minus_square(ctx, x))
    return ctx.b.multiply(ctx.full(2, x), ctx.b.atan2(x, denominator))


@_unary("Acos")
def acos(ctx: LoweringContext, x: Value) -> Value:
    one = ctx.full(1, x)
    general = ctx.b.multiply(ctx.full(2, x), ctx.b.atan2(_sqrt_one_minus_square(ctx, x), ctx.b.add(one, x)))
    return ctx.b.select(ctx.compare(x, ctx.full(-1, x), "EQ"), ctx.full(math.pi, x), general)


@_unary("Asinh")
def asinh(ctx: LoweringContext, x: Value) -> Value:
    b = ctx.b
    a = b.abs(x)
    one = ctx.full(1, x)
    square = b.multiply(a, a)
    small = b.log_plus_one(b.add(a, b.divide(square, b.add(one, b.sqrt(b.add(one, square))))))
    large = b.add(ctx.full(math.log(2), x), b.log(a))
    huge = ctx.compare(a, ctx.full(math.sqrt(_max_finite(ctx.dtype(x))), x), "GE")
    return b.multiply(b.sign(x), b.select(huge, large, small))


@_unary("Acosh")
def acosh(ctx: LoweringContext, x: Value) -> Value:
    b = ctx.b
    one = ctx.full(1, x)
    below = b.sqrt(b.subtract(x, one))
    general = b.log_plus_one(b.multiply(below, b.add(b.sqrt(b.add(x, one)), below)))
    large = b.add(ctx.full(math.log(2), x), b.log(x))
    huge = ctx.compare(x, ctx.full(_max_finite(ctx.dtype(x)) / 2, x), "GE")
    return b.select(huge, large, general)


@_unary("Atanh")
def atanh(ctx: LoweringContext, x: Value) -> Value:
    b = ctx.b
    result = b.multiply(b.subtract(b.log_plus_one(x), b.log_plus_one(b.negate(x))), ctx.full(0.5, x))
    outside = ctx.compare(b.abs(x), ctx.full(1, x), "GT")
    return b.select(outside, ctx.full(np.nan, x), result)


def _half_exps(ctx: LoweringContext, x: Value) -> tuple[Value, Value]:
    """``exp(x) / 2`` and ``exp(-x) / 2`` as ``exp(+-x + log 1/2)``."""
    log_half = ctx.full(math.log(0.5), x)
    return ctx.b.exponential(ctx.b.add(x, log_half)), ctx.b.exponential(ctx.b.add(ctx.b.negate(x), log_half))


@_unary("Sinh")
def sinh(ctx: LoweringContext, x: Value) -> Value:
    b = ctx.b
    up, down = _half_exps(ctx, x)
    large = b.subtract(up, down)
    e = b.exponential_minus_one(x)
    half = ctx.full(0.5, x)
    small = b.add(b.multiply(half, e), b.divide(b.multiply(half, e), b.add(e, ctx.full(1, x))))
    return b.select(ctx.compare(b.abs(x), ctx.full(1, x), "LT"), small, large)


@_unary("Cosh")
def cosh(ctx: LoweringContext, x: Value) -> Value:
    up, down = _half_exps(ctx, x)
    return ctx.b.add(up, down)


# --- x == 0 ? 0 : f(x, y) ------------------------------------------------------------------------------

_ZERO_X = {
    "Xdivy": lambda ctx, x, y: ctx.b.divide(x, y),
    "Xlogy": lambda ctx, x, y: ctx.b.multiply(x, ctx.b.log(y)),
    "Xlog1py": lambda ctx, x, y: ctx.b.multiply(x, ctx.b.log_plus_one(y)),
}


def _zero_x(fn: Callable) -> Callable:
    def lower(ctx: LoweringContext) -> Value:
        x, y = ctx.broadcast_all(*ctx.inputs)
        return ctx.b.select(ctx.compare(x, ctx.full(0, x), "EQ"), ctx.full(0, x), fn(ctx, x, y))
    return lower


for _op, _fn in _ZERO_X.items():
    register_lowering(_op, dtypes=FLOATS)(_zero_x(_fn))


# --- integers ------------------------------------------------------------------------------------------


def _shift(opcode_for: Callable[[P], Opcode]) -> Callable[[LoweringContext], Value]:
    def lower(ctx: LoweringContext) -> Value:
        x, y = ctx.broadcast_all(*ctx.inputs)
        bits = ctx.dtype(x).bit_width
        amount = ctx.b.clamp(ctx.full(0, y), y, ctx.full(bits - 1, y))
        return ctx.b.op(opcode_for(ctx.dtype(x)), x, amount)
    return lower


register_lowering("LeftShift", dtypes=INTS)(_shift(lambda t: Opcode.SHIFT_LEFT))
register_lowering("RightShift", dtypes=INTS)(_shift(
    lambda t: Opcode.SHIFT_RIGHT_LOGICAL if t.is_unsigned_int else Opcode.SHIFT_RIGHT_ARITHMETIC))


@register_lowering("Invert", dtypes=INTS)
def invert(ctx: LoweringContext) -> Value:
    (x,) = ctx.inputs
    return ctx.b.not_(x)


@register_lowering("PopulationCount", dtypes=INTS)
def population_count(ctx: LoweringContext) -> Value:
    (x,) = ctx.inputs
    return ctx.convert(ctx.b.popcnt(x), P.U8)


@register_lowering("Mod", dtypes=frozenset({P.F32, P.F64, P.S32, P.S64}))
def mod(ctx: LoweringContext) -> Value:
    x, y = ctx.inputs
    return ctx.binary(Opcode.REMAINDER, x, y)


# --- gradients -----------------------------------------------------------------------------------------


@register_lowering("ReciprocalGrad", "InvGrad", dtypes=FLOATS)
def reciprocal_grad(ctx: LoweringContext) -> Value:
    """``(-y * dy) * y`` for ``y = 1 / x``, and +0 where ``dy == 0`` (TF's kernel: no NaN from inf * 0)."""
    y, dy = ctx.inputs
    grad = ctx.b.multiply(ctx.b.multiply(ctx.b.negate(y), dy), y)
    return ctx.b.select(ctx.compare(dy, ctx.full(0, dy), "EQ"), ctx.full(0, dy), grad)


@register_lowering("SoftplusGrad", dtypes=FLOATS)
def softplus_grad(ctx: LoweringContext) -> Value:
    """``gradients / (exp(-features) + 1)``."""
    g, f = ctx.inputs
    return ctx.b.divide(g, ctx.b.add(ctx.b.exponential(ctx.b.negate(f)), ctx.full(1, f)))


@register_lowering("SoftsignGrad", dtypes=FLOATS)
def softsign_grad(ctx: LoweringContext) -> Value:
    """``gradients / (1 + |features|)^2``."""
    g, f = ctx.inputs
    d = ctx.b.add(ctx.full(1, f), ctx.b.abs(f))
    return ctx.b.divide(g, ctx.b.multiply(d, d))
