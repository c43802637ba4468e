"""SpaceToBatchND / BatchToSpaceND (and the 4-D SpaceToBatch / BatchToSpace): how TF writes dilated
convolutions (Keras ``Conv*D(dilation_rate=...)``, causal ``Conv1D``), as pad-reshape-transpose-reshape.

``SpaceToBatchND(input [B, S1..SM, R...], block_shape [M], paddings [M, 2])`` pads each spatial dim
``Si`` by ``paddings[i]`` (which must make it a multiple of ``block_shape[i]``), splits it into
``(Si' / bi, bi)``, moves every block factor in front of the batch and merges them into it:
``[B * prod(b), S1' / b1, ..., SM' / bM, R...]``; the output batch index is
``((j1 * b2 + j2) ... ) * B + batch`` for block offsets ``j``. ``BatchToSpaceND(input, block_shape,
crops)`` is the inverse (then crops). ``block_shape``, ``paddings`` and ``crops`` decide the output
shape, so they must be compile-time constants; errors are TF's kernel's messages.
"""

from __future__ import annotations

from math import prod

from hlo.builder import Value
from hlo.lowering.context import LoweringContext
from hlo.lowering.ops._shape_util import pad, slice_dims
from hlo.lowering.registry import register_lowering
from hlo.lowering.tf_types import ALL


def _blocks(ctx: LoweringContext, x: Value, block: list[int], pairs: list[int], what: str) -> list[tuple[int, int]]:
    rank, m = len(ctx.dims(x)), len(block)
    if len(pairs) != 2 * m:
        raise ctx.invalid_argument(f"{what} should have shape [{m}, 2] instead of {len(pairs)} values")
    if rank < 1 + m:
        raise ctx.invalid_argument(f"input rank should be >= {1 + m} instead of {rank}")
    if any(b < 1 for b in block):
        raise ctx.invalid_argument(f"All values in block_shape must be positive, got value, {min(block)}")
    spans = [(pairs[2 * i], pairs[2 * i + 1]) for i in range(m)]
    if any(lo < 0 or hi < 0 for lo, hi in spans):
        raise ctx.invalid_argument(f"All values in {what} must be non-negative, got {pairs}")
    return spans


def _space_to_batch(ctx: LoweringContext, x: Value, block: list[int], paddings: list[int]) -> Value:
    spans = _blocks(ctx, x, block, paddings, "paddings")
    dims, m = ctx.dims(x), len(block)
    batch, rest = dims[0], list(dims[1 + m:])
    zero = ctx.scalar(0, ctx.dtype(x))
    x = pad(ctx, x, zero, [0] + [lo for lo, _ in spans] + [0] * len(rest),
            [0] + [hi for _, hi in spans] + [0] * len(rest))
    padded = ctx.dims(x)[1:1 + m]
    for i, (size, b) in enumerate(zip(padded, block)):
        if size % b:
            raise ctx.invalid_argument(f"padded_shape[{i}]={size} is not divisible by block_shape[{i}]={b}")
    split = [batch] + [n for size, b in zip(padded, block) for n in (size // b, b)] + rest
    x = ctx.reshape(x, split)
    perm = [2 + 2 * i for i in range(m)] + [0] + [1 + 2 * i for i in range(m)] + list(range(1 + 2 * m, len(split)))
    x = ctx.b.transpose(x, dimensions=tuple(perm))
    return ctx.reshape(x, [batch * prod(block)] + [size // b for size, b in zip(padded, block)] + rest)


def _batch_to_space(ctx: LoweringContext, x: Value, block: list[int], crops: list[int]) -> Value:
    spans = _blocks(ctx, x, block, crops, "crops")
    dims, m = ctx.dims(x), len(block)
    total = prod(block)
    if dims[0] % total:
        raise ctx.invalid_argument(f"Input batch dimension ({dims[0]}) is not divisible by product of block "
                                   f"sizes ({total})")
    batch, spatial, rest = dims[0] // total, list(dims[1:1 + m]), list(dims[1 + m:])
    x = ctx.reshape(x, block + [batch] + spatial + rest)
    perm = [m] + [n for i in range(m) for n in (m + 1 + i, i)] + list(range(2 * m + 1, 2 * m + 1 + len(rest)))
    x = ctx.b.transpose(x, dimensions=tuple(perm))
    full = [s * b for s, b in zip(spatial, block)]
    x = ctx.reshape(x, [batch] + full + rest)
    for i, ((lo, hi), size) in enumerate(zip(spans, full)):
        if lo + hi > size:
            raise ctx.invalid_argument(f"Cropped size must be non-negative: start: {lo} end: {hi} size {size}")
    return slice_dims(ctx, x, [0] + [lo for lo, _ in spans] + [0] * len(rest),
                      [batch] + [size - hi for (_, hi), size in zip(spans, full)] + rest)


@register_lowering("SpaceToBatchND", dtypes=ALL, const_inputs=(1, 2))
def space_to_batch_nd(ctx: LoweringContext) -> Value:
    return _space_to_batch(ctx, ctx.inputs[0], ctx.const_ints(1), ctx.const_ints(2))


@register_lowering("BatchToSpaceND", dtypes=ALL, const_inputs=(1, 2))
def batch_to_space_nd(ctx: LoweringContext) -> Value:
    return _batch_to_space(ctx, ctx.inputs[0], ctx.const_ints(1), ctx.const_ints(2))


@register_lowering("SpaceToBatch", dtypes=ALL, const_inputs=(1,))
def space_to_batch(ctx: LoweringContext) -> Value:
    """The 4-D form: NHWC input, one ``block_size`` attribute for both spatial dims."""
    return _space_to_batch(ctx, ctx.inputs[0], _square_block(ctx), ctx.const_ints(1))


@register_lowering("BatchToSpace", dtypes=ALL, const_inputs=(1,))
def batch_to_space(ctx: LoweringContext) -> Value:
    return _batch_to_space(ctx, ctx.inputs[0], _square_block(ctx), ctx.const_ints(1))


def _square_block(ctx: LoweringContext) -> list[int]:
    """The 4-D forms' one ``block_size`` (> 1, as TF checks) for both spatial dims."""
    b = ctx.attr_int("block_size")
    if b <= 1:
        raise ctx.invalid_argument(f"Block size should be > 1: {b}")
    return [b, b]
