"""Shape rules of leaves and data movement: parameter, constant, iota, broadcast, reshape, bitcast,
transpose, slice, dynamic-slice, dynamic-update-slice, concatenate, pad, reverse, and the
dynamic-dimension ops.

Ops whose result cannot be derived from operands alone (parameter, iota,
broadcast, reshape, bitcast, dynamic-reshape) check the declared shape against
their operands and attributes and return it.
"""

from __future__ import annotations

from hlo.opcodes import Opcode
from hlo.shape_inference import ShapeContext, shape_rule
from hlo.shape_inference.common import (
    S32, array, check_dims_in_range, declared_array, expect_array, expect_int_scalar, expect_same_dtype,
    fail, int_list, operand, short, with_default_layout,
)
from hlo.shapes import Shape, ShapeLike

O = Opcode


@shape_rule(O.PARAMETER)
def parameter(ctx: ShapeContext) -> ShapeLike:
    if ctx.parameter_number is not None and ctx.parameter_number < 0:
        raise fail(ctx, f"parameter number {ctx.parameter_number} is negative")
    return ctx.require_declared()


@shape_rule(O.CONSTANT)
def constant(ctx: ShapeContext) -> ShapeLike:
    if ctx.literal is None:
        raise fail(ctx, "constant has no literal value")
    shape = ctx.literal.shape
    for leaf in shape.leaves():
        if not leaf.dtype.is_array_type:
            raise fail(ctx, f"a constant cannot have type {leaf} (tokens come from after-all)")
    if ctx.declared is not None and not shape.compatible(ctx.declared):
        raise fail(ctx, f"literal has shape {short(shape)} but {short(ctx.declared)} is declared")
    return with_default_layout(shape)


@shape_rule(O.IOTA)
def iota(ctx: ShapeContext) -> Shape:
    out = declared_array(ctx)
    dim = ctx.attr("iota_dimension")
    if out.rank == 0:
        raise fail(ctx, "the result must have rank at least 1")
    if not 0 <= dim < out.rank:
        raise fail(ctx, f"iota_dimension {dim} is out of range for {short(out)}")
    if out.dtype.is_pred:
        raise fail(ctx, "cannot produce pred values")
    return out


@shape_rule(O.BROADCAST)
def broadcast(ctx: ShapeContext) -> Shape:
    x = operand(ctx, 0, "the operand")
    out = declared_array(ctx)
    dims = int_list(ctx, "dimensions", ())
    if out.dtype != x.dtype:
        raise fail(ctx, f"cannot change the element type: operand {short(x)}, result {short(out)}")
    if len(dims) != x.rank:
        raise fail(ctx, f"dimensions={list(dims)} must list one output dimension per operand dimension "
                        f"(operand {short(x)})")
    # Client-side XLA asks for increasing dims, but its HLO verifier does not, and optimized HLO
    # (a transpose folded into a broadcast) may list them in any order: only repeats are wrong.
    check_dims_in_range(ctx, dims, out.rank, "dimensions")
    for i, d in enumerate(dims):
        if x.dims[i] != out.dims[d]:
            raise fail(ctx, f"operand dimension {i} has size {x.dims[i]} but output dimension {d} "
                            f"has size {out.dims[d]}")
    return out


@shape_rule(O.RESHAPE)
def reshape(ctx: ShapeContext) -> Shape:
    x = operand(ctx, 0, "the operand")
    out = declared_array(ctx)
    if out.dtype != x.dtype:
        raise fail(ctx, f"cannot change the element type: operand {short(x)}, result {short(out)}")
    if out.num_elements != x.num_elements:
        raise fail(ctx, f"element counts differ: operand {short(x)} has {x.num_elements}, "
                        f"result {short(out)} has {out.num_elements}")
    return out


@shape_rule(O.DYNAMIC_RESHAPE)
def dynamic_reshape(ctx: ShapeContext) -> Shape:
    x = operand(ctx, 0, "the operand")
    out = declared_array(ctx)
    if out.dtype != x.dtype:
        raise fail(ctx, f"cannot change the element type: operand {short(x)}, result {short(out)}")
    sizes = ctx.operands[1:]
    if len(sizes) != out.rank:
        raise fail(ctx, f"needs one size operand per result dimension ({out.rank}), got {len(sizes)}")
    for i, s in enumerate(sizes):
        expect_int_scalar(ctx, s, f"size operand {i}")
    return out


