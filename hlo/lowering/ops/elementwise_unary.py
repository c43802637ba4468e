"""Elementwise unary ops and activations: tables from TF op type to HLO, then the ops that need a formula.

Semantics are TF CPU's (Eigen), checked eagerly:
* ``Sign(-0.0)`` is ``+0.0``; ``Sign(NaN)`` is NaN.
* ``Round`` rounds half to even (like ``Rint``) and is the identity on integers, as TF
  documents and ``tf.math.round`` does (TF >= 2.17's CPU kernel returns zeros for
  integer ``Round``, a known bug: tensorflow/tensorflow#74789).
* ``Relu``/``Relu6`` are ``std::max``/``std::min`` chains: NaN passes through, ``Relu(-0.0)`` is ``-0.0``.
* ``LeakyRelu`` is ``x > 0 ? x : alpha * x`` (any alpha, also > 1 or negative).
* ``Softplus`` uses TF's thresholds ``log(eps) + 2`` of the dtype: ``x`` above ``-threshold``,
  ``exp(x)`` below ``threshold``, ``log1p(exp(x))`` between.
* ``Elu``/``Selu`` use ``expm1`` where TF's kernel computes ``exp(x) - 1``; the results
  agree to within one ulp of 1.0 and ours keep relative accuracy near zero.
* ``Erf(+-inf)`` is +-1 in every dtype (TF's f64 kernel returns NaN for |x| > 1.3e154, an
  Eigen bug: tensorflow/tensorflow#125596).
* ``Erfc`` keeps relative accuracy in the tail (see ``erfc``); f16/bf16 compute in f32.
"""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from hlo.builder import Value
from hlo.dtypes import PrimitiveType as P
from hlo.lowering.context import LoweringContext
from hlo.lowering.lists import ListValue, zeros_like_list
from hlo.lowering.ops._elementwise_util import BOOL, clear_low_bits, std_max, std_min, zero_where
from hlo.lowering.registry import Rule, register_lowering
from hlo.lowering.tf_types import ALL, COMPLEX, FLOATS, NUMERIC, SIGNED_INTS
from hlo.opcodes import Opcode

# TF ops that are exactly one HLO opcode, with the dtypes TF has kernels for.
_DIRECT = {
    "Neg": (Opcode.NEGATE, FLOATS | SIGNED_INTS | COMPLEX),
    "Abs": (Opcode.ABS, FLOATS | SIGNED_INTS),  # Abs(INT_MIN) wraps to INT_MIN, as in TF
    "Floor": (Opcode.FLOOR, FLOATS),
    "Ceil": (Opcode.CEIL, FLOATS),
    "Rint": (Opcode.ROUND_NEAREST_EVEN, frozenset({P.F32, P.F64})),
    "Exp": (Opcode.EXPONENTIAL, FLOATS | COMPLEX),
    "Log": (Opcode.LOG, FLOATS | COMPLEX),
    "Sqrt": (Opcode.SQRT, FLOATS | COMPLEX),
    "Rsqrt": (Opcode.RSQRT, FLOATS | COMPLEX),
    "Sin": (Opcode.SINE, FLOATS | COMPLEX),
    "Cos": (Opcode.COSINE, FLOATS | COMPLEX),
    "Tan": (Opcode.TAN, FLOATS | COMPLEX),
    "Tanh": (Opcode.TANH, FLOATS | COMPLEX),
    "Sigmoid": (Opcode.LOGISTIC, FLOATS),
    "Erf": (Opcode.ERF, FLOATS),
    "IsFinite": (Opcode.IS_FINITE, FLOATS),
    "LogicalNot": (Opcode.NOT, BOOL),
}


def _direct(opcode: Opcode) -> Rule:
    def lower(ctx: LoweringContext) -> Value:
        (x,) = ctx.inputs
        return ctx.b.op(opcode, x)
    return lower


for _op, (_opcode, _dtypes) in _DIRECT.items():
    register_lowering(_op, dtypes=_dtypes)(_direct(_opcode))


