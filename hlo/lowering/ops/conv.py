"""Convolutions and their gradients, each one HLO ``convolution``.

Activations are NHWC or NCHW (``data_format``; NDHWC/NCDHW for the 3-D ops),
filters are always ``[spatial..., in, out]`` (HWIO). Padding is TF's (see
``_window``). A filter whose input depth divides the input's depth makes a
grouped convolution (``feature_group_count``); a depthwise filter
``[kh, kw, C, M]`` is the grouped case with C groups and filter
``[kh, kw, 1, C*M]``, output channel ``c*M + m``.

Gradients are built as XLA builds them:
- input gradient: convolve ``out_backprop`` dilated by the stride
  (``lhs_dilate``) with the spatially reversed filter, its in/out features
  swapped, padded so the result has the input's size;
- filter gradient: convolve the input (batch and feature swapped) with
  ``out_backprop`` as the kernel, the stride becoming the kernel's dilation
  and the dilation the window stride; grouped filters use
  ``batch_group_count``.
Sizes given as inputs (``input_sizes``, ``filter_sizes``) must be compile-time constants.

TF 2.21's CPU kernels of DepthwiseConv2dNativeBackpropInput/Filter ignore the
``dilations`` attribute (so GradientTape through a dilated native depthwise
convolution gives the undilated gradient); we compute what TF computes.
"""

from __future__ import annotations

from typing import Sequence

from hlo.attributes import ConvDimLabels, Window
from hlo.builder import Value
from hlo.dtypes import PrimitiveType
from hlo.lowering.context import LoweringContext
from hlo.lowering.ops._window import Layout, layout, output_size, paddings, per_dim, window_dim
from hlo.lowering.registry import register_lowering
from hlo.lowering.tf_types import FLOATS

# Element types TF's CPU kernels accept (checked by running TF 2.21).
_CONV_TYPES = FLOATS | {PrimitiveType.S32}  # Conv2D, Conv2DBackpropInput
_FLOAT_CONV_TYPES = FLOATS  # filter gradients, depthwise ops, 3-D ops


def _params(ctx: LoweringContext, rank: int, dilated: bool = True) -> tuple[Layout, tuple[int, ...], tuple[int, ...]]:
    """Layout, spatial strides and spatial dilations (all 1 unless ``dilated``); batch and feature
    entries must be 1, as TF requires."""
    lay = layout(ctx, rank)
    strides = per_dim(ctx, "strides", ctx.attr_ints("strides"), rank)
    dilations = per_dim(ctx, "dilations", ctx.attr_ints("dilations", ()) if dilated else None, rank)
    for name, vals in (("strides", strides), ("dilations", dilations)):
        if vals[lay.batch] != 1 or vals[lay.feature] != 1:
            raise ctx.error(f"{name} in the batch and depth dimensions must be 1, got {list(vals)}")
    return lay, tuple(strides[d] for d in lay.spatial), tuple(dilations[d] for d in lay.spatial)


def _filter_labels(lay: Layout, swap: bool = False) -> ConvDimLabels:
    """Activation layout for input and output, HWIO filter (in/out features swapped when ``swap``)."""
    n = len(lay.spatial)
    k_in, k_out = (n + 1, n) if swap else (n, n + 1)
    return ConvDimLabels(lay.batch, lay.feature, lay.spatial, k_in, k_out, tuple(range(n)),
                         lay.batch, lay.feature, lay.spatial)


