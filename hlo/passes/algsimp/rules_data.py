"""Data movement: slice, concatenate, pad, dynamic-slice, reverse.

A dynamic-slice whose start indices are constants becomes a slice; its starts
are clamped first, exactly as the evaluator (and XLA) clamps them at run time,
to ``[0, dim - size]``.
"""

from __future__ import annotations

from hlo.attributes import PadDim, SliceDim
from hlo.ir import HloInstruction
from hlo.opcodes import Opcode
from hlo.passes.algsimp.context import Replacement, RewriteContext, rule
from hlo.shapes import Shape, array_shape


# --- slice ------------------------------------------------------------------------------


@rule(Opcode.SLICE)
def slice_full(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """A slice that keeps every element -> its operand."""
    x = ctx.operand(inst)
    if x.shape != inst.shape:
        return None
    dims: tuple[SliceDim, ...] = inst.attr("slice")
    return x.name if all(d.start == 0 or n == 0 for d, n in zip(dims, array_shape(x.shape).dims)) else None


@rule(Opcode.SLICE)
def slice_slice(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """slice(slice(x)) -> slice(x): element j of the outer slice is element
    start1 + (start2 + j*stride2) * stride1 of x."""
    inner = ctx.operand(inst)
    if inner.opcode is not Opcode.SLICE:
        return None
    composed = []
    for d1, d2, n in zip(inner.attr("slice"), inst.attr("slice"), array_shape(inst.shape).dims):
        if n == 0:
            composed.append(SliceDim(0, 0, 1))
            continue
        start = d1.start + d2.start * d1.stride
        stride = d1.stride * d2.stride if n > 1 else 1
        composed.append(SliceDim(start, start + (n - 1) * stride + 1, stride))
    return ctx.new(Opcode.SLICE, inst.shape, [ctx.operand(inner)], {"slice": tuple(composed)})


# --- concatenate ------------------------------------------------------------------------


@rule(Opcode.CONCATENATE)
def concatenate_single(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """concatenate(x) -> x."""
    if len(inst.operands) != 1:
        return None
    x = ctx.operand(inst)
    return x.name if x.shape == inst.shape else None


@rule(Opcode.CONCATENATE)
def concatenate_drop_empty(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """Operands with no elements along the concatenated dim contribute nothing: drop them."""
    (dim,) = inst.attr("dimensions")
    operands = ctx.operands(inst)
    kept = [o for o in operands if not (isinstance(o.shape, Shape) and o.shape.dims[dim] == 0)]
    if len(kept) == len(operands) or not kept:
        return None
    if len(kept) == 1 and kept[0].shape == inst.shape:
        return kept[0].name
    return ctx.new(Opcode.CONCATENATE, inst.shape, kept, {"dimensions": (dim,)})


# --- pad --------------------------------------------------------------------------------


@rule(Opcode.PAD)
def pad_nothing(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """pad(x, v) with all-zero padding (low, high and interior) -> x."""
    x = ctx.operand(inst)
    padding: tuple[PadDim, ...] = inst.attr("padding")
    if x.shape != inst.shape or any(p != PadDim(0, 0, 0) for p in padding):
        return None
    return x.name


# --- dynamic-slice ----------------------------------------------------------------------


def _constant_starts(ctx: RewriteContext, inst: HloInstruction, rank: int) -> list[int] | None:
    """Start indices of a dynamic-slice when they are all constants (one scalar per dim, or, in
    old HLO, one vector), else None."""
    starts = ctx.operands(inst)[1:]
    if len(starts) == 1 and isinstance(starts[0].shape, Shape) and starts[0].shape.rank == 1:
        lit = starts[0].literal if starts[0].opcode is Opcode.CONSTANT else None
        if lit is None or lit.array is None:
            return None
        return [int(v) for v in lit.array]
    if len(starts) != rank:
        return None
    values = [ctx.uniform_value(s) for s in starts]
    scalars = [int(v) for v in values if v is not None and v.ndim == 0]
    return scalars if len(scalars) == len(values) else None


@rule(Opcode.DYNAMIC_SLICE)
def dynamic_slice_constant_starts(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """dynamic-slice(x, constant starts) -> slice(x), the starts clamped to [0, dim - size]."""
    x = ctx.operand(inst)
    if not isinstance(x.shape, Shape) or not isinstance(inst.shape, Shape):
        return None
    sizes = inst.attr("dynamic_slice_sizes", inst.shape.dims)
    starts = _constant_starts(ctx, inst, x.shape.rank)
    if starts is None or len(sizes) != x.shape.rank:
        return None
    dims = []
    for start, dim, size in zip(starts, x.shape.dims, sizes):
        start = min(max(start, 0), dim - size)
        dims.append(SliceDim(start, start + size, 1))
    return ctx.new(Opcode.SLICE, inst.shape, [x], {"slice": tuple(dims)})


# --- reverse ----------------------------------------------------------------------------


@rule(Opcode.REVERSE)
def reverse_trivial(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """reverse(x) over no dims, or only dims of size <= 1 -> x."""
    x = ctx.operand(inst)
    if x.shape != inst.shape:
        return None
    return x.name if all(array_shape(inst.shape).dims[d] <= 1 for d in inst.attr("dimensions", ())) else None
