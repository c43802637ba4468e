"""Fused batch normalization (FusedBatchNorm, V2, V3) and its gradient, in elementwise HLO and reductions.

``x`` is NHWC/NCHW (NDHWC/NCDHW for V3); statistics are per feature over every
other dim. Everything is computed in the statistics type ``U`` (f32; ``T``
for V1) and ``y``/``x_backprop`` are rounded to ``T`` once. TF's CPU outputs,
checked by running TF 2.21:

forward, ``is_training``: ``y`` uses the batch mean and the biased batch
variance; ``batch_mean``/``batch_variance`` are the running statistics:
the batch mean and the Bessel-corrected variance (``n/(n-1)``, factor 1 when
``n == 1``), blended as ``(1-f)*old + f*new`` when
``exponential_avg_factor`` f is not 1; ``reserve_space_1``/``_2`` are the
batch mean and the biased variance; an empty batch gives NaN running
statistics and zero reserves. Not training: the given mean and variance are
used and returned unchanged in outputs 1-4. ``reserve_space_3`` (V3) is an
empty f32 vector.

gradient: ``reserve_space_1``/``_2`` are taken as the mean and biased
variance of the forward pass; ``reserve_space_4``/``_5`` are empty f32
vectors (TF's static shape; its oneDNN kernel, used for f32/bf16, returns
scalars at run time instead).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from hlo.builder import Value
from hlo.dtypes import PrimitiveType as P
from hlo.lowering.context import LoweringContext
from hlo.lowering.ops._window import layout
from hlo.lowering.registry import register_lowering
from hlo.opcodes import Opcode

_BN_TYPES = frozenset({P.F16, P.BF16, P.F32})  # V2 and V3 (the statistics type U is always f32)
_BN_V1_TYPES = frozenset({P.F32})  # V1 has one type for x and the statistics

# Op type -> number of outputs after the five that every version has (V3's reserve_space_3).
_EXTRA_OUTPUTS = {"FusedBatchNorm": 0, "FusedBatchNormV2": 0, "FusedBatchNormV3": 1}


class _Stats:
    """Per-feature helpers for one node: broadcasting a [C] vector over x and summing x-shaped values to [C]."""

    def __init__(self, ctx: LoweringContext, x: Value, acc: P):
        self.ctx, self.acc = ctx, acc
        self.dims = ctx.dims(x)
        self.feature = layout(ctx, len(self.dims)).feature
        self.axes = tuple(d for d in range(len(self.dims)) if d != self.feature)
        self.count = int(np.prod([self.dims[d] for d in self.axes], dtype=np.int64))

    def spread(self, v: Value) -> Value:
        return self.ctx.broadcast_in_dim(v, self.dims, (self.feature,))

    def sum(self, v: Value) -> Value:
        return self.ctx.reduce(v, self.axes, Opcode.ADD, 0)

    def op(self, opcode: Opcode, a: Value, b: Value) -> Value:
        """Elementwise op on values that are x-shaped or [C] (a [C] operand is spread over x)."""
        if self.ctx.dims(a) != self.ctx.dims(b):
            a, b = (self.spread(v) if len(self.ctx.dims(v)) == 1 else v for v in (a, b))
        return self.ctx.b.op(opcode, a, b)

    def const(self, value: npt.ArrayLike, like: Value | None = None) -> Value:
        v = self.ctx.scalar(value, self.acc)
        return v if like is None else self.ctx.broadcast_to(v, self.ctx.dims(like))

    def rsqrt_var(self, var: Value, epsilon: float) -> Value:
        return self.ctx.b.rsqrt(self.op(Opcode.ADD, var, self.const(epsilon, var)))


def _depth_vector(ctx: LoweringContext, v: Value, depth: int, what: str) -> None:
    if ctx.dims(v) != (depth,):
        raise ctx.error(f"{what} must have shape [{depth}], got {list(ctx.dims(v))}")


@register_lowering("FusedBatchNorm", dtypes=_BN_V1_TYPES)
@register_lowering("FusedBatchNormV2", "FusedBatchNormV3", dtypes=_BN_TYPES)
def fused_batch_norm(ctx: LoweringContext) -> list[Value]:
    x, scale, offset, mean, variance = ctx.inputs[:5]
    acc = ctx.dtype(scale)
    st = _Stats(ctx, x, acc)
    depth = st.dims[st.feature]
    for v, what in ((scale, "scale"), (offset, "offset")):
        _depth_vector(ctx, v, depth, what)
    eps = float(ctx.attr_float("epsilon", 1e-4))
    xs = ctx.convert(x, acc)
    extra = [ctx.constant(np.zeros(0), acc)] * _EXTRA_OUTPUTS[ctx.op_type]
    if not ctx.attr_bool("is_training", True):
        for v, what in ((mean, "mean"), (variance, "variance")):
            _depth_vector(ctx, v, depth, what)
        y = _normalize(st, xs, mean, variance, scale, offset, eps)
        return [ctx.convert(y, ctx.dtype(x)), mean, variance, mean, variance, *extra]
    n = st.count
    if n == 0:
        nan, zero = ctx.constant(np.full(depth, np.nan), acc), ctx.constant(np.zeros(depth), acc)
        return [x, nan, nan, zero, zero, *extra]
    batch_mean = st.op(Opcode.MULTIPLY, st.sum(xs), st.const(1.0 / n, scale))
    centered = st.op(Opcode.SUBTRACT, xs, batch_mean)
    batch_var = st.op(Opcode.MULTIPLY, st.sum(ctx.b.multiply(centered, centered)), st.const(1.0 / n, scale))
    y = _scale_shift(st, centered, batch_var, scale, offset, eps)
    running_mean, running_var = batch_mean, st.op(Opcode.MULTIPLY, batch_var, st.const(n / max(n - 1, 1), scale))
    factor = float(ctx.attr_float("exponential_avg_factor", 1.0))
    if factor != 1.0:
        for v, what in ((mean, "mean"), (variance, "variance")):
            _depth_vector(ctx, v, depth, what)
        running_mean = _blend(st, mean, running_mean, factor)
        running_var = _blend(st, variance, running_var, factor)
    return [ctx.convert(y, ctx.dtype(x)), running_mean, running_var, batch_mean, batch_var, *extra]


def _normalize(st: _Stats, xs: Value, mean: Value, var: Value, scale: Value, offset: Value, eps: float) -> Value:
    return _scale_shift(st, st.op(Opcode.SUBTRACT, xs, mean), var, scale, offset, eps)


def _scale_shift(st: _Stats, centered: Value, var: Value, scale: Value, offset: Value, eps: float) -> Value:
    """``centered * (scale * rsqrt(var + eps)) + offset``."""
    factor = st.op(Opcode.MULTIPLY, scale, st.rsqrt_var(var, eps))
    return st.op(Opcode.ADD, st.op(Opcode.MULTIPLY, centered, factor), offset)


def _blend(st: _Stats, old: Value, new: Value, factor: float) -> Value:
    """``(1 - factor) * old + factor * new``."""
    return st.op(Opcode.ADD, st.op(Opcode.MULTIPLY, old, st.const(1.0 - factor, old)),
                 st.op(Opcode.MULTIPLY, new, st.const(factor, new)))


@register_lowering("FusedBatchNormGrad", dtypes=_BN_V1_TYPES)
@register_lowering("FusedBatchNormGradV2", "FusedBatchNormGradV3", dtypes=_BN_TYPES)
def fused_batch_norm_grad(ctx: LoweringContext) -> list[Value]:
    dy, x, scale, mean, var = ctx.inputs[:5]
    acc = ctx.dtype(scale)
    st = _Stats(ctx, x, acc)
    depth = st.dims[st.feature]
    for v, what in ((scale, "scale"), (mean, "reserve_space_1"), (var, "reserve_space_2")):
        _depth_vector(ctx, v, depth, what)
    if ctx.dims(dy) != ctx.dims(x):
        raise ctx.error(f"y_backprop has dims {list(ctx.dims(dy))} but x has {list(ctx.dims(x))}")
    eps = float(ctx.attr_float("epsilon", 1e-4))
    dys, xs = ctx.convert(dy, acc), ctx.convert(x, acc)
    inv = st.rsqrt_var(var, eps)
    x_hat = st.op(Opcode.MULTIPLY, st.op(Opcode.SUBTRACT, xs, mean), inv)
    offset_grad = st.sum(dys)
    scale_grad = st.sum(ctx.b.multiply(dys, x_hat))
    coef = st.op(Opcode.MULTIPLY, scale, inv)
    if ctx.attr_bool("is_training", True) and st.count:
        # dy - mean(dy) - x_hat * mean(dy * x_hat)
        inv_n = st.const(1.0 / st.count, scale)
        dys = st.op(Opcode.SUBTRACT, dys, st.op(Opcode.MULTIPLY, offset_grad, inv_n))
        dys = ctx.b.subtract(dys, st.op(Opcode.MULTIPLY, x_hat, st.op(Opcode.MULTIPLY, scale_grad, inv_n)))
    x_grad = ctx.convert(st.op(Opcode.MULTIPLY, dys, coef), ctx.dtype(x))
    empty = ctx.constant(np.zeros(0), acc)
    return [x_grad, scale_grad, offset_grad, empty, empty]
