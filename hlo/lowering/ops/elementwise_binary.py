"""Elementwise binary ops with NumPy broadcasting: arithmetic, division family, comparisons, logic.

Semantics are TF CPU's, checked eagerly:
* ``Div`` and ``TruncateDiv`` on integers truncate toward zero (C division); ``FloorDiv``
  rounds toward -inf and ``FloorMod`` takes the divisor's sign (ints and floats:
  ``fmod(x, y)``, plus ``y`` when that is nonzero and its sign differs from ``y``'s).
  ``TruncateMod`` is C's ``%`` / ``fmod``. ``INT_MIN / -1`` is ``INT_MIN`` and
  ``INT_MIN % -1`` is 0, as in TF.
* Float ``FloorDiv`` is ``floor(x / y)`` and float ``TruncateDiv`` is ``trunc(x / y)``
  (TF computes the quotient first; XLA's tf2xla differs).
* Integer division by zero is an error in TF; here it gives XLA's values
  (``x / 0 = -1``, ``x % 0 = x``; FloorDiv/FloorMod are adjusted from those). Integer
  ``Pow`` with a negative exponent is likewise an error in TF and XLA's value here (``Pow`` is in
  ``complex_math.py``, with its complex form).
* ``Maximum``/``Minimum`` propagate NaN from either operand (HLO semantics and TF's).
* ``MulNoNan``/``DivNoNan`` give +0 wherever ``y == 0``, even for inf/NaN ``x``.
* ``Equal``/``NotEqual`` with ``incompatible_shape_error=False`` give a scalar ``False``/``True``
  for shapes that do not broadcast (known at compile time, as shapes are static).
"""

from __future__ import annotations

from typing import Sequence

from hlo.builder import Value
from hlo.dtypes import PrimitiveType as P
from hlo.lowering.context import LoweringContext
from hlo.lowering.ops._elementwise_util import BOOL, trunc, zero_where
from hlo.lowering.registry import Rule, register_lowering
from hlo.lowering.tf_types import ALL, COMPLEX, FLOATS, INTS, NUMERIC, SIGNED_INTS
from hlo.opcodes import Opcode

# TF ops that are exactly one HLO opcode after broadcasting, with the dtypes TF has kernels for.
_DIRECT = {
    "Add": (Opcode.ADD, FLOATS | SIGNED_INTS | {P.U8} | COMPLEX),
    "AddV2": (Opcode.ADD, NUMERIC | COMPLEX),
    "Sub": (Opcode.SUBTRACT, NUMERIC | COMPLEX),
    "Mul": (Opcode.MULTIPLY, NUMERIC | COMPLEX),
    "Div": (Opcode.DIVIDE, NUMERIC | COMPLEX),  # integer division truncates, like HLO's
    "RealDiv": (Opcode.DIVIDE, FLOATS | COMPLEX),
    "TruncateMod": (Opcode.REMAINDER, frozenset({P.F32, P.F64, P.S32, P.S64})),
    "Maximum": (Opcode.MAXIMUM, NUMERIC),
    "Minimum": (Opcode.MINIMUM, NUMERIC),
    "Atan2": (Opcode.ATAN2, FLOATS),  # inputs are (y, x), as HLO's operands
    "LogicalAnd": (Opcode.AND, BOOL),
    "LogicalOr": (Opcode.OR, BOOL),
    "BitwiseAnd": (Opcode.AND, INTS),
    "BitwiseOr": (Opcode.OR, INTS),
    "BitwiseXor": (Opcode.XOR, INTS),
}


def _direct(opcode: Opcode) -> Rule:
    def lower(ctx: LoweringContext) -> Value:
        x, y = ctx.inputs
        return ctx.binary(opcode, x, y)
    return lower


for _op, (_opcode, _dtypes) in _DIRECT.items():
    register_lowering(_op, dtypes=_dtypes)(_direct(_opcode))


# --- comparisons ------------------------------------------------------------------------

_COMPARISONS = {
    "Less": ("LT", NUMERIC),
    "LessEqual": ("LE", NUMERIC),
    "Greater": ("GT", NUMERIC),
    "GreaterEqual": ("GE", NUMERIC),
}


