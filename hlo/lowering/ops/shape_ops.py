"""Shape ops: Reshape, Transpose, ConjugateTranspose, ExpandDims, Squeeze, BroadcastTo, Tile, Fill, Range, and Shape,
ShapeN, Size, Rank (which fold to constants from the static shapes).

Shape-like inputs (new shapes, permutations, multiples) must be compile-time
constants; the framework evaluates them, so ``tf.shape(x)`` arithmetic folds.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from hlo.builder import Value
from hlo.dtypes import PrimitiveType
from hlo.lowering.context import LoweringContext
from hlo.lowering.registry import register_lowering
from hlo.lowering.tf_types import ALL, FLOATS, INTS

P = PrimitiveType


def reshape_dims(ctx: LoweringContext, in_dims: tuple[int, ...], sizes: list[int]) -> list[int]:
    """TF's Reshape size rule: one -1 is inferred; zero sizes are left out of the products that infer
    it, so ``[0, 3] -> [-1, 0]`` gives ``[3, 0]``."""
    unknown = [i for i, s in enumerate(sizes) if s == -1]
    if len(unknown) > 1:
        raise ctx.error(f"only one input size may be -1, not both {unknown[0]} and {unknown[1]}")
    if any(s < -1 for s in sizes):
        raise ctx.error(f"size {min(sizes)} is invalid in shape {sizes}")
    total = math.prod(in_dims)
    out = list(sizes)
    if unknown:
        has_zero = 0 in sizes
        product = math.prod(s for s in sizes if s > 0)
        known = math.prod(d for d in in_dims if d > 0 or not has_zero)
        missing = known // product
        if 0 not in in_dims or not has_zero:
            if product * missing != known:
                raise ctx.error(f"input has {total} values, which is not a multiple of {product} "
                                f"(requested shape {sizes})")
        out[unknown[0]] = missing
    if math.prod(out) != total:
        raise ctx.error(f"input has {total} values but the requested shape {out} has {math.prod(out)}")
    return out


@register_lowering("Reshape", dtypes=ALL, const_inputs=(1,))
def reshape(ctx: LoweringContext) -> Value:
    x = ctx.inputs[0]
    return ctx.reshape(x, reshape_dims(ctx, ctx.dims(x), ctx.const_ints(1)))


@register_lowering("Transpose", dtypes=ALL, const_inputs=(1,))
def transpose(ctx: LoweringContext) -> Value:
    x = ctx.inputs[0]
    rank = len(ctx.dims(x))
    perm = [p + rank if p < 0 else p for p in ctx.const_ints(1)]
    if sorted(perm) != list(range(rank)):
        raise ctx.error(f"perm {ctx.const_ints(1)} is not a permutation of the {rank} dimensions")
    if perm == list(range(rank)):
        return x
    return ctx.b.transpose(x, dimensions=tuple(perm))


@register_lowering("ConjugateTranspose", dtypes=ALL, const_inputs=(1,))
def conjugate_transpose(ctx: LoweringContext) -> Value:
    """``Transpose``, then the complex conjugate (real types: the transpose)."""
    t = transpose(ctx)
    if not ctx.dtype(t).is_complex:
        return t
    return ctx.b.complex(ctx.b.real(t), ctx.b.negate(ctx.b.imag(t)))


@register_lowering("ExpandDims", dtypes=ALL, const_inputs=(1,))
def expand_dims(ctx: LoweringContext) -> Value:
    x = ctx.inputs[0]
    dims = list(ctx.dims(x))
    values = ctx.const_ints(1)
    if len(values) != 1:
        raise ctx.error(f"dim must hold exactly one value, got {values}")
    axis = ctx.normalize_axis(values[0], len(dims) + 1, "dim")
    return ctx.reshape(x, dims[:axis] + [1] + dims[axis:])


@register_lowering("Squeeze", dtypes=ALL)
def squeeze(ctx: LoweringContext) -> Value:
    x = ctx.inputs[0]
    dims = ctx.dims(x)
    asked = ctx.attr_ints("squeeze_dims", ())
    axes = {ctx.normalize_axis(a, len(dims), "squeeze dim") for a in asked}
    for a in axes:
        if dims[a] != 1:
            raise ctx.error(f"cannot squeeze dim[{a}], expected a dimension of 1, got {dims[a]}")
    if not asked:
        axes = {i for i, d in enumerate(dims) if d == 1}
    return ctx.reshape(x, [d for i, d in enumerate(dims) if i not in axes])


@register_lowering("BroadcastTo", dtypes=ALL, const_inputs=(1,))
def broadcast_to(ctx: LoweringContext) -> Value:
    x = ctx.inputs[0]
    target = ctx.const_ints(1)
    if len(target) < len(ctx.dims(x)):
        raise ctx.error(f"cannot broadcast {list(ctx.dims(x))} to the lower-rank shape {target}")
    return ctx.broadcast_to(x, ctx.broadcast_shapes(ctx.dims(x), target))


@register_lowering("Tile", dtypes=ALL - {P.U16}, const_inputs=(1,))
def tile(ctx: LoweringContext) -> Value:
    """Broadcast into ``[m0, d0, m1, d1, ...]``, then merge each pair."""
    x = ctx.inputs[0]
    dims = ctx.dims(x)
    multiples = ctx.const_ints(1)
    if len(multiples) != len(dims):
        raise ctx.error(f"multiples has {len(multiples)} entries but the input has rank {len(dims)}")
    if any(m < 0 for m in multiples):
        raise ctx.error(f"multiples {multiples} must be non-negative")
    if all(m == 1 for m in multiples):
        return x
    paired = [n for m, d in zip(multiples, dims) for n in (m, d)]
    wide = ctx.broadcast_in_dim(x, paired, [2 * i + 1 for i in range(len(dims))])
    return ctx.reshape(wide, [m * d for m, d in zip(multiples, dims)])


@register_lowering("Fill", dtypes=ALL, const_inputs=(0,))
def fill(ctx: LoweringContext) -> Value:
    value = ctx.inputs[1]
    if ctx.dims(value):
        raise ctx.error(f"value must be a scalar, got dims {list(ctx.dims(value))}")
    dims = ctx.const_ints(0)
    if any(d < 0 for d in dims):
        raise ctx.error(f"dims {dims} must be non-negative")
    return ctx.broadcast_in_dim(value, dims, ())


_RANGE_TYPES = (FLOATS - {P.F16}) | {P.S32, P.S64}  # TF's shape function rejects half


@register_lowering("Range", dtypes=_RANGE_TYPES, type_attrs=("Tidx",), const_inputs=(0, 1, 2))
def range_(ctx: LoweringContext) -> Value:
    """Folded to a constant the way TF's kernel computes it: ``out[i] = start + T(i) * delta`` in T."""
    dtype = ctx.dtype_attr("Tidx")
    start, limit, delta = (np.asarray(ctx.const_input(i)).reshape(()) for i in range(3))
    if delta == 0:
        raise ctx.error("requires delta != 0")
    if (delta > 0 and start > limit) or (delta < 0 and start < limit):
        raise ctx.error(f"requires start {'<=' if delta > 0 else '>='} limit when delta "
                        f"{'>' if delta > 0 else '<'} 0: {start}/{limit}")
    if dtype in INTS:
        span, step = abs(int(limit) - int(start)), abs(int(delta))
        size = (span + step - 1) // step
    else:
        size = int(np.ceil(np.abs((limit - start) / delta)))  # in the element type, as TF does
    values = start + np.arange(size).astype(dtype.numpy) * delta
    return ctx.constant(values.astype(dtype.numpy), dtype)


