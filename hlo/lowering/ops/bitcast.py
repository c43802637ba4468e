"""Bitcast: reinterpret the bits of each element as another type, as TF's kernel (a memcpy on a
little-endian machine) does.

Equal widths keep the shape. A wider input element becomes a new innermost dimension of
``width_in / width_out`` narrower elements, lowest-addressed (least significant) bits first; a
narrower input must have an innermost dimension of ``width_out / width_in``, which is packed into one
element. Packing and unpacking are built from shifts on unsigned integers of the two widths, then an
equal-width bitcast-convert, so every backend that has equal-width bitcast-convert compiles it.
"""

from __future__ import annotations

from hlo.builder import Value
from hlo.dtypes import PrimitiveType as P
from hlo.lowering.ops._philox import Ops
from hlo.lowering.context import LoweringContext
from hlo.lowering.registry import register_lowering
from hlo.lowering.tf_types import NUMERIC, hlo_tf_name
from hlo.opcodes import Opcode

_UNSIGNED = {8: P.U8, 16: P.U16, 32: P.U32, 64: P.U64}


@register_lowering("Bitcast", dtypes=NUMERIC, type_attrs=("T", "type"))
def bitcast(ctx: LoweringContext) -> Value:
    (x,) = ctx.inputs
    src, dst = ctx.dtype(x), ctx.dtype_attr("type")
    if src == dst:
        return x
    ops = Ops(ctx.b)
    wi, wo = src.bit_width, dst.bit_width
    dims = ctx.dims(x)
    if wi == wo:
        return ops.bitcast(x, dst)
    ui, uo = _UNSIGNED[wi], _UNSIGNED[wo]
    bits = ops.bitcast(x, ui)
    if wi > wo:
        pieces = [ops.convert(ops.shr(bits, wo * j) if j else bits, uo) for j in range(wi // wo)]
        return ops.bitcast(ops.stack_last(pieces), dst)
    ratio = wo // wi
    if not dims or dims[-1] != ratio:
        raise ctx.invalid_argument(f"Cannot bitcast from {hlo_tf_name(src)} to {hlo_tf_name(dst)}: shape "
                                   f"{list(dims)} must end in a dimension of {ratio}")
    packed = ops.convert(ops.take(bits, len(dims) - 1, 0), uo)
    for j in range(1, ratio):
        piece = ops.convert(ops.take(bits, len(dims) - 1, j), uo)
        packed = ctx.b.op(Opcode.OR, packed, ops.shl(piece, wi * j))
    return ops.bitcast(packed, dst)
