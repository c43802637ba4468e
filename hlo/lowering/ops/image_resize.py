"""Image resizing: ResizeBilinear, ResizeNearestNeighbor and their gradients (Keras ``Resizing``,
``UpSampling2D(interpolation="bilinear")``, ``tf.image.resize``), with TF's CPU kernels' coordinates.

Images are NHWC; ``size`` (``[new_height, new_width]``) sets the output shape, so it must be a
compile-time constant. Per axis, with ``scale = (in - 1) / (out - 1)`` when ``align_corners`` and
``out > 1``, else ``in / out`` (computed in float32, as TF does):

- bilinear: ``x = (i + 0.5) * scale - 0.5`` with ``half_pixel_centers``, else ``i * scale``;
  ``lower = max(floor(x), 0)``, ``upper = min(ceil(x), in - 1)``, ``lerp = x - floor(x)``. The output
  (float32 for every input type) is TF's ``top + (bottom - top) * y_lerp`` of
  ``left + (right - left) * x_lerp``: a gather along W, then along H, in TF's operation order.
- nearest: ``x = (i + 0.5) * scale`` with ``half_pixel_centers``, else ``i * scale``; the index is
  ``round(x)`` (half away from zero) with ``align_corners``, else ``floor(x)``, clamped to ``in - 1``
  (and to 0 with half-pixel centers). A gather per axis; the output keeps the input type.

The weights and indices depend only on the shapes, so they are computed here in NumPy float32 and
become constants. The gradients are the transposed linear maps, applied per axis as a dot with a
constant ``[in, out]`` matrix (the sums run in another order than TF's loop of adds: tolerance, not
bits). ``align_corners`` with ``half_pixel_centers`` is refused, as TF's kernels refuse it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hlo.builder import Value
from hlo.dtypes import PrimitiveType as P
from hlo.lowering.context import LoweringContext
from hlo.lowering.registry import register_lowering
from hlo.lowering.tf_types import FLOATS, NUMERIC

_F32 = np.float32


@dataclass(frozen=True)
class _Axis:
    """One axis of a resize: for each output position the source indices and weight."""

    lower: np.ndarray  # int64 [out]
    upper: np.ndarray  # int64 [out] (== lower for nearest)
    lerp: np.ndarray  # float32 [out] (0 for nearest)

    def matrix(self, size: int) -> np.ndarray:
        """``[out, in]`` float32: output ``i`` = sum_j m[i, j] * input ``j``."""
        m = np.zeros((len(self.lower), size), np.float64)
        rows = np.arange(len(self.lower))
        np.add.at(m, (rows, self.lower), 1.0 - self.lerp.astype(np.float64))
        np.add.at(m, (rows, self.upper), self.lerp.astype(np.float64))
        return m.astype(_F32)


def _scale(size_in: int, size_out: int, align_corners: bool) -> np.float32:
    if align_corners and size_out > 1:
        return _F32(size_in - 1) / _F32(size_out - 1)
    return _F32(size_in) / _F32(size_out)


def _bilinear_axis(size_in: int, size_out: int, align: bool, half: bool) -> _Axis:
    i = np.arange(size_out).astype(_F32)
    scale = _scale(size_in, size_out, align)
    x = ((i + _F32(0.5)) * scale - _F32(0.5)) if half else i * scale
    floor = np.floor(x)
    lower = np.maximum(floor, 0).astype(np.int64)
    upper = np.minimum(np.ceil(x), size_in - 1).astype(np.int64)
    return _Axis(lower, upper, (x - floor).astype(_F32))


def _nearest_axis(size_in: int, size_out: int, align: bool, half: bool) -> _Axis:
    i = np.arange(size_out).astype(_F32)
    scale = _scale(size_in, size_out, align)
    x = ((i + _F32(0.5)) * scale) if half else i * scale
    rounded = np.where(x >= 0, np.floor(x + _F32(0.5)), np.ceil(x - _F32(0.5))) if align else np.floor(x)
    index = np.minimum(rounded, size_in - 1)
    if half:
        index = np.maximum(index, 0)
    index = index.astype(np.int64)
    return _Axis(index, index, np.zeros(size_out, _F32))


def _flags(ctx: LoweringContext) -> tuple[bool, bool]:
    align, half = ctx.attr_bool("align_corners", False), ctx.attr_bool("half_pixel_centers", False)
    if align and half:
        raise ctx.invalid_argument("If half_pixel_centers is True, align_corners must be False.")
    return align, half


def _images(ctx: LoweringContext, x: Value, what: str = "input") -> tuple[int, ...]:
    dims = ctx.dims(x)
    if len(dims) != 4:
        raise ctx.invalid_argument(f"{what} must be 4-dimensional{list(dims)}")
    return dims


def _size(ctx: LoweringContext, i: int) -> tuple[int, int]:
    size = ctx.const_ints(i)
    if len(size) != 2:
        raise ctx.invalid_argument(f"shape_t must have two elements {size}")
    if min(size) <= 0:
        raise ctx.invalid_argument(f"output dimensions must be positive, got {size}")
    return size[0], size[1]


def _take(ctx: LoweringContext, x: Value, axis: int, index: np.ndarray) -> Value:
    """``x`` indexed along ``axis`` by a constant in-range index vector."""
    dims = ctx.dims(x)
    idx = ctx.constant(index.astype(np.int64), P.S64)
    sizes = tuple(1 if d == axis else n for d, n in enumerate(dims))
    return ctx.b.gather(x, idx, offset_dims=tuple(d for d in range(len(dims)) if d != axis),
                        collapsed_slice_dims=(axis,), start_index_map=(axis,), index_vector_dim=1, slice_sizes=sizes)


def _lerp(ctx: LoweringContext, x: Value, axis: int, ax: _Axis) -> Value:
    """TF's ``a + (b - a) * lerp`` along ``axis`` (a = x[lower], b = x[upper])."""
    a, b = _take(ctx, x, axis, ax.lower), _take(ctx, x, axis, ax.upper)
    dims = ctx.dims(a)
    lerp = ctx.broadcast_in_dim(ctx.constant(ax.lerp, P.F32), dims, (axis,))
    return ctx.b.add(a, ctx.b.multiply(ctx.b.subtract(b, a), lerp))


