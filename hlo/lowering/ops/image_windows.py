"""Windows over images and channels: ExtractImagePatches (``tf.image.extract_patches``), LRN and LRNGrad
(``tf.nn.local_response_normalization`` and its gradient), with TF's formulas.

- ExtractImagePatches(images [B, H, W, C]; ksizes, strides, rates, padding): the input padded as TF pads a
  window of effective size ``(k - 1) * rate + 1`` (``_window.paddings``), then one strided slice per kernel
  offset ``(i, j)`` (rows from ``i * rate_h`` by ``stride_h``), concatenated along the last dim in
  ``(i, j, c)`` order: ``[B, out_h, out_w, kh * kw * C]``, exact.
- LRN(input [B, H, W, D]; depth_radius r, bias, alpha, beta): ``s = sum(x^2)`` over channels
  ``d - r .. d + r`` (a reduce-window), ``x * (bias + alpha * s) ^ -beta``.
- LRNGrad(dy, x, y): with ``n = bias + alpha * s``, ``dy * n ^ -beta - 2 alpha beta * x * window_sum(dy * y
  / n)`` (the window is symmetric, so the sum over the outputs a channel feeds is the same window), as
  tf2xla computes it. float32 sums in another order than TF's kernel: within float rounding.
"""

from __future__ import annotations

from hlo.attributes import PadDim, Window, WindowDim
from hlo.builder import Value
from hlo.dtypes import PrimitiveType as P
from hlo.lowering.context import LoweringContext
from hlo.lowering.ops._shape_util import concat, slice_dims
from hlo.lowering.ops._window import output_size, paddings, per_dim
from hlo.lowering.registry import register_lowering
from hlo.lowering.tf_types import COMPLEX, FLOATS, NUMERIC
from hlo.opcodes import Opcode


@register_lowering("ExtractImagePatches", dtypes=NUMERIC | COMPLEX | {P.PRED})
def extract_image_patches(ctx: LoweringContext) -> Value:
    x = ctx.inputs[0]
    dims = ctx.dims(x)
    if len(dims) != 4:
        raise ctx.invalid_argument(f"input must be 4-dimensional, got shape {list(dims)}")
    ks, ss, rs = (per_dim(ctx, name, ctx.attr_ints(name), 4) for name in ("ksizes", "strides", "rates"))
    if ks[0] != 1 or ks[3] != 1 or ss[0] != 1 or ss[3] != 1 or rs[0] != 1 or rs[3] != 1:
        raise ctx.error("ksizes, strides and rates are only supported across spatial dimensions (first and last "
                        f"entries 1), got {list(ks)}, {list(ss)}, {list(rs)}")
    b, h, w, c = dims
    pads = paddings(ctx, (h, w), ks[1:3], ss[1:3], rs[1:3], dims=(1, 2))
    outs = [output_size(n, k, s, r, p) for n, k, s, r, p in zip((h, w), ks[1:3], ss[1:3], rs[1:3], pads)]
    zero = ctx.scalar(0, ctx.dtype(x))
    config = (PadDim(0, 0, 0), PadDim(*pads[0], 0), PadDim(*pads[1], 0), PadDim(0, 0, 0))
    padded = ctx.b.pad(x, zero, padding=config) if any(any(p) for p in pads) else x
    pieces = []
    for i in range(ks[1]):
        for j in range(ks[2]):
            starts = [0, i * rs[1], j * rs[2], 0]
            limits = [b, starts[1] + (outs[0] - 1) * ss[1] + 1 if outs[0] else starts[1],
                      starts[2] + (outs[1] - 1) * ss[2] + 1 if outs[1] else starts[2], c]
            pieces.append(slice_dims(ctx, padded, starts, limits, [1, ss[1], ss[2], 1]))
    return concat(ctx, pieces, 3) if len(pieces) > 1 else pieces[0]


def _lrn_attrs(ctx: LoweringContext) -> tuple[int, float, float, float]:
    r = ctx.attr_int("depth_radius", 5)
    if r < 0:
        raise ctx.invalid_argument(f"depth_radius = {r} must be non-negative")
    return r, ctx.attr_float("bias", 1.0), ctx.attr_float("alpha", 1.0), ctx.attr_float("beta", 0.5)


def _channel_sum(ctx: LoweringContext, v: Value, r: int) -> Value:
    """Per element, the sum over channels ``d - r .. d + r`` (missing channels count as 0)."""
    rank = len(ctx.dims(v))
    window = Window(tuple(WindowDim(2 * r + 1, 1, r, r) if d == rank - 1 else WindowDim(1) for d in range(rank)))
    dtype = ctx.dtype(v)
    return ctx.b.reduce_window(v, ctx.scalar(0, dtype), window=window,
                               to_apply=ctx.scalar_computation(Opcode.ADD, dtype))


def _norm(ctx: LoweringContext, x: Value, r: int, bias: float, alpha: float) -> Value:
    s = _channel_sum(ctx, ctx.b.multiply(x, x), r)
    return ctx.b.add(ctx.full(bias, s), ctx.b.multiply(ctx.full(alpha, s), s))


def _check_4d(ctx: LoweringContext, *values: Value) -> None:
    for v in values:
        if len(ctx.dims(v)) != 4:
            raise ctx.invalid_argument(f"input must be 4-dimensional, got shape {list(ctx.dims(v))}")


@register_lowering("LRN", dtypes=FLOATS)
def lrn(ctx: LoweringContext) -> Value:
    (x,) = ctx.inputs
    _check_4d(ctx, x)
    r, bias, alpha, beta = _lrn_attrs(ctx)
    dtype = ctx.dtype(x)
    wide = ctx.convert(x, P.F32) if dtype in (P.F16, P.BF16) else x
    n = _norm(ctx, wide, r, bias, alpha)
    return ctx.convert(ctx.b.multiply(wide, ctx.b.power(n, ctx.full(-beta, n))), dtype)


@register_lowering("LRNGrad", dtypes=FLOATS)
def lrn_grad(ctx: LoweringContext) -> Value:
    dy, x, y = ctx.inputs
    _check_4d(ctx, dy, x, y)
    if not ctx.dims(dy) == ctx.dims(x) == ctx.dims(y):
        raise ctx.invalid_argument(f"input_grads, input_image and output_image must have the same shape, got "
                                   f"{list(ctx.dims(dy))}, {list(ctx.dims(x))}, {list(ctx.dims(y))}")
    r, bias, alpha, beta = _lrn_attrs(ctx)
    dtype = ctx.dtype(dy)
    if dtype in (P.F16, P.BF16):
        dy, x, y = (ctx.convert(v, P.F32) for v in (dy, x, y))
    b = ctx.b
    n = _norm(ctx, x, r, bias, alpha)
    spread = _channel_sum(ctx, b.divide(b.multiply(dy, y), n), r)
    grad = b.subtract(b.multiply(dy, b.power(n, ctx.full(-beta, n))),
                      b.multiply(ctx.full(2 * alpha * beta, x), b.multiply(x, spread)))
    return ctx.convert(grad, dtype)
