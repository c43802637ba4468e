"""Gradient helper ops that TF's autodiff puts into traced training steps.

- Activation gradients, written exactly as TF's CPU functors (same operations, same order, in
  the input type, so f16/bf16 round op by op as Eigen does): ReluGrad ``g * (f > 0)`` and
  Relu6Grad ``g * (0 < f < 6)`` multiply (a NaN or inf gradient where the mask is 0 gives NaN),
  LeakyReluGrad/EluGrad/SeluGrad select, Sigmoid/Tanh/Rsqrt/SqrtGrad are ``(y, dy)`` formulas;
  Rsqrt/SqrtGrad give 0 wherever ``dy == 0`` (TF's "no NaN from a zero gradient" rule).
  Operands must have equal dims, as TF requires.
- BiasAddGrad: sum over every dim but the channel dim (last for NHWC, 1 for NCHW), f16/bf16
  accumulated in f32.
- BroadcastGradientArgs: folded at compile time from its constant shape inputs (TF's BCast):
  output ``j`` lists the dims where input ``j``'s shape, left-padded with 1s, is 1; equal
  shapes give two empty lists.
- StridedSliceGrad: the canonical slice spec is StridedSlice's own (``strided_slice``); ``dy``
  is reshaped to one dim per input dim, reversed along negative strides, and padded with zeros
  (low = first index, interior = stride - 1) into the input's shape. With a run-time begin (Keras
  ``RandomCrop``'s gradient) it is the ``dynamic-update-slice`` of ``dy`` into zeros at the starts
  the forward ``dynamic-slice`` used (``strided_slice.runtime_starts``; sizes from ``dy``).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from hlo.attributes import PadDim
from hlo.builder import Value
from hlo.lowering.context import LoweringContext
from hlo.lowering.ops import _reduce_util as ru
from hlo.lowering.ops._shape_util import reverse
from hlo.lowering.ops.strided_slice import NEW_AXIS, is_runtime, runtime_starts, slice_spec
from hlo.lowering.registry import Rule, register_lowering
from hlo.lowering.tf_types import ALL, FLOATS, NUMERIC
from hlo.opcodes import Opcode

_SELU_SCALE = 1.0507009873554804934193349852946
_SELU_SCALE_ALPHA = 1.7580993408473768599402175208123


def _mask(ctx: LoweringContext, pred: Value, like: Value) -> Value:
    return ctx.convert(pred, ctx.dtype(like))


def _relu_grad(ctx: LoweringContext, g: Value, f: Value) -> Value:
    return ctx.b.multiply(g, _mask(ctx, ctx.compare(f, ctx.full(0, f), "GT"), f))


def _relu6_grad(ctx: LoweringContext, g: Value, f: Value) -> Value:
    inside = ctx.b.op(Opcode.AND, ctx.compare(f, ctx.full(0, f), "GT"), ctx.compare(f, ctx.full(6, f), "LT"))
    return ctx.b.multiply(g, _mask(ctx, inside, f))


def _leaky_relu_grad(ctx: LoweringContext, g: Value, f: Value) -> Value:
    alpha = ctx.full(ctx.attr_float("alpha", 0.2), g)
    return ctx.select(ctx.compare(f, ctx.full(0, f), "GT"), g, ctx.b.multiply(g, alpha))


def _elu_grad(ctx: LoweringContext, g: Value, y: Value) -> Value:
    below = ctx.b.multiply(g, ctx.b.add(y, ctx.full(1, y)))
    return ctx.select(ctx.compare(y, ctx.full(0, y), "LT"), below, g)


def _selu_grad(ctx: LoweringContext, g: Value, y: Value) -> Value:
    below = ctx.b.multiply(g, ctx.b.add(y, ctx.full(_SELU_SCALE_ALPHA, y)))
    return ctx.select(ctx.compare(y, ctx.full(0, y), "LT"), below, ctx.b.multiply(g, ctx.full(_SELU_SCALE, g)))


def _sigmoid_grad(ctx: LoweringContext, y: Value, dy: Value) -> Value:
    return ctx.b.multiply(ctx.b.multiply(dy, y), ctx.b.subtract(ctx.full(1, y), y))


def _tanh_grad(ctx: LoweringContext, y: Value, dy: Value) -> Value:
    return ctx.b.multiply(dy, ctx.b.subtract(ctx.full(1, y), ctx.b.multiply(y, y)))


def _zero_where_no_gradient(ctx: LoweringContext, dy: Value, grad: Value) -> Value:
    """TF's Rsqrt/SqrtGrad return 0 where ``dy == 0``, whatever ``y`` is (no NaN from 0 * inf or 0 / 0)."""
    zero = ctx.full(0, dy)
    return ctx.select(ctx.compare(dy, zero, "EQ"), zero, grad)


def _rsqrt_grad(ctx: LoweringContext, y: Value, dy: Value) -> Value:
    grad = ctx.b.multiply(ctx.b.multiply(ctx.full(-0.5, y), ctx.b.multiply(dy, y)), ctx.b.multiply(y, y))
    return _zero_where_no_gradient(ctx, dy, grad)


def _sqrt_grad(ctx: LoweringContext, y: Value, dy: Value) -> Value:
    return _zero_where_no_gradient(ctx, dy, ctx.b.divide(ctx.b.multiply(ctx.full(0.5, dy), dy), y))