def _apply(ctx: LoweringContext, x: Value, axis: int, m: np.ndarray) -> Value:
    """``out[.., i, ..] = sum_j m[i, j] * x[.., j, ..]`` along ``axis`` (a dot with a constant)."""
    w = ctx.constant(m, ctx.dtype(x))
    out = ctx.b.dot(w, x, lhs_batch_dims=(), rhs_batch_dims=(), lhs_contracting_dims=(1,),
                    rhs_contracting_dims=(axis,))  # [i] + x's other dims
    rank = len(ctx.dims(x))
    perm = list(range(1, axis + 1)) + [0] + list(range(axis + 1, rank))
    return ctx.b.transpose(out, dimensions=tuple(perm)) if axis else out


@register_lowering("ResizeBilinear", dtypes=NUMERIC - {P.U32, P.U64}, const_inputs=(1,))
def resize_bilinear(ctx: LoweringContext) -> Value:
    x = ctx.inputs[0]
    _, h, w, _ = _images(ctx, x)
    oh, ow = _size(ctx, 1)
    align, half = _flags(ctx)
    x = ctx.convert(x, P.F32)
    x = _lerp(ctx, x, 2, _bilinear_axis(w, ow, align, half))
    return _lerp(ctx, x, 1, _bilinear_axis(h, oh, align, half))


@register_lowering("ResizeBilinearGrad", dtypes=FLOATS)
def resize_bilinear_grad(ctx: LoweringContext) -> Value:
    grads, original = ctx.inputs
    _, oh, ow, _ = _images(ctx, grads, "grads")
    _, h, w, _ = _images(ctx, original, "original_image")
    align, half = _flags(ctx)
    g = ctx.convert(grads, P.F32)
    g = _apply(ctx, g, 1, _bilinear_axis(h, oh, align, half).matrix(h).T)
    g = _apply(ctx, g, 2, _bilinear_axis(w, ow, align, half).matrix(w).T)
    return ctx.convert(g, ctx.dtype(original))


@register_lowering("ResizeNearestNeighbor", dtypes=NUMERIC, const_inputs=(1,))
def resize_nearest(ctx: LoweringContext) -> Value:
    x = ctx.inputs[0]
    _, h, w, _ = _images(ctx, x)
    oh, ow = _size(ctx, 1)
    align, half = _flags(ctx)
    x = _take(ctx, x, 2, _nearest_axis(w, ow, align, half).lower)
    return _take(ctx, x, 1, _nearest_axis(h, oh, align, half).lower)


@register_lowering("ResizeNearestNeighborGrad", dtypes=FLOATS, const_inputs=(1,))
def resize_nearest_grad(ctx: LoweringContext) -> Value:
    grads = ctx.inputs[0]
    _, oh, ow, _ = _images(ctx, grads, "grads")
    h, w = _size(ctx, 1)
    align, half = _flags(ctx)
    dtype = ctx.dtype(grads)
    g = ctx.convert(grads, P.F32)
    g = _apply(ctx, g, 1, _nearest_axis(h, oh, align, half).matrix(h).T)
    g = _apply(ctx, g, 2, _nearest_axis(w, ow, align, half).matrix(w).T)
    return ctx.convert(g, dtype)
