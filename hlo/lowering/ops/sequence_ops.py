"""Reversals and a log-space scan: Reverse (v1: a bool per dim), ReverseSequence (``tf.reverse_sequence``,
bidirectional RNNs over padded batches) and CumulativeLogsumexp (``tf.math.cumulative_logsumexp``).

- ReverseSequence(input, seq_lengths; seq_dim, batch_dim): along ``seq_dim``, batch entry ``b`` reverses
  its first ``seq_lengths[b]`` elements and keeps the rest: a gather (batched over ``batch_dim``) of index
  ``L - 1 - i`` where ``i < L``, else ``i``. TF fails on a length above the dim; here such a length
  reads clamped indices (XLA's gather), and a length known at compile time is checked with TF's message.
- CumulativeLogsumexp(x, axis; exclusive, reverse): the scan of Cumsum (a reduce-window over the whole
  axis, ``scan_sort.py``) with TF's combiner ``m = max(a, b)``: ``m`` where ``m`` is below the type's
  lowest value (``-inf``), else ``log1p(exp(min(a, b) - m)) + m``; its identity ``-inf``.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from hlo.attributes import ComparisonDirection
from hlo.builder import ComputationBuilder, Value
from hlo.dtypes import PrimitiveType as P
from hlo.lowering.context import LoweringContext
from hlo.lowering.errors import LoweringError
from hlo.lowering.ops._shape_util import const_axis, iota, reverse
from hlo.lowering.ops.scan_sort import scan
from hlo.lowering.registry import register_lowering
from hlo.lowering.tf_types import ALL
from hlo.shapes import scalar


@register_lowering("Reverse", dtypes=ALL, const_inputs=(1,))
def reverse_v1(ctx: LoweringContext) -> Value:
    x = ctx.inputs[0]
    rank = len(ctx.dims(x))
    flags = [bool(v) for v in np.asarray(ctx.const_input(1)).reshape(-1)]
    if len(flags) != rank:
        raise ctx.invalid_argument(f"'dims' must have the same number of values as 'input' has dimensions. "
                                   f"'input' has {rank}'dims' has {len(flags)} values")
    return reverse(ctx, x, [d for d, f in enumerate(flags) if f])


def _check_lengths(ctx: LoweringContext, n: int) -> None:
    try:
        lengths = np.asarray(ctx.const_input(1)).reshape(-1)
    except LoweringError:
        return
    for b, v in enumerate(lengths):
        if v < 0 or v > n:
            raise ctx.invalid_argument(f"seq_lens(b) < 0 or seq_lens(b) > input.dims(seq_dim) for b = {b}, got "
                                       f"{int(v)} with input.dims(seq_dim) = {n}")


@register_lowering("ReverseSequence", dtypes=ALL)
def reverse_sequence(ctx: LoweringContext) -> Value:
    x, lengths = ctx.inputs
    dims = ctx.dims(x)
    seq, batch = ctx.attr_int("seq_dim"), ctx.attr_int("batch_dim", 0)
    seq, batch = (seq + len(dims) if seq < 0 else seq), (batch + len(dims) if batch < 0 else batch)
    if seq == batch or not (0 <= seq < len(dims) and 0 <= batch < len(dims)):
        raise ctx.invalid_argument(f"seq_dim ({ctx.attr_int('seq_dim')}) and batch_dim ({ctx.attr_int('batch_dim', 0)}) "
                                   f"must be different dims of the input of rank {len(dims)}")
    if ctx.dims(lengths) != (dims[batch],):
        raise ctx.invalid_argument(f"Length of seq_lengths != input.dims({batch}), ({ctx.dims(lengths)} vs. "
                                   f"{dims[batch]})")
    n = dims[seq]
    _check_lengths(ctx, n)
    b = ctx.b
    idx_dims = (dims[batch], n)
    i = iota(ctx, P.S32, idx_dims, 1)
    length = ctx.broadcast_in_dim(ctx.convert(lengths, P.S32), idx_dims, (0,))
    flipped = b.subtract(b.subtract(length, ctx.full(1, length)), i)
    index = ctx.select(ctx.compare(i, length, "LT"), flipped, i)
    sizes = tuple(1 if d in (seq, batch) else v for d, v in enumerate(dims))
    offset = tuple(d for d in range(len(dims)) if d not in (seq, batch))
    # gather result dims: the index dims (batch, seq) first, then the offset dims in order
    out = b.gather(x, ctx.reshape(index, (*idx_dims, 1)), offset_dims=tuple(range(2, len(dims))),
                   collapsed_slice_dims=(seq,), start_index_map=(seq,), operand_batching_dims=(batch,),
                   start_indices_batching_dims=(0,), index_vector_dim=2, slice_sizes=sizes)
    order = [batch, seq, *offset]  # result dim k is input dim order[k]
    perm = tuple(order.index(d) for d in range(len(dims)))
    return b.transpose(out, dimensions=perm) if perm != tuple(range(len(dims))) else out


def _log_add_exp(dtype: P) -> Callable[[ComputationBuilder], Value]:
    def build(cb: ComputationBuilder) -> Value:
        a, c = cb.parameter(scalar(dtype), name="a"), cb.parameter(scalar(dtype), name="b")
        lo, hi = cb.minimum(a, c), cb.maximum(a, c)
        lowest = cb.constant(np.finfo(dtype.numpy).min, dtype)
        value = cb.add(cb.log_plus_one(cb.exponential(cb.subtract(lo, hi))), hi)
        below = cb.compare(hi, lowest, direction=ComparisonDirection.LT)
        return cb.select(below, hi, value)
    return build


@register_lowering("CumulativeLogsumexp", dtypes=frozenset({P.F32, P.F64}), const_inputs=(1,))
def cumulative_logsumexp(ctx: LoweringContext) -> Value:
    x = ctx.inputs[0]
    if not ctx.dims(x):
        raise ctx.invalid_argument("ScanOp: Expected scan axis in the range [0, 0), but got 0")
    dtype = ctx.dtype(x)
    combine = ctx.computation(f"log_add_exp_{dtype.value}", _log_add_exp(dtype))
    return scan(ctx, x, const_axis(ctx, 1, len(ctx.dims(x))), combine, -np.inf)