_ACTIVATION_GRADS = {
    "ReluGrad": (_relu_grad, NUMERIC),
    "Relu6Grad": (_relu6_grad, NUMERIC),
    "LeakyReluGrad": (_leaky_relu_grad, FLOATS),
    "EluGrad": (_elu_grad, FLOATS),
    "SeluGrad": (_selu_grad, FLOATS),
    "SigmoidGrad": (_sigmoid_grad, FLOATS),
    "TanhGrad": (_tanh_grad, FLOATS),
    "RsqrtGrad": (_rsqrt_grad, FLOATS),
    "SqrtGrad": (_sqrt_grad, FLOATS),
}


def _elementwise_grad(formula: Callable[[LoweringContext, Value, Value], Value]) -> Rule:
    def lower(ctx: LoweringContext) -> Value:
        a, b = ctx.inputs
        if ctx.dims(a) != ctx.dims(b):
            raise ctx.error(f"{ctx.op_type} needs operands of equal shape, got {list(ctx.dims(a))} and "
                            f"{list(ctx.dims(b))}")
        return formula(ctx, a, b)
    return lower


for _op, (_formula, _dtypes) in _ACTIVATION_GRADS.items():
    register_lowering(_op, dtypes=_dtypes)(_elementwise_grad(_formula))


_CHANNEL_DIM = {"NHWC": lambda rank: rank - 1, "NCHW": lambda rank: 1}


@register_lowering("BiasAddGrad", dtypes=NUMERIC)
def bias_add_grad(ctx: LoweringContext) -> Value:
    (g,) = ctx.inputs
    rank = len(ctx.dims(g))
    fmt = ctx.attr_str("data_format", "NHWC")
    if fmt not in _CHANNEL_DIM:
        raise ctx.error(f"unsupported data_format {fmt!r} (NHWC or NCHW)")
    if rank < 2:
        raise ctx.error(f"input must be at least 2-dimensional, got shape {list(ctx.dims(g))}")
    channel = _CHANNEL_DIM[fmt](rank)
    return ru.sum_(ctx, g, [d for d in range(rank) if d != channel])


def broadcast_gradient_args(ctx: LoweringContext, s0: list[int], s1: list[int]) -> tuple[list[int], list[int]]:
    """TF's BCast reduction indices for shapes ``s0`` and ``s1``."""
    if s0 == s1:
        return [], []
    rank = max(len(s0), len(s1))
    p0, p1 = [1] * (rank - len(s0)) + s0, [1] * (rank - len(s1)) + s1
    for a, b in zip(p0, p1):
        if a != b and a != 1 and b != 1:
            raise ctx.error(f"incompatible shapes: {s0} vs. {s1}")
    return [i for i, d in enumerate(p0) if d == 1], [i for i, d in enumerate(p1) if d == 1]


@register_lowering("BroadcastGradientArgs", dtypes=ru.INDEX_TYPES, const_inputs=(0, 1))
def broadcast_gradient_args_rule(ctx: LoweringContext) -> list[Value]:
    dtype = ctx.dtype_attr("T")
    r0, r1 = broadcast_gradient_args(ctx, ctx.const_ints(0), ctx.const_ints(1))
    return [ctx.constant(np.array(r, np.int64), dtype) for r in (r0, r1)]


def _dynamic_strided_slice_grad(ctx: LoweringContext, dims: list[int]) -> Value:
    dy = ctx.inputs[4]
    spec = runtime_starts(ctx, dims, 1, ctx.dims(dy))
    zero = ctx.scalar(0, ctx.dtype(dy))
    dy = ctx.reshape(dy, spec.out_sizes())
    if any(k != 1 for k in spec.steps):  # a fully masked strided dim: spread dy back over its window
        config = tuple(PadDim(0, n - ((m - 1) * abs(k) + 1) if m else n, abs(k) - 1 if m else 0)
                       for n, m, k in zip(spec.sizes, spec.out_sizes(), spec.steps))
        dy = reverse(ctx, ctx.b.pad(dy, zero, padding=config), [i for i, k in enumerate(spec.steps) if k < 0])
    return ctx.b.dynamic_update_slice(ctx.broadcast_to(zero, dims), dy, *spec.starts)


@register_lowering("StridedSliceGrad", dtypes=ALL, const_inputs=(0, 3))
def strided_slice_grad(ctx: LoweringContext) -> Value:
    dy = ctx.inputs[4]
    dims = ctx.const_ints(0)
    if is_runtime(ctx, 1):
        return _dynamic_strided_slice_grad(ctx, dims)
    slices, final = slice_spec(ctx, dims, first=1)
    sizes = [s.size() for s in slices]
    want = [1 if d == NEW_AXIS else sizes[d] for d in final]
    if list(ctx.dims(dy)) != want:
        raise ctx.error(f"dy has shape {list(ctx.dims(dy))} but the slice of {dims} has shape {want}")
    if 0 in sizes:
        return ctx.broadcast_to(ctx.scalar(0, ctx.dtype(dy)), dims)
    dy = reverse(ctx, ctx.reshape(dy, sizes), [i for i, s in enumerate(slices) if s.stride < 0])
    config = []
    for s, n, size in zip(slices, dims, sizes):
        step = abs(s.stride)
        last = s.begin + (size - 1) * s.stride  # the index the last element of dy lands on
        low = min(s.begin, last)
        config.append(PadDim(low, n - (low + (size - 1) * step + 1), step - 1))
    return ctx.b.pad(dy, ctx.scalar(0, ctx.dtype(dy)), padding=tuple(config))
