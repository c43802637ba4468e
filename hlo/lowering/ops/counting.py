"""Bucketize and the bincounts (Bincount, DenseBincount): Keras ``Discretization`` and
``CategoryEncoding`` (``multi_hot``/``count``), ``tf.math.bincount``.

- ``Bucketize(input, boundaries)``: for each element the number of boundaries ``<=`` it (TF's
  ``std::upper_bound`` over the sorted boundaries), as int32; a comparison against every boundary,
  counted as ``len(boundaries) - #(x < b)`` so that NaN (less than nothing) lands in the last bucket, as
  ``upper_bound`` puts it. The comparison is in float32 (float64 for float64 input), as TF's kernel
  compares its input with the float boundaries.
- ``DenseBincount(input [N] or [B, N], size, weights, binary_output)``: per row, ``out[v] += weight``
  (1 without weights: ``weights`` of zero elements) for each value ``v``; ``binary_output`` gives 1
  where a value occurs. A scatter-add into zeros of ``[size]`` / ``[B, size]``; values outside
  ``[0, size)`` are dropped by the scatter (TF's CPU kernel rejects negative values at run time and
  drops values ``>= size``). ``Bincount(arr, size, weights)`` is the rank-1 form without
  ``binary_output``. ``size`` sets the output shape, so it must be a compile-time constant.
"""

from __future__ import annotations

import numpy as np

from hlo.builder import Value
from hlo.dtypes import PrimitiveType as P
from hlo.lowering.context import LoweringContext
from hlo.lowering.ops._shape_util import combiner, iota
from hlo.lowering.registry import register_lowering
from hlo.lowering.tf_types import SIGNED_INTS
from hlo.opcodes import Opcode

_BUCKETIZE_TYPES = frozenset({P.S32, P.S64, P.F32, P.F64})
_WEIGHT_TYPES = frozenset({P.S32, P.S64, P.F32, P.F64})


@register_lowering("Bucketize", dtypes=_BUCKETIZE_TYPES)
def bucketize(ctx: LoweringContext) -> Value:
    (x,) = ctx.inputs
    boundaries = [float(b) for b in ctx._attr_value("boundaries", ("list", None), "a list of floats").list.f]
    if any(b > a for a, b in zip(boundaries[1:], boundaries)):
        raise ctx.invalid_argument("Expected sorted boundaries")
    dims = ctx.dims(x)
    if not boundaries:
        return ctx.full(0, x, P.S32)
    k = len(boundaries)
    dtype = P.F64 if ctx.dtype(x) == P.F64 else P.F32
    values = ctx.broadcast_in_dim(ctx.convert(x, dtype), dims + (k,), tuple(range(len(dims))))
    bounds = ctx.broadcast_in_dim(ctx.constant(np.array(boundaries), dtype), dims + (k,), (len(dims),))
    below = ctx.reduce(ctx.convert(ctx.compare(values, bounds, "LT"), P.S32), (len(dims),), Opcode.ADD, 0)
    return ctx.b.subtract(ctx.full(k, below), below)


def _bincount(ctx: LoweringContext, values: Value, size: int, weights: Value, binary: bool) -> Value:
    vdims, wdims = ctx.dims(values), ctx.dims(weights)
    if size < 0:
        raise ctx.invalid_argument(f"size ({size}) must be non-negative")
    if len(vdims) not in (1, 2):
        raise ctx.invalid_argument(f"Shape must be at most rank 2 but is rank {len(vdims)}")
    weighted = int(np.prod(wdims)) > 0
    if weighted and wdims != vdims:
        raise ctx.invalid_argument(f"Input indices and weights must have the same shape: {list(vdims)} vs "
                                   f"{list(wdims)}")
    dtype = ctx.dtype(weights)
    out = ((vdims[0],) if len(vdims) == 2 else ()) + (size,)
    zeros = ctx.broadcast_in_dim(ctx.scalar(0, dtype), out, ())
    updates = weights if weighted and not binary else ctx.full(1, values, dtype)
    index = ctx.convert(values, P.S64)
    if len(vdims) == 2:  # (row, value) pairs
        rows = iota(ctx, P.S64, vdims, 0)
        index = ctx.b.concatenate(ctx.reshape(rows, vdims + (1,)), ctx.reshape(index, vdims + (1,)),
                                  dimensions=(2,))
    else:
        index = ctx.reshape(index, vdims + (1,))
    lead = len(vdims)
    return ctx.b.scatter(zeros, index, updates, update_window_dims=(), inserted_window_dims=tuple(range(len(out))),
                         scatter_dims_to_operand_dims=tuple(range(len(out))), index_vector_dim=lead,
                         to_apply=combiner(ctx, "replace" if binary else "add", dtype))


@register_lowering("DenseBincount", dtypes=_WEIGHT_TYPES | SIGNED_INTS, type_attrs=("Tidx", "T"),
                   const_inputs=(1,))
def dense_bincount(ctx: LoweringContext) -> Value:
    values, _, weights = ctx.inputs
    if ctx.dtype(values) not in (P.S32, P.S64) or ctx.dtype(weights) not in _WEIGHT_TYPES:
        raise ctx.error(f"DenseBincount of {ctx.dtype(values).name} values with {ctx.dtype(weights).name} "
                        "weights is not supported")
    (size,) = ctx.const_ints(1)
    return _bincount(ctx, values, size, weights, ctx.attr_bool("binary_output", False))


@register_lowering("Bincount", dtypes=_WEIGHT_TYPES, const_inputs=(1,))
def bincount(ctx: LoweringContext) -> Value:
    values, _, weights = ctx.inputs
    if len(ctx.dims(values)) != 1:
        # TF's Bincount takes any rank and counts all elements
        values = ctx.reshape(values, (int(np.prod(ctx.dims(values))),))
        if int(np.prod(ctx.dims(weights))):
            weights = ctx.reshape(weights, ctx.dims(values))
    (size,) = ctx.const_ints(1)
    return _bincount(ctx, values, size, weights, False)



