"""Rearranging ops tf2xla lowers that models and their gradients emit: Roll (``tf.roll``, shifted
windows), SpaceToDepth / DepthToSpace (``tf.nn.space_to_depth``, sub-pixel upsampling) and MirrorPadGrad
(the gradient of a REFLECT/SYMMETRIC ``tf.pad``).

- ``Roll(input, shift, axis)``: per axis (shifts of a repeated axis add), the last ``shift mod n``
  elements move to the front: two slices and a concatenation. ``shift`` and ``axis`` are compile-time
  constants.
- ``SpaceToDepth(input, block_size)``, NHWC: ``[N, H/b, b, W/b, b, C]`` -> transpose ->
  ``[N, H/b, W/b, b*b*C]`` (depth index ``(row * b + col) * C + c``); ``DepthToSpace`` is its inverse.
  Other data formats are refused.
- ``MirrorPadGrad(grad, paddings, mode)``: per dim, the centre of ``grad`` plus each padded edge
  reversed onto the elements it mirrored (REFLECT skips the edge element, SYMMETRIC does not).
"""

from __future__ import annotations

from hlo.builder import Value
from hlo.lowering.context import LoweringContext
from hlo.lowering.ops._shape_util import concat, pad, reverse, slice_axis
from hlo.lowering.ops.data_movement import _MIRROR_OFFSET, _paddings
from hlo.lowering.registry import register_lowering
from hlo.lowering.tf_types import ALL, NUMERIC


@register_lowering("Roll", dtypes=ALL, const_inputs=(1, 2))
def roll(ctx: LoweringContext) -> Value:
    x = ctx.inputs[0]
    dims = ctx.dims(x)
    shifts, axes = ctx.const_ints(1), ctx.const_ints(2)
    if len(shifts) != len(axes):
        raise ctx.invalid_argument(f"shift and axis must have the same size, got {len(shifts)} and {len(axes)}")
    total: dict[int, int] = {}
    for s, a in zip(shifts, axes):
        a = ctx.normalize_axis(a, len(dims))
        total[a] = total.get(a, 0) + s
    for a, s in sorted(total.items()):
        n = dims[a]
        s = s % n if n else 0
        if s:
            x = concat(ctx, [slice_axis(ctx, x, a, n - s, n), slice_axis(ctx, x, a, 0, n - s)], a)
    return x


def _nhwc_block(ctx: LoweringContext) -> int:
    fmt = ctx.attr_str("data_format", "NHWC")
    if fmt != "NHWC":
        raise ctx.error(f"data_format {fmt} is not supported (NHWC only)")
    b = ctx.attr_int("block_size")
    if b < 2:
        raise ctx.invalid_argument(f"Block size should be > 1, but was: {b}")
    if len(ctx.dims(ctx.inputs[0])) != 4:
        raise ctx.invalid_argument(f"Input rank should be: 4 instead of: {len(ctx.dims(ctx.inputs[0]))}")
    return b


@register_lowering("SpaceToDepth", dtypes=ALL)
def space_to_depth(ctx: LoweringContext) -> Value:
    b = _nhwc_block(ctx)
    x = ctx.inputs[0]
    n, h, w, c = ctx.dims(x)
    if h % b or w % b:
        raise ctx.invalid_argument(f"Image width {w} and height {h} should be divisible by block_size: {b}")
    x = ctx.reshape(x, (n, h // b, b, w // b, b, c))
    x = ctx.b.transpose(x, dimensions=(0, 1, 3, 2, 4, 5))
    return ctx.reshape(x, (n, h // b, w // b, b * b * c))


@register_lowering("DepthToSpace", dtypes=ALL)
def depth_to_space(ctx: LoweringContext) -> Value:
    b = _nhwc_block(ctx)
    x = ctx.inputs[0]
    n, h, w, c = ctx.dims(x)
    if c % (b * b):
        raise ctx.invalid_argument(f"Input depth dimension {c} should be divisible by: {b * b}")
    x = ctx.reshape(x, (n, h, w, b, b, c // (b * b)))
    x = ctx.b.transpose(x, dimensions=(0, 1, 3, 2, 4, 5))
    return ctx.reshape(x, (n, h * b, w * b, c // (b * b)))


@register_lowering("MirrorPadGrad", dtypes=NUMERIC, const_inputs=(1,))
def mirror_pad_grad(ctx: LoweringContext) -> Value:
    g = ctx.inputs[0]
    mode = ctx.attr_str("mode")
    if mode not in _MIRROR_OFFSET:
        raise ctx.error(f"mode must be REFLECT or SYMMETRIC, got {mode!r}")
    off = _MIRROR_OFFSET[mode]
    pads = _paddings(ctx, len(ctx.dims(g)))
    for d, (lo, hi) in enumerate(pads.tolist()):
        size = ctx.dims(g)[d]
        n = size - lo - hi
        if n <= 0 or lo > n - off or hi > n - off:
            raise ctx.invalid_argument(f"paddings {pads.tolist()} do not fit the gradient's dims {list(ctx.dims(g))} "
                                       f"in {mode} mode")
        out = slice_axis(ctx, g, d, lo, lo + n)
        zero = ctx.scalar(0, ctx.dtype(g))
        rank = len(ctx.dims(g))

        def onto(piece: Value, start: int) -> Value:
            """``piece`` (reversed along d) added at ``[start, start + len)`` of the centre."""
            k = ctx.dims(piece)[d]
            lows, highs = [0] * rank, [0] * rank
            lows[d], highs[d] = start, n - start - k
            return pad(ctx, reverse(ctx, piece, [d]), zero, lows, highs)
        if lo:
            out = ctx.b.add(out, onto(slice_axis(ctx, g, d, 0, lo), off))
        if hi:
            out = ctx.b.add(out, onto(slice_axis(ctx, g, d, lo + n, size), n - off - hi))
        g = out
    return g


