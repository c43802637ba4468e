"""Elementwise ops with more than two operands or a layout: AddN, BiasAdd, Select, SelectV2, ClipByValue.

* ``Select`` (TF1): ``x`` and ``y`` have the same shape; the condition is a scalar, has
  that shape, or is a vector that picks whole rows (along dim 0) of a higher-rank ``x``.
* ``SelectV2`` broadcasts all three operands.
* ``ClipByValue`` is TF's ``min(t, hi)`` then ``max(., lo)`` with ``std::min``/``std::max``:
  NaN in ``t`` stays NaN, a NaN bound is ignored, and ``lo > hi`` gives ``lo``.
  The bounds are scalars or have ``t``'s shape (anything that broadcasts to it is accepted).
* ``BiasAdd`` adds a vector along the channel dim: the last for NHWC, dim 1 for NCHW.
"""

from __future__ import annotations

from hlo.builder import Value
from hlo.dtypes import PrimitiveType as P
from hlo.lowering.context import LoweringContext
from hlo.lowering.lists import ListValue, add_lists
from hlo.lowering.ops._elementwise_util import std_max, std_min
from hlo.lowering.registry import register_lowering
from hlo.lowering.tf_types import ALL, COMPLEX, FLOATS, NUMERIC, SIGNED_INTS
from hlo.opcodes import Opcode


@register_lowering("AddN", dtypes=NUMERIC | COMPLEX, lists=True)
def add_n(ctx: LoweringContext) -> Value | ListValue:
    if any(isinstance(x, ListValue) for x in ctx.inputs):  # gradients summed over TensorLists
        return add_lists(ctx, ctx.inputs)
    total, *rest = ctx.inputs
    for x in rest:
        total = ctx.binary(Opcode.ADD, total, x)
    return total


_CHANNEL_DIM = {"NHWC": -1, "NCHW": 1}


@register_lowering("BiasAdd", "BiasAddV1", dtypes=NUMERIC)
def bias_add(ctx: LoweringContext) -> Value:
    value, bias = ctx.inputs
    dims = ctx.dims(value)
    fmt = ctx.attr_str("data_format", "NHWC")
    if fmt not in _CHANNEL_DIM:
        raise ctx.error(f"unsupported data_format {fmt!r}")
    if len(dims) < 2:
        raise ctx.error(f"BiasAdd needs an input of rank at least 2, got {list(dims)}")
    channel = _CHANNEL_DIM[fmt] % len(dims)
    if ctx.dims(bias) != (dims[channel],):
        raise ctx.error(f"bias of dims {list(ctx.dims(bias))} does not match channel dim {channel} of {list(dims)}")
    return ctx.b.add(value, ctx.broadcast_in_dim(bias, dims, (channel,)))


@register_lowering("Select", dtypes=ALL)
def select(ctx: LoweringContext) -> Value:
    cond, x, y = ctx.inputs
    dims = ctx.dims(x)
    if ctx.dims(y) != dims:
        raise ctx.error(f"'then' and 'else' must have the same dims, got {list(dims)} and {list(ctx.dims(y))}")
    cdims = ctx.dims(cond)
    if len(cdims) == 1 and len(dims) > 1 and cdims[0] == dims[0]:
        cond = ctx.broadcast_in_dim(cond, dims, (0,))
    elif cdims and cdims != dims:
        raise ctx.error(f"condition of dims {list(cdims)} must be a scalar, a vector of size {dims[0] if dims else 1}"
                        f" or have the dims {list(dims)} of 'then'")
    return ctx.b.select(ctx.broadcast_to(cond, dims), x, y)


@register_lowering("SelectV2", dtypes=ALL)
def select_v2(ctx: LoweringContext) -> Value:
    cond, x, y = ctx.inputs
    return ctx.select(cond, x, y)


@register_lowering("ClipByValue", dtypes=FLOATS | SIGNED_INTS | {P.U8, P.U16})
def clip_by_value(ctx: LoweringContext) -> Value:
    t, lo, hi = ctx.inputs
    dims = ctx.dims(t)
    lo, hi = ctx.broadcast_to(lo, dims), ctx.broadcast_to(hi, dims)
    return std_max(ctx, std_min(ctx, t, hi), lo)
