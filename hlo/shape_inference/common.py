"""Helpers shared by the shape-rule modules: typed operand access, checks, windows.

Every helper raises ``ShapeError`` with a message naming the opcode, so rules
read as a list of XLA's conditions. Shapes built here carry XLA's default
(row-major) layout, which is what inferred shapes print with.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from hlo.attributes import CompRef, ProgramShape, Window
from hlo.dtypes import PrimitiveType
from hlo.shape_inference import ShapeContext, ShapeError
from hlo.shapes import Shape, ShapeLike, TupleShape

S32 = PrimitiveType.S32
PRED = PrimitiveType.PRED


def array(dtype: PrimitiveType, dims: Iterable[int]) -> Shape:
    """An array shape with XLA's default layout."""
    return Shape.array(dtype, tuple(dims))


def with_default_layout(shape: ShapeLike) -> ShapeLike:
    """``shape`` with every array leaf given XLA's default layout (dynamic bounds kept)."""
    if isinstance(shape, TupleShape):
        return TupleShape(tuple(with_default_layout(e) for e in shape.elements))
    if not shape.dtype.is_array_type:
        return shape
    return Shape(shape.dtype, shape.dims, Shape.array(shape.dtype, shape.dims).layout, shape.dynamic)


def short(shape: ShapeLike) -> str:
    return shape.short()


def fail(ctx: ShapeContext, message: str) -> ShapeError:
    return ShapeError(f"{ctx.opcode.text}: {message}")


def expect_array(ctx: ShapeContext, shape: ShapeLike, what: str) -> Shape:
    """``shape`` as an array (not a tuple, not a token)."""
    if isinstance(shape, TupleShape) or not shape.dtype.is_array_type:
        raise fail(ctx, f"{what} must be an array, got {short(shape)}")
    return shape


def operand(ctx: ShapeContext, i: int, what: str | None = None) -> Shape:
    return expect_array(ctx, ctx.operands[i], what or f"operand {i}")


def expect_scalar(ctx: ShapeContext, shape: ShapeLike, what: str) -> Shape:
    shape = expect_array(ctx, shape, what)
    if shape.rank != 0:
        raise fail(ctx, f"{what} must be a scalar, got {short(shape)}")
    return shape


def expect_int_scalar(ctx: ShapeContext, shape: ShapeLike, what: str) -> Shape:
    shape = expect_scalar(ctx, shape, what)
    if not shape.dtype.is_integral:
        raise fail(ctx, f"{what} must be an integer scalar, got {short(shape)}")
    return shape


def expect_same_dims(ctx: ShapeContext, shapes: Sequence[Shape], what: str = "operands") -> None:
    first = shapes[0]
    for s in shapes[1:]:
        if s.dims != first.dims:
            raise fail(ctx, f"{what} must have the same dimensions, got {short(first)} and {short(s)}")


def expect_same_dtype(ctx: ShapeContext, shapes: Sequence[Shape], what: str = "operands") -> None:
    first = shapes[0]
    for s in shapes[1:]:
        if s.dtype != first.dtype:
            raise fail(ctx, f"{what} must have the same element type, got {short(first)} and {short(s)}")


def int_list(ctx: ShapeContext, key: str, default=...) -> tuple[int, ...]:
    value = ctx.attr(key, default)
    if isinstance(value, int):
        return (value,)
    return tuple(value)


def check_dims_in_range(ctx: ShapeContext, dims: Sequence[int], rank: int, what: str,
                        unique: bool = True, increasing: bool = False) -> None:
    for d in dims:
        if not 0 <= d < rank:
            raise fail(ctx, f"{what} {list(dims)}: dimension {d} is out of range for rank {rank}")
    if unique and len(set(dims)) != len(dims):
        raise fail(ctx, f"{what} {list(dims)} has repeated dimensions")
    if increasing and list(dims) != sorted(dims):
        raise fail(ctx, f"{what} {list(dims)} must be sorted in increasing order")


def declared_array(ctx: ShapeContext) -> Shape:
    return expect_array(ctx, ctx.require_declared(), "the result shape")


# --- called computations -----------------------------------------------------------


def called(ctx: ShapeContext, key: str) -> ProgramShape:
    return ctx.computation(key)


