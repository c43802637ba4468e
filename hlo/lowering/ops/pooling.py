"""Max and average pooling and their gradients, as reduce-window and select-and-scatter.

Windows cover every dim of the input in data-format order (``ksize``,
``strides``), padded as TF pads (see ``_window``); padded positions never
take part. TF's CPU semantics, checked by running TF 2.21:

- MaxPool starts from the lowest finite value for f32/f64 (so an all ``-inf``
  window gives ``-FLT_MAX``) and from ``-inf`` for f16/bf16, and ignores NaN
  (an all-NaN window gives that start value): NaNs are replaced by the start
  value before an ordinary ``maximum`` reduce-window.
- MaxPoolGrad sends each output's gradient to the first element of its window
  (row-major) that no later element strictly exceeds: the select keeps the
  current pick unless ``current < candidate`` (XLA's ``GE`` select differs only
  for NaN, where TF keeps a NaN picked first and never picks a later one).
- AvgPool divides by the number of window positions inside the input (SAME
  padding does not count); the counts are compile-time constants.
  AvgPoolGrad spreads ``grad / count`` back with a stride-dilated, padded
  reduce-window sum. f16/bf16 sums are taken in f32 and rounded once.

MaxPool3DGrad is not lowered: TF's CPU kernel gives the full gradient to every
element within 1e-5 of its window's max.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from hlo.attributes import ComparisonDirection, PadDim, Window
from hlo.builder import ComputationBuilder, Value
from hlo.dtypes import PrimitiveType as P
from hlo.ir import HloComputation
from hlo.lowering.context import LoweringContext
from hlo.lowering.ops._window import layout, output_size, paddings, per_dim, window_dim
from hlo.lowering.registry import register_lowering
from hlo.lowering.tf_types import FLOATS, INTS
from hlo.opcodes import Opcode
from hlo.shapes import scalar

_MAX_POOL_TYPES = FLOATS | {P.S8, P.S16, P.S32, P.S64, P.U8, P.U16}
_MAX_POOL_GRAD_TYPES = FLOATS | INTS
_POOL_3D_TYPES = frozenset({P.BF16, P.F32})  # TF's CPU kernels for the 3-D pools (f16 has none)
_NARROW_FLOATS = {P.F16, P.BF16}


def _pool_window(ctx: LoweringContext, dims: tuple[int, ...], ksize: Sequence[int], strides: Sequence[int],
                 depth_ok: bool) -> tuple[Window, list[tuple[int, int]]]:
    """The padded window of a pooling op over an input of ``dims``, and its (before, after) paddings."""
    rank = len(dims)
    lay = layout(ctx, rank)
    ks, ss = per_dim(ctx, "ksize", ksize, rank), per_dim(ctx, "strides", strides, rank)
    if ks[lay.batch] != 1 or ss[lay.batch] != 1:
        raise ctx.error("pooling is not supported on the batch dimension (as in TensorFlow)")
    if ks[lay.feature] != 1 or ss[lay.feature] != 1:
        k = ks[lay.feature]
        spatial = any(ks[d] != 1 or ss[d] != 1 for d in lay.spatial)
        if not depth_ok:
            raise ctx.error("average pooling over the depth dimension is not supported (TF's CPU kernel returns "
                            "an empty result for it)")
        if spatial or ss[lay.feature] != k or dims[lay.feature] % k:
            raise ctx.error(f"pooling over depth needs a depth window equal to the depth stride that divides the "
                            f"depth and no spatial pooling (ksize {list(ks)}, strides {list(ss)})")
    pads = paddings(ctx, dims, ks, ss)
    return Window(tuple(window_dim(k, s, p) for k, s, p in zip(ks, ss, pads))), pads


def _floor(dtype: P) -> float | int:
    """Where TF's max pooling starts (and what NaN counts as)."""
    if dtype in _NARROW_FLOATS:
        return -np.inf
    return np.finfo(dtype.numpy).min if dtype.is_float else np.iinfo(dtype.numpy).min


def _max_pool(ctx: LoweringContext, x: Value, ksize: Sequence[int], strides: Sequence[int]) -> Value:
    window, _ = _pool_window(ctx, ctx.dims(x), ksize, strides, depth_ok=True)
    dtype = ctx.dtype(x)
    floor = ctx.scalar(_floor(dtype), dtype)
    if dtype.is_float:
        x = ctx.select(ctx.compare(x, x, "NE"), floor, x)
    return ctx.b.reduce_window(x, floor, window=window, to_apply=ctx.scalar_computation(Opcode.MAXIMUM, dtype))


def _tf_max_select(ctx: LoweringContext, dtype: P) -> HloComputation:
    """``(current, candidate) -> !(current < candidate)``: keep the first maximum, as TF's CPU kernel does."""
    def build(cb: ComputationBuilder) -> Value:
        a, b = cb.parameter(scalar(dtype), name="current"), cb.parameter(scalar(dtype), name="candidate")
        return cb.op(Opcode.NOT, cb.compare(a, b, direction=ComparisonDirection.LT))
    return ctx.computation(f"tf_max_pool_select_{dtype.value}", build)


def _max_pool_grad(ctx: LoweringContext, x: Value, grad: Value, ksize: Sequence[int],
                   strides: Sequence[int]) -> Value:
    window, _ = _pool_window(ctx, ctx.dims(x), ksize, strides, depth_ok=True)
    dtype = ctx.dtype(x)
    if ctx.dtype(grad) != dtype:
        raise ctx.error(f"grad has type {ctx.dtype(grad).value} but orig_input has {dtype.value}")
    want = [output_size(n, w.size, w.stride, 1, (w.pad_low, w.pad_high)) for n, w in zip(ctx.dims(x), window.dims)]
    if list(ctx.dims(grad)) != want:
        raise ctx.error(f"grad has dims {list(ctx.dims(grad))} but the pooling output has {want}")
    return ctx.b.select_and_scatter(x, grad, ctx.scalar(0, dtype), window=window,
                                    select=_tf_max_select(ctx, dtype),
                                    scatter=ctx.scalar_computation(Opcode.ADD, dtype))


