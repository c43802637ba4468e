"""Shape rules of elementwise ops: unary math, binary arithmetic and logic, compare, select, clamp,
and the conversions (convert, bitcast-convert, reduce-precision).

HLO has no implicit broadcasting: operands of an elementwise op have identical
dimensions. XLA's only exceptions are a scalar predicate for ``select`` and
scalar bounds for ``clamp``. Element types must match exactly (no mixed precision).
"""

from __future__ import annotations

from typing import Callable

from hlo.attributes import ComparisonType as CT
from hlo.dtypes import PrimitiveType
from hlo.opcodes import Opcode
from hlo.shape_inference import ShapeContext, shape_rule
from hlo.shape_inference.common import (
    PRED, array, declared_array, expect_same_dtype, fail, operand, short, with_default_layout,
)
from hlo.shapes import Shape, ShapeLike

P = PrimitiveType
O = Opcode

# --- element-type classes, as XLA's InferUnaryOpShape / InferBinaryOpShape name them ------------


def _floating(t: P) -> bool:
    return t.is_float


def _float_or_complex(t: P) -> bool:
    return t.is_float or t.is_complex


def _integral(t: P) -> bool:
    return t.is_integral


def _pred_or_integral(t: P) -> bool:
    return t.is_pred or t.is_integral


def _signed(t: P) -> bool:  # XLA counts floats as signed
    return t.is_signed_int or t.is_float


def _signed_or_complex(t: P) -> bool:
    return _signed(t) or t.is_complex


def _numeric(t: P) -> bool:
    return t.is_integral or t.is_float or t.is_complex


def _not_pred(t: P) -> bool:
    return not t.is_pred


def _any(t: P) -> bool:
    return True


_UNARY_TYPES: dict[Opcode, tuple[Callable[[P], bool], str]] = {
    **{op: (_floating, "floating point") for op in (O.FLOOR, O.CEIL, O.ROUND_NEAREST_AFZ,
                                                   O.ROUND_NEAREST_EVEN, O.IS_FINITE)},
    **{op: (_float_or_complex, "floating point or complex") for op in (
        O.EXPONENTIAL, O.EXPONENTIAL_MINUS_ONE, O.LOG, O.LOG_PLUS_ONE, O.SQRT, O.RSQRT, O.CBRT, O.TANH,
        O.LOGISTIC, O.SINE, O.COSINE, O.TAN, O.ERF, O.REAL, O.IMAG)},
    O.ABS: (_signed_or_complex, "signed integer, floating point or complex"),
    O.SIGN: (_signed_or_complex, "signed integer, floating point or complex"),
    O.NEGATE: (_numeric, "integral, floating point or complex"),
    O.NOT: (_pred_or_integral, "pred or integral"),
    O.POPCNT: (_integral, "integral"),
    O.CLZ: (_integral, "integral"),
    O.COPY: (_any, "any"),
}


@shape_rule(*_UNARY_TYPES)
def unary(ctx: ShapeContext) -> ShapeLike:
    if ctx.opcode is O.COPY:  # copy also copies tuples and tokens
        return with_default_layout(ctx.operands[0])
    x = operand(ctx, 0, "the operand")
    accepts, kind = _UNARY_TYPES[ctx.opcode]
    if not accepts(x.dtype):
        raise fail(ctx, f"operand must have a {kind} element type, got {short(x)}")
    dtype = x.dtype
    if ctx.opcode is O.IS_FINITE:
        dtype = PRED
    elif ctx.opcode in (O.ABS, O.REAL, O.IMAG) and x.dtype.is_complex:
        dtype = P.F32 if x.dtype is P.C64 else P.F64
    return array(dtype, x.dims)


_BINARY_TYPES: dict[Opcode, tuple[Callable[[P], bool], str]] = {
    **{op: (_any, "any") for op in (O.ADD, O.MULTIPLY, O.MAXIMUM, O.MINIMUM, O.COMPARE)},
    **{op: (_not_pred, "arithmetic (not pred)") for op in (O.SUBTRACT, O.DIVIDE, O.REMAINDER, O.POWER)},
    O.ATAN2: (_float_or_complex, "floating point or complex"),
    **{op: (_pred_or_integral, "pred or integral") for op in (O.AND, O.OR, O.XOR)},
    **{op: (_integral, "integral") for op in (O.SHIFT_LEFT, O.SHIFT_RIGHT_LOGICAL,
                                              O.SHIFT_RIGHT_ARITHMETIC)},
    O.COMPLEX: (lambda t: t in (P.F32, P.F64), "f32 or f64"),
}


