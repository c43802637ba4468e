"""Data movement: ConcatV2/Concat, Pack, Unpack, Split, SplitV, Slice, Pad, PadV2, MirrorPad, ReverseV2.

Axes, sizes and paddings are compile-time constants; every op becomes static
slices, concatenations, pads and reverses. TF's argument checks are repeated
here so a bad graph fails at compile time with TF's reason. ``Slice`` with a run-time ``begin``
(``tf.image.random_crop``) is a ``dynamic-slice`` of the constant sizes, as in XLA: the start is
clamped so the slice fits, where TF's kernel fails on an out-of-range begin.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from hlo.builder import Value
from hlo.dtypes import PrimitiveType as P
from hlo.lowering.context import LoweringContext
from hlo.lowering.ops._shape_util import concat, const_axis, normalize_axes, pad, reverse, slice_axis, slice_dims
from hlo.lowering.registry import register_lowering
from hlo.lowering.tf_types import ALL


def _concat_values(ctx: LoweringContext, values: Sequence[Value], axis_input: int) -> Value:
    rank = len(ctx.dims(values[0]))
    axis = const_axis(ctx, axis_input, rank)
    for v in values[1:]:
        dims = ctx.dims(v)
        if len(dims) != rank or any(a != b for i, (a, b) in enumerate(zip(dims, ctx.dims(values[0]))) if i != axis):
            raise ctx.error(f"inputs must match except in dimension {axis}: {list(ctx.dims(values[0]))} "
                            f"vs. {list(dims)}")
    return concat(ctx, values, axis)


@register_lowering("ConcatV2", dtypes=ALL, const_inputs=(-1,))
def concat_v2(ctx: LoweringContext) -> Value:
    return _concat_values(ctx, ctx.inputs[:-1], len(ctx.inputs) - 1)


@register_lowering("Concat", dtypes=ALL, const_inputs=(0,))
def concat_v1(ctx: LoweringContext) -> Value:
    return _concat_values(ctx, ctx.inputs[1:], 0)


@register_lowering("Pack", dtypes=ALL)
def pack(ctx: LoweringContext) -> Value:
    dims = list(ctx.dims(ctx.inputs[0]))
    axis = ctx.normalize_axis(ctx.attr_int("axis", 0), len(dims) + 1)
    for v in ctx.inputs[1:]:
        if list(ctx.dims(v)) != dims:
            raise ctx.error(f"shapes of all inputs must match: {dims} vs. {list(ctx.dims(v))}")
    expanded = [ctx.reshape(v, dims[:axis] + [1] + dims[axis:]) for v in ctx.inputs]
    return concat(ctx, expanded, axis)


@register_lowering("Unpack", dtypes=ALL)
def unpack(ctx: LoweringContext) -> list[Value]:
    x = ctx.inputs[0]
    dims = list(ctx.dims(x))
    axis = ctx.normalize_axis(ctx.attr_int("axis", 0), len(dims))
    if ctx.attr_int("num") != dims[axis]:
        raise ctx.error(f"input dimension {axis} has size {dims[axis]}, but num={ctx.attr_int('num')}")
    rest = dims[:axis] + dims[axis + 1:]
    return [ctx.reshape(slice_axis(ctx, x, axis, i, i + 1), rest) for i in range(dims[axis])]


def _split_at(ctx: LoweringContext, x: Value, axis: int, sizes: list[int]) -> list[Value]:
    out, start = [], 0
    for n in sizes:
        out.append(slice_axis(ctx, x, axis, start, start + n))
        start += n
    return out


@register_lowering("Split", dtypes=ALL, const_inputs=(0,))
def split(ctx: LoweringContext) -> list[Value]:
    x = ctx.inputs[1]
    dims = ctx.dims(x)
    axis = const_axis(ctx, 0, len(dims), "split_dim")
    num = ctx.attr_int("num_split")
    if dims[axis] % num:
        raise ctx.error(f"number of ways to split should evenly divide the split dimension, "
                        f"but got split_dim {axis} (size = {dims[axis]}) and num_split {num}")
    return _split_at(ctx, x, axis, [dims[axis] // num] * num)


@register_lowering("SplitV", dtypes=ALL, const_inputs=(1, 2))
def split_v(ctx: LoweringContext) -> list[Value]:
    x = ctx.inputs[0]
    dims = ctx.dims(x)
    axis = const_axis(ctx, 2, len(dims), "split_dim")
    sizes = ctx.const_ints(1)
    if len(sizes) != ctx.attr_int("num_split"):
        raise ctx.error(f"size_splits has {len(sizes)} entries but num_split={ctx.attr_int('num_split')}")
    unknown = [i for i, s in enumerate(sizes) if s == -1]
    if len(unknown) > 1 or any(s < -1 for s in sizes):
        raise ctx.error(f"size_splits {sizes}: at most one -1 and no other negative size")
    known = sum(s for s in sizes if s >= 0)
    if unknown:
        sizes[unknown[0]] = dims[axis] - known
    if sum(sizes) != dims[axis] or min(sizes, default=0) < 0:
        raise ctx.error(f"size_splits {ctx.const_ints(1)} must sum to the dimension {dims[axis]} "
                        f"of split_dim {axis}")
    return _split_at(ctx, x, axis, sizes)


def _dynamic_slice(ctx: LoweringContext, x: Value, size: list[int]) -> Value:
    dims = ctx.dims(x)
    if ctx.dims(ctx.inputs[1]) != (len(dims),) or len(size) != len(dims):
        raise ctx.error(f"begin {list(ctx.dims(ctx.inputs[1]))} and size {size} must have one entry per input "
                        f"dimension ({len(dims)})")
    if any(s < 0 or s > n for s, n in zip(size, dims)):
        raise ctx.error(f"a Slice with a run-time begin needs sizes in [0, dim] (no -1), got {size} of {list(dims)}")
    begin = ctx.convert(ctx.inputs[1], P.S32)
    starts = [ctx.reshape(slice_axis(ctx, begin, 0, i, i + 1), ()) for i in range(len(dims))]
    return ctx.b.dynamic_slice(x, *starts, dynamic_slice_sizes=tuple(size))


@register_lowering("Slice", dtypes=ALL, const_inputs=(2,))
def slice_(ctx: LoweringContext) -> Value:
    x = ctx.inputs[0]
    dims = ctx.dims(x)
    if not ctx._lowering.is_constant(ctx.inputs[1]):
        return _dynamic_slice(ctx, x, ctx.const_ints(2))
    begin, size = ctx.const_ints(1), ctx.const_ints(2)
    if len(begin) != len(dims) or len(size) != len(dims):
        raise ctx.error(f"begin {begin} and size {size} must have one entry per input dimension ({len(dims)})")
    limits = []
    for i, (b, s, n) in enumerate(zip(begin, size, dims)):
        s = n - b if s == -1 else s
        if not (0 <= b <= n and 0 <= s and b + s <= n):
            raise ctx.error(f"expected size[{i}] in [0, {n - b}], but got {s} (begin[{i}] = {b})")
        limits.append(b + s)
    return slice_dims(ctx, x, begin, limits)


def _paddings(ctx: LoweringContext, rank: int, i: int = 1) -> np.ndarray:
    pads = np.asarray(ctx.const_input(i)).astype(np.int64)
    if pads.shape != (rank, 2):
        raise ctx.error(f"paddings must have shape [{rank}, 2], got {list(pads.shape)}")
    if (pads < 0).any():
        raise ctx.error(f"paddings must be non-negative: {pads.tolist()}")
    return pads


@register_lowering("Pad", dtypes=ALL, const_inputs=(1,))
def pad_(ctx: LoweringContext) -> Value:
    x = ctx.inputs[0]
    pads = _paddings(ctx, len(ctx.dims(x)))
    zero = ctx.scalar(0, ctx.dtype(x))
    return pad(ctx, x, zero, pads[:, 0].tolist(), pads[:, 1].tolist())


@register_lowering("PadV2", dtypes=ALL, const_inputs=(1,))
def pad_v2(ctx: LoweringContext) -> Value:
    x, _, value = ctx.inputs
    if ctx.dims(value):
        raise ctx.error(f"constant_values must be a scalar, got dims {list(ctx.dims(value))}")
    pads = _paddings(ctx, len(ctx.dims(x)))
    return pad(ctx, x, value, pads[:, 0].tolist(), pads[:, 1].tolist())


# MirrorPad: how far the mirrored block starts from the edge (REFLECT skips the edge element).
_MIRROR_OFFSET = {"REFLECT": 1, "SYMMETRIC": 0}


@register_lowering("MirrorPad", dtypes=ALL, const_inputs=(1,))
def mirror_pad(ctx: LoweringContext) -> Value:
    x = ctx.inputs[0]
    dims = ctx.dims(x)
    mode = ctx.attr_str("mode")
    if mode not in _MIRROR_OFFSET:
        raise ctx.error(f"mode must be REFLECT or SYMMETRIC, got {mode!r}")
    off = _MIRROR_OFFSET[mode]
    pads = _paddings(ctx, len(dims))
    for axis, ((lo, hi), n) in enumerate(zip(pads.tolist(), dims)):
        if max(lo, hi) > n - off:
            raise ctx.invalid_argument(f"paddings {[lo, hi]} of dimension {axis} must be "
                            f"{'less than' if off else 'no greater than'} the dimension size {n}")
        if lo == hi == 0:
            continue
        left = reverse(ctx, slice_axis(ctx, x, axis, off, off + lo), [axis])
        right = reverse(ctx, slice_axis(ctx, x, axis, n - off - hi, n - off), [axis])
        x = concat(ctx, [left, x, right], axis)
    return x


@register_lowering("ReverseV2", dtypes=ALL, const_inputs=(1,))
def reverse_v2(ctx: LoweringContext) -> Value:
    x = ctx.inputs[0]
    return reverse(ctx, x, normalize_axes(ctx, ctx.const_ints(1), len(ctx.dims(x))))
