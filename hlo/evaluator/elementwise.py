"""Evaluator rules for elementwise math: unary and binary ops, compare, select, clamp.

Semantics are XLA's (checked against TF's XLA where TF exposes the op):
* NumPy warnings never leak; f16/bf16/f8 math runs in f32 and is rounded back
  (as XLA CPU does); f32 transcendental functions run in f64, so results are
  correctly rounded; s4/u4 run in s8/u8. Integer arithmetic wraps modulo 2^bits.
* Subnormals follow IEEE (gradual underflow). XLA CPU runs with denormals
  flushed to zero, so its results differ where an input or result is subnormal.
* Integer divide truncates toward zero; x / 0 is -1 (all bits set, so the max
  for unsigned) and x % 0 is x; INT_MIN / -1 is INT_MIN and INT_MIN % -1 is 0.
  Float remainder has the dividend's sign (C fmod).
* Integer power with a negative exponent is 0, except 1 -> 1 and -1 -> +-1.
* Shift amounts are unsigned: an amount >= the bit width gives 0 for shift-left
  and shift-right-logical and the sign fill for shift-right-arithmetic.
* maximum/minimum propagate NaN from either side; on equal operands (-0, +0)
  they return the lhs. (TF's XLA CPU is built with fast min/max and returns
  the lhs when only the rhs is NaN; this evaluator keeps the IEEE-style spec.)
* sign(NaN) = NaN, sign(-0) = -0; complex sign is x/|x| (0 for 0).
* round-nearest-afz rounds halves away from zero; round-nearest-even to even.
* compare type=TOTALORDER orders floats -NaN < -inf < ... < -0 < +0 < ... < inf < NaN.
* select and clamp accept scalar pred / bounds, including under a batched call.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from hlo.attributes import ComparisonDirection, ComparisonType
from hlo.evaluator import eval_rule
from hlo.evaluator.conversions import ptype, unsigned_bits, widen
from hlo.opcodes import Group, Opcode

ArrayFn = Callable[..., np.ndarray]


def _expand(x: np.ndarray, ndim: int) -> np.ndarray:
    """Append unit dims so that a scalar operand (possibly with batch dims) lines up with ``ndim``."""
    x = np.asarray(x)
    return x.reshape(x.shape + (1,) * (ndim - x.ndim)) if x.ndim < ndim else x


def _is_float(x: np.ndarray) -> bool:
    return ptype(x).is_float


# --- unary ------------------------------------------------------------------


def _sign(x: np.ndarray) -> np.ndarray:
    t = ptype(x)
    if t.is_complex:
        mag = np.abs(x)
        return np.where(mag == 0, np.zeros((), x.dtype), x / np.where(mag == 0, 1, mag))
    if t.is_unsigned_int:
        return (x > 0).astype(x.dtype)
    one = np.ones((), x.dtype)
    return np.where(x > 0, one, np.where(x < 0, -one, x))  # keeps NaN and -0


def _round_afz(x: np.ndarray) -> np.ndarray:
    whole = np.trunc(x)
    frac = x - whole  # exact
    return np.where(np.abs(frac) >= 0.5, whole + np.copysign(np.ones((), x.dtype), x), whole)


def _logistic(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


_ERF = np.frompyfunc(math.erf, 1, 1)


def _erf(x: np.ndarray) -> np.ndarray:
    """erf accurate to f64 (math.erf), then rounded to the result type."""
    return np.asarray(_ERF(x.astype(np.float64)), np.float64)  # frompyfunc gives a Python float at rank 0


def _not(x: np.ndarray) -> np.ndarray:
    return np.invert(x)  # logical on pred, bitwise on integers


def _popcnt(x: np.ndarray) -> np.ndarray:
    bits, _ = unsigned_bits(x)
    return np.bitwise_count(bits)


def _clz(x: np.ndarray) -> np.ndarray:
    bits, width = unsigned_bits(x)
    u = bits.astype(np.uint64)
    length = np.zeros(u.shape, np.int64)
    for step in (32, 16, 8, 4, 2, 1):  # binary search for the highest set bit
        high = u >= np.uint64(1 << step)
        length += np.where(high, step, 0)
        u = np.where(high, u >> np.uint64(step), u)
    length += (u > 0).astype(np.int64)
    return width - length


def _real(x: np.ndarray) -> np.ndarray:
    return np.real(x).copy()


def _imag(x: np.ndarray) -> np.ndarray:
    return np.imag(x).copy() if ptype(x).is_complex else np.zeros_like(x)


UNARY: dict[Opcode, ArrayFn] = {
    Opcode.ABS: np.abs,  # INT_MIN stays INT_MIN; complex -> magnitude
    Opcode.NEGATE: np.negative,
    Opcode.SIGN: _sign,
    Opcode.FLOOR: np.floor,
    Opcode.CEIL: np.ceil,
    Opcode.ROUND_NEAREST_AFZ: _round_afz,
    Opcode.ROUND_NEAREST_EVEN: np.rint,
    Opcode.EXPONENTIAL: np.exp,
    Opcode.EXPONENTIAL_MINUS_ONE: np.expm1,
    Opcode.LOG: np.log,
    Opcode.LOG_PLUS_ONE: np.log1p,
    Opcode.SQRT: np.sqrt,
    Opcode.RSQRT: lambda x: 1 / np.sqrt(x),
    Opcode.CBRT: np.cbrt,
    Opcode.TANH: np.tanh,
    Opcode.LOGISTIC: _logistic,
    Opcode.SINE: np.sin,
    Opcode.COSINE: np.cos,
    Opcode.TAN: np.tan,
    Opcode.ERF: _erf,
    Opcode.NOT: _not,
    Opcode.IS_FINITE: np.isfinite,
    Opcode.POPCNT: _popcnt,
    Opcode.CLZ: _clz,
    Opcode.REAL: _real,
    Opcode.IMAG: _imag,
}
_BIT_OPS = (Opcode.POPCNT, Opcode.CLZ)  # work on the stored bits, not widened values


# Computed in f64 for f32 operands (sqrt is correctly rounded in f32 already; erf widens itself).
_TRANSCENDENTAL = Group.TRANSCENDENTAL - {Opcode.SQRT, Opcode.ERF}


def math_widen(x: np.ndarray) -> np.ndarray:
    """Operands of transcendental functions: f32 as f64, so that the result rounds correctly
    (NumPy's f32 loops are off by an ulp at times: cbrt(27) = 2.9999998); narrow floats as f32."""
    if x.dtype == np.float32:
        return x.astype(np.float64)
    if x.dtype == np.complex64:
        return x.astype(np.complex128)
    return widen(x)


def _narrow(result: np.ndarray, inst) -> np.ndarray:
    """Round a widened result to the declared type here, where overflow to inf raises no warning."""
    dtype = inst.shape.dtype.numpy
    result = np.asarray(result)
    if result.dtype == dtype:
        return result
    with np.errstate(all="ignore"):
        return result.astype(dtype)


@eval_rule(*UNARY)
def _unary(ev, inst, vals):
    (x,) = vals
    if inst.opcode not in _BIT_OPS:
        x = math_widen(x) if inst.opcode in _TRANSCENDENTAL else widen(x)
    with np.errstate(all="ignore"):
        return _narrow(UNARY[inst.opcode](x), inst)


@eval_rule(Opcode.COPY)
def _copy(ev, inst, vals):
    def copy(v):
        return tuple(copy(e) for e in v) if isinstance(v, tuple) else np.array(v, copy=True)
    return copy(vals[0])


# --- binary -----------------------------------------------------------------


def _int_bounds_of(t) -> tuple[int, int]:
    bits = t.bit_width
    return (-(1 << (bits - 1)), (1 << (bits - 1)) - 1) if t.is_signed_int else (0, (1 << bits) - 1)


def _divide(x: np.ndarray, y: np.ndarray, t) -> np.ndarray:
    if not t.is_integral:
        return np.divide(x, y)
    lo, _ = _int_bounds_of(t)
    zero = y == 0
    overflow = (x == lo) & (y == -1) if t.is_signed_int else np.zeros(np.shape(zero), bool)
    safe = np.where(zero | overflow, np.ones((), y.dtype), y)
    quotient = (x - np.fmod(x, safe)) // safe  # exact: truncation toward zero
    quotient = np.where(overflow, x, quotient)
    return np.where(zero, np.array(-1).astype(quotient.dtype), quotient)


def _remainder(x: np.ndarray, y: np.ndarray, t) -> np.ndarray:
    if not t.is_integral:
        return np.fmod(x, y)
    lo, _ = _int_bounds_of(t)
    zero = y == 0
    overflow = (x == lo) & (y == -1) if t.is_signed_int else np.zeros(np.shape(zero), bool)
    safe = np.where(zero | overflow, np.ones((), y.dtype), y)
    return np.where(zero, x, np.fmod(x, safe))  # fmod(INT_MIN, 1) is already 0


def _power(x: np.ndarray, y: np.ndarray, t) -> np.ndarray:
    if not t.is_integral:
        return np.power(x, y)
    negative = y < 0
    result = np.power(x, np.where(negative, np.zeros((), y.dtype), y))
    one = np.ones((), x.dtype)
    odd = (y % 2) != 0
    minus_one_power = np.where(odd, np.negative(one), one) if t.is_signed_int else one
    special = np.where(x == 1, one, np.where(x == np.negative(one), minus_one_power, np.zeros((), x.dtype)))
    return np.where(negative, special, result)


def _maximum(x: np.ndarray, y: np.ndarray, t) -> np.ndarray:
    if not t.is_float:
        return np.maximum(x, y)
    return np.where(np.isnan(x), x, np.where(x >= y, x, y))


def _minimum(x: np.ndarray, y: np.ndarray, t) -> np.ndarray:
    if not t.is_float:
        return np.minimum(x, y)
    return np.where(np.isnan(x), x, np.where(x <= y, x, y))


def _logical_shift(x: np.ndarray, y: np.ndarray, shift: np.ufunc) -> np.ndarray:
    bits, width = unsigned_bits(x)
    amount = unsigned_bits(y)[0].astype(np.uint64)
    big = amount >= width
    shifted = shift(bits, np.where(big, 0, amount).astype(bits.dtype))
    return _same_type_bits(np.where(big, np.zeros((), bits.dtype), shifted), x)


def _shift_left(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return _logical_shift(x, y, np.left_shift)


def _shift_right_logical(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return _logical_shift(x, y, np.right_shift)


def _shift_right_arithmetic(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    width = unsigned_bits(x)[1]
    amount = unsigned_bits(y)[0].astype(np.uint64)
    signed = _as_signed(x, width)
    clipped = np.minimum(amount, np.uint64(width - 1)).astype(signed.dtype)
    return signed >> clipped  # the driver wraps back to the declared (maybe unsigned) type


def _as_signed(x: np.ndarray, width: int) -> np.ndarray:
    bits, _ = unsigned_bits(x)
    if width == 4:
        return np.where(bits >= 8, bits.astype(np.int8) - 16, bits.astype(np.int8)).astype(np.int8)
    return bits.view(np.dtype(f"int{width}"))


def _same_type_bits(bits: np.ndarray, like: np.ndarray) -> np.ndarray:
    """Bit patterns back to ``like``'s type; 4-bit patterns stay in u8 and wrap in the driver's cast."""
    return bits if unsigned_bits(like)[1] == 4 else bits.view(like.dtype)


def _complex(x, y, t):
    shape = np.broadcast_shapes(np.shape(x), np.shape(y))
    out = np.empty(shape, np.complex128 if x.dtype == np.float64 else np.complex64)
    out.real, out.imag = x, y  # not x + 1j*y, which turns inf into NaN
    return out


BINARY: dict[Opcode, Callable] = {
    Opcode.ADD: lambda x, y, t: np.add(x, y),
    Opcode.SUBTRACT: lambda x, y, t: np.subtract(x, y),
    Opcode.MULTIPLY: lambda x, y, t: np.multiply(x, y),
    Opcode.DIVIDE: _divide,
    Opcode.REMAINDER: _remainder,
    Opcode.POWER: _power,
    Opcode.MAXIMUM: _maximum,
    Opcode.MINIMUM: _minimum,
    Opcode.ATAN2: lambda x, y, t: np.arctan2(x, y),
    Opcode.AND: lambda x, y, t: np.bitwise_and(x, y),
    Opcode.OR: lambda x, y, t: np.bitwise_or(x, y),
    Opcode.XOR: lambda x, y, t: np.bitwise_xor(x, y),
    Opcode.COMPLEX: _complex,
}
_SHIFTS: dict[Opcode, Callable] = {
    Opcode.SHIFT_LEFT: _shift_left,
    Opcode.SHIFT_RIGHT_LOGICAL: _shift_right_logical,
    Opcode.SHIFT_RIGHT_ARITHMETIC: _shift_right_arithmetic,
}


@eval_rule(*BINARY)
def _binary(ev, inst, vals):
    x, y = vals
    t = ptype(x)
    wide = math_widen if inst.opcode in _TRANSCENDENTAL else widen
    with np.errstate(all="ignore"):
        return _narrow(BINARY[inst.opcode](wide(x), wide(y), t), inst)


@eval_rule(*_SHIFTS)
def _shift(ev, inst, vals):
    x, y = vals
    with np.errstate(all="ignore"):
        return _SHIFTS[inst.opcode](x, y)


# --- compare, select, clamp -------------------------------------------------

_COMPARE: dict[ComparisonDirection, np.ufunc] = {
    ComparisonDirection.EQ: np.equal, ComparisonDirection.NE: np.not_equal,
    ComparisonDirection.LT: np.less, ComparisonDirection.LE: np.less_equal,
    ComparisonDirection.GT: np.greater, ComparisonDirection.GE: np.greater_equal,
}


def total_order_key(x: np.ndarray) -> np.ndarray:
    """Signed integers that order floats as XLA's TOTALORDER (rank 0 stays rank 0)."""
    bits, width = unsigned_bits(x)
    signed = bits.view(np.dtype(f"int{width}"))
    return signed ^ ((signed >> (width - 1)) & np.array((1 << (width - 1)) - 1, signed.dtype))


@eval_rule(Opcode.COMPARE)
def _compare(ev, inst, vals):
    x, y = vals
    if inst.attr("type") is ComparisonType.TOTALORDER and _is_float(x):
        x, y = total_order_key(x), total_order_key(y)
    else:
        x, y = widen(x), widen(y)
    with np.errstate(all="ignore"):
        return _COMPARE[inst.attr("direction")](x, y)


@eval_rule(Opcode.SELECT)
def _select(ev, inst, vals):
    pred, on_true, on_false = vals
    if isinstance(on_true, tuple):  # old-style tuple select: the pred is a scalar
        return on_true if bool(pred) else on_false
    return np.where(_expand(pred, on_true.ndim), on_true, on_false)


@eval_rule(Opcode.CLAMP)
def _clamp(ev, inst, vals):
    lo, x, hi = vals
    t = ptype(x)
    x = widen(x)
    lo, hi = widen(_expand(lo, x.ndim)), widen(_expand(hi, x.ndim))
    with np.errstate(all="ignore"):
        return _narrow(_minimum(_maximum(lo, x, t), hi, t), inst)  # XLA CPU: min(max(lo, x), hi)
