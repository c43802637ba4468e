"""MaxPool3DGrad with TF's CPU kernel's rule (Keras ``MaxPooling3D`` and ``AdaptiveMaxPooling3D``
training): every input element within ``1e-5`` of its window's maximum receives that window's full
gradient, so ties all receive it (a select-and-scatter, XLA's lowering, gives it to one).

``MaxPool3DGrad(orig_input, orig_output, grad)``: for each offset ``o`` inside the window, the input
elements at ``o + stride * k`` (of the padded input) are compared with ``orig_output[k]``; where
``|x - max| < 1e-5`` the element gets ``grad[k]``. Each offset's contributions are padded back to
their input positions (low ``o``, interior ``stride - 1``) and summed over the offsets, then the
padding is cut off. Padding elements are NaN, which matches no maximum. The sums over overlapping
windows run offset by offset, not window by window as TF's loop adds them: tolerance, not bits.
"""

from __future__ import annotations

import itertools

import numpy as np

from hlo.attributes import PadDim
from hlo.builder import Value
from hlo.lowering.context import LoweringContext
from hlo.lowering.ops._shape_util import pad, slice_dims
from hlo.lowering.ops.pooling import _POOL_3D_TYPES, _pool_window
from hlo.lowering.registry import register_lowering
from hlo.opcodes import Opcode

_TIE = 1e-5  # TF's kernel: ``(in - out).abs() < 1e-5``


@register_lowering("MaxPool3DGrad", dtypes=_POOL_3D_TYPES, type_attrs=("T", "TInput"))
def max_pool_3d_grad(ctx: LoweringContext) -> Value:
    x, y, grad = ctx.inputs
    if ctx.dtype(x) != ctx.dtype(grad) or ctx.dtype(y) != ctx.dtype(grad):
        raise ctx.error("orig_input, orig_output and grad must have one element type")
    window, _ = _pool_window(ctx, ctx.dims(x), ctx.attr_ints("ksize"), ctx.attr_ints("strides"), depth_ok=False)
    dims, out = ctx.dims(x), ctx.dims(grad)
    if ctx.dims(y) != out:
        raise ctx.error(f"orig_output has dims {list(ctx.dims(y))} but grad has {list(out)}")
    dtype = ctx.dtype(x)
    b = ctx.b
    padded = pad(ctx, x, ctx.scalar(np.nan, dtype), [w.pad_low for w in window.dims], [w.pad_high for w in window.dims])
    pdims = ctx.dims(padded)
    zero, tie = ctx.full(0, grad), ctx.full(_TIE, grad)
    total: Value | None = None
    for offset in itertools.product(*(range(w.size) for w in window.dims)):
        starts = list(offset)
        limits = [o + w.stride * (n - 1) + 1 for o, w, n in zip(offset, window.dims, out)]
        xs = slice_dims(ctx, padded, starts, limits, [w.stride for w in window.dims])
        near = ctx.compare(b.op(Opcode.ABS, b.subtract(xs, y)), tie, "LT")
        part = b.select(near, grad, zero)
        config = tuple(PadDim(o, p - lim, w.stride - 1) for o, p, lim, w in zip(offset, pdims, limits, window.dims))
        part = b.pad(part, ctx.scalar(0, dtype), padding=config)
        total = part if total is None else b.add(total, part)
    assert total is not None
    lows = [w.pad_low for w in window.dims]
    return slice_dims(ctx, total, lows, [lo + n for lo, n in zip(lows, dims)])