@shape_rule(*_BINARY_TYPES)
def binary(ctx: ShapeContext) -> Shape:
    lhs, rhs = operand(ctx, 0, "lhs"), operand(ctx, 1, "rhs")
    if lhs.dtype != rhs.dtype:
        raise fail(ctx, f"operands must have the same element type, got {short(lhs)} and {short(rhs)}")
    if lhs.dims != rhs.dims:
        raise fail(ctx, f"operands must have the same dimensions (HLO has no implicit broadcasting), "
                        f"got {short(lhs)} and {short(rhs)}")
    accepts, kind = _BINARY_TYPES[ctx.opcode]
    if not accepts(lhs.dtype):
        raise fail(ctx, f"operands must have a {kind} element type, got {short(lhs)}")
    dtype = lhs.dtype
    if ctx.opcode is O.COMPARE:
        dtype = PRED
        _check_comparison_type(ctx, lhs.dtype)
    elif ctx.opcode is O.COMPLEX:
        dtype = P.C64 if lhs.dtype is P.F32 else P.C128
    return array(dtype, lhs.dims)


def _check_comparison_type(ctx: ShapeContext, dtype: P) -> None:
    """An explicit ``type=`` must suit the operands (XLA: FLOAT/TOTALORDER for floats, SIGNED/UNSIGNED for ints)."""
    ctx.attr("direction")
    kind = ctx.attr("type", None)
    if kind is None:
        return
    if dtype.is_float or dtype.is_complex:
        ok = kind in (CT.FLOAT, CT.TOTALORDER)
    elif dtype.is_signed_int:
        ok = kind is CT.SIGNED
    else:  # unsigned ints and pred
        ok = kind is CT.UNSIGNED
    if not ok:
        raise fail(ctx, f"comparison type {kind.value} does not suit {dtype} operands")


@shape_rule(O.SELECT)
def select(ctx: ShapeContext) -> Shape:
    pred = operand(ctx, 0, "the predicate")
    on_true, on_false = operand(ctx, 1, "on_true"), operand(ctx, 2, "on_false")
    if pred.dtype is not PRED:
        raise fail(ctx, f"the predicate must have element type pred, got {short(pred)}")
    if not on_true.compatible(on_false):
        raise fail(ctx, f"on_true and on_false must have the same shape, got {short(on_true)} and "
                        f"{short(on_false)}")
    if pred.rank != 0 and pred.dims != on_true.dims:
        raise fail(ctx, f"the predicate {short(pred)} must be a scalar or have the dimensions of "
                        f"{short(on_true)}")
    return array(on_true.dtype, on_true.dims)


@shape_rule(O.CLAMP)
def clamp(ctx: ShapeContext) -> Shape:
    lo, x, hi = operand(ctx, 0, "min"), operand(ctx, 1, "the operand"), operand(ctx, 2, "max")
    expect_same_dtype(ctx, [lo, x, hi])
    for bound, what in ((lo, "min"), (hi, "max")):
        if bound.rank != 0 and bound.dims != x.dims:
            raise fail(ctx, f"{what} {short(bound)} must be a scalar or have the dimensions of {short(x)}")
    return array(x.dtype, x.dims)


# --- conversions -------------------------------------------------------------------


@shape_rule(O.CONVERT)
def convert(ctx: ShapeContext) -> Shape:
    x = operand(ctx, 0, "the operand")
    out = declared_array(ctx)
    if out.dims != x.dims:
        raise fail(ctx, f"cannot change dimensions: operand {short(x)}, result {short(out)}")
    return array(out.dtype, x.dims)


@shape_rule(O.BITCAST_CONVERT)
def bitcast_convert(ctx: ShapeContext) -> Shape:
    x = operand(ctx, 0, "the operand")
    to = declared_array(ctx).dtype
    if x.dtype.is_complex != to.is_complex:
        raise fail(ctx, f"cannot bitcast between complex and real types ({short(x)} to {to})")
    wi, wo = x.dtype.bit_width, to.bit_width
    if max(wi, wo) % min(wi, wo):
        raise fail(ctx, f"bit widths {wi} ({x.dtype}) and {wo} ({to}) do not divide")
    dims = list(x.dims)
    if wi > wo:  # one input element becomes a new minor dimension of outputs
        dims.append(wi // wo)
    elif wi < wo:  # the minor dimension of inputs packs into one output element
        if not dims or dims[-1] != wo // wi:
            raise fail(ctx, f"the last dimension of {short(x)} must be {wo // wi} to bitcast to {to}")
        dims.pop()
    return array(to, dims)


@shape_rule(O.REDUCE_PRECISION)
def reduce_precision(ctx: ShapeContext) -> Shape:
    x = operand(ctx, 0, "the operand")
    if not x.dtype.is_float:
        raise fail(ctx, f"operand must have a floating point element type, got {short(x)}")
    exponent, mantissa = ctx.attr("exponent_bits"), ctx.attr("mantissa_bits")
    if exponent < 1:
        raise fail(ctx, f"exponent_bits must be at least 1, got {exponent}")
    if mantissa < 0:
        raise fail(ctx, f"mantissa_bits must be non-negative, got {mantissa}")
    return array(x.dtype, x.dims)