def _comparison(direction: str) -> Rule:
    def lower(ctx: LoweringContext) -> Value:
        x, y = ctx.inputs
        return ctx.compare(x, y, direction)
    return lower


for _op, (_direction, _dtypes) in _COMPARISONS.items():
    register_lowering(_op, dtypes=_dtypes)(_comparison(_direction))


def _broadcastable(*shapes: Sequence[int]) -> bool:
    rank = max(len(s) for s in shapes)
    padded = [(1,) * (rank - len(s)) + tuple(s) for s in shapes]
    return all(len({d for d in dims if d != 1}) <= 1 for dims in zip(*padded))


def _equality(direction: str) -> Rule:
    """``Equal``/``NotEqual``: with ``incompatible_shape_error=False``, shapes that do not broadcast
    compare as entirely different, giving a scalar."""
    def lower(ctx: LoweringContext) -> Value:
        x, y = ctx.inputs
        if not ctx.attr_bool("incompatible_shape_error", True) and not _broadcastable(ctx.dims(x), ctx.dims(y)):
            return ctx.scalar(direction == "NE", P.PRED)
        return ctx.compare(x, y, direction)
    return lower


for _op, _direction in {"Equal": "EQ", "NotEqual": "NE"}.items():
    register_lowering(_op, dtypes=ALL)(_equality(_direction))


# --- arithmetic with a formula ------------------------------------------------------------


@register_lowering("SquaredDifference", dtypes=FLOATS | {P.S32, P.S64})
def squared_difference(ctx: LoweringContext) -> Value:
    x, y = ctx.inputs
    d = ctx.binary(Opcode.SUBTRACT, x, y)
    return ctx.b.multiply(d, d)


def _no_nan(opcode: Opcode) -> Rule:
    """``MulNoNan``/``DivNoNan``: ``y == 0 ? 0 : x op y``."""
    def lower(ctx: LoweringContext) -> Value:
        x, y = ctx.broadcast_all(*ctx.inputs)
        return zero_where(ctx, ctx.compare(y, ctx.full(0, y), "EQ"), ctx.b.op(opcode, x, y))
    return lower


register_lowering("MulNoNan", dtypes=FLOATS | COMPLEX)(_no_nan(Opcode.MULTIPLY))
register_lowering("DivNoNan", dtypes=FLOATS | COMPLEX)(_no_nan(Opcode.DIVIDE))


def _floor_adjust(ctx: LoweringContext, y: Value, r: Value) -> Value:
    """Where the truncated remainder ``r`` is nonzero and its sign differs from the divisor's."""
    zero = ctx.full(0, r)
    nonzero = ctx.compare(r, zero, "NE")
    signs_differ = ctx.compare(ctx.compare(r, zero, "LT"), ctx.compare(y, zero, "LT"), "NE")
    return ctx.b.op(Opcode.AND, nonzero, signs_differ)


@register_lowering("FloorDiv", dtypes=NUMERIC)
def floor_div(ctx: LoweringContext) -> Value:
    x, y = ctx.broadcast_all(*ctx.inputs)
    b = ctx.b
    if ctx.dtype(x).is_float:
        return b.floor(b.divide(x, y))
    q = b.divide(x, y)
    if ctx.dtype(x).is_unsigned_int:
        return q
    adjust = _floor_adjust(ctx, y, b.remainder(x, y))
    return b.select(adjust, b.subtract(q, ctx.full(1, q)), q)


@register_lowering("FloorMod", dtypes=NUMERIC)
def floor_mod(ctx: LoweringContext) -> Value:
    x, y = ctx.broadcast_all(*ctx.inputs)
    b = ctx.b
    r = b.remainder(x, y)
    if ctx.dtype(x).is_unsigned_int:
        return r
    return b.select(_floor_adjust(ctx, y, r), b.add(r, y), r)


@register_lowering("TruncateDiv", dtypes=NUMERIC)
def truncate_div(ctx: LoweringContext) -> Value:
    x, y = ctx.inputs
    q = ctx.binary(Opcode.DIVIDE, x, y)
    return trunc(ctx, q) if ctx.dtype(q).is_float else q
