"""Softmax, LogSoftmax and the softmax cross-entropy losses (TF's CPU formulas).

All four shift the logits by their row maximum first (numerically stable), along the last
axis, and compute in f32 for f16/bf16 inputs, rounding once at the end.

- Softmax: ``exp(s) / sum(exp(s))``; LogSoftmax: ``s - log(sum(exp(s)))``, ``s = x - max(x)``;
  any rank >= 1. A row holding +inf or NaN gives NaN, as in TF.
- SoftmaxCrossEntropyWithLogits(features, labels): both broadcast NumPy-style to a matrix
  ``[batch, classes]``; ``loss = sum(labels * (log(sum(exp(s))) - s))`` (so a zero label on a
  -inf logit gives NaN, as TF's kernel does) and ``backprop = softmax - labels``.
- SparseSoftmaxCrossEntropyWithLogits(features [batch, classes], labels [batch] int32/int64):
  ``loss = log(sum(exp(s))) - s[label]`` (only the label's column enters the loss, so -inf
  logits elsewhere are fine) and ``backprop = softmax - one_hot(label)``. TF CPU raises an
  error for a label outside ``[0, classes)``; a compiled kernel cannot, so such a row's loss
  and backprop are NaN (TF GPU's and XLA's behaviour); labels known at compile time are
  checked and rejected with TF's message.
"""

from __future__ import annotations

import numpy as np

from hlo.builder import Value
from hlo.lowering.context import LoweringContext
from hlo.lowering.errors import LoweringError
from hlo.lowering.ops import _reduce_util as ru
from hlo.lowering.registry import register_lowering
from hlo.lowering.tf_types import FLOATS
from hlo.opcodes import Opcode
from hlo.shapes import Shape


def _shifted(ctx: LoweringContext, x: Value) -> tuple[Value, Value, Value]:
    """``(s, sum(exp(s)))`` for ``s = x - max(x)`` along the last axis; ``sum`` keeps the reduced
    dims broadcast back to ``x``'s dims."""
    dims = ctx.dims(x)
    axis = len(dims) - 1
    m = ru.broadcast_back(ctx, ru.max_(ctx, x, (axis,)), dims, (axis,))
    s = ctx.b.subtract(x, m)
    e = ctx.b.exponential(s)
    total = ru.broadcast_back(ctx, ctx.reduce(e, (axis,), Opcode.ADD, 0), dims, (axis,))
    return s, e, total


def _logits(ctx: LoweringContext, x: Value) -> Value:
    if not ctx.dims(x):
        raise ctx.error(f"{ctx.op_type} needs logits of rank at least 1, got a scalar")
    return ctx.convert(x, ru.accumulation_type(ctx.dtype(x)))


@register_lowering("Softmax", dtypes=FLOATS)
def softmax(ctx: LoweringContext) -> Value:
    (x,) = ctx.inputs
    _, e, total = _shifted(ctx, _logits(ctx, x))
    return ctx.convert(ctx.b.divide(e, total), ctx.dtype(x))


@register_lowering("LogSoftmax", dtypes=FLOATS)
def log_softmax(ctx: LoweringContext) -> Value:
    (x,) = ctx.inputs
    s, _, total = _shifted(ctx, _logits(ctx, x))
    return ctx.convert(ctx.b.subtract(s, ctx.b.log(total)), ctx.dtype(x))


@register_lowering("SoftmaxCrossEntropyWithLogits", dtypes=FLOATS)
def softmax_cross_entropy(ctx: LoweringContext) -> list[Value]:
    features, labels = ctx.inputs
    dtype = ctx.dtype(features)
    features, labels = ctx.broadcast_all(*(_logits(ctx, v) for v in (features, labels)))
    if len(ctx.dims(features)) != 2:
        raise ctx.error("logits and labels must be either 2-dimensional, or broadcasted to be "
                        f"2-dimensional, got {list(ctx.dims(features))}")
    s, e, total = _shifted(ctx, features)
    per_class = ctx.b.multiply(labels, ctx.b.subtract(ctx.b.log(total), s))
    loss = ctx.reduce(per_class, (1,), Opcode.ADD, 0)
    backprop = ctx.b.subtract(ctx.b.divide(e, total), labels)
    return [ctx.convert(loss, dtype), ctx.convert(backprop, dtype)]


def _check_constant_labels(ctx: LoweringContext, classes: int) -> None:
    try:
        labels = np.asarray(ctx.const_input(1))
    except LoweringError:
        return  # known only at run time: out-of-range rows become NaN
    bad = labels[(labels < 0) | (labels >= classes)]
    if bad.size:
        raise ctx.error(f"Received a label value of {int(bad[0])} which is outside the valid range of "
                        f"[0, {classes})")


@register_lowering("SparseSoftmaxCrossEntropyWithLogits", dtypes=FLOATS)
def sparse_softmax_cross_entropy(ctx: LoweringContext) -> list[Value]:
    features, labels = ctx.inputs
    dtype = ctx.dtype(features)
    dims = ctx.dims(features)
    if len(dims) != 2 or ctx.dims(labels) != dims[:1]:
        raise ctx.error(f"logits must be a matrix and labels a vector of its rows, got logits "
                        f"{list(dims)} and labels {list(ctx.dims(labels))}")
    if dims[1] == 0:
        raise ctx.error(f"Must have at least one class, but got logits shape {list(dims)}")
    _check_constant_labels(ctx, dims[1])
    s, e, total = _shifted(ctx, _logits(ctx, features))
    acc = ctx.dtype(s)
    ltype = ctx.dtype(labels)
    classes = ctx.b.iota(iota_dimension=1, shape=Shape.array(ltype, dims))
    hot = ctx.compare(classes, ctx.broadcast_in_dim(labels, dims, (0,)), "EQ")
    zeros = ctx.full(0, s)
    loss = ctx.reduce(ctx.b.select(hot, ctx.b.subtract(ctx.b.log(total), s), zeros), (1,), Opcode.ADD, 0)
    backprop = ctx.b.subtract(ctx.b.divide(e, total), ctx.convert(hot, acc))
    valid = ctx.b.op(Opcode.AND, ctx.compare(labels, ctx.scalar(0, ltype), "GE"),
                     ctx.compare(labels, ctx.scalar(dims[1], ltype), "LT"))
    loss = ctx.b.select(valid, loss, ctx.full(np.nan, loss))
    backprop = ctx.b.select(ctx.broadcast_in_dim(valid, dims, (0,)), backprop, ctx.full(np.nan, backprop))
    return [ctx.convert(loss, dtype), ctx.convert(backprop, dtype)]

