"""Arithmetic identities: add, subtract, multiply, divide, negate, maximum, minimum.

Float rules hold bit for bit, NaN, infinities and signed zeros included:
``x + -0.0 = x`` (but ``-0.0 + 0.0 = +0.0``, so ``x + 0.0`` stays), ``x - 0.0 = x``,
``x * 1 = x``, ``x / 1 = x``; ``x * 0 = 0`` only for integers (``inf * 0`` is NaN,
``-1.0 * 0`` is -0.0). maximum/minimum propagate NaN and return the lhs on ties, so
``max(x, -inf) = x`` and ``max(x, x) = x`` hold for floats too.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from hlo.dtypes import PrimitiveType
from hlo.ir import HloInstruction
from hlo.opcodes import Opcode
from hlo.passes.algsimp.context import Replacement, RewriteContext, rule
from hlo.shapes import Shape, array_shape


def _array(inst: HloInstruction) -> Shape | None:
    return inst.shape if isinstance(inst.shape, Shape) else None


def _numeric(inst: HloInstruction) -> bool:
    s = _array(inst)
    return s is not None and (s.dtype.is_float or s.dtype.is_integral)


def additive_identity(dtype: PrimitiveType) -> float | int:
    """The exact identity of ``add``: -0.0 for floats (``+0.0 + -0.0`` is ``+0.0``), 0 for integers."""
    return -0.0 if dtype.is_float or dtype.is_complex else 0


def extreme(dtype: PrimitiveType, lowest: bool) -> np.ndarray:
    """The identity of maximum (``lowest``) or minimum: -inf/+inf, or the type's range ends."""
    np_type = dtype.numpy
    if dtype.is_pred:
        return np.array(not lowest)
    if dtype.is_integral:
        info = ml_dtypes.iinfo(np_type)
        return np.array(info.min if lowest else info.max).astype(np_type)
    with np.errstate(all="ignore"):
        inf = np.array(-np.inf if lowest else np.inf).astype(np_type)
    if np.isnan(inf.astype(np.float32)):  # a type without infinities (f8e4m3fn)
        finfo = ml_dtypes.finfo(np_type)
        return np.array(finfo.min if lowest else finfo.max).astype(np_type)
    return inf


def _other_if(ctx: RewriteContext, inst: HloInstruction, value, sides=(0, 1)) -> str | None:
    """The operand opposite an operand on one of ``sides`` that is uniformly ``value``, if the
    result can simply be that operand (its shape is the instruction's)."""
    for side in sides:
        const, other = ctx.operand(inst, side), ctx.operand(inst, 1 - side)
        if other.shape == inst.shape and ctx.has_value(const, value):
            return other.name
    return None


@rule(Opcode.ADD)
def add_zero(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """x + (-0.0) -> x for floats, x + 0 -> x for integers (either side)."""
    if not _numeric(inst):
        return None
    return _other_if(ctx, inst, additive_identity(array_shape(inst.shape).dtype))


@rule(Opcode.SUBTRACT)
def subtract_zero(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """x - 0 -> x (for floats +0.0 only: -0.0 - +0.0 is -0.0, but -0.0 - -0.0 is +0.0)."""
    if not _numeric(inst):
        return None
    return _other_if(ctx, inst, 0, sides=(1,))


@rule(Opcode.MULTIPLY)
def multiply_one(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """x * 1 -> x (either side)."""
    if not _numeric(inst):
        return None
    return _other_if(ctx, inst, 1)


@rule(Opcode.MULTIPLY)
def multiply_zero_int(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """x * 0 -> 0 for integers (for floats NaN * 0 and inf * 0 are NaN, -1 * 0 is -0)."""
    shape = _array(inst)
    if shape is None or not shape.dtype.is_integral:
        return None
    for zero in ctx.operands(inst):
        if ctx.has_value(zero, 0):
            return zero.name if zero.shape == inst.shape else ctx.splat(0, shape)
    return None


@rule(Opcode.DIVIDE)
def divide_one(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """x / 1 -> x."""
    if not _numeric(inst):
        return None
    return _other_if(ctx, inst, 1, sides=(1,))


@rule(Opcode.NEGATE)
def negate_negate(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """-(-x) -> x (integers wrap back; NaN's sign bit flips twice)."""
    inner = ctx.operand(inst)
    if inner.opcode is not Opcode.NEGATE:
        return None
    x = ctx.operand(inner)
    return x.name if x.shape == inst.shape else None


def _extreme_identity(ctx: RewriteContext, inst: HloInstruction, lowest: bool) -> Replacement:
    shape = _array(inst)
    if shape is None or shape.dtype.is_complex:
        return None
    return _other_if(ctx, inst, extreme(shape.dtype, lowest))


def _same_operands(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    a, b = inst.operands
    return a if a == b and ctx.get(a).shape == inst.shape else None


@rule(Opcode.MAXIMUM)
def maximum_lowest(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """max(x, -inf) -> x (the type's lowest value for integers and types without infinities)."""
    return _extreme_identity(ctx, inst, lowest=True)


@rule(Opcode.MAXIMUM)
def maximum_same(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """max(x, x) -> x."""
    return _same_operands(ctx, inst)


@rule(Opcode.MINIMUM)
def minimum_highest(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """min(x, +inf) -> x (the type's highest value for integers and types without infinities)."""
    return _extreme_identity(ctx, inst, lowest=False)


@rule(Opcode.MINIMUM)
def minimum_same(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """min(x, x) -> x."""
    return _same_operands(ctx, inst)
