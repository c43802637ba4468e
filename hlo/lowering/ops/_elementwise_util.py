"""Shared helpers of the elementwise lowering rules (unary, binary, cast).

TensorFlow's CPU kernels are Eigen expressions, and a few of Eigen's building
blocks differ from the HLO opcodes of the same name:

* ``cwiseMax``/``cwiseMin`` are ``std::max``/``std::min``: ``(a < b) ? b : a`` and
  ``(b < a) ? b : a``. A NaN first operand is returned, a NaN second operand is
  ignored, and ``max(-0, +0)`` is ``-0``. (HLO maximum/minimum propagate NaN from
  either side; TF's ``Maximum``/``Minimum`` ops do too, and use the opcodes.)
* There is no truncation opcode: ``trunc(x)`` is ``ceil`` below zero, ``floor`` otherwise.

The dtype sets are the dtypes TF 2.x registers CPU kernels for, per op.
"""

from __future__ import annotations

from hlo.builder import Value
from hlo.dtypes import PrimitiveType as P
from hlo.lowering.context import LoweringContext
from hlo.opcodes import Opcode
from hlo.shapes import Shape

BOOL = frozenset({P.PRED})


def std_max(ctx: LoweringContext, a: Value, b: Value) -> Value:
    """``std::max(a, b)`` with NumPy broadcasting: NaN in ``a`` is kept, NaN in ``b`` ignored."""
    return ctx.select(ctx.compare(a, b, "LT"), b, a)


def std_min(ctx: LoweringContext, a: Value, b: Value) -> Value:
    """``std::min(a, b)`` with NumPy broadcasting: NaN in ``a`` is kept, NaN in ``b`` ignored."""
    return ctx.select(ctx.compare(b, a, "LT"), b, a)


def trunc(ctx: LoweringContext, x: Value) -> Value:
    """Round toward zero (floats); keeps -0 and NaN."""
    negative = ctx.compare(x, ctx.full(0, x), "LT")
    return ctx.b.select(negative, ctx.b.ceil(x), ctx.b.floor(x))


def zero_where(ctx: LoweringContext, pred: Value, x: Value) -> Value:
    """``pred ? +0 : x`` elementwise (``pred`` and ``x`` have the same dims)."""
    return ctx.b.select(pred, ctx.full(0, x), x)


def clear_low_bits(ctx: LoweringContext, x: Value, nbits: int) -> Value:
    """``x`` (a float) with the ``nbits`` least significant bits of its encoding set to zero."""
    width = ctx.dtype(x).bit_width
    utype = {16: P.U16, 32: P.U32, 64: P.U64}[width]
    bits = ctx.b.bitcast_convert(x, shape=Shape.array(utype, ctx.dims(x)))
    mask = ctx.full(((1 << width) - 1) ^ ((1 << nbits) - 1), bits)
    return ctx.b.bitcast_convert(ctx.b.op(Opcode.AND, bits, mask), shape=x.shape)
