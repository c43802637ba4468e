"""The fused image adjustments of ``tf.image.adjust_contrast``/``adjust_hue``/``adjust_saturation``:
``AdjustContrastv2``, ``AdjustHue``, ``AdjustSaturation``, with TF's CPU kernels' formulas in their
operation order (float32: the only type TF's CPU kernels take).

- AdjustContrastv2(images [..., H, W, C], contrast_factor): per image and channel ``m = mean over H, W``,
  ``(x - m) * factor + m`` (the mean's summation order is Eigen's, so it matches to float rounding).
- AdjustHue(images [..., 3], delta): per pixel, the kernel's hue-and-value-range form: the channels
  sorted into ``max``/``mid``/``min`` pick one of six sectors ``k`` (``r < g``: ``b < r`` 1, ``b > g`` 3,
  else 2; otherwise ``b < g`` 0, ``b > r`` 4, else 5), ``h = k + ratio`` (``1 - ratio`` in odd sectors,
  ``ratio = (mid - min) / (max - min)``, ``h = 0`` where ``max == min``); then ``h + delta * 6`` brought
  into ``[0, 6)`` by adding or subtracting 6 (twice at most: exact for ``|delta| <= 1``, which
  ``tf.image.adjust_hue`` requires), and back: sector ``int(h)``, ``mid = min + ratio * (max - min)``.
- AdjustSaturation(images [..., 3], scale): the kernel's RGB -> HSV (``color.py``'s, with its
  ``norm * (b - r) + 2/6`` added in double as C++ does), ``s = clamp(s * scale, 0, 1)``, and its own
  HSV -> RGB: ``c = s * v``, ``m = v - c``, ``x = c * (1 - |fmod2(h * 6) - 1|)`` (``fmod2`` brings
  ``h * 6`` into ``(0, 2)`` by steps of 2, as the kernel's loops do), the sector ``int(h * 6)`` placing
  ``c``, ``x``, 0, each plus ``m``.
"""

from __future__ import annotations

from typing import Sequence

from hlo.builder import Value
from hlo.dtypes import PrimitiveType as P
from hlo.lowering.context import LoweringContext
from hlo.lowering.ops import _reduce_util as ru
from hlo.lowering.ops.color import _Channels
from hlo.lowering.registry import register_lowering
from hlo.opcodes import Opcode

_TYPES = frozenset({P.F32})


def _scalar_input(ctx: LoweringContext, i: int, what: str) -> Value:
    v = ctx.inputs[i]
    if ctx.dims(v):
        raise ctx.invalid_argument(f"{what} must be scalar: {list(ctx.dims(v))}")
    return ctx.convert(v, P.F32)


def _check_images(ctx: LoweringContext, x: Value, channels: int | None = None) -> None:
    """TF's checks (and messages): at least 3-D, with ``channels`` in the last dim when given."""
    dims = ctx.dims(x)
    if len(dims) < 3:
        raise ctx.invalid_argument(f"input must be at least 3-D, got shape[{','.join(map(str, dims))}]")
    if channels is not None and dims[-1] != channels:
        raise ctx.invalid_argument(f"input must have 3 channels but instead has {dims[-1]} channels.")


@register_lowering("AdjustContrastv2", dtypes=_TYPES)
def adjust_contrast_v2(ctx: LoweringContext) -> Value:
    x = ctx.inputs[0]
    _check_images(ctx, x)
    factor = _scalar_input(ctx, 1, "contrast_factor")
    dims = ctx.dims(x)
    axes = (len(dims) - 3, len(dims) - 2)
    count = dims[axes[0]] * dims[axes[1]]
    total = ru.broadcast_back(ctx, ctx.reduce(x, axes, Opcode.ADD, 0), dims, axes)
    mean = ctx.b.divide(total, ctx.full(count, total))
    scaled = ctx.b.multiply(ctx.b.subtract(x, mean), ctx.broadcast_to(factor, dims))
    return ctx.b.add(scaled, mean)


def _sector_pick(c: _Channels, sector: Value, options: Sequence[Value]) -> Value:
    """``options[sector]`` per element (``sector`` an s32 plane in [0, 5]; the last for any other)."""
    out = options[-1]
    for k in range(len(options) - 2, -1, -1):
        out = c.where(c.cmp(sector, c.ctx.full(k, sector), "EQ"), options[k], out)
    return out


def _hue_range(c: _Channels) -> tuple[Value, Value, Value, Value]:
    """The AdjustHue kernel's ``rgb_to_hv_range``: per pixel ``(sector, max, mid, min)`` (sector as a
    float), picked by its comparisons in its order."""
    r, g, bl = c.planes
    k = [c.k(i, r) for i in range(6)]
    # the kernel's six branches: r < g (b < r; b > g; else), then g <= r (b < g; b > r; else)
    low = [(k[1], g, r, bl), (k[3], bl, g, r), (k[2], g, bl, r)]
    high = [(k[0], r, g, bl), (k[4], bl, r, g), (k[5], r, bl, g)]
    first = [c.where(c.cmp(bl, r, "LT"), p, c.where(c.cmp(bl, g, "GT"), q, t)) for p, q, t in zip(*low)]
    second = [c.where(c.cmp(bl, g, "LT"), p, c.where(c.cmp(bl, r, "GT"), q, t)) for p, q, t in zip(*high)]
    lt = c.cmp(r, g, "LT")
    sector, v_max, v_mid, v_min = (c.where(lt, p, q) for p, q in zip(first, second))
    return sector, v_max, v_mid, v_min


