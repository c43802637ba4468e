"""InTopKV2: whether each target is among the ``k`` largest predictions of its row (Keras
``TopKCategoricalAccuracy``/``SparseTopKCategoricalAccuracy``, ``tf.math.in_top_k``), TF's CPU rule.

``InTopKV2(predictions [B, C], targets [B], k)``: row ``b`` is true when fewer than ``k`` classes
predict strictly more than ``predictions[b, targets[b]]`` (ties count for the target). It is false
when the target is out of range, when the target's prediction is not finite, or when any prediction
of the row is not finite (TF's kernel "cannot say"). ``k`` may be a run-time scalar.
"""

from __future__ import annotations

import numpy as np

from hlo.builder import Value
from hlo.dtypes import PrimitiveType as P
from hlo.lowering.context import LoweringContext
from hlo.lowering.ops._shape_util import iota
from hlo.lowering.registry import register_lowering
from hlo.opcodes import Opcode

_INDEX = frozenset({P.S32, P.S64})


def _finite(ctx: LoweringContext, x: Value) -> Value:
    return ctx.compare(ctx.b.op(Opcode.ABS, x), ctx.full(np.inf, x), "LT")  # NaN compares false


@register_lowering("InTopKV2", dtypes=_INDEX)
def in_top_k(ctx: LoweringContext) -> Value:
    predictions, targets, k = ctx.inputs
    if ctx.dtype(predictions) != P.F32:
        raise ctx.error(f"predictions must be float32, got {ctx.dtype(predictions).name}")
    dims = ctx.dims(predictions)
    if len(dims) != 2 or ctx.dims(targets) != dims[:1] or ctx.dims(k):
        raise ctx.invalid_argument(f"predictions must be 2-dimensional, targets its first dim and k a scalar; got "
                                   f"{list(dims)}, {list(ctx.dims(targets))} and {list(ctx.dims(k))}")
    b = ctx.b
    classes = iota(ctx, P.S64, dims, 1)
    target = ctx.broadcast_in_dim(ctx.convert(targets, P.S64), dims, (0,))
    hot = ctx.compare(classes, target, "EQ")
    mine = ctx.reduce(b.select(hot, predictions, ctx.full(-np.inf, predictions)), (1,), Opcode.MAXIMUM, -np.inf)
    more = ctx.compare(predictions, ctx.broadcast_in_dim(mine, dims, (0,)), "GT")
    count = ctx.reduce(ctx.convert(more, P.S64), (1,), Opcode.ADD, 0)
    row_finite = ctx.reduce(_finite(ctx, predictions), (1,), Opcode.AND, True)
    ok = b.and_(row_finite, _finite(ctx, mine))
    return b.and_(ok, ctx.compare(count, ctx.broadcast_to(ctx.convert(k, P.S64), dims[:1]), "LT"))
