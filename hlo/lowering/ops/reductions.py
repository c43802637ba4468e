"""Reductions: Sum, Prod, Max, Min, All, Any, Mean, EuclideanNorm, L2Loss, ArgMax, ArgMin.

TF semantics, checked against TF 2.21 on CPU:
- ``reduction_indices`` is a compile-time constant (scalar or vector), axes in ``[-rank, rank)``,
  no duplicates; empty axes reduce nothing; ``keep_dims`` keeps size-1 dims. Reducing size-0
  dims gives the identity (0, 1, -inf/INT_MIN, +inf/INT_MAX, True, False).
- Sum/Prod/Mean/EuclideanNorm/L2Loss of f16/bf16 accumulate in f32 and round once (XLA's
  choice; TF CPU does the same for bf16 but sums f16 in f16, so f16 results can differ from
  TF's in the last bits, and TF's f16 sums overflow to inf past 65504 where ours need not).
- Max/Min propagate NaN.
- Integer Mean sums in 64 bits (int64 for signed, uint64 for unsigned types), divides
  truncating toward zero, and converts back; the mean over zero elements is 0 for
  integers and NaN for floats.
- Integer EuclideanNorm is ``trunc(sqrt(double(sum(x*x))))`` with the sum in the input type.
- ArgMax/ArgMin follow Eigen's CPU reducer: start from (index 0, the most negative / positive
  finite value) and replace it only with a strictly greater / smaller element; equal values
  keep the first index, NaNs are never chosen, so an all-NaN row gives 0. TF rejects an
  empty reduced dimension at run time; we reject it at compile time.
"""

from __future__ import annotations

from typing import Callable, Sequence

from hlo.attributes import ComparisonDirection
from hlo.builder import ComputationBuilder, Value
from hlo.dtypes import PrimitiveType as P
from hlo.ir import HloComputation
from hlo.lowering.context import LoweringContext
from hlo.lowering.ops import _reduce_util as ru
from hlo.lowering.registry import Rule, register_lowering
from hlo.lowering.tf_types import ALL, COMPLEX, FLOATS, NUMERIC
from hlo.opcodes import Opcode
from hlo.shapes import Shape, scalar


def _axes(ctx: LoweringContext) -> tuple[Value, tuple[int, ...]]:
    x = ctx.inputs[0]
    return x, ru.reduction_axes(ctx, ctx.const_ints(1), len(ctx.dims(x)))


def _finish(ctx: LoweringContext, out: Value, x: Value, axes: Sequence[int]) -> Value:
    """Apply ``keep_dims``."""
    if ctx.attr_bool("keep_dims", False):
        return ru.keep_dims(ctx, out, ctx.dims(x), axes)
    return out


# op type -> (opcode, identity as a function of the element type, dtypes, accumulate wide)
_SIMPLE = {
    "Sum": (Opcode.ADD, lambda t: 0, NUMERIC | COMPLEX, True),
    "Prod": (Opcode.MULTIPLY, lambda t: 1, NUMERIC | COMPLEX, True),
    "Max": (Opcode.MAXIMUM, ru.lowest, NUMERIC, False),
    "Min": (Opcode.MINIMUM, ru.highest, NUMERIC, False),
    "All": (Opcode.AND, lambda t: True, None, False),  # bool only, by the op's definition (no T attr)
    "Any": (Opcode.OR, lambda t: False, None, False),
}


def _simple(opcode: Opcode, identity: Callable[[P], ru.Extreme], wide: bool) -> Rule:
    def lower(ctx: LoweringContext) -> Value:
        x, axes = _axes(ctx)
        dtype = ctx.dtype(x)
        acc = ru.accumulation_type(dtype) if wide else dtype
        return _finish(ctx, ru.reduce(ctx, x, axes, opcode, identity(dtype), acc), x, axes)
    return lower


for _op, (_opcode, _identity, _dtypes, _wide) in _SIMPLE.items():
    register_lowering(_op, dtypes=_dtypes, const_inputs=(1,))(_simple(_opcode, _identity, _wide))


def _mean_accumulator(dtype: P) -> P:
    if dtype.is_signed_int:
        return P.S64
    if dtype.is_unsigned_int:
        return P.U64
    return ru.accumulation_type(dtype)


@register_lowering("Mean", dtypes=NUMERIC | COMPLEX, const_inputs=(1,))
def mean(ctx: LoweringContext) -> Value:
    x, axes = _axes(ctx)
    dtype = ctx.dtype(x)
    acc = _mean_accumulator(dtype)
    count = ru.count_elements(ctx.dims(x), axes)
    total = ctx.reduce(ctx.convert(x, acc), axes, Opcode.ADD, 0)
    if count == 0 and dtype.is_integral:
        out = ctx.full(0, total, dtype)
    else:
        out = ctx.convert(ctx.binary(Opcode.DIVIDE, total, ctx.scalar(count, acc)), dtype)
    return _finish(ctx, out, x, axes)