@register_lowering("MaxPool", dtypes=_MAX_POOL_TYPES)
@register_lowering("MaxPool3D", dtypes=_POOL_3D_TYPES)
def max_pool(ctx: LoweringContext) -> Value:
    (x,) = ctx.inputs
    return _max_pool(ctx, x, ctx.attr_ints("ksize"), ctx.attr_ints("strides"))


@register_lowering("MaxPoolV2", dtypes=_MAX_POOL_TYPES, const_inputs=(1, 2))
def max_pool_v2(ctx: LoweringContext) -> Value:
    return _max_pool(ctx, ctx.inputs[0], ctx.const_ints(1), ctx.const_ints(2))


# Not MaxPool3DGrad: TF's CPU kernel gives the full gradient to every element within 1e-5 of its
# window's max (ties all receive it), which a select-and-scatter does not express (max_pool_3d_grad.py).
@register_lowering("MaxPoolGrad", dtypes=_MAX_POOL_GRAD_TYPES)
def max_pool_grad(ctx: LoweringContext) -> Value:
    x, _, grad = ctx.inputs
    return _max_pool_grad(ctx, x, grad, ctx.attr_ints("ksize"), ctx.attr_ints("strides"))


@register_lowering("MaxPoolGradV2", dtypes=_MAX_POOL_GRAD_TYPES, const_inputs=(3, 4))
def max_pool_grad_v2(ctx: LoweringContext) -> Value:
    x, _, grad = ctx.inputs[:3]
    return _max_pool_grad(ctx, x, grad, ctx.const_ints(3), ctx.const_ints(4))


# --- average pooling -----------------------------------------------------------------------------------------


def _counts(dims: Sequence[int], window: Window) -> np.ndarray:
    """How many window positions of each output fall inside the input (size-1 dims where the count is constant)."""
    count = np.ones((), np.float64)
    for axis, (n, w) in enumerate(zip(dims, window.dims)):
        start = np.arange(output_size(n, w.size, w.stride, 1, (w.pad_low, w.pad_high))) * w.stride - w.pad_low
        c = np.minimum(start + w.size, n) - np.maximum(start, 0)
        if len(c) and np.all(c == c[0]):
            c = c[:1]
        shape = [1] * len(dims)
        shape[axis] = len(c)
        count = count * c.reshape(shape)
    return count


def _compute_type(dtype: P) -> P:
    return P.F32 if dtype in _NARROW_FLOATS else dtype


def _avg_window(ctx: LoweringContext, dims: tuple[int, ...], ksize: Sequence[int], strides: Sequence[int]) -> Window:
    return _pool_window(ctx, dims, ksize, strides, depth_ok=False)[0]


@register_lowering("AvgPool", dtypes=FLOATS)
@register_lowering("AvgPool3D", dtypes=_POOL_3D_TYPES)
def avg_pool(ctx: LoweringContext) -> Value:
    (x,) = ctx.inputs
    window = _avg_window(ctx, ctx.dims(x), ctx.attr_ints("ksize"), ctx.attr_ints("strides"))
    dtype, acc = ctx.dtype(x), _compute_type(ctx.dtype(x))
    total = ctx.b.reduce_window(ctx.convert(x, acc), ctx.scalar(0, acc), window=window,
                                to_apply=ctx.scalar_computation(Opcode.ADD, acc))
    mean = ctx.binary(Opcode.DIVIDE, total, ctx.constant(_counts(ctx.dims(x), window), acc))
    return ctx.convert(mean, dtype)


@register_lowering("AvgPoolGrad", dtypes=FLOATS, const_inputs=(0,))
@register_lowering("AvgPool3DGrad", dtypes=_POOL_3D_TYPES, const_inputs=(0,))
def avg_pool_grad(ctx: LoweringContext) -> Value:
    _, grad = ctx.inputs
    dims = tuple(ctx.const_ints(0))
    if len(dims) != len(ctx.dims(grad)):
        raise ctx.error(f"orig_input_shape {list(dims)} does not have the rank of grad {list(ctx.dims(grad))}")
    window = _avg_window(ctx, dims, ctx.attr_ints("ksize"), ctx.attr_ints("strides"))
    outs = [output_size(n, w.size, w.stride, 1, (w.pad_low, w.pad_high)) for n, w in zip(dims, window.dims)]
    if list(ctx.dims(grad)) != outs:
        raise ctx.error(f"grad has dims {list(ctx.dims(grad))} but the pooling output has {outs}")
    dtype, acc = ctx.dtype(grad), _compute_type(ctx.dtype(grad))
    zero = ctx.scalar(0, acc)
    g = ctx.binary(Opcode.DIVIDE, ctx.convert(grad, acc), ctx.constant(_counts(dims, window), acc))
    # Output o of the pooling read inputs o*s - lo .. o*s - lo + k - 1; put it at o*s and sum a k-window.
    config = tuple(PadDim(w.size - 1 - w.pad_low, n - 1 + w.pad_low - (o - 1) * w.stride, w.stride - 1)
                   if o else PadDim(n + w.size - 1, 0, 0)
                   for n, o, w in zip(dims, outs, window.dims))
    spread = ctx.b.pad(g, zero, padding=config)
    total = ctx.b.reduce_window(spread, zero, window=Window(tuple(window_dim(w.size) for w in window.dims)),
                                to_apply=ctx.scalar_computation(Opcode.ADD, acc))
    return ctx.convert(total, dtype)
