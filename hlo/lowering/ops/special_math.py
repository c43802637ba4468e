"""Special functions as XLA expands them (xla/client/lib/math.cc), f16/bf16 computed in f32:

* ``Lgamma``: the Lanczos approximation (g = 7, 9 terms) of ``log|gamma(x)|``, with Euler's
  reflection ``log(pi) - lgamma(1 - x) - log|sin(pi x)|`` below 1/2 (``sin`` taken of the reduced
  fractional part, so it is exactly 0, and the result +inf, at the poles); ``lgamma(+-inf) = +inf``.
* ``Digamma``: the derivative of the same approximation, reflected with ``- pi cot(pi x)``
  below 1/2; NaN at the poles (zero and the negative integers).
* ``Erfinv``: Giles' single-precision approximation ("Approximating the erfinv function"), a degree-8
  polynomial in ``w - 2.5`` or ``sqrt(w) - 3`` for ``w = -log1p(-x^2)`` below or above 5, times ``x``;
  +-inf at +-1, NaN beyond. f64 is TF's own kernel's ``ndtri``-based formula (``ndtri.py``);
  there are no f16/bf16 kernels in TF.
* ``NextAfter(x, y)``: the float after ``x`` towards ``y`` by stepping its bit pattern (NaN if either
  is NaN, ``y`` if they are equal, the smallest subnormal with ``y``'s sign from zero).
* ``ApproximateEqual(x, y)``: ``|x - y| < tolerance``.
"""

from __future__ import annotations

import math

import numpy as np

from hlo.builder import Value
from hlo.dtypes import PrimitiveType as P
from hlo.lowering.context import LoweringContext
from hlo.lowering.ops.elementwise_math import upcast
from hlo.lowering.registry import register_lowering
from hlo.shapes import Shape

_LANCZOS_G = 7.0
_LANCZOS_BASE = 0.99999999999980993227684700473478
_LANCZOS = (676.520368121885098567009190444019, -1259.13921672240287047156078755283,
            771.3234287776530788486528258894, -176.61502916214059906584551354,
            12.507343278686904814458936853, -0.13857109526572011689554707,
            9.984369578019570859563e-6, 1.50563273514931155834e-7)


def _reflect_and_shift(ctx: LoweringContext, x: Value) -> tuple[Value, Value]:
    """``(x < 1/2, z)`` with ``z = -x`` where reflected, else ``x - 1``."""
    reflect = ctx.compare(x, ctx.full(0.5, x), "LT")
    return reflect, ctx.b.select(reflect, ctx.b.negate(x), ctx.b.subtract(x, ctx.full(1, x)))


def _log_t(ctx: LoweringContext, z: Value) -> tuple[Value, Value]:
    """``t = g + 1/2 + z`` and ``log t`` as ``log(g + 1/2) + log1p(z / (g + 1/2))``."""
    gh = ctx.full(_LANCZOS_G + 0.5, z)
    t = ctx.b.add(gh, z)
    return t, ctx.b.add(ctx.full(math.log(_LANCZOS_G + 0.5), z), ctx.b.log_plus_one(ctx.b.divide(z, gh)))


@upcast
def _lgamma(ctx: LoweringContext, x: Value) -> Value:
    b = ctx.b
    reflect, z = _reflect_and_shift(ctx, x)
    series = ctx.full(_LANCZOS_BASE, x)
    for i, coefficient in enumerate(_LANCZOS):
        series = b.add(series, b.divide(ctx.full(coefficient, x), b.add(z, ctx.full(i + 1, x))))
    t, log_t = _log_t(ctx, z)
    # (z + 1/2) log t - t, as (z + 1/2 - t / log t) log t so that it does not overflow first
    log_y = b.add(b.add(ctx.full((math.log(2) + math.log(math.pi)) / 2, x),
                        b.multiply(b.subtract(b.add(z, ctx.full(0.5, x)), b.divide(t, log_t)), log_t)),
                  b.log(series))
    a = b.abs(x)
    frac = b.subtract(a, b.floor(a))
    frac = b.select(ctx.compare(frac, ctx.full(0.5, x), "GT"), b.subtract(ctx.full(1, x), frac), frac)
    denominator = b.log(b.sine(b.multiply(ctx.full(math.pi, x), frac)))
    reflection = b.select(b.is_finite(denominator),
                          b.subtract(b.subtract(ctx.full(math.log(math.pi), x), denominator), log_y),
                          b.negate(denominator))
    result = b.select(reflect, reflection, log_y)
    is_inf = ctx.compare(a, ctx.full(np.inf, x), "EQ")
    return b.select(is_inf, ctx.full(np.inf, x), result)


