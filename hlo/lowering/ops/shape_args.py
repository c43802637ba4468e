"""Shape arithmetic that gradients emit, folded at compile time: InvertPermutation (the gradient of a
Transpose with a computed permutation, Keras ``TimeDistributed`` and ``STFTSpectrogram``),
BroadcastArgs (``tf.broadcast_to`` of a computed shape, ``tf.broadcast_dynamic_shape``) and
ConcatOffset (the gradient of ConcatV2: where each input starts in the result).

Their inputs are shapes, compile-time constants, so each rule computes its result in NumPy with TF's
kernel's checks and messages and returns a constant of the op's index type (InvertPermutation also
takes a run-time permutation).
"""

from __future__ import annotations

import numpy as np

from hlo.builder import Value
from hlo.lowering.context import LoweringContext
from hlo.lowering.errors import LoweringError
from hlo.lowering.ops._shape_util import combiner, iota
from hlo.lowering.ops._reduce_util import INDEX_TYPES
from hlo.lowering.registry import register_lowering


@register_lowering("InvertPermutation", dtypes=INDEX_TYPES)
def invert_permutation(ctx: LoweringContext) -> Value:
    """Folded with TF's checks when the permutation is a constant; else ``out[perm[i]] = i``, a scatter
    (a run-time permutation that is not one gives what the scatter leaves, as in tf2xla)."""
    (x,) = ctx.inputs
    if len(ctx.dims(x)) != 1:
        raise ctx.invalid_argument(f"invert_permutation expects a 1D vector, got shape {list(ctx.dims(x))}")
    try:
        perm = ctx.const_ints(0)
    except LoweringError:
        (n,) = ctx.dims(x)
        zeros = ctx.full(0, x)
        return ctx.b.scatter(zeros, ctx.reshape(x, (n, 1)), iota(ctx, ctx.dtype(x), (n,), 0), update_window_dims=(),
                             inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,), index_vector_dim=1,
                             to_apply=combiner(ctx, "replace", ctx.dtype(x)))
    inverse = [-1] * len(perm)
    for i, d in enumerate(perm):
        if not 0 <= d < len(perm):
            raise ctx.invalid_argument(f"{d} is not between 0 and {len(perm)}")
        if inverse[d] != -1:
            raise ctx.invalid_argument(f"{d} is duplicated in the input.")
        inverse[d] = i
    return ctx.constant(np.array(inverse, np.int64), ctx.dtype_attr("T"))


@register_lowering("BroadcastArgs", dtypes=INDEX_TYPES, const_inputs=(0, 1))
def broadcast_args(ctx: LoweringContext) -> Value:
    s0, s1 = ctx.const_ints(0), ctx.const_ints(1)
    rank = max(len(s0), len(s1))
    a, b = [1] * (rank - len(s0)) + s0, [1] * (rank - len(s1)) + s1
    out = []
    for x, y in zip(a, b):
        if x != y and 1 not in (x, y):
            raise ctx.invalid_argument(f"Incompatible shapes: [{','.join(map(str, s0))}] vs. "
                                       f"[{','.join(map(str, s1))}]")
        out.append(y if x == 1 else x)
    return ctx.constant(np.array(out, np.int64), ctx.dtype_attr("T"))


@register_lowering("ConcatOffset", dtypes=None, const_inputs=(0, 1, -1))  # the middle shapes are asked for too
def concat_offset(ctx: LoweringContext) -> list[Value]:
    """``ConcatOffset(concat_dim, shape_0, ..., shape_{N-1})``: output ``i`` is zeros but the sum of the
    earlier shapes' ``concat_dim`` entries at ``concat_dim``."""
    (axis,) = ctx.const_ints(0)
    shapes = [ctx.const_ints(i) for i in range(1, len(ctx.inputs))]
    rank = len(shapes[0])
    if not -rank <= axis < rank:
        raise ctx.invalid_argument(f"Concat dim is out of range: {axis} vs. {rank}")
    axis %= rank
    dtype = ctx.dtype(ctx.inputs[1])
    out, offset = [], 0
    for i, s in enumerate(shapes):
        if len(s) != rank:
            raise ctx.invalid_argument(f"input {i} should contain {rank} elements, but got {len(s)}")
        if any(s[d] != shapes[0][d] for d in range(rank) if d != axis):
            raise ctx.invalid_argument(f"All dimensions except {axis} must match. Input {i} has shape "
                                       f"[{' '.join(map(str, s))}] and doesn't match input 0 with shape "
                                       f"[{' '.join(map(str, shapes[0]))}].")
        row = [0] * rank
        row[axis] = offset
        offset += s[axis]
        out.append(ctx.constant(np.array(row, np.int64), dtype))
    return out