def called_list(ctx: ShapeContext, key: str) -> list[tuple[str, ProgramShape]]:
    """(name, signature) of every computation named by a list attribute such as ``branch_computations``."""
    refs = ctx.attr(key)
    refs = refs if isinstance(refs, tuple) else (refs,)
    out = []
    for ref in refs:
        if not isinstance(ref, CompRef) or ref.name not in ctx.called:
            raise fail(ctx, f"{key}: {ref} does not name a computation of the module")
        out.append((ref.name, ctx.called[ref.name]))
    return out


def check_call_signature(ctx: ShapeContext, key: str, sig: ProgramShape, args: Sequence[ShapeLike]) -> None:
    """The computation ``key`` takes exactly ``args`` (layouts ignored)."""
    if len(sig.parameters) != len(args):
        raise fail(ctx, f"{key} computation takes {len(sig.parameters)} parameter(s), "
                        f"but {len(args)} are passed")
    for i, (param, arg) in enumerate(zip(sig.parameters, args)):
        if not param.compatible(arg):
            raise fail(ctx, f"{key} computation parameter {i} is {short(param)}, but it is passed {short(arg)}")


def check_scalar_function(ctx: ShapeContext, key: str, sig: ProgramShape, params: Sequence[PrimitiveType],
                          results: Sequence[PrimitiveType]) -> None:
    """``key`` is ``(params...) -> result`` on scalars; ``results`` of length > 1 means a tuple result."""
    if len(sig.parameters) != len(params):
        raise fail(ctx, f"{key} computation must take {len(params)} parameters, but takes {len(sig.parameters)}")
    want_params = [Shape.array(t, ()) for t in params]
    check_call_signature(ctx, key, sig, want_params)
    if len(results) == 1:
        want: ShapeLike = Shape.array(results[0], ())
    else:
        want = TupleShape(tuple(Shape.array(t, ()) for t in results))
    if not sig.result.compatible(want):
        raise fail(ctx, f"{key} computation must return {short(want)}, but returns {short(sig.result)}")


def check_combiner(ctx: ShapeContext, key: str, dtypes: Sequence[PrimitiveType]) -> None:
    """``key`` is ``(acc_0..acc_{n-1}, x_0..x_{n-1}) -> acc`` on scalars of ``dtypes`` (a tuple when n > 1),
    as the computations of reduce, reduce-window and scatter must be."""
    check_scalar_function(ctx, key, called(ctx, key), list(dtypes) * 2, dtypes)


def check_inits(ctx: ShapeContext, inits: Sequence[ShapeLike], inputs: Sequence[Shape]) -> list[Shape]:
    """Init values are scalars of their input's element type."""
    out = []
    for i, (init, x) in enumerate(zip(inits, inputs)):
        init = expect_scalar(ctx, init, f"init value {i}")
        if init.dtype != x.dtype:
            raise fail(ctx, f"init value {i} is {short(init)} but input {i} is {short(x)}")
        out.append(init)
    return out


# --- windows -------------------------------------------------------------------------


def dilated(bound: int, dilation: int) -> int:
    return 0 if bound == 0 else (bound - 1) * dilation + 1


def strided(bound: int, window: int, stride: int) -> int:
    return 0 if window > bound else (bound - window) // stride + 1


def window_output_dims(ctx: ShapeContext, window: Window, base: Sequence[int]) -> list[int]:
    """Output sizes of a window sliding over ``base`` (XLA's InferWindowOutputShape)."""
    if len(window.dims) != len(base):
        raise fail(ctx, f"window has {len(window.dims)} dimension(s) but the base shape has rank {len(base)}")
    out = []
    for i, (w, n) in enumerate(zip(window.dims, base)):
        if w.size <= 0:
            raise fail(ctx, f"window dimension {i} has non-positive size {w.size}")
        if w.stride <= 0:
            raise fail(ctx, f"window dimension {i} has non-positive stride {w.stride}")
        if w.lhs_dilate < 1 or w.rhs_dilate < 1:
            raise fail(ctx, f"window dimension {i} has a dilation below 1")
        padded = w.pad_low + dilated(n, w.lhs_dilate) + w.pad_high
        out.append(strided(padded, dilated(w.size, w.rhs_dilate), w.stride))
    return out
