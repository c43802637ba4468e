"""Ndtri (the inverse of the standard normal CDF) and the float64 Erfinv, as TF's CPU kernels compute
them: Eigen's ``generic_ndtri`` (the Cephes approximations) and TF's ``erfinv(x) = ndtri((x + 1) / 2)
/ sqrt(2)`` (``scalar_erfinv_op``).

With ``e = exp(-2)``: for ``e < b`` (``b = a`` below ``1 - e``, else ``1 - a``), ``c = b - 1/2``,
``ndtri = (c + c * c^2 * P0(c^2) / Q0(c^2)) * sqrt(2 pi)``; else ``x = sqrt(-2 log b)`` and
``ndtri = (x - log(x) / x) - z P(z) / Q(z)`` (``z = 1/x``) with the (P1, Q1) pair below ``x = 8`` and (P2, Q2)
above, negated where ``a < 1 - e``. ``ndtri(0) = -inf``, ``ndtri(1) = +inf``, NaN outside [0, 1].
Polynomials are evaluated by Horner's rule from the highest coefficient, as Eigen's ``ppolevl``.
f16/bf16 Ndtri is computed in float32 and rounded once (TF computes those in their own type).
"""

from __future__ import annotations

import math

import numpy as np

from hlo.builder import Value
from hlo.lowering.context import LoweringContext
from hlo.lowering.ops.elementwise_math import upcast
from hlo.lowering.registry import register_lowering
from hlo.lowering.tf_types import FLOATS

_P0 = (-5.99633501014107895267e1, 9.80010754185999661536e1, -5.66762857469070293439e1, 1.39312609387279679503e1,
       -1.23916583867381258016e0)
_Q0 = (1.0, 1.95448858338141759834e0, 4.67627912898881538453e0, 8.63602421390890590575e1,
       -2.25462687854119370527e2, 2.00260212380060660359e2, -8.20372256168333339912e1, 1.59056225126211695515e1,
       -1.18331621121330003142e0)
_P1 = (4.05544892305962419923e0, 3.15251094599893866154e1, 5.71628192246421288162e1, 4.40805073893200834700e1,
       1.46849561928858024014e1, 2.18663306850790267539e0, -1.40256079171354495875e-1, -3.50424626827848203418e-2,
       -8.57456785154685413611e-4)
_Q1 = (1.0, 1.57799883256466749731e1, 4.53907635128879210584e1, 4.13172038254672030440e1, 1.50425385692907503408e1,
       2.50464946208309415979e0, -1.42182922854787788574e-1, -3.80806407691578277194e-2, -9.33259480895457427372e-4)
_P2 = (3.23774891776946035970e0, 6.91522889068984211695e0, 3.93881025292474443415e0, 1.33303460815807542389e0,
       2.01485389549179081538e-1, 1.23716634817820021358e-2, 3.01581553508235416007e-4, 2.65806974686737550832e-6,
       6.23974539184983293730e-9)
_Q2 = (1.0, 6.02427039364742014255e0, 3.67983563856160859403e0, 1.37702099489081330271e0, 2.16236993594496635890e-1,
       1.34204006088543189037e-2, 3.28014464682127739104e-4, 2.89247864745380683936e-6, 6.79019408009981274425e-9)
_EXP_NEG_TWO = 0.13533528323661269189


def _poly(ctx: LoweringContext, x: Value, coefficients: tuple[float, ...]) -> Value:
    b = ctx.b
    out = ctx.full(coefficients[0], x)
    for c in coefficients[1:]:
        out = b.add(b.multiply(out, x), ctx.full(c, x))
    return out


def ndtri(ctx: LoweringContext, a: Value) -> Value:
    """Eigen's ``generic_ndtri`` of ``a`` (f32 or f64)."""
    b = ctx.b
    one, half = ctx.full(1, a), ctx.full(0.5, a)
    e = ctx.full(_EXP_NEG_TWO, a)
    flip = ctx.compare(a, b.subtract(one, e), "LE")
    p = b.select(flip, a, b.subtract(one, a))
    # the central interval
    c = b.subtract(p, half)
    c2 = b.multiply(c, c)
    central = b.add(b.multiply(c, b.multiply(c2, b.divide(_poly(ctx, c2, _P0), _poly(ctx, c2, _Q0)))), c)
    central = b.multiply(central, ctx.full(math.sqrt(2 * math.pi), a))
    # the tails
    x = b.sqrt(b.multiply(ctx.full(-2, a), b.log(p)))
    x0 = b.subtract(x, b.divide(b.log(x), x))
    z = b.divide(one, x)
    near = ctx.compare(x, ctx.full(8, a), "LT")
    x1 = b.multiply(z, b.select(near, b.divide(_poly(ctx, z, _P1), _poly(ctx, z, _Q1)),
                                b.divide(_poly(ctx, z, _P2), _poly(ctx, z, _Q2))))
    tail = b.subtract(x0, x1)
    tail = b.select(flip, b.negate(tail), tail)
    out = b.select(ctx.compare(e, p, "LT"), central, tail)
    out = b.select(ctx.compare(a, one, "EQ"), ctx.full(np.inf, a), out)
    return b.select(ctx.compare(a, ctx.full(0, a), "EQ"), ctx.full(-np.inf, a), out)


@register_lowering("Ndtri", dtypes=FLOATS)
@upcast
def ndtri_rule(ctx: LoweringContext, x: Value) -> Value:
    return ndtri(ctx, x)


def erfinv_f64(ctx: LoweringContext, x: Value) -> Value:
    """TF's float64 Erfinv: ``ndtri(x / 2 + 1/2) * sqrt(1/2)``."""
    b = ctx.b
    half = ctx.full(0.5, x)
    return b.multiply(ndtri(ctx, b.add(b.multiply(half, x), half)), ctx.full(math.sqrt(0.5), x))


__all__ = ["erfinv_f64", "ndtri"]
