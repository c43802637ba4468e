"""MaxPoolGradGrad/V2 and MaxPool3DGradGrad (second derivatives through max pooling: gradient penalties,
``tf.hessians``), with TF's CPU kernel's rule: per pooling output, the incoming ``grad`` at the first
window element (row-major) equal to ``orig_output`` (MaxPool's result: so NaNs, which MaxPool ignores,
are never picked), 0 where none is (a window of ``-inf`` only, whose max pool is the lowest finite value).

Unrolled over the window: the input padded with ``-inf`` (never a float max pool's value; for integers
the type's lowest, so a window whose real elements all hold it may pick padding and give 0) and ``grad``
with 0, then per window offset one strided slice of each, taken where it equals the output and no
earlier offset was. Exact.
"""

from __future__ import annotations

import itertools
from typing import Sequence

import numpy as np

from hlo.attributes import PadDim
from hlo.builder import Value
from hlo.dtypes import PrimitiveType as P
from hlo.lowering.context import LoweringContext
from hlo.lowering.ops._shape_util import slice_dims
from hlo.lowering.ops._window import output_size
from hlo.lowering.ops.pooling import _MAX_POOL_GRAD_TYPES, _pool_window
from hlo.lowering.registry import register_lowering

MAX_WINDOW = 64  # window elements unrolled


def _filler(ctx: LoweringContext, x: Value) -> Value:
    """What padding holds: ``-inf`` for floats, the lowest value for integers."""
    dtype = ctx.dtype(x)
    return ctx.scalar(-np.inf if dtype.is_float else np.iinfo(dtype.numpy).min, dtype)


def _grad_grad(ctx: LoweringContext, x: Value, y: Value, grad: Value, ksize: Sequence[int],
               strides: Sequence[int]) -> Value:
    dims = ctx.dims(x)
    if ctx.dims(grad) != dims:
        raise ctx.invalid_argument(f"grad must have the shape of orig_input {list(dims)}, got {list(ctx.dims(grad))}")
    window, pads = _pool_window(ctx, dims, ksize, strides, depth_ok=False)
    ks = [w.size for w in window.dims]
    if int(np.prod(ks)) > MAX_WINDOW:
        raise ctx.error(f"{ctx.op_type} with a window of {int(np.prod(ks))} elements is not supported: it is "
                        f"unrolled over the window, up to {MAX_WINDOW}")
    outs = [output_size(n, w.size, w.stride, 1, p) for n, w, p in zip(dims, window.dims, pads)]
    if list(ctx.dims(y)) != outs:
        raise ctx.invalid_argument(f"orig_output has shape {list(ctx.dims(y))}, the pooling output {outs}")
    filler = _filler(ctx, x)
    config = tuple(PadDim(lo, hi, 0) for lo, hi in pads)
    px = ctx.b.pad(x, filler, padding=config) if any(any(p) for p in pads) else x
    pg = ctx.b.pad(grad, ctx.scalar(0, ctx.dtype(grad)), padding=config) if any(any(p) for p in pads) else grad
    found = ctx.broadcast_to(ctx.scalar(False, P.PRED), outs)
    out = ctx.broadcast_to(ctx.scalar(0, ctx.dtype(grad)), outs)
    steps = [w.stride for w in window.dims]
    for offset in itertools.product(*(range(k) for k in ks)):
        limits = [o + (n - 1) * s + 1 if n else o for o, n, s in zip(offset, outs, steps)]
        xv = slice_dims(ctx, px, list(offset), limits, steps)
        gv = slice_dims(ctx, pg, list(offset), limits, steps)
        take = ctx.b.and_(ctx.b.not_(found), ctx.compare(xv, y, "EQ"))
        found, out = ctx.b.or_(found, take), ctx.select(take, gv, out)
    return out


@register_lowering("MaxPoolGradGrad", "MaxPool3DGradGrad", dtypes=_MAX_POOL_GRAD_TYPES)
def max_pool_grad_grad(ctx: LoweringContext) -> Value:
    x, y, grad = ctx.inputs
    return _grad_grad(ctx, x, y, grad, ctx.attr_ints("ksize"), ctx.attr_ints("strides"))


@register_lowering("MaxPoolGradGradV2", dtypes=_MAX_POOL_GRAD_TYPES, const_inputs=(3, 4))
def max_pool_grad_grad_v2(ctx: LoweringContext) -> Value:
    x, y, grad = ctx.inputs[:3]
    return _grad_grad(ctx, x, y, grad, ctx.const_ints(3), ctx.const_ints(4))
