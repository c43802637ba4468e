"""Conversions: convert to the same type, and chains of converts that lose nothing.

``convert(convert(x: A) -> B) -> C`` becomes ``convert(x) -> C`` (or ``x`` when
C is A) only when A -> B is lossless (every value of A is exact in B, NaN and
infinities included) and converting the exact value of x onward gives the same
result as converting x directly, which holds when:
* C is A (the round trip is the identity);
* A -> C is lossless too (both sides are exactly x's value);
* A and B are both integers or both floats and C is an integer, pred or float:
  float -> integer (truncate, saturate, NaN -> 0), integer -> integer (wrap) and
  -> pred (``!= 0``) depend on the value only; integer -> float rounds the same
  integer the same way; float -> float rounds a value exact in f32 once.
Everything else (s16 -> f32 -> s8 saturates where s16 -> s8 wraps; f32 -> f16 ->
f32 rounds) stays. Complex types are left alone.
"""

from __future__ import annotations

from hlo.dtypes import PrimitiveType as P
from hlo.ir import HloInstruction
from hlo.opcodes import Opcode
from hlo.passes.algsimp.context import Replacement, RewriteContext, rule
from hlo.shapes import Shape

# Float formats: (significand digits, smallest subnormal exponent, largest finite exponent, has infinity).
_FLOAT_FORMAT = {
    P.F8E4M3FN: (4, -9, 8, False), P.F8E5M2: (3, -16, 15, True), P.F16: (11, -24, 15, True),
    P.BF16: (8, -133, 127, True), P.F32: (24, -149, 127, True), P.F64: (53, -1074, 1023, True),
}


def _magnitude_bits(t: P) -> int:
    return t.bit_width - 1 if t.is_signed_int else t.bit_width


def lossless(src: P, dst: P) -> bool:
    """Every value of ``src`` converts to ``dst`` exactly (and NaN/inf stay NaN/inf)."""
    if src is dst:
        return True
    if src.is_pred:
        return dst.is_integral or dst in _FLOAT_FORMAT
    if src.is_integral and dst.is_integral:
        if src.is_signed_int:
            return dst.is_signed_int and dst.bit_width >= src.bit_width
        return dst.bit_width >= src.bit_width if dst.is_unsigned_int else dst.bit_width > src.bit_width
    if src.is_integral and dst in _FLOAT_FORMAT:
        return _magnitude_bits(src) <= _FLOAT_FORMAT[dst][0]
    if src in _FLOAT_FORMAT and dst in _FLOAT_FORMAT:
        (d1, sub1, max1, inf1), (d2, sub2, max2, inf2) = _FLOAT_FORMAT[src], _FLOAT_FORMAT[dst]
        return d2 >= d1 and sub2 <= sub1 and max2 >= max1 and (inf2 or not inf1)
    return False


def _kind(t: P) -> str:
    if t.is_integral:
        return "int"
    if t in _FLOAT_FORMAT:
        return "float"
    return "pred" if t.is_pred else "other"


def chain_collapses(a: P, b: P, c: P) -> bool:
    """``convert(convert(x: a) -> b) -> c`` equals ``convert(x) -> c`` for every x (see the docstring)."""
    if not lossless(a, b):
        return False
    if c is a or lossless(a, c):
        return True
    return _kind(a) == _kind(b) in ("int", "float") and _kind(c) in ("int", "float", "pred")


@rule(Opcode.CONVERT)
def convert_same_type(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """convert(x) to x's own type -> x."""
    x = ctx.operand(inst)
    return x.name if x.shape == inst.shape else None


@rule(Opcode.CONVERT)
def convert_convert(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """convert(convert(x)) -> convert(x), or x, where the first convert loses nothing."""
    inner = ctx.operand(inst)
    if inner.opcode is not Opcode.CONVERT:
        return None
    x = ctx.operand(inner)
    shapes = (x.shape, inner.shape, inst.shape)
    if not (isinstance(shapes[0], Shape) and isinstance(shapes[1], Shape) and isinstance(shapes[2], Shape)):
        return None
    if not chain_collapses(shapes[0].dtype, shapes[1].dtype, shapes[2].dtype):
        return None
    return x.name if x.shape == inst.shape else ctx.new(Opcode.CONVERT, inst.shape, [x])
