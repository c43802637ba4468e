"""Colour-space conversions: RGBToHSV and HSVToRGB (Keras ``RandomHue``, ``RandomSaturation``,
``tf.image.rgb_to_hsv``/``hsv_to_rgb``; the fused ``AdjustHue``/``AdjustSaturation``, with their kernels'
own formulas, are in ``color_adjust.py``), TF's CPU kernel's formulas in its operation order.

The innermost dimension holds the 3 channels. RGB -> HSV, with ``V = max(r, g, b)`` and
``range = V - min(r, g, b)``: ``S = range / V`` (0 where ``V <= 0``); with ``norm = (1 / range) * (1/6)``,
``H = norm * (g - b)`` where ``r == V``, else ``norm * (b - r) + 2/6`` where ``g == V``, else
``norm * (r - g) + 4/6``; 0 where ``range <= 0``; plus 1 where negative. HSV -> RGB, with ``dh = h * 6``:
``dr = clamp(|dh - 3| - 1)``, ``dg = clamp(2 - |dh - 2|)``, ``db = clamp(2 - |dh - 4|)`` into [0, 1],
and each channel ``((1 - s) + s * d) * v``.
"""

from __future__ import annotations

from hlo.builder import Value
from hlo.dtypes import PrimitiveType as P
from hlo.lowering.context import LoweringContext
from hlo.lowering.ops._shape_util import concat, slice_axis
from hlo.lowering.registry import register_lowering
from hlo.opcodes import Opcode

_TYPES = frozenset({P.F32, P.F64})


class _Channels:
    """Elementwise helpers over the channel planes (each ``[..., 1]``) of one image tensor."""

    def __init__(self, ctx: LoweringContext, x: Value):
        dims = ctx.dims(x)
        if not dims or dims[-1] != 3:
            raise ctx.invalid_argument(f"input must have 3 channels but input only has {dims[-1] if dims else 0} "
                                       "channels.")
        self.ctx, self.b, self.axis = ctx, ctx.b, len(dims) - 1
        self.planes = [slice_axis(ctx, x, self.axis, c, c + 1) for c in range(3)]

    def k(self, value: float, like: Value) -> Value:
        return self.ctx.full(value, like)

    def where(self, pred: Value, on_true: Value, on_false: Value) -> Value:
        return self.b.select(pred, on_true, on_false)

    def cmp(self, x: Value, y: Value, direction: str) -> Value:
        return self.ctx.compare(x, y, direction)

    def clamp01(self, x: Value) -> Value:
        return self.b.minimum(self.b.maximum(x, self.k(0, x)), self.k(1, x))

    def stack(self, planes: list[Value]) -> Value:
        return concat(self.ctx, planes, self.axis)


@register_lowering("RGBToHSV", dtypes=_TYPES)
def rgb_to_hsv(ctx: LoweringContext) -> Value:
    c = _Channels(ctx, ctx.inputs[0])
    b = ctx.b
    r, g, bl = c.planes
    v = b.maximum(b.maximum(r, g), bl)
    lo = b.minimum(b.minimum(r, g), bl)
    rng = b.subtract(v, lo)
    zero = c.k(0, v)
    s = c.where(c.cmp(v, zero, "GT"), b.divide(rng, v), zero)
    norm = b.multiply(b.divide(c.k(1, rng), rng), b.divide(c.k(1, rng), c.k(6, rng)))
    h_r = b.multiply(norm, b.subtract(g, bl))
    h_g = b.add(b.multiply(norm, b.subtract(bl, r)), b.divide(c.k(2, rng), c.k(6, rng)))
    h_b = b.add(b.multiply(norm, b.subtract(r, g)), b.divide(c.k(4, rng), c.k(6, rng)))
    h = c.where(c.cmp(r, v, "EQ"), h_r, c.where(c.cmp(g, v, "EQ"), h_g, h_b))
    h = c.where(c.cmp(rng, zero, "GT"), h, zero)
    h = c.where(c.cmp(h, zero, "LT"), b.add(h, c.k(1, h)), h)
    return c.stack([h, s, v])


@register_lowering("HSVToRGB", dtypes=_TYPES)
def hsv_to_rgb(ctx: LoweringContext) -> Value:
    c = _Channels(ctx, ctx.inputs[0])
    b = ctx.b
    h, s, v = c.planes
    dh = b.multiply(h, c.k(6, h))

    def dist(center: float) -> Value:
        return b.op(Opcode.ABS, b.subtract(dh, c.k(center, dh)))
    dr = c.clamp01(b.subtract(dist(3), c.k(1, dh)))
    dg = c.clamp01(b.add(b.negate(dist(2)), c.k(2, dh)))
    db = c.clamp01(b.add(b.negate(dist(4)), c.k(2, dh)))
    one_s = b.add(b.negate(s), c.k(1, s))
    return c.stack([b.multiply(b.add(one_s, b.multiply(s, d)), v) for d in (dr, dg, db)])
