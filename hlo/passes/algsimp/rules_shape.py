"""Shape-changing instructions that move no data or compose: broadcast, reshape, transpose, copy, bitcast.

Reshape and transpose are logical (row-major over the logical dims, whatever
the layout), so chains of them compose; an instruction is dropped only when its
operand's shape equals its own exactly, layout included (a copy or reshape that
changes layout is a physical transpose). Bitcast is physical: it is dropped only
when shapes are identical.
"""

from __future__ import annotations

from hlo.ir import HloInstruction
from hlo.opcodes import Opcode
from hlo.passes.algsimp.context import Replacement, RewriteContext, rule
from hlo.shapes import Shape


def _same_shape_operand(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    x = ctx.operand(inst)
    return x.name if x.shape == inst.shape else None


# --- broadcast ------------------------------------------------------------------------


@rule(Opcode.BROADCAST)
def broadcast_identity(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """broadcast(x) with dimensions={0..rank-1} to x's own shape -> x."""
    x = ctx.operand(inst)
    dims = tuple(inst.attr("dimensions", ()))
    return x.name if x.shape == inst.shape and dims == tuple(range(len(dims))) else None


@rule(Opcode.BROADCAST)
def broadcast_broadcast(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """broadcast(broadcast(x, d1), d2) -> broadcast(x, d2[d1])."""
    inner = ctx.operand(inst)
    if inner.opcode is not Opcode.BROADCAST:
        return None
    outer_dims = inst.attr("dimensions", ())
    dims = tuple(outer_dims[d] for d in inner.attr("dimensions", ()))
    return ctx.new(Opcode.BROADCAST, inst.shape, [ctx.operand(inner)], {"dimensions": dims})


# --- reshape --------------------------------------------------------------------------


@rule(Opcode.RESHAPE)
def reshape_identity(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """reshape(x) to x's own shape -> x."""
    return _same_shape_operand(ctx, inst)


@rule(Opcode.RESHAPE)
def reshape_reshape(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """reshape(reshape(x)) -> reshape(x) (or x, when that is its shape)."""
    inner = ctx.operand(inst)
    if inner.opcode is not Opcode.RESHAPE:
        return None
    x = ctx.operand(inner)
    return x.name if x.shape == inst.shape else ctx.new(Opcode.RESHAPE, inst.shape, [x])


@rule(Opcode.RESHAPE)
def reshape_scalar_broadcast(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """reshape(broadcast(scalar)) -> broadcast(scalar)."""
    inner = ctx.operand(inst)
    if inner.opcode is not Opcode.BROADCAST or not isinstance(inst.shape, Shape):
        return None
    scalar = ctx.operand(inner)
    if not isinstance(scalar.shape, Shape) or scalar.shape.rank != 0:
        return None
    return ctx.new(Opcode.BROADCAST, inst.shape, [scalar], {"dimensions": ()})


@rule(Opcode.RESHAPE)
def reshape_unit_broadcast(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """reshape(broadcast(x)) where the reshape only drops or inserts size-1 dims -> broadcast(x') into
    the reshape's dims (x' is x without its size-1 dims). Tile's lowering makes these: broadcast
    [48] -> [32,1,48,1,48,1,1,48], reshape -> [32,48,48,48], which is broadcast [48] with dims={3}, where
    the reshape would cost a division per element."""
    inner = ctx.operand(inst)
    if inner.opcode is not Opcode.BROADCAST or not isinstance(inst.shape, Shape) or not isinstance(inner.shape, Shape):
        return None
    x = ctx.operand(inner)
    if not isinstance(x.shape, Shape) or x.shape.rank == 0:
        return None  # reshape_scalar_broadcast's case
    src, out = inner.shape.dims, inst.shape.dims
    big_src = [k for k, n in enumerate(src) if n != 1]
    big_out = [k for k, n in enumerate(out) if n != 1]
    if [src[k] for k in big_src] != [out[k] for k in big_out]:
        return None
    to_out = dict(zip(big_src, big_out))  # each broadcast dim larger than 1 -> its place in the result
    bdims = inner.attr("dimensions", ())
    keep = [j for j, d in enumerate(bdims) if src[d] != 1]  # x's dims of size 1 go
    dims = tuple(to_out[bdims[j]] for j in keep)
    if list(dims) != sorted(dims):
        return None
    operand: HloInstruction | str = x.name
    if len(keep) < x.shape.rank:
        operand = ctx.reshape(x, Shape(x.shape.dtype, tuple(x.shape.dims[j] for j in keep)))
    return ctx.new(Opcode.BROADCAST, inst.shape, [operand], {"dimensions": dims})


# --- transpose ------------------------------------------------------------------------


@rule(Opcode.TRANSPOSE)
def transpose_identity(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """transpose(x) with the identity permutation -> x."""
    perm = tuple(inst.attr("dimensions"))
    return _same_shape_operand(ctx, inst) if perm == tuple(range(len(perm))) else None


@rule(Opcode.TRANSPOSE)
def transpose_transpose(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """transpose(transpose(x, p1), p2) -> transpose(x, p1[p2]) (or x, for the identity)."""
    inner = ctx.operand(inst)
    if inner.opcode is not Opcode.TRANSPOSE:
        return None
    p1, p2 = inner.attr("dimensions"), inst.attr("dimensions")
    perm = tuple(p1[d] for d in p2)
    x = ctx.operand(inner)
    if perm == tuple(range(len(perm))) and x.shape == inst.shape:
        return x.name
    return ctx.new(Opcode.TRANSPOSE, inst.shape, [x], {"dimensions": perm})


@rule(Opcode.TRANSPOSE)
def transpose_is_reshape(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """A transpose that only moves size-1 dims (the others keep their order) -> reshape."""
    x = ctx.operand(inst)
    if not isinstance(x.shape, Shape):
        return None
    perm = tuple(inst.attr("dimensions"))
    if perm == tuple(range(len(perm))):
        return None  # transpose_identity's case, or a layout change
    moved = [p for p in perm if x.shape.dims[p] != 1]
    if moved != sorted(moved):
        return None
    return ctx.new(Opcode.RESHAPE, inst.shape, [x])


# --- copy, bitcast --------------------------------------------------------------------


@rule(Opcode.COPY)
def copy_same_layout(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """copy(x) with x's own shape and layout -> x."""
    return _same_shape_operand(ctx, inst)


@rule(Opcode.BITCAST)
def bitcast_identity(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """bitcast(x) to x's own shape and layout -> x."""
    return _same_shape_operand(ctx, inst)