@register_lowering("Sign", dtypes=FLOATS | SIGNED_INTS | COMPLEX)
def sign(ctx: LoweringContext) -> Value:
    (x,) = ctx.inputs
    return zero_where(ctx, ctx.compare(x, ctx.full(0, x), "EQ"), ctx.b.sign(x))  # -0 -> +0


@register_lowering("Round", dtypes=FLOATS | {P.S32, P.S64})
def round_(ctx: LoweringContext) -> Value:
    (x,) = ctx.inputs
    return x if ctx.dtype(x).is_integral else ctx.b.round_nearest_even(x)


@register_lowering("Square", dtypes=NUMERIC | COMPLEX)
def square(ctx: LoweringContext) -> Value:
    (x,) = ctx.inputs
    return ctx.b.multiply(x, x)


@register_lowering("Reciprocal", "Inv", dtypes=FLOATS | COMPLEX)
def reciprocal(ctx: LoweringContext) -> Value:
    (x,) = ctx.inputs
    return ctx.b.divide(ctx.full(1, x), x)


@register_lowering("IsNan", dtypes=FLOATS)
def is_nan(ctx: LoweringContext) -> Value:
    (x,) = ctx.inputs
    return ctx.compare(x, x, "NE")


@register_lowering("IsInf", dtypes=FLOATS)
def is_inf(ctx: LoweringContext) -> Value:
    (x,) = ctx.inputs
    return ctx.compare(ctx.b.abs(x), ctx.full(np.inf, x), "EQ")


def _fill_like(value: int) -> Rule:
    def lower(ctx: LoweringContext) -> Value | ListValue:
        (x,) = ctx.inputs
        if isinstance(x, ListValue):  # ZerosLike of a TensorList (gradients): a list of zeros
            return zeros_like_list(ctx, x)
        return ctx.full(value, x)
    return lower


for _op, _value in {"ZerosLike": 0, "OnesLike": 1}.items():
    register_lowering(_op, dtypes=ALL, lists=_op == "ZerosLike")(_fill_like(_value))


# --- activations ----------------------------------------------------------------------


@register_lowering("Relu", dtypes=NUMERIC)
def relu(ctx: LoweringContext) -> Value:
    (x,) = ctx.inputs
    return std_max(ctx, x, ctx.full(0, x))


@register_lowering("Relu6", dtypes=NUMERIC)
def relu6(ctx: LoweringContext) -> Value:
    (x,) = ctx.inputs
    return std_min(ctx, std_max(ctx, x, ctx.full(0, x)), ctx.full(6, x))


def _where_negative(ctx: LoweringContext, x: Value, negative: Value, positive: Value) -> Value:
    return ctx.b.select(ctx.compare(x, ctx.full(0, x), "LT"), negative, positive)


@register_lowering("Elu", dtypes=FLOATS)
def elu(ctx: LoweringContext) -> Value:
    (x,) = ctx.inputs
    return _where_negative(ctx, x, ctx.b.exponential_minus_one(x), x)


_SELU_SCALE = 1.0507009873554804934193349852946
_SELU_ALPHA = 1.6732632423543772848170429916717


@register_lowering("Selu", dtypes=FLOATS)
def selu(ctx: LoweringContext) -> Value:
    (x,) = ctx.inputs
    negative = ctx.b.multiply(ctx.full(_SELU_SCALE * _SELU_ALPHA, x), ctx.b.exponential_minus_one(x))
    return _where_negative(ctx, x, negative, ctx.b.multiply(ctx.full(_SELU_SCALE, x), x))


@register_lowering("LeakyRelu", dtypes=FLOATS)
def leaky_relu(ctx: LoweringContext) -> Value:
    (x,) = ctx.inputs
    alpha = ctx.full(np.float32(ctx.attr_float("alpha", 0.2)), x)  # a float attr, rounded to T like TF's cast
    positive = ctx.compare(x, ctx.full(0, x), "GT")
    return ctx.b.select(positive, x, ctx.b.multiply(alpha, x))


