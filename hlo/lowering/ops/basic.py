"""Constants and identity-like ops."""

from __future__ import annotations

import numpy as np

from hlo.builder import Value
from hlo.lowering import tf_types
from hlo.lowering.context import LoweringContext
from hlo.lowering.registry import register_lowering


@register_lowering("Const", dtypes=tf_types.ALL, type_attrs=("dtype",))
def const(ctx: LoweringContext) -> Value:
    value = np.asarray(ctx.attr_tensor("value"))
    return ctx.constant(value, ctx.dtype_attr("dtype"))


@register_lowering("Identity", "StopGradient", "PreventGradient", "Snapshot", dtypes=tf_types.ALL, lists=True)
def identity(ctx: LoweringContext) -> Value:
    (x,) = ctx.inputs
    return x


@register_lowering("IdentityN", type_attrs=())
def identity_n(ctx: LoweringContext) -> list[Value]:
    return list(ctx.inputs)
