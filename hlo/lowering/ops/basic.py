"""Constants and identity-like ops."""

from __future__ import annotations

import numpy as np

from hlo.lowering import tf_types
from hlo.lowering.registry import register_lowering


@register_lowering("Const", dtypes=tf_types.ALL, type_attrs=("dtype",))
def const(ctx):
    value = np.asarray(ctx.attr("value"))
    return ctx.constant(value, ctx.dtype_attr("dtype"))


@register_lowering("Identity", "StopGradient", "PreventGradient", "Snapshot", dtypes=tf_types.ALL)
def identity(ctx):
    (x,) = ctx.inputs
    return x


@register_lowering("IdentityN", type_attrs=())
def identity_n(ctx):
    return list(ctx.inputs)
