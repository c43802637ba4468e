"""Helpers shared by the shape and data-movement lowerings: static slices, concatenation, padding,
reversal, iotas, compile-time axes, and the scatter combiners ``(old, new) -> result``.

Every helper takes and returns builder ``Value``s with static dims; none of them
checks TF semantics (the rules do), they only build well-typed HLO.
"""

from __future__ import annotations

from typing import Sequence

from hlo.attributes import ComparisonDirection, PadDim, SliceDim
from hlo.builder import ComputationBuilder, Value
from hlo.dtypes import PrimitiveType
from hlo.ir import HloComputation
from hlo.lowering.context import LoweringContext
from hlo.opcodes import Opcode
from hlo.shapes import Shape, scalar


def slice_dims(ctx: LoweringContext, x: Value, starts: Sequence[int], limits: Sequence[int],
               strides: Sequence[int] | None = None) -> Value:
    """``x[starts:limits:strides]`` over every dim (strides positive); no-op when it is the identity."""
    dims = ctx.dims(x)
    strides = strides or [1] * len(dims)
    if all(s == 0 and l == n and k == 1 for s, l, k, n in zip(starts, limits, strides, dims)):
        return x
    spec = tuple(SliceDim(int(s), int(l), int(k)) for s, l, k in zip(starts, limits, strides))
    return ctx.b.slice(x, slice=spec)


def slice_axis(ctx: LoweringContext, x: Value, axis: int, start: int, limit: int, stride: int = 1) -> Value:
    """``x`` sliced along one axis."""
    dims = ctx.dims(x)
    starts, limits, strides = [0] * len(dims), list(dims), [1] * len(dims)
    starts[axis], limits[axis], strides[axis] = start, limit, stride
    return slice_dims(ctx, x, starts, limits, strides)


def concat(ctx: LoweringContext, values: Sequence[Value], axis: int) -> Value:
    """Concatenate along ``axis``, skipping empty pieces where a non-empty one remains."""
    values = list(values)
    kept = [v for v in values if ctx.dims(v)[axis] > 0] or values[:1]
    if len(kept) == 1:
        return kept[0]
    return ctx.b.concatenate(*kept, dimensions=(axis,))


def pad(ctx: LoweringContext, x: Value, value: Value, lows: Sequence[int], highs: Sequence[int]) -> Value:
    if not any(lows) and not any(highs):
        return x
    config = tuple(PadDim(int(lo), int(hi), 0) for lo, hi in zip(lows, highs))
    return ctx.b.pad(x, value, padding=config)


def reverse(ctx: LoweringContext, x: Value, axes: Sequence[int]) -> Value:
    axes = tuple(sorted(a for a in set(axes) if ctx.dims(x)[a] > 1))
    return ctx.b.reverse(x, dimensions=axes) if axes else x


def iota(ctx: LoweringContext, dtype: PrimitiveType, dims: Sequence[int], axis: int) -> Value:
    return ctx.b.iota(shape=Shape.array(dtype, tuple(dims)), iota_dimension=axis)


def const_axis(ctx: LoweringContext, i: int, rank: int, what: str = "axis") -> int:
    """Compile-time scalar axis input ``i``, normalized into ``[0, rank)``."""
    values = ctx.const_ints(i)
    if len(values) != 1:
        raise ctx.error(f"{what} must be a scalar, got {len(values)} values")
    return ctx.normalize_axis(values[0], rank, what)


def normalize_axes(ctx: LoweringContext, axes: Sequence[int], rank: int, what: str = "axis") -> list[int]:
    out = [ctx.normalize_axis(a, rank, what) for a in axes]
    if len(set(out)) != len(out):
        raise ctx.error(f"{what} {list(axes)} names a dimension more than once")
    return out


def combiner(ctx: LoweringContext, kind: str, dtype: PrimitiveType) -> HloComputation:
    """Scatter combiners ``(old, new) -> result``: ``replace`` keeps the update; ``add`` adds (ORs for pred);
    ``sub`` subtracts; ``mul`` multiplies; ``max``/``min`` take the update only when it is strictly greater/less, so like TF a
    NaN update leaves the old value and a NaN old value stays."""
    table = {"add": Opcode.OR if dtype == PrimitiveType.PRED else Opcode.ADD, "sub": Opcode.SUBTRACT,
             "mul": Opcode.MULTIPLY}
    if kind in table:
        return ctx.scalar_computation(table[kind], dtype)

    def build(cb: ComputationBuilder) -> Value:
        old = cb.parameter(scalar(dtype), name="old")
        new = cb.parameter(scalar(dtype), name="new")
        if kind == "replace":
            return new
        lhs, rhs = (old, new) if kind == "max" else (new, old)
        better = cb.compare(lhs, rhs, direction=ComparisonDirection.LT)
        return cb.select(better, new, old)
    return ctx.computation(f"scatter_{kind}_{dtype.value}", build)
