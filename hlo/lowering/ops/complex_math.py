"""``Pow``, ``Expm1`` and ``Log1p``: one HLO opcode on real types (``power``, ``exponential-minus-one``,
``log-plus-one``), and on complex64/complex128 a formula over the real and imaginary parts (``z = a + bi``),
so every backend that has complex add/multiply/exp/log computes them:

- ``Expm1(z)``: Eigen's, as TF's CPU kernel: ``e = expm1(a)``, real ``e - 2 (e + 1) sin(b / 2)^2``,
  imaginary ``(e + 1) sin(b)`` (no cancellation near 0, where ``exp(z) - 1`` loses every digit).
- ``Log1p(z)``: imaginary ``atan2(b, 1 + a)``; real ``log|1 + z|`` as ``0.5 log1p(a (a + 2) + b^2)``
  where ``|a|, |b| < 0.5`` (accurate near 0, as XLA's), else ``log(m) + 0.5 log1p((n / m)^2)`` with
  ``m, n`` the larger and smaller of ``|1 + a|``, ``|b|`` (no overflow; ``-inf`` at ``z = -1``). TF's CPU
  kernel is less accurate (relative errors to 2e-4 in c64 where ``|z|`` is about 1e-4); this is within
  a few ulp of the exact value, as TF's XLA is.
- ``Pow(x, y)``: ``exp(y log(x))`` after broadcasting (glibc's ``cpow``, which TF's kernel calls); at
  ``x = 0`` the result follows from ``log(0) = -inf``, so ``0^0`` is NaN as in TF.
"""

from __future__ import annotations

from hlo.builder import Value
from hlo.lowering.context import LoweringContext
from hlo.lowering.registry import register_lowering
from hlo.lowering.tf_types import COMPLEX, FLOATS, SIGNED_INTS
from hlo.opcodes import Opcode


def _parts(ctx: LoweringContext, z: Value) -> tuple[Value, Value]:
    return ctx.b.real(z), ctx.b.imag(z)


@register_lowering("Expm1", dtypes=FLOATS | COMPLEX)
def expm1(ctx: LoweringContext) -> Value:
    (z,) = ctx.inputs
    if not ctx.dtype(z).is_complex:
        return ctx.b.op(Opcode.EXPONENTIAL_MINUS_ONE, z)
    b = ctx.b
    re, im = _parts(ctx, z)
    e = b.op(Opcode.EXPONENTIAL_MINUS_ONE, re)
    e1 = b.add(e, ctx.full(1, e))
    half = b.sine(b.multiply(im, ctx.full(0.5, im)))
    real = b.subtract(e, b.multiply(b.multiply(ctx.full(2, e), e1), b.multiply(half, half)))
    return b.complex(real, b.multiply(e1, b.sine(im)))


@register_lowering("Log1p", dtypes=FLOATS | COMPLEX)
def log1p(ctx: LoweringContext) -> Value:
    (z,) = ctx.inputs
    if not ctx.dtype(z).is_complex:
        return ctx.b.op(Opcode.LOG_PLUS_ONE, z)
    b = ctx.b
    re, im = _parts(ctx, z)
    one, half = ctx.full(1, re), ctx.full(0.5, re)
    u = b.add(re, one)
    near = b.multiply(half, b.op(Opcode.LOG_PLUS_ONE, b.add(b.multiply(re, b.add(re, ctx.full(2, re))),
                                                               b.multiply(im, im))))
    au, ab = b.abs(u), b.abs(im)
    m, n = b.maximum(au, ab), b.minimum(au, ab)
    q = b.divide(n, m)
    far = b.add(b.log(m), b.multiply(half, b.op(Opcode.LOG_PLUS_ONE, b.multiply(q, q))))
    far = ctx.select(ctx.compare(n, ctx.full(0, n), "EQ"), b.log(m), far)  # also -inf at z = -1
    small = b.op(Opcode.AND, ctx.compare(b.abs(re), half, "LT"), ctx.compare(ab, half, "LT"))
    return b.complex(ctx.select(small, near, far), b.atan2(im, u))


@register_lowering("Pow", dtypes=FLOATS | SIGNED_INTS | COMPLEX)
def pow_(ctx: LoweringContext) -> Value:
    x, y = ctx.inputs
    if not ctx.dtype(x).is_complex:
        return ctx.binary(Opcode.POWER, x, y)
    x, y = ctx.broadcast_all(x, y)
    return ctx.b.exponential(ctx.b.multiply(y, ctx.b.log(x)))