@register_lowering("EuclideanNorm", dtypes=NUMERIC, const_inputs=(1,))
def euclidean_norm(ctx: LoweringContext) -> Value:
    x, axes = _axes(ctx)
    dtype = ctx.dtype(x)
    if dtype.is_integral:
        total = ctx.reduce(ctx.b.multiply(x, x), axes, Opcode.ADD, 0)
        out = ctx.convert(ctx.b.sqrt(ctx.convert(total, P.F64)), dtype)
    else:
        wide = ctx.convert(x, ru.accumulation_type(dtype))
        total = ctx.reduce(ctx.b.multiply(wide, wide), axes, Opcode.ADD, 0)
        out = ctx.convert(ctx.b.sqrt(total), dtype)
    return _finish(ctx, out, x, axes)


@register_lowering("L2Loss", dtypes=FLOATS)
def l2_loss(ctx: LoweringContext) -> Value:
    (x,) = ctx.inputs
    dtype = ctx.dtype(x)
    wide = ctx.convert(x, ru.accumulation_type(dtype))
    total = ctx.reduce(ctx.b.multiply(wide, wide), range(len(ctx.dims(x))), Opcode.ADD, 0)
    return ctx.convert(ctx.b.multiply(total, ctx.scalar(0.5, ctx.dtype(wide))), dtype)


# --- ArgMax / ArgMin -------------------------------------------------------------------------

# op type -> (direction an element must beat the running best in, Eigen's finite initial value,
# the identity of the reduction)
_ARG = {
    "ArgMax": (ComparisonDirection.GT, ru.finite_lowest, ru.lowest),
    "ArgMin": (ComparisonDirection.LT, ru.finite_highest, ru.highest),
}


def _arg_reducer(ctx: LoweringContext, direction: ComparisonDirection, vtype: P, itype: P) -> HloComputation:
    """``(best_v, best_i, v, i) -> (v, i)`` if ``v`` beats ``best_v``, or ties it at a smaller index."""
    def build(cb: ComputationBuilder) -> Value:
        av, ai = cb.parameter(scalar(vtype), name="best_v"), cb.parameter(scalar(itype), name="best_i")
        bv, bi = cb.parameter(scalar(vtype), name="v"), cb.parameter(scalar(itype), name="i")
        beats = cb.compare(bv, av, direction=direction)
        ties = cb.compare(bv, av, direction=ComparisonDirection.EQ)
        earlier = cb.compare(bi, ai, direction=ComparisonDirection.LT)
        take = cb.op(Opcode.OR, beats, cb.op(Opcode.AND, ties, earlier))
        return cb.tuple(cb.select(take, bv, av), cb.select(take, bi, ai))
    return ctx.computation(f"arg_{direction.value.lower()}_{vtype.value}_{itype.value}", build)


def _arg(direction: ComparisonDirection, initial: Callable[[P], ru.Extreme],
         identity: Callable[[P], ru.Extreme]) -> Rule:
    def lower(ctx: LoweringContext) -> Value:
        x = ctx.inputs[0]
        dims = ctx.dims(x)
        axes = ctx.const_ints(1)
        if len(axes) != 1:
            raise ctx.error(f"{ctx.op_type} takes one dimension, got {axes}")
        (axis,) = ru.reduction_axes(ctx, axes, len(dims))
        if dims[axis] == 0:
            raise ctx.invalid_argument(f"{ctx.op_type}: reduction axis {axis} is empty in shape {list(dims)}")
        vtype, itype = ctx.dtype(x), ctx.dtype_attr("output_type")
        idx = ctx.b.iota(iota_dimension=axis, shape=Shape.array(itype, dims))
        if vtype.is_float:
            # Elements that cannot beat Eigen's finite initial value (NaN included) never win:
            # map them to (the identity, index 0) so the reduction is order-independent.
            live = ctx.b.compare(x, ctx.full(initial(vtype), x), direction=direction)
            x = ctx.b.select(live, x, ctx.full(identity(vtype), x))
            idx = ctx.b.select(live, idx, ctx.full(0, idx))
        out = ctx.b.reduce(x, idx, ctx.scalar(identity(vtype), vtype), ctx.scalar(0, itype), dimensions=(axis,),
                           to_apply=_arg_reducer(ctx, direction, vtype, itype))
        return ctx.b.get_tuple_element(out, index=1)
    return lower


for _op, _row in _ARG.items():
    register_lowering(_op, dtypes=ALL - COMPLEX, const_inputs=(1,))(_arg(*_row))  # complex has no order