@shape_rule(O.BITCAST)
def bitcast(ctx: ShapeContext) -> ShapeLike:
    x = operand(ctx, 0, "the operand")
    out = declared_array(ctx)
    if out.num_elements * out.dtype.bit_width != x.num_elements * x.dtype.bit_width:
        raise fail(ctx, f"operand {short(x)} and result {short(out)} differ in size")
    return out


@shape_rule(O.TRANSPOSE)
def transpose(ctx: ShapeContext) -> Shape:
    x = operand(ctx, 0, "the operand")
    perm = int_list(ctx, "dimensions")
    if sorted(perm) != list(range(x.rank)):
        raise fail(ctx, f"dimensions={list(perm)} is not a permutation of the {x.rank} dimensions of {short(x)}")
    return array(x.dtype, (x.dims[p] for p in perm))


@shape_rule(O.SLICE)
def slice_(ctx: ShapeContext) -> Shape:
    x = operand(ctx, 0, "the operand")
    spec = ctx.attr("slice")
    if len(spec) != x.rank:
        raise fail(ctx, f"slice has {len(spec)} dimension(s) but the operand {short(x)} has rank {x.rank}")
    dims = []
    for i, (s, n) in enumerate(zip(spec, x.dims)):
        if s.stride <= 0:
            raise fail(ctx, f"dimension {i}: stride {s.stride} must be positive")
        if not 0 <= s.start <= s.limit <= n:
            raise fail(ctx, f"dimension {i}: slice [{s.start}:{s.limit}] is out of bounds for size {n} "
                            f"(need 0 <= start <= limit <= {n})")
        dims.append(-(-(s.limit - s.start) // s.stride))
    return array(x.dtype, dims)


def _start_indices(ctx: ShapeContext, first: int, rank: int) -> None:
    """Start indices are ``rank`` integer scalars of one type (or, in old HLO, one 1-D vector)."""
    starts = ctx.operands[first:]
    if len(starts) == 1 and rank != 1 and isinstance(starts[0], Shape) and starts[0].rank == 1:
        vec = expect_array(ctx, starts[0], "the start index vector")
        if vec.dims[0] != rank or not vec.dtype.is_integral:
            raise fail(ctx, f"start index vector {short(vec)} must hold {rank} integers")
        return
    if len(starts) != rank:
        raise fail(ctx, f"needs {rank} start index operand(s), one per operand dimension, got {len(starts)}")
    shapes = [expect_int_scalar(ctx, s, f"start index {i}") for i, s in enumerate(starts)]
    if shapes:
        expect_same_dtype(ctx, shapes, "start indices")


@shape_rule(O.DYNAMIC_SLICE)
def dynamic_slice(ctx: ShapeContext) -> Shape:
    if len(ctx.operands) < 1:
        raise fail(ctx, "needs an operand")
    x = operand(ctx, 0, "the operand")
    sizes = int_list(ctx, "dynamic_slice_sizes")
    _start_indices(ctx, 1, x.rank)
    if len(sizes) != x.rank:
        raise fail(ctx, f"dynamic_slice_sizes={list(sizes)} must have one size per operand dimension ({x.rank})")
    for i, (s, n) in enumerate(zip(sizes, x.dims)):
        if not 0 <= s <= n:
            raise fail(ctx, f"slice size {s} of dimension {i} is out of range for size {n}")
    return array(x.dtype, sizes)


@shape_rule(O.DYNAMIC_UPDATE_SLICE)
def dynamic_update_slice(ctx: ShapeContext) -> Shape:
    if len(ctx.operands) < 2:
        raise fail(ctx, "needs an operand and an update")
    x, update = operand(ctx, 0, "the operand"), operand(ctx, 1, "the update")
    if update.dtype != x.dtype:
        raise fail(ctx, f"update {short(update)} must have the element type of the operand {short(x)}")
    if update.rank != x.rank:
        raise fail(ctx, f"update {short(update)} must have the rank of the operand {short(x)}")
    for i, (u, n) in enumerate(zip(update.dims, x.dims)):
        if u > n:
            raise fail(ctx, f"update dimension {i} has size {u}, larger than the operand's {n}")
    _start_indices(ctx, 2, x.rank)
    return array(x.dtype, x.dims)


@shape_rule(O.CONCATENATE)
def concatenate(ctx: ShapeContext) -> Shape:
    if not ctx.operands:
        raise fail(ctx, "needs at least one operand")
    shapes = [operand(ctx, i) for i in range(len(ctx.operands))]
    (dim,) = _single_dim(ctx)
    first = shapes[0]
    if not 0 <= dim < first.rank:
        raise fail(ctx, f"dimension {dim} is out of range for {short(first)}")
    expect_same_dtype(ctx, shapes)
    for s in shapes[1:]:
        if s.rank != first.rank or any(a != b for i, (a, b) in enumerate(zip(s.dims, first.dims)) if i != dim):
            raise fail(ctx, f"operands must match except in dimension {dim}, got {short(first)} and {short(s)}")
    dims = list(first.dims)
    dims[dim] = sum(s.dims[dim] for s in shapes)
    return array(first.dtype, dims)


def _single_dim(ctx: ShapeContext) -> tuple[int]:
    dims = int_list(ctx, "dimensions")
    if len(dims) != 1:
        raise fail(ctx, f"dimensions={list(dims)} must name exactly one dimension")
    return (dims[0],)


@shape_rule(O.PAD)
def pad(ctx: ShapeContext) -> Shape:
    x = operand(ctx, 0, "the operand")
    value = operand(ctx, 1, "the padding value")
    if value.rank != 0:
        raise fail(ctx, f"the padding value must be a scalar, got {short(value)}")
    if value.dtype != x.dtype:
        raise fail(ctx, f"the padding value {short(value)} must have the element type of {short(x)}")
    config = ctx.attr("padding")
    if len(config) != x.rank:
        raise fail(ctx, f"padding has {len(config)} dimension(s) but the operand {short(x)} has rank {x.rank}")
    dims = []
    for i, (p, n) in enumerate(zip(config, x.dims)):
        if p.interior < 0:
            raise fail(ctx, f"dimension {i}: interior padding {p.interior} is negative")
        size = p.low + p.high + n + max(n - 1, 0) * p.interior
        if size < 0:
            raise fail(ctx, f"dimension {i}: padding {p.low}_{p.high}_{p.interior} of size {n} gives "
                            f"negative size {size}")
        dims.append(size)
    return array(x.dtype, dims)


@shape_rule(O.REVERSE)
def reverse(ctx: ShapeContext) -> Shape:
    x = operand(ctx, 0, "the operand")
    check_dims_in_range(ctx, int_list(ctx, "dimensions"), x.rank, "dimensions")
    return array(x.dtype, x.dims)


@shape_rule(O.GET_DIMENSION_SIZE)
def get_dimension_size(ctx: ShapeContext) -> Shape:
    x = operand(ctx, 0, "the operand")
    (dim,) = _single_dim(ctx)
    check_dims_in_range(ctx, (dim,), x.rank, "dimensions")
    return array(S32, ())


@shape_rule(O.SET_DIMENSION_SIZE)
def set_dimension_size(ctx: ShapeContext) -> Shape:
    x = operand(ctx, 0, "the operand")
    size = expect_int_scalar(ctx, ctx.operands[1], "the size operand")
    if size.dtype is not S32:
        raise fail(ctx, f"the size operand must be s32[], got {short(size)}")
    (dim,) = _single_dim(ctx)
    check_dims_in_range(ctx, (dim,), x.rank, "dimensions")
    dynamic = list(x.dynamic or (False,) * x.rank)
    dynamic[dim] = True
    base = array(x.dtype, x.dims)
    return Shape(x.dtype, x.dims, base.layout, tuple(dynamic))