@register_lowering("Softsign", dtypes=FLOATS)
def softsign(ctx: LoweringContext) -> Value:
    (x,) = ctx.inputs
    return ctx.b.divide(x, ctx.b.add(ctx.full(1, x), ctx.b.abs(x)))


def _softplus_threshold(dtype: P) -> float:
    """TF's ``log(epsilon) + 2``, computed in the dtype."""
    dt = dtype.numpy
    eps = np.asarray(ml_dtypes.finfo(dt).eps, dt)
    return float((np.log(eps).astype(dt) + np.asarray(2, dt)).astype(dt))


@register_lowering("Softplus", dtypes=FLOATS)
def softplus(ctx: LoweringContext) -> Value:
    (x,) = ctx.inputs
    threshold = _softplus_threshold(ctx.dtype(x))
    ex = ctx.b.exponential(x)
    too_small = ctx.compare(x, ctx.full(threshold, x), "LT")
    too_large = ctx.compare(x, ctx.full(-threshold, x), "GT")
    return ctx.b.select(too_large, x, ctx.b.select(too_small, ex, ctx.b.log_plus_one(ex)))


# --- erfc -------------------------------------------------------------------------------

# Per compute type: (below this |x| use 1 - erf(x), continued-fraction terms, |x| where erfc is 0,
# mantissa bits to clear so that the high part of |x| squares exactly).
_ERFC = {P.F32: (1.0, 20, 11.0, 12), P.F64: (2.0, 20, 28.0, 27)}


def _exp_minus_square(ctx: LoweringContext, a: Value) -> Value:
    """``exp(-a*a)`` without the rounding error of ``a*a``: ``a = hi + lo`` with ``hi*hi`` exact."""
    hi = clear_low_bits(ctx, a, _ERFC[ctx.dtype(a)][3])
    lo = ctx.b.subtract(a, hi)
    main = ctx.b.exponential(ctx.b.negate(ctx.b.multiply(hi, hi)))
    rest = ctx.b.exponential(ctx.b.negate(ctx.b.multiply(lo, ctx.b.add(a, hi))))
    return ctx.b.multiply(main, rest)


def _erfc_tail(ctx: LoweringContext, a: Value) -> Value:
    """erfc(a) for a >= threshold: exp(-a^2)/sqrt(pi) * 2a / (2a^2+1 - 1*2/(2a^2+5 - 3*4/(2a^2+9 - ...)))."""
    b = ctx.b
    terms = _ERFC[ctx.dtype(a)][1]
    z = b.multiply(ctx.full(2, a), b.multiply(a, a))
    t = b.add(z, ctx.full(4 * terms + 1, a))
    for k in range(terms, 0, -1):
        t = b.subtract(b.add(z, ctx.full(4 * k - 3, a)), b.divide(ctx.full((2 * k - 1) * 2 * k, a), t))
    ratio = b.divide(b.multiply(ctx.full(2 / math.sqrt(math.pi), a), a), t)
    return b.multiply(_exp_minus_square(ctx, a), ratio)


@register_lowering("Erfc", dtypes=FLOATS)
def erfc(ctx: LoweringContext) -> Value:
    """``1 - erf(x)`` near zero (no cancellation there), a continued fraction in the tails.

    Relative error about 1e-7 in f32 and 1e-14 in f64 everywhere erfc is normal.
    """
    (x,) = ctx.inputs
    dtype = ctx.dtype(x)
    xc = ctx.convert(x, P.F64 if dtype == P.F64 else P.F32)
    threshold, _, zero_at, _ = _ERFC[ctx.dtype(xc)]
    b = ctx.b
    a = b.abs(xc)
    near = b.subtract(ctx.full(1, xc), b.erf(xc))
    tail = _erfc_tail(ctx, b.minimum(a, ctx.full(zero_at, a)))  # NaN stays NaN, inf gives 0
    tail = _where_negative(ctx, xc, b.subtract(ctx.full(2, xc), tail), tail)
    result = b.select(ctx.compare(a, ctx.full(threshold, a), "LT"), near, tail)
    return ctx.convert(result, dtype)
