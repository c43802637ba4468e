"""MatrixBandPart: keep a band of each innermost matrix, zero the rest (causal attention masks).

``MatrixBandPart(input [..., M, N], num_lower, num_upper)`` keeps ``input[..., m, n]`` where
``(num_lower < 0 or m - n <= num_lower) and (num_upper < 0 or n - m <= num_upper)``: a negative
bound keeps the whole triangle. The bounds are scalars known at compile time or only at run time
(then the mask is computed in the kernel). TF rejects ``num_lower > M`` or ``num_upper > N``; bounds
known at compile time are checked with TF's message, run-time ones that break it keep everything on
that side, which is what the formula gives.
"""

from __future__ import annotations

from hlo.builder import Value
from hlo.dtypes import PrimitiveType as P
from hlo.lowering.errors import LoweringError
from hlo.lowering.ops._shape_util import iota
from hlo.lowering.context import LoweringContext
from hlo.lowering.registry import register_lowering
from hlo.lowering.tf_types import ALL

_WHAT = (("num_lower", "rows (M)"), ("num_upper", "columns (N)"))


def _check_constant(ctx: LoweringContext, i: int, limit: int) -> None:
    name, what = _WHAT[i - 1]
    try:
        values = ctx.const_ints(i)
    except LoweringError:
        return  # a run-time bound
    if values and values[0] > limit:
        raise ctx.invalid_argument(f"{name} must be negative or less or equal to number of {what}: "
                                   f"{values[0]}")


@register_lowering("MatrixBandPart", dtypes=ALL)
def matrix_band_part(ctx: LoweringContext) -> Value:
    x, lower, upper = ctx.inputs
    dims = ctx.dims(x)
    if len(dims) < 2:
        raise ctx.invalid_argument(f"input must be at least 2-dim, received shape: {list(dims)}")
    for i, bound in ((1, lower), (2, upper)):
        if ctx.dims(bound):
            raise ctx.invalid_argument(f"{_WHAT[i - 1][0]} must be scalar, got shape {list(ctx.dims(bound))}")
    m, n = dims[-2:]
    _check_constant(ctx, 1, m)
    _check_constant(ctx, 2, n)
    itype = P.S64
    lower, upper = ctx.convert(lower, itype), ctx.convert(upper, itype)
    diff = ctx.b.subtract(iota(ctx, itype, (m, n), 0), iota(ctx, itype, (m, n), 1))  # m - n

    def within(bound: Value, distance: Value) -> Value:
        """``bound < 0 or distance <= bound`` over the matrix."""
        bound = ctx.broadcast_to(bound, (m, n))
        return ctx.b.or_(ctx.compare(bound, ctx.full(0, bound), "LT"), ctx.compare(distance, bound, "LE"))
    below = within(lower, diff)
    above = within(upper, ctx.b.negate(diff))
    keep = ctx.broadcast_in_dim(ctx.b.and_(below, above), dims, (len(dims) - 2, len(dims) - 1))
    return ctx.b.select(keep, x, ctx.full(0, x))
