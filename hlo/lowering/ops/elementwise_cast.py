"""``Cast``: one HLO convert, plus TF's mantissa truncation when ``Truncate`` is set.

Conversions are HLO's: int -> int wraps, anything -> bool is ``x != 0`` (NaN is true),
bool -> number is 0/1, float -> float rounds to nearest even.

float -> int truncates toward zero. Out of range values and NaN are undefined
behaviour in TF's C++ kernel; on x86 it gives INT_MIN for int32/int64 (and the
low bits of an int32 conversion for narrower types). We give HLO's convert:
saturation to the type's range, and NaN -> 0.

``Truncate=True`` (checked against TF): for the narrowing float casts f32 -> f16/bf16
and f64 -> f32/f16, the source's low mantissa bits that the destination lacks are
zeroed first, then the value converts as usual (so the normal range truncates toward
zero and 65520 -> f16 is 65504, not inf). NaN stays NaN whatever its payload.
Every other cast ignores the attribute.

complex -> real keeps the real part (TF's cast; HLO's convert has no such conversion), then converts;
real -> complex has a zero imaginary part.
"""

from __future__ import annotations

from hlo.builder import Value
from hlo.dtypes import PrimitiveType as P
from hlo.lowering.context import LoweringContext
from hlo.lowering.ops._elementwise_util import clear_low_bits
from hlo.lowering.registry import register_lowering
from hlo.lowering.tf_types import ALL

# (source, destination) -> source mantissa bits to zero when Truncate is set.
_TRUNCATED_BITS = {
    (P.F32, P.F16): 23 - 10,
    (P.F32, P.BF16): 23 - 7,
    (P.F64, P.F32): 52 - 23,
    (P.F64, P.F16): 52 - 10,
}


@register_lowering("Cast", dtypes=ALL, type_attrs=("SrcT", "DstT"))
def cast(ctx: LoweringContext) -> Value:
    (x,) = ctx.inputs
    dst = ctx.dtype_attr("DstT")
    bits = _TRUNCATED_BITS.get((ctx.dtype(x), dst))
    if bits and ctx.attr_bool("Truncate", False):
        x = ctx.b.select(ctx.compare(x, x, "NE"), x, clear_low_bits(ctx, x, bits))  # NaN payloads stay NaN
    if ctx.dtype(x).is_complex and not dst.is_complex:
        x = ctx.b.real(x)
    return ctx.convert(x, dst)
