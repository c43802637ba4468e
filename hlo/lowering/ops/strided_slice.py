"""StridedSlice with TF's full spec: begin/end/strides constants and all five masks.

TF first turns the sparse spec (one entry per begin/end/strides element) into
a dense one (one entry per input dim): an ellipsis entry expands to the full
range of the dims it covers (an ellipsis is appended when none is given),
new-axis entries consume no input dim. Then per dim: shrink takes one index
(negative counts from the end; the begin mask and the sign of the stride are
not used, a non-positive stride is an error); otherwise masked bounds become
the full range in the stride's direction and given bounds are clamped to
``[0, n]`` (``[-1, n-1]`` for negative strides). The lowering slices with
positive strides (reversing dims first where the stride is negative) and
reshapes to insert new axes and drop shrunk ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from hlo.builder import Value
from hlo.lowering.context import LoweringContext
from hlo.lowering.ops._shape_util import reverse, slice_dims
from hlo.lowering.registry import register_lowering
from hlo.lowering.tf_types import ALL

NEW_AXIS = -1  # a final-shape entry that is an inserted size-1 axis
# One input dim of the dense spec: (begin, end, stride, begin_masked, end_masked, shrink).
_DenseDim = tuple[int, int, int, bool, bool, bool]


@dataclass
class DimSlice:
    """One input dim's slice: ``begin`` up to (not including) ``end`` by ``stride``, all canonical."""

    begin: int
    end: int
    stride: int
    shrink: bool

    def size(self) -> int:
        if self.shrink:
            return 1
        span = self.end - self.begin
        if span == 0 or (span < 0) != (self.stride < 0):
            return 0
        return -(-span // self.stride) if self.stride > 0 else -(-(-span) // -self.stride)


def _dense(ctx: LoweringContext, rank: int, begin: Sequence[int], end: Sequence[int], strides: Sequence[int],
           masks: dict[str, int]) -> tuple[list[_DenseDim], list[int]]:
    """Expand the sparse spec: per input dim (begin, end, stride, begin_masked, end_masked, shrink), and the
    final shape as a list of input dims (``NEW_AXIS`` for inserted axes; shrunk dims left out)."""
    n = len(begin)
    ellipsis, new_axis = masks["ellipsis_mask"], masks["new_axis_mask"]
    if bin(ellipsis & ((1 << n) - 1)).count("1") > 1:
        raise ctx.error("multiple ellipses in slice spec not allowed")
    entries = list(range(n))
    if not ellipsis & ((1 << n) - 1):
        ellipsis |= 1 << n  # an implicit trailing ellipsis
        entries.append(n)
    dense: list[_DenseDim] = []
    final: list[int] = []
    for i in entries:
        bit = 1 << i
        if ellipsis & bit:
            later_new = sum(1 for j in range(i + 1, n) if new_axis & (1 << j))
            stop = min(rank - (n - i) + 1 + later_new, rank)
            for _ in range(len(dense), stop):
                final.append(len(dense))
                dense.append((0, 0, 1, True, True, False))
        elif new_axis & bit:
            final.append(NEW_AXIS)
        else:
            if len(dense) == rank:
                raise ctx.error(f"index out of range using input dim {len(dense)}; input has only {rank} dims")
            shrink = bool(masks["shrink_axis_mask"] & bit)
            if not shrink:
                final.append(len(dense))
            dense.append((begin[i], end[i], strides[i], bool(masks["begin_mask"] & bit),
                          bool(masks["end_mask"] & bit), shrink))
    return dense, final


def _canonical(ctx: LoweringContext, axis: int, n: int, spec: _DenseDim) -> DimSlice:
    begin, end, stride, begin_masked, end_masked, shrink = spec
    if stride == 0:
        raise ctx.error(f"strides[{axis}] must be non-zero")
    if shrink:
        if stride <= 0:
            raise ctx.error("only stride 1 allowed on non-range indexing")
        index = begin + n if begin < 0 else begin
        if not 0 <= index < n:
            raise ctx.error(f"slice index {begin} of dimension {axis} out of bounds")
        return DimSlice(index, index + 1, 1, True)
    lo, hi = (0, n) if stride > 0 else (-1, n - 1)

    def bound(x: int, masked: bool, is_end: bool) -> int:
        if masked:
            return (hi if is_end else lo) if stride > 0 else (lo if is_end else hi)
        x = x + n if x < 0 else x
        return min(max(x, lo), hi)
    return DimSlice(bound(begin, begin_masked, False), bound(end, end_masked, True), stride, False)


def slice_spec(ctx: LoweringContext, dims: Sequence[int], first: int) -> tuple[list[DimSlice], list[int]]:
    """The per-dim slices and final shape of a strided slice of ``dims`` whose constant begin, end and
    strides are inputs ``first``.. ``first + 2`` (StridedSlice and StridedSliceGrad share this)."""
    begin, end, strides = ctx.const_ints(first), ctx.const_ints(first + 1), ctx.const_ints(first + 2)
    if not len(begin) == len(end) == len(strides):
        raise ctx.error(f"begin, end and strides must have the same length, got {len(begin)}, {len(end)}, "
                        f"{len(strides)}")
    masks = {k: ctx.attr_int(k, 0) for k in ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask",
                                         "shrink_axis_mask")}
    dense, final = _dense(ctx, len(dims), begin, end, strides, masks)
    return [_canonical(ctx, i, n, spec) for i, (n, spec) in enumerate(zip(dims, dense))], final


@register_lowering("StridedSlice", dtypes=ALL, const_inputs=(1, 2, 3))
def strided_slice(ctx: LoweringContext) -> Value:
    x = ctx.inputs[0]
    dims = ctx.dims(x)
    slices, final = slice_spec(ctx, dims, first=1)
    flipped = [i for i, s in enumerate(slices) if s.stride < 0]
    x = reverse(ctx, x, flipped)
    starts, limits, steps = [], [], []
    for i, (s, n) in enumerate(zip(slices, dims)):
        size = s.size()
        # In reversed coordinates index j maps to n - 1 - j.
        start = (n - 1 - s.begin) if s.stride < 0 else s.begin
        step = abs(s.stride)
        start = min(start, n) if size else 0
        starts.append(start)
        limits.append(start + (size - 1) * step + 1 if size else 0)
        steps.append(step)
    x = slice_dims(ctx, x, starts, limits, steps)
    sizes = [s.size() for s in slices]
    return ctx.reshape(x, [1 if d == NEW_AXIS else sizes[d] for d in final])
