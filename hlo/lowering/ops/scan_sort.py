"""Scans and top-k: Cumsum, Cumprod (exclusive, reverse) and TopKV2.

A scan is one reduce-window whose window spans the whole axis, padded with the
identity on the side the scan comes from (one extra pad and a final slice make
it exclusive), as XLA's tf2xla does. TopKV2 sorts the values together with an
iota of their positions along the last dim, largest first with ties going to
the lower index, and slices the first k.
"""

from __future__ import annotations

from typing import Callable

from hlo.attributes import ComparisonDirection, Window, WindowDim
from hlo.builder import ComputationBuilder, Value
from hlo.dtypes import PrimitiveType
from hlo.ir import HloComputation
from hlo.lowering.context import LoweringContext
from hlo.lowering.ops._shape_util import const_axis, iota, slice_axis
from hlo.lowering.registry import Rule, register_lowering
from hlo.lowering.tf_types import NUMERIC
from hlo.opcodes import Opcode
from hlo.shapes import scalar

P = PrimitiveType

# scan op -> (combining opcode, identity)
_SCANS = {"Cumsum": (Opcode.ADD, 0), "Cumprod": (Opcode.MULTIPLY, 1)}


def scan(ctx: LoweringContext, x: Value, axis: int, combine: HloComputation, identity: float) -> Value:
    """The inclusive/exclusive, forward/reverse (the node's attrs) scan of ``x`` along ``axis`` with the
    scalar computation ``combine`` and its ``identity``."""
    dims = ctx.dims(x)
    n = dims[axis]
    if n == 0:
        return x
    exclusive, rev = int(bool(ctx.attr_bool("exclusive", False))), bool(ctx.attr_bool("reverse", False))
    pad = n - 1 + exclusive
    window = Window(tuple(
        WindowDim(n, 1, 0 if rev else pad, pad if rev else 0) if d == axis else WindowDim(1)
        for d in range(len(dims))))
    out = ctx.b.reduce_window(x, ctx.scalar(identity, ctx.dtype(x)), window=window, to_apply=combine)
    if exclusive:
        out = slice_axis(ctx, out, axis, 1 if rev else 0, n + 1 if rev else n)
    return out


def _scan(opcode: Opcode, identity: int) -> Rule:
    def lower(ctx: LoweringContext) -> Value:
        x = ctx.inputs[0]
        dims = ctx.dims(x)
        if not dims:
            raise ctx.error("scan axis must be in range [0, 0) for a scalar input")
        return scan(ctx, x, const_axis(ctx, 1, len(dims)), ctx.scalar_computation(opcode, ctx.dtype(x)), identity)
    return lower


for _op, (_opcode, _identity) in _SCANS.items():
    register_lowering(_op, dtypes=NUMERIC, const_inputs=(1,))(_scan(_opcode, _identity))


def _greater_then_lower_index(dtype: PrimitiveType) -> Callable[[ComputationBuilder], Value]:
    """Sort comparator on (value, index) pairs: larger value first, equal values by lower index."""
    def build(cb: ComputationBuilder) -> Value:
        vl, vr = cb.parameter(scalar(dtype), name="v_lhs"), cb.parameter(scalar(dtype), name="v_rhs")
        il, ir = cb.parameter(scalar(P.S32), name="i_lhs"), cb.parameter(scalar(P.S32), name="i_rhs")
        greater = cb.compare(vl, vr, direction=ComparisonDirection.GT)
        equal = cb.compare(vl, vr, direction=ComparisonDirection.EQ)
        lower = cb.compare(il, ir, direction=ComparisonDirection.LT)
        return cb.op(Opcode.OR, greater, cb.op(Opcode.AND, equal, lower))
    return build


@register_lowering("TopKV2", dtypes=NUMERIC, const_inputs=(1,))
def top_k(ctx: LoweringContext) -> list[Value]:
    """Values and indices of the k largest entries along the last dim, in descending order (also for
    ``sorted=False``, whose order TF leaves unspecified). NaN ordering is unspecified, as in TF."""
    x = ctx.inputs[0]
    dims = ctx.dims(x)
    ks = ctx.const_ints(1)
    if len(ks) != 1 or ks[0] < 0:
        raise ctx.error(f"k must be a non-negative scalar, got {ks}")
    (k,) = ks
    if not dims or dims[-1] < k:
        raise ctx.error(f"input must have at least {k} columns, got dims {list(dims)}")
    axis, dtype = len(dims) - 1, ctx.dtype(x)
    index_type = ctx.dtype_attr("index_type") if "index_type" in ctx.node.attr else P.S32
    if k == 0:  # nothing to sort
        return [slice_axis(ctx, x, axis, 0, 0), iota(ctx, index_type, (*dims[:-1], 0), axis)]
    positions = iota(ctx, P.S32, dims, axis)
    comparator = ctx.computation(f"topk_greater_{dtype.value}", _greater_then_lower_index(dtype))
    both = ctx.b.sort(x, positions, dimensions=(axis,), is_stable=True, to_apply=comparator)
    values = ctx.b.get_tuple_element(both, index=0)
    indices = ctx.b.get_tuple_element(both, index=1)
    values = slice_axis(ctx, values, axis, 0, k)
    indices = ctx.convert(slice_axis(ctx, indices, axis, 0, k), index_type)
    return [values, indices]