@upcast
def _digamma(ctx: LoweringContext, x: Value) -> Value:
    b = ctx.b
    reflect, z = _reflect_and_shift(ctx, x)
    num, denom = ctx.full(0, x), ctx.full(_LANCZOS_BASE, x)
    for i, coefficient in enumerate(_LANCZOS):
        shifted = b.add(z, ctx.full(i + 1, x))
        c = ctx.full(coefficient, x)
        num = b.subtract(num, b.divide(c, b.multiply(shifted, shifted)))
        denom = b.add(denom, b.divide(c, shifted))
    t, log_t = _log_t(ctx, z)
    y = b.subtract(b.add(log_t, b.divide(num, denom)), b.divide(ctx.full(_LANCZOS_G, x), t))
    reduced = b.add(x, b.abs(b.floor(b.add(x, ctx.full(0.5, x)))))  # into [-1/2, 1/2] for pi * x
    angle = b.multiply(ctx.full(math.pi, x), reduced)
    reflection = b.subtract(y, b.divide(b.multiply(ctx.full(math.pi, x), b.cosine(angle)), b.sine(angle)))
    result = b.select(reflect, reflection, y)
    pole = b.and_(ctx.compare(x, ctx.full(0, x), "LE"), ctx.compare(x, b.floor(x), "EQ"))
    return b.select(pole, ctx.full(np.nan, x), result)


_ERFINV_SMALL_W = (2.81022636e-08, 3.43273939e-07, -3.5233877e-06, -4.39150654e-06, 0.00021858087,
                   -0.00125372503, -0.00417768164, 0.246640727, 1.50140941)
_ERFINV_LARGE_W = (-0.000200214257, 0.000100950558, 0.00134934322, -0.00367342844, 0.00573950773,
                   -0.0076224613, 0.00943887047, 1.00167406, 2.83297682)


@upcast
def _erfinv(ctx: LoweringContext, x: Value) -> Value:
    b = ctx.b
    w = b.negate(b.log_plus_one(b.negate(b.multiply(x, x))))
    small = ctx.compare(w, ctx.full(5.0, x), "LT")
    w = b.select(small, b.subtract(w, ctx.full(2.5, x)), b.subtract(b.sqrt(w), ctx.full(3.0, x)))
    p = None
    for lo, hi in zip(_ERFINV_SMALL_W, _ERFINV_LARGE_W):
        c = b.select(small, ctx.full(np.float32(lo), x), ctx.full(np.float32(hi), x))
        p = c if p is None else b.add(c, b.multiply(p, w))
    assert p is not None
    at_one = ctx.compare(b.abs(x), ctx.full(1, x), "EQ")
    return b.select(at_one, b.multiply(x, ctx.full(np.inf, x)), b.multiply(p, x))


def _erfinv_rule(ctx: LoweringContext) -> Value:
    """f32: Giles' approximation (XLA's); f64: TF's own kernel, ``ndtri`` based (ndtri.py)."""
    from hlo.lowering.ops.ndtri import erfinv_f64

    if ctx.dtype(ctx.inputs[0]) == P.F64:
        return erfinv_f64(ctx, ctx.inputs[0])
    return _erfinv(ctx)


register_lowering("Erfinv", dtypes=frozenset({P.F32, P.F64}))(_erfinv_rule)  # TF: f32, f64 kernels only
_TF_CPU = frozenset({P.F16, P.F32, P.F64})  # TF has no bf16 kernels for these
register_lowering("Lgamma", dtypes=_TF_CPU)(_lgamma)
register_lowering("Digamma", dtypes=_TF_CPU)(_digamma)

_BITS = {P.F16: P.U16, P.BF16: P.U16, P.F32: P.U32, P.F64: P.U64}


@register_lowering("NextAfter", dtypes=frozenset({P.F32, P.F64}))
def next_after(ctx: LoweringContext) -> Value:
    x, y = ctx.broadcast_all(*ctx.inputs)
    b = ctx.b
    dtype, dims = ctx.dtype(x), ctx.dims(x)
    utype = _BITS[dtype]
    bits = b.bitcast_convert(x, shape=Shape.array(utype, dims))
    one = ctx.full(1, bits)
    up = b.not_(b.xor(ctx.compare(x, y, "LT"), ctx.compare(x, ctx.full(0, x), "GT")))  # |x| grows
    stepped = b.select(up, b.add(bits, one), b.subtract(bits, one))
    sign_of_y = b.and_(b.bitcast_convert(y, shape=Shape.array(utype, dims)), ctx.full(1 << (dtype.bit_width - 1), bits))
    stepped = b.select(ctx.compare(x, ctx.full(0, x), "EQ"), b.or_(sign_of_y, one), stepped)
    result = b.select(ctx.compare(x, y, "EQ"), y, b.bitcast_convert(stepped, shape=Shape.array(dtype, dims)))
    either_nan = b.or_(ctx.compare(x, x, "NE"), ctx.compare(y, y, "NE"))
    return b.select(either_nan, ctx.full(np.nan, x), result)


@register_lowering("ApproximateEqual", dtypes=frozenset({P.F32, P.F64}))
def approximate_equal(ctx: LoweringContext) -> Value:
    x, y = ctx.broadcast_all(*ctx.inputs)
    tolerance = ctx.full(np.float32(ctx.attr_float("tolerance", 1e-5)), x)
    return ctx.compare(ctx.b.abs(ctx.b.subtract(x, y)), tolerance, "LT")