def _odd(c: _Channels, sector: Value) -> Value:
    return c.cmp(c.b.op(Opcode.REMAINDER, sector, c.ctx.full(2, sector)), c.ctx.full(1, sector), "EQ")


@register_lowering("AdjustHue", dtypes=_TYPES)
def adjust_hue(ctx: LoweringContext) -> Value:
    x = ctx.inputs[0]
    _check_images(ctx, x, 3)
    c = _Channels(ctx, x)
    b = ctx.b
    sector, v_max, v_mid, v_min = _hue_range(c)
    one, zero, six = c.k(1, sector), c.k(0, sector), c.k(6, sector)
    ratio = b.divide(b.subtract(v_mid, v_min), b.subtract(v_max, v_min))
    h = b.add(sector, c.where(_odd(c, sector), b.subtract(one, ratio), ratio))
    h = c.where(c.cmp(v_max, v_min, "EQ"), zero, h)
    delta = ctx.broadcast_to(_scalar_input(ctx, 1, "delta"), ctx.dims(h))
    h = b.add(h, b.multiply(delta, six))
    for _ in range(2):
        h = c.where(c.cmp(h, zero, "LT"), b.add(h, six), h)
    for _ in range(2):
        h = c.where(c.cmp(h, six, "GE"), b.subtract(h, six), h)
    sector = ctx.convert(h, P.S32)
    ratio = b.subtract(h, ctx.convert(sector, P.F32))
    ratio = c.where(_odd(c, sector), b.subtract(one, ratio), ratio)
    v_mid = b.add(v_min, b.multiply(ratio, b.subtract(v_max, v_min)))
    table = {"r": (v_max, v_mid, v_min, v_min, v_mid, v_max), "g": (v_mid, v_max, v_max, v_mid, v_min, v_min),
             "b": (v_min, v_min, v_mid, v_max, v_max, v_mid)}
    return c.stack([_sector_pick(c, sector, table[ch]) for ch in "rgb"])


def _rgb_to_hsv(c: _Channels) -> tuple[Value, Value, Value]:
    """The AdjustSaturation kernel's RGB -> HSV (``2/6``, ``4/6`` added in double, as its C++ does)."""
    ctx, b = c.ctx, c.b
    r, g, bl = c.planes
    v = b.maximum(b.maximum(r, g), bl)
    rng = b.subtract(v, b.minimum(b.minimum(r, g), bl))
    zero = c.k(0, v)
    s = c.where(c.cmp(v, zero, "GT"), b.divide(rng, v), zero)
    norm = b.divide(c.k(1, rng), b.multiply(c.k(6, rng), rng))

    def plus(x: Value, sixths: float) -> Value:
        wide = ctx.convert(x, P.F64)
        return ctx.convert(b.add(wide, ctx.full(sixths / 6.0, wide)), P.F32)
    h = c.where(c.cmp(r, v, "EQ"), b.multiply(norm, b.subtract(g, bl)),
                c.where(c.cmp(g, v, "EQ"), plus(b.multiply(norm, b.subtract(bl, r)), 2.0),
                        plus(b.multiply(norm, b.subtract(r, g)), 4.0)))
    h = c.where(c.cmp(rng, zero, "LE"), zero, h)
    h = c.where(c.cmp(h, zero, "LT"), b.add(h, c.k(1, h)), h)
    return h, s, v


@register_lowering("AdjustSaturation", dtypes=_TYPES)
def adjust_saturation(ctx: LoweringContext) -> Value:
    x = ctx.inputs[0]
    _check_images(ctx, x, 3)
    c = _Channels(ctx, x)
    b = ctx.b
    h, s, v = _rgb_to_hsv(c)
    scale = ctx.broadcast_to(_scalar_input(ctx, 1, "scale"), ctx.dims(s))
    s = c.clamp01(b.multiply(s, scale))
    chroma = b.multiply(s, v)
    m = b.subtract(v, chroma)
    dh = b.multiply(h, c.k(6, h))
    sector = ctx.convert(dh, P.S32)
    two, zero = c.k(2, dh), c.k(0, dh)
    fmodu = dh
    for _ in range(2):  # h in [0, 1]: dh in [0, 6], two steps reach (0, 2)
        fmodu = c.where(c.cmp(fmodu, zero, "LE"), b.add(fmodu, two), fmodu)
    for _ in range(3):
        fmodu = c.where(c.cmp(fmodu, two, "GE"), b.subtract(fmodu, two), fmodu)
    xx = b.multiply(chroma, b.subtract(c.k(1, dh), b.op(Opcode.ABS, b.subtract(fmodu, c.k(1, dh)))))
    table = {"r": (chroma, xx, zero, zero, xx, chroma, zero), "g": (xx, chroma, chroma, xx, zero, zero, zero),
             "b": (zero, zero, xx, chroma, chroma, xx, zero)}
    return c.stack([b.add(_sector_pick(c, sector, table[ch]), m) for ch in "rgb"])
