"""Logical and bitwise identities (not, and, or, xor on pred and integers), compare, select.

and/or/xor are logical on pred and bitwise on integers, so "true" below means
all bits set (-1 for signed, the maximum for unsigned integers). ``compare(x, x)``
folds only where every value equals itself: integers, pred, and floats compared
with ``type=TOTALORDER`` (a FLOAT compare of NaN with itself is false).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from hlo.attributes import ComparisonDirection, ComparisonType
from hlo.dtypes import PrimitiveType
from hlo.ir import HloInstruction
from hlo.opcodes import Opcode
from hlo.passes.algsimp.context import Replacement, RewriteContext, rule
from hlo.shapes import Shape, array_shape


def _bits_type(inst: HloInstruction) -> Shape | None:
    """The shape of a logical/bitwise instruction on pred or integers, else None."""
    s = inst.shape
    return s if isinstance(s, Shape) and (s.dtype.is_pred or s.dtype.is_integral) else None


def all_ones(dtype: PrimitiveType):
    """true for pred, every bit set for integers."""
    if dtype.is_pred:
        return True
    return -1 if dtype.is_signed_int else int(ml_dtypes.iinfo(dtype.numpy).max)


def _pass_through(ctx: RewriteContext, inst: HloInstruction, value) -> Replacement:
    """op(x, c) -> x when c is uniformly ``value`` (either side)."""
    for side in (0, 1):
        const, other = ctx.operand(inst, side), ctx.operand(inst, 1 - side)
        if other.shape == inst.shape and ctx.has_value(const, value):
            return other.name
    return None


def _absorb(ctx: RewriteContext, inst: HloInstruction, value) -> Replacement:
    """op(x, c) -> c when c is uniformly ``value`` (either side)."""
    for const in ctx.operands(inst):
        if ctx.has_value(const, value):
            return const.name if const.shape == inst.shape else ctx.splat(value, array_shape(inst.shape))
    return None


def _same(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    a, b = inst.operands
    return a if a == b and ctx.get(a).shape == inst.shape else None


@rule(Opcode.NOT)
def not_not(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """not(not(x)) -> x."""
    inner = ctx.operand(inst)
    if inner.opcode is not Opcode.NOT:
        return None
    x = ctx.operand(inner)
    return x.name if x.shape == inst.shape else None


@rule(Opcode.AND)
def and_true(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """and(x, true) -> x; and(x, -1) -> x for integers."""
    shape = _bits_type(inst)
    return None if shape is None else _pass_through(ctx, inst, all_ones(shape.dtype))


@rule(Opcode.AND)
def and_false(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """and(x, false) -> false; and(x, 0) -> 0."""
    return None if _bits_type(inst) is None else _absorb(ctx, inst, 0)


@rule(Opcode.AND)
def and_same(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """and(x, x) -> x."""
    return None if _bits_type(inst) is None else _same(ctx, inst)


@rule(Opcode.OR)
def or_false(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """or(x, false) -> x; or(x, 0) -> x."""
    return None if _bits_type(inst) is None else _pass_through(ctx, inst, 0)


@rule(Opcode.OR)
def or_true(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """or(x, true) -> true; or(x, -1) -> -1."""
    shape = _bits_type(inst)
    return None if shape is None else _absorb(ctx, inst, all_ones(shape.dtype))


@rule(Opcode.OR)
def or_same(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """or(x, x) -> x."""
    return None if _bits_type(inst) is None else _same(ctx, inst)


@rule(Opcode.XOR)
def xor_false(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """xor(x, false) -> x; xor(x, 0) -> x."""
    return None if _bits_type(inst) is None else _pass_through(ctx, inst, 0)


_REFLEXIVE = {ComparisonDirection.EQ: True, ComparisonDirection.LE: True, ComparisonDirection.GE: True,
              ComparisonDirection.NE: False, ComparisonDirection.LT: False, ComparisonDirection.GT: False}


@rule(Opcode.COMPARE)
def compare_same(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """compare(x, x) -> true for EQ/LE/GE, false for NE/LT/GT (not for FLOAT compares: NaN != NaN)."""
    a, b = ctx.operands(inst)
    if a.name != b.name or not isinstance(a.shape, Shape) or not isinstance(inst.shape, Shape):
        return None
    dtype = a.shape.dtype
    total = inst.attr("type") is ComparisonType.TOTALORDER
    if not (dtype.is_integral or dtype.is_pred or (dtype.is_float and total)):
        return None
    return ctx.splat(_REFLEXIVE[inst.attr("direction")], inst.shape)


@rule(Opcode.SELECT)
def select_constant_pred(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """select(true, a, b) -> a; select(false, a, b) -> b (the predicate uniform, scalar or not)."""
    pred, on_true, on_false = ctx.operands(inst)
    value = ctx.uniform_value(pred)
    if value is None or value.dtype != np.bool_:
        return None
    chosen = on_true if bool(value) else on_false
    return chosen.name if chosen.shape == inst.shape else None


@rule(Opcode.SELECT)
def select_same(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """select(p, x, x) -> x."""
    _, on_true, on_false = inst.operands
    return on_true if on_true == on_false and ctx.get(on_true).shape == inst.shape else None
