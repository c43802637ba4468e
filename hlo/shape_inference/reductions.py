"""Shape rules of reductions and windowed ops: reduce, reduce-window, select-and-scatter.

reduce and reduce-window are variadic: N inputs of equal dims, then N scalar
init values; ``to_apply`` is ``(acc_0..acc_{N-1}, x_0..x_{N-1}) -> acc`` and
the result is a tuple when N > 1. Window output sizes follow XLA's formula:
``(pad_lo + dilated(base) + pad_hi - dilated(window)) // stride + 1`` (0 when
the window does not fit), with ``dilated(n, d) = (n - 1) * d + 1``.
"""

from __future__ import annotations

from hlo.opcodes import Opcode
from hlo.shape_inference import ShapeContext, shape_rule
from hlo.shape_inference.common import (
    PRED, array, called, check_combiner, check_dims_in_range, check_inits, check_scalar_function,
    expect_same_dims, fail, int_list, operand, short, window_output_dims,
)
from hlo.shapes import Shape, ShapeLike, TupleShape

O = Opcode


def _split_inputs(ctx: ShapeContext) -> tuple[list[Shape], list[Shape]]:
    count = len(ctx.operands)
    if count < 2 or count % 2:
        raise fail(ctx, f"takes N inputs followed by N init values (an even count), got {count} operands")
    n = count // 2
    inputs = [operand(ctx, i, f"input {i}") for i in range(n)]
    expect_same_dims(ctx, inputs, "inputs")
    inits = check_inits(ctx, ctx.operands[n:], inputs)
    return inputs, inits


def _result(shapes: list[Shape]) -> ShapeLike:
    return shapes[0] if len(shapes) == 1 else TupleShape(tuple(shapes))


@shape_rule(O.REDUCE)
def reduce(ctx: ShapeContext) -> ShapeLike:
    inputs, inits = _split_inputs(ctx)
    dims = int_list(ctx, "dimensions")
    check_dims_in_range(ctx, dims, inputs[0].rank, "dimensions")
    check_combiner(ctx, "to_apply", [i.dtype for i in inits])
    kept = [n for d, n in enumerate(inputs[0].dims) if d not in dims]
    return _result([array(init.dtype, kept) for init in inits])


@shape_rule(O.REDUCE_WINDOW)
def reduce_window(ctx: ShapeContext) -> ShapeLike:
    inputs, inits = _split_inputs(ctx)
    out_dims = window_output_dims(ctx, ctx.attr("window"), inputs[0].dims)
    check_combiner(ctx, "to_apply", [i.dtype for i in inits])
    return _result([array(init.dtype, out_dims) for init in inits])


@shape_rule(O.SELECT_AND_SCATTER)
def select_and_scatter(ctx: ShapeContext) -> Shape:
    x, source = operand(ctx, 0, "the operand"), operand(ctx, 1, "the source")
    init = operand(ctx, 2, "the init value")
    if init.rank != 0 or init.dtype != x.dtype:
        raise fail(ctx, f"the init value must be a {x.dtype} scalar, got {short(init)}")
    if source.dtype != x.dtype:
        raise fail(ctx, f"the source {short(source)} must have the element type of the operand {short(x)}")
    windowed = window_output_dims(ctx, ctx.attr("window"), x.dims)
    if list(source.dims) != windowed:
        raise fail(ctx, f"the source {short(source)} must have the window output dims {windowed} of the operand")
    check_scalar_function(ctx, "select", called(ctx, "select"), [x.dtype, x.dtype], [PRED])
    check_combiner(ctx, "scatter", [x.dtype])
    return array(x.dtype, x.dims)