def _index_constant(ctx: LoweringContext, values: npt.ArrayLike, attr: str = "out_type") -> Value:
    dtype = ctx.dtype_attr(attr)
    if dtype == P.S32 and any(v > np.iinfo(np.int32).max for v in np.ravel(values)):
        raise ctx.error(f"value {max(np.ravel(values))} does not fit in int32; use out_type=int64")
    return ctx.constant(np.asarray(values, dtype.numpy), dtype)


@register_lowering("Shape", dtypes=ALL)
def shape(ctx: LoweringContext) -> Value:
    return _index_constant(ctx, np.array(ctx.dims(ctx.inputs[0]), np.int64).reshape(-1))


@register_lowering("ShapeN", dtypes=ALL)
def shape_n(ctx: LoweringContext) -> list[Value]:
    return [_index_constant(ctx, np.array(ctx.dims(x), np.int64).reshape(-1)) for x in ctx.inputs]


@register_lowering("Size", dtypes=ALL)
def size(ctx: LoweringContext) -> Value:
    return _index_constant(ctx, np.int64(math.prod(ctx.dims(ctx.inputs[0]))))


@register_lowering("Rank", dtypes=ALL)
def rank(ctx: LoweringContext) -> Value:
    return ctx.constant(np.int32(len(ctx.dims(ctx.inputs[0]))), P.S32)