def _groups(ctx: LoweringContext, depth: int, filter_dims: tuple[int, ...]) -> int:
    """The group count of a convolution whose input has ``depth`` features and whose HWIO filter has ``filter_dims``."""
    filter_in, filter_out = filter_dims[-2:]
    if filter_in <= 0 or depth % filter_in:
        raise ctx.error(f"input depth {depth} must be a multiple of the filter's input depth {filter_in}")
    if filter_out % (depth // filter_in):
        raise ctx.error(f"the filter's output depth {filter_out} must be a multiple of the group count "
                        f"{depth // filter_in}")
    return depth // filter_in


def _group_attrs(name: str, count: int) -> dict:
    return {name: count} if count > 1 else {}


def _forward(ctx: LoweringContext, x: Value, w: Value, groups: int) -> Value:
    lay, strides, dils = _params(ctx, len(ctx.dims(x)))
    n = len(lay.spatial)
    ks = ctx.dims(w)[:n]
    sizes = [ctx.dims(x)[d] for d in lay.spatial]
    pads = paddings(ctx, sizes, ks, strides, dils, lay.spatial)
    window = Window(tuple(window_dim(k, s, p, rhs_dilate=d) for k, s, p, d in zip(ks, strides, pads, dils)))
    return ctx.b.convolution(x, w, window=window, dim_labels=_filter_labels(lay),
                             **_group_attrs("feature_group_count", groups))


def _backprop_input(ctx: LoweringContext, in_dims: tuple[int, ...], w: Value, dy: Value, groups: int,
                    dilated: bool = True) -> Value:
    """d(input) for the convolution of an input of ``in_dims`` with the HWIO filter ``w`` in ``groups`` groups."""
    lay, strides, dils = _params(ctx, len(in_dims), dilated)
    n = len(lay.spatial)
    ks, (i_per_group, out_depth) = ctx.dims(w)[:n], ctx.dims(w)[n:]
    sizes = [in_dims[d] for d in lay.spatial]
    pads = paddings(ctx, sizes, ks, strides, dils, lay.spatial)
    outs = [output_size(*a) for a in zip(sizes, ks, strides, dils, pads)]
    _check_out_backprop(ctx, lay, in_dims, dy, outs, out_depth)
    if 0 in outs:  # no output position: no input element gets a gradient
        return ctx.broadcast_to(ctx.scalar(0, ctx.dtype(dy)), in_dims)
    if groups > 1:  # [.., I/G, O] -> [.., I, O/G]: group g's output-feature block becomes its input features
        per = out_depth // groups
        w = ctx.reshape(w, ks + (i_per_group, groups, per))
        w = ctx.b.transpose(w, dimensions=tuple(range(n)) + (n + 1, n, n + 2))
        w = ctx.reshape(w, ks + (i_per_group * groups, per))
    w = ctx.b.reverse(w, dimensions=tuple(range(n)))
    window = Window(tuple(
        window_dim(k, 1, ((k - 1) * d - lo, size - 1 + lo - (o - 1) * s), lhs_dilate=s, rhs_dilate=d)
        for k, s, d, (lo, _), size, o in zip(ks, strides, dils, pads, sizes, outs)))
    return ctx.b.convolution(dy, w, window=window, dim_labels=_filter_labels(lay, swap=True),
                             **_group_attrs("feature_group_count", groups))


def _backprop_filter(ctx: LoweringContext, x: Value, filter_dims: tuple[int, ...], dy: Value, groups: int,
                     dilated: bool = True) -> Value:
    """d(filter) of shape ``filter_dims`` (HWIO) for the convolution of ``x`` in ``groups`` groups."""
    lay, strides, dils = _params(ctx, len(ctx.dims(x)), dilated)
    n = len(lay.spatial)
    ks = tuple(filter_dims[:n])
    sizes = [ctx.dims(x)[d] for d in lay.spatial]
    pads = paddings(ctx, sizes, ks, strides, dils, lay.spatial)
    outs = [output_size(*a) for a in zip(sizes, ks, strides, dils, pads)]
    _check_out_backprop(ctx, lay, ctx.dims(x), dy, outs, filter_dims[n + 1])
    if 0 in outs:  # no output position: every filter tap has zero gradient
        return ctx.broadcast_to(ctx.scalar(0, ctx.dtype(x)), filter_dims)
    window = Window(tuple(
        window_dim(o, d, (lo, (k - 1) * d + (o - 1) * s + 1 - size - lo), rhs_dilate=s)
        for o, s, d, k, (lo, _), size in zip(outs, strides, dils, ks, pads, sizes)))
    labels = ConvDimLabels(lay.feature, lay.batch, lay.spatial, lay.batch, lay.feature, lay.spatial,
                           n, n + 1, tuple(range(n)))
    return ctx.b.convolution(x, dy, window=window, dim_labels=labels, **_group_attrs("batch_group_count", groups))


def _check_out_backprop(ctx: LoweringContext, lay: Layout, in_dims: Sequence[int], dy: Value, outs: list[int], out_depth: int) -> None:
    want = [0] * lay.rank
    want[lay.batch], want[lay.feature] = in_dims[lay.batch], out_depth
    for d, o in zip(lay.spatial, outs):
        want[d] = o
    if list(ctx.dims(dy)) != want:
        raise ctx.error(f"out_backprop has dims {list(ctx.dims(dy))} but the convolution's output has {want}")


def _sizes_input(ctx: LoweringContext, i: int, rank: int, lay: Layout | None, depth: int = 0, batch: int = 0) -> tuple[int, ...]:
    """A constant ``input_sizes``/``filter_sizes`` input: the full shape, or (given ``lay``, for an input
    shape) only the spatial sizes, the batch and depth then being ``batch`` and ``depth``."""
    sizes = ctx.const_ints(i)
    n = rank - 2
    if len(sizes) == n and lay is not None:
        full = [0] * rank
        full[lay.batch], full[lay.feature] = batch, depth
        for d, v in zip(lay.spatial, sizes):
            full[d] = v
        sizes = full
    if len(sizes) != rank or any(v < 0 for v in sizes):
        raise ctx.error(f"input {i} must hold {rank} non-negative sizes, got {sizes}")
    return tuple(sizes)


# --- the ops ------------------------------------------------------------------------------------------------


@register_lowering("Conv2D", dtypes=_CONV_TYPES)
@register_lowering("Conv3D", dtypes=_FLOAT_CONV_TYPES)
def conv(ctx: LoweringContext) -> Value:
    x, w = ctx.inputs
    lay = layout(ctx, len(ctx.dims(x)))
    return _forward(ctx, x, w, _groups(ctx, ctx.dims(x)[lay.feature], ctx.dims(w)))


def _depthwise_filter(ctx: LoweringContext, w: Value) -> Value:
    """``[kh, kw, C, M]`` -> ``[kh, kw, 1, C*M]``."""
    dims = ctx.dims(w)
    return ctx.reshape(w, dims[:-2] + (1, dims[-2] * dims[-1]))


@register_lowering("DepthwiseConv2dNative", dtypes=_FLOAT_CONV_TYPES)
def depthwise_conv(ctx: LoweringContext) -> Value:
    x, w = ctx.inputs
    lay = layout(ctx, len(ctx.dims(x)))
    if ctx.dims(x)[lay.feature] != ctx.dims(w)[-2]:
        raise ctx.error(f"input depth {ctx.dims(x)[lay.feature]} must equal the filter's depth {ctx.dims(w)[-2]}")
    return _forward(ctx, x, _depthwise_filter(ctx, w), ctx.dims(w)[-2])


@register_lowering("Conv2DBackpropInput", dtypes=_CONV_TYPES, const_inputs=(0,))
@register_lowering("Conv3DBackpropInputV2", dtypes=_FLOAT_CONV_TYPES, const_inputs=(0,))
def conv_backprop_input(ctx: LoweringContext) -> Value:
    _, w, dy = ctx.inputs
    rank = len(ctx.dims(dy))
    lay = layout(ctx, rank)
    in_dims = _sizes_input(ctx, 0, rank, lay, ctx.dims(w)[-2], ctx.dims(dy)[lay.batch])
    return _backprop_input(ctx, in_dims, w, dy, _groups(ctx, in_dims[lay.feature], ctx.dims(w)))


@register_lowering("Conv2DBackpropFilter", dtypes=_FLOAT_CONV_TYPES, const_inputs=(1,))
@register_lowering("Conv3DBackpropFilterV2", dtypes=_FLOAT_CONV_TYPES, const_inputs=(1,))
def conv_backprop_filter(ctx: LoweringContext) -> Value:
    x, _, dy = ctx.inputs
    rank = len(ctx.dims(x))
    lay = layout(ctx, rank)
    f_dims = _sizes_input(ctx, 1, rank, None)
    return _backprop_filter(ctx, x, f_dims, dy, _groups(ctx, ctx.dims(x)[lay.feature], f_dims))


@register_lowering("DepthwiseConv2dNativeBackpropInput", dtypes=_FLOAT_CONV_TYPES, const_inputs=(0,))
def depthwise_backprop_input(ctx: LoweringContext) -> Value:
    _, w, dy = ctx.inputs
    rank = len(ctx.dims(dy))
    lay = layout(ctx, rank)
    in_dims = _sizes_input(ctx, 0, rank, lay, ctx.dims(w)[-2], ctx.dims(dy)[lay.batch])
    if in_dims[lay.feature] != ctx.dims(w)[-2]:
        raise ctx.error(f"input depth {in_dims[lay.feature]} must equal the filter's depth {ctx.dims(w)[-2]}")
    return _backprop_input(ctx, in_dims, _depthwise_filter(ctx, w), dy, ctx.dims(w)[-2], dilated=False)


@register_lowering("DepthwiseConv2dNativeBackpropFilter", dtypes=_FLOAT_CONV_TYPES, const_inputs=(1,))
def depthwise_backprop_filter(ctx: LoweringContext) -> Value:
    x, _, dy = ctx.inputs
    rank = len(ctx.dims(x))
    lay = layout(ctx, rank)
    f_dims = _sizes_input(ctx, 1, rank, None)
    depth, mult = f_dims[-2], f_dims[-1]
    if ctx.dims(x)[lay.feature] != depth:
        raise ctx.error(f"input depth {ctx.dims(x)[lay.feature]} must equal the filter's depth {depth}")
    grad = _backprop_filter(ctx, x, f_dims[:-2] + (1, depth * mult), dy, depth, dilated=False)
    return ctx.reshape(grad, f_dims)
