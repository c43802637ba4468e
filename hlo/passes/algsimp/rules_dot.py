"""dot products that sum a single product (every contracting dim of size 1, or none) or nothing.

With one product per output element, dot is an elementwise multiply of the two
operands broadcast into the result's dims (batch, lhs free, rhs free). To keep
the evaluator's semantics bit for bit: the operands are converted to the
accumulation type (the result type, or f32 for narrower floats) and, for
floats, the product is added to +0.0 as the accumulator starts there (so a
-0.0 product gives +0.0), then converted to the result type. Contracting dims
of size 0 give all +0 (an empty sum). Complex and pred dots are left alone.
"""

from __future__ import annotations

from hlo.dtypes import PrimitiveType
from hlo.ir import HloInstruction
from hlo.opcodes import Opcode
from hlo.passes.algsimp.context import Replacement, RewriteContext, rule
from hlo.shapes import Shape, array_shape


def _accumulation_type(dtype: PrimitiveType) -> PrimitiveType:
    return PrimitiveType.F32 if dtype.is_float and dtype.bit_width < 32 else dtype


def _dims(inst: HloInstruction, side: str) -> tuple[list[int], list[int]]:
    return list(inst.attr(f"{side}_batch_dims", ())), list(inst.attr(f"{side}_contracting_dims", ()))


def _spread(ctx: RewriteContext, operand: HloInstruction, batch: list[int], contracting: list[int],
            dtype: PrimitiveType, result: Shape, first_free: int) -> HloInstruction | str:
    """``operand`` as an array of the result's dims: convert to ``dtype``, bring batch and free dims in
    order (a transpose, where needed), drop the size-1 contracting dims, broadcast."""
    cur = array_shape(operand.shape)
    rank = cur.rank
    free = [d for d in range(rank) if d not in batch and d not in contracting]
    x: HloInstruction | str = operand.name
    if cur.dtype is not dtype:
        cur = ctx.like(dtype, cur.dims)
        x = ctx.new(Opcode.CONVERT, cur, [x])
    order = batch + free + contracting
    if order != list(range(rank)):
        cur = ctx.like(dtype, [cur.dims[d] for d in order])
        x = ctx.new(Opcode.TRANSPOSE, cur, [x], {"dimensions": tuple(order)})
    kept = cur.dims[:len(batch) + len(free)]
    if kept != cur.dims:
        cur = ctx.like(dtype, kept)
        x = ctx.new(Opcode.RESHAPE, cur, [x])
    out_dims = list(range(len(batch))) + list(range(first_free, first_free + len(free)))
    target = ctx.like(dtype, result.dims)
    return ctx.new(Opcode.BROADCAST, target, [x], {"dimensions": tuple(out_dims)})


@rule(Opcode.DOT)
def dot_single_product(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """dot with contracting dims all of size 1 (or none) -> multiply of broadcasts (see the docstring)."""
    lhs, rhs = ctx.operands(inst)
    lshape, rshape, shape = lhs.shape, rhs.shape, inst.shape
    if not (isinstance(lshape, Shape) and isinstance(rshape, Shape) and isinstance(shape, Shape)):
        return None
    if not all(t.is_float or t.is_integral for t in (lshape.dtype, rshape.dtype, shape.dtype)):
        return None
    if shape.dtype.is_integral and not (lshape.dtype.is_integral and rshape.dtype.is_integral):
        return None  # float -> integer accumulation is not a convert
    lb, lc = _dims(inst, "lhs")
    rb, rc = _dims(inst, "rhs")
    if any(lshape.dims[d] != 1 for d in lc):
        return None
    acc = _accumulation_type(shape.dtype)
    n_lhs_free = lshape.rank - len(lb) - len(lc)
    a = _spread(ctx, lhs, lb, lc, acc, shape, len(lb))
    b = _spread(ctx, rhs, rb, rc, acc, shape, len(lb) + n_lhs_free)
    acc_shape = ctx.like(acc, shape.dims)
    product = ctx.new(Opcode.MULTIPLY, acc_shape if acc is not shape.dtype else shape, [a, b])
    if acc.is_float:
        zero = ctx.splat(0.0, acc_shape)
        product = ctx.new(Opcode.ADD, acc_shape if acc is not shape.dtype else shape, [product, zero])
    if acc is not shape.dtype:
        product = ctx.new(Opcode.CONVERT, shape, [product])
    return product


@rule(Opcode.DOT)
def dot_empty_sum(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """dot with a contracting dim of size 0 -> zeros."""
    lhs = ctx.operand(inst)
    shape = inst.shape
    if not isinstance(shape, Shape) or not isinstance(lhs.shape, Shape) or shape.dtype.is_complex:
        return None
    _, lc = _dims(inst, "lhs")
    if not any(lhs.shape.dims[d] == 0 for d in lc):
        return None
    return ctx.splat(0, shape)
