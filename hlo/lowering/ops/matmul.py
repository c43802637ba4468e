"""Dense matrix products: MatMul, BatchMatMul (V1), BatchMatMulV2, BatchMatMulV3, each one HLO ``dot``.

- MatMul: rank-2 operands, ``transpose_a``/``transpose_b`` pick the contracting dims (no
  transpose is materialized).
- BatchMatMul V1 (equal batch dims), V2 and V3: ``[..., m, k] x [..., k, n]``; ``adj_x``/``adj_y``
  swap the last two dims (adjoint = transpose for the real types we support); V2/V3 batch dims
  broadcast NumPy-style. When ``y`` has no batch dims (or only size-1 ones), ``x``'s batch dims
  are free dims of the dot and ``y`` is not broadcast (the Dense-layer-on-a-sequence case).
  V3's ``Ta``/``Tb`` may be int8/uint8 with ``Tout`` int32: operands are converted to ``Tout`` first.
- f16/bf16 products accumulate in f32 inside ``dot`` (XLA's behaviour); integer products
  wrap in the result type, as TF's do. Declared dtypes are TF's CPU kernels'.
"""

from __future__ import annotations

from hlo.builder import Value
from hlo.dtypes import PrimitiveType as P
from hlo.lowering.context import LoweringContext
from hlo.lowering.registry import register_lowering
from hlo.lowering.tf_types import FLOATS

_MATMUL_TYPES = FLOATS | {P.S32, P.S64}
_BATCH_MATMUL_TYPES = _MATMUL_TYPES | {P.S16}
_V3_TYPES = (_BATCH_MATMUL_TYPES - {P.F16}) | {P.S8, P.U8}


def _dot(ctx: LoweringContext, x: Value, y: Value, x_contract: int, y_contract: int, batch: int = 0) -> Value:
    """``dot`` with the first ``batch`` dims of both operands as batch dims."""
    dims = tuple(range(batch))
    return ctx.b.dot(x, y, lhs_batch_dims=dims, rhs_batch_dims=dims,
                     lhs_contracting_dims=(x_contract,), rhs_contracting_dims=(y_contract,))


def _check_rank(ctx: LoweringContext, v: Value, what: str, exact: bool = False) -> None:
    rank = len(ctx.dims(v))
    if (exact and rank != 2) or rank < 2:
        raise ctx.error(f"{what} must be {'a matrix' if exact else 'at least rank 2'}, got shape "
                        f"{list(ctx.dims(v))}")


@register_lowering("MatMul", dtypes=_MATMUL_TYPES)
def matmul(ctx: LoweringContext) -> Value:
    a, b = ctx.inputs
    _check_rank(ctx, a, "a", exact=True)
    _check_rank(ctx, b, "b", exact=True)
    ka = 0 if ctx.attr_bool("transpose_a", False) else 1
    kb = 1 if ctx.attr_bool("transpose_b", False) else 0
    if ctx.dims(a)[ka] != ctx.dims(b)[kb]:
        raise ctx.error(f"matrix size-incompatible: a {list(ctx.dims(a))}, b {list(ctx.dims(b))}")
    return _dot(ctx, a, b, ka, kb)  # dot puts a's free dim first, then b's, transposed or not


def _batch_matmul(ctx: LoweringContext, out_type: P) -> Value:
    x, y = (ctx.convert(v, out_type) for v in ctx.inputs)
    _check_rank(ctx, x, "x")
    _check_rank(ctx, y, "y")
    adj_x, adj_y = ctx.attr_bool("adj_x", False), ctx.attr_bool("adj_y", False)
    xd, yd = ctx.dims(x), ctx.dims(y)
    kx = xd[-2] if adj_x else xd[-1]
    ky = yd[-1] if adj_y else yd[-2]
    if kx != ky:
        raise ctx.error(f"in[0] and in[1] must agree on the contracting dimension: x {list(xd)} "
                        f"(adj_x={adj_x}), y {list(yd)} (adj_y={adj_y})")
    batch = ctx.broadcast_shapes(xd[:-2], yd[:-2])
    nb = len(batch)
    if all(d == 1 for d in yd[:-2]):
        # y is one matrix: x's batch dims become free dims of the dot, before m, whether or not
        # adj_x, so the result is already [batch..., m, n].
        x = ctx.broadcast_to(x, batch + xd[-2:])
        return _dot(ctx, x, ctx.reshape(y, yd[-2:]), nb + (0 if adj_x else 1), 1 if adj_y else 0)
    x = ctx.broadcast_to(x, batch + xd[-2:])
    y = ctx.broadcast_to(y, batch + yd[-2:])
    return _dot(ctx, x, y, nb + (0 if adj_x else 1), nb + (1 if adj_y else 0), batch=nb)


@register_lowering("BatchMatMul", dtypes=_MATMUL_TYPES)
def batch_matmul_v1(ctx: LoweringContext) -> Value:
    x, y = ctx.inputs
    if ctx.dims(x)[:-2] != ctx.dims(y)[:-2]:
        raise ctx.error(f"BatchMatMul (V1) does not broadcast: batch dims of x {list(ctx.dims(x))} and "
                        f"y {list(ctx.dims(y))} differ")
    return _batch_matmul(ctx, ctx.dtype(x))


@register_lowering("BatchMatMulV2", dtypes=_BATCH_MATMUL_TYPES)
def batch_matmul_v2(ctx: LoweringContext) -> Value:
    return _batch_matmul(ctx, ctx.dtype(ctx.inputs[0]))


@register_lowering("BatchMatMulV3", dtypes=_V3_TYPES, type_attrs=("Ta", "Tb", "Tout"))
def batch_matmul_v3(ctx: LoweringContext) -> Value:
    return _batch_matmul(ctx, ctx.dtype_attr("Tout"))
