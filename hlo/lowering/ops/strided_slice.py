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

A run-time ``begin`` (or ``end``; Keras ``RandomCrop`` slices at a random offset) is lowered as XLA
does, as a ``dynamic-slice`` with static sizes (strides must be 1, except on a dim with both masks, which
is then walked with its stride): a shrunk dim takes size 1, a dim
with both masks its full range, and any other dim the size recorded in the node's ``_output_shapes``
(``graph_passes/fold_shapes.py`` writes it where ``end = begin + c``: size ``c``). A negative begin
counts from the end; the start is then clamped so the slice fits (``dynamic-slice``), where TF's
kernel would return a shorter slice (a slice past the end) or fail (a shrunk index out of range).
``StridedSliceGrad`` with a run-time begin is the matching ``dynamic-update-slice`` of ``dy`` into
zeros (``runtime_starts`` is shared).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from hlo.builder import Value
from hlo.dtypes import PrimitiveType as P
from hlo.lowering.context import LoweringContext
from hlo.lowering.ops._shape_util import reverse, slice_axis, slice_dims
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
    dense, final = _dense(ctx, len(dims), begin, end, strides, _masks(ctx))
    return [_canonical(ctx, i, n, spec) for i, (n, spec) in enumerate(zip(dims, dense))], final


def _masks(ctx: LoweringContext) -> dict[str, int]:
    return {k: ctx.attr_int(k, 0) for k in ("begin_mask", "end_mask", "ellipsis_mask", "new_axis_mask",
                                            "shrink_axis_mask")}


def is_runtime(ctx: LoweringContext, first: int) -> bool:
    """Whether the begin or end (inputs ``first``, ``first + 1``) is known only at run time."""
    return not all(ctx._lowering.is_constant(ctx.inputs[i]) for i in (first, first + 1))


def _annotated(ctx: LoweringContext) -> list[int] | None:
    """The output dims recorded in ``_output_shapes`` (-1: not known), or None."""
    if not ctx.has_attr("_output_shapes") or not ctx.node.attr["_output_shapes"].list.shape:
        return None
    return [int(d.size) for d in ctx.node.attr["_output_shapes"].list.shape[0].dim]


@dataclass
class RuntimeSlice:
    """A strided slice with a run-time begin, per input dim: the s32 ``starts`` and ``sizes`` of its
    ``dynamic-slice`` window, then the ``steps`` taken through the window (1, or a fully masked dim's
    stride: negative walks it from the end); ``final`` as ``slice_spec`` gives it."""

    starts: list[Value]
    sizes: list[int]
    steps: list[int]
    final: list[int]

    def out_sizes(self) -> list[int]:
        return [-(-n // abs(k)) for n, k in zip(self.sizes, self.steps)]


def runtime_starts(ctx: LoweringContext, dims: Sequence[int], first: int,
                   out_dims: Sequence[int] | None) -> RuntimeSlice:
    """The ``RuntimeSlice`` of ``dims`` whose begin (input ``first``) is a run-time value and strides
    (input ``first + 2``) are constant. ``out_dims``: the output's dims where known (-1: not; None: none
    known), giving the size of a dim that is neither shrunk nor fully masked (its stride must be 1)."""
    strides = ctx.const_ints(first + 2)
    n = len(strides)
    if len(ctx.dims(ctx.inputs[first])) != 1 or ctx.dims(ctx.inputs[first])[0] != n:
        raise ctx.error(f"begin must be a vector of {n} entries (one per stride), got "
                        f"{list(ctx.dims(ctx.inputs[first]))}")
    # with begin = [0, 1, ...] the dense spec's begin is the sparse entry each input dim reads
    dense, final = _dense(ctx, len(dims), list(range(n)), [0] * n, strides, _masks(ctx))
    known = list(out_dims) if out_dims is not None and len(out_dims) == len(final) else [-1] * len(final)
    begin = ctx.convert(ctx.inputs[first], P.S32)
    zero = ctx.scalar(0, P.S32)
    out = RuntimeSlice([], [], [], final)
    for axis, ((entry, _, stride, begin_masked, end_masked, shrink), d) in enumerate(zip(dense, dims)):
        if stride == 0:
            raise ctx.error(f"strides[{axis}] must be non-zero")
        full = begin_masked and end_masked and not shrink
        if stride != 1 and not full:
            raise ctx.error(f"a strided slice with a run-time begin needs stride 1, got {stride} in dim {axis}")
        if shrink:
            size = 1
        elif full:
            size = d
        else:
            size = known[final.index(axis)]
            if not 0 <= size <= d:
                raise ctx.error(f"a strided slice with a run-time begin needs a static slice size in dim {axis} "
                                f"(end = begin + a constant), got {'unknown' if size < 0 else size} of {d}")
        out.sizes.append(size)
        out.steps.append(stride if full else 1)
        if begin_masked and not shrink:
            out.starts.append(zero)
            continue
        b = ctx.reshape(slice_axis(ctx, begin, 0, entry, entry + 1), ())
        out.starts.append(ctx.select(ctx.compare(b, zero, "LT"), ctx.b.add(b, ctx.scalar(d, P.S32)), b))
    return out


def _dynamic_strided_slice(ctx: LoweringContext) -> Value:
    x = ctx.inputs[0]
    dims = ctx.dims(x)
    spec = runtime_starts(ctx, dims, 1, _annotated(ctx))
    if spec.sizes != list(dims):
        x = ctx.b.dynamic_slice(x, *spec.starts, dynamic_slice_sizes=tuple(spec.sizes))
    x = reverse(ctx, x, [i for i, k in enumerate(spec.steps) if k < 0])
    x = slice_dims(ctx, x, [0] * len(dims), spec.sizes, [abs(k) for k in spec.steps])
    sizes = spec.out_sizes()
    return ctx.reshape(x, [1 if d == NEW_AXIS else sizes[d] for d in spec.final])


@register_lowering("StridedSlice", dtypes=ALL, const_inputs=(3,))
def strided_slice(ctx: LoweringContext) -> Value:
    if is_runtime(ctx, 1):
        return _dynamic_strided_slice(ctx)
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
