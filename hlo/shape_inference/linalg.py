"""Shape rules of dot and convolution.

dot: the result dims are the batch dims (in ``lhs_batch_dims`` order), then
the lhs free dims, then the rhs free dims, each in increasing order.
convolution: ``dim_labels`` places batch/feature/spatial dims; the output
batch is ``input_batch / batch_group_count``, the output feature count is
the kernel's output features, and spatial sizes follow the window formula.
Both take the element type of the declared result when one is given (XLA's
``preferred_element_type``), else the operands' common type.
"""

from __future__ import annotations

from hlo.attributes import ConvDimLabels, Window
from hlo.dtypes import PrimitiveType
from hlo.opcodes import Opcode
from hlo.shape_inference import ShapeContext, shape_rule
from hlo.shape_inference.common import array, expect_array, fail, int_list, operand, short, window_output_dims
from hlo.shapes import Shape

O = Opcode


def result_type(ctx: ShapeContext, lhs: Shape, rhs: Shape) -> PrimitiveType:
    """The declared element type if any (it may widen the operands'), else the operands' common type."""
    if ctx.declared is None:
        if lhs.dtype != rhs.dtype:
            raise fail(ctx, f"operands {short(lhs)} and {short(rhs)} have different element types; "
                            "the result type must be declared")
        return lhs.dtype
    want = expect_array(ctx, ctx.declared, "the result shape").dtype
    for x in (lhs, rhs):
        if want != x.dtype and not x.dtype.is_float and want.bit_width < x.dtype.bit_width:
            raise fail(ctx, f"result type {want} is narrower than operand type {x.dtype}")
    return want


def _check_dim_numbers(ctx: ShapeContext, side: str, shape: Shape, batch, contracting) -> None:
    for d in (*batch, *contracting):
        if not 0 <= d < shape.rank:
            raise fail(ctx, f"{side} dimension {d} is out of range for {short(shape)}")
    if len(set(batch) | set(contracting)) != len(batch) + len(contracting):
        raise fail(ctx, f"{side} batch dims {list(batch)} and contracting dims {list(contracting)} "
                        "repeat a dimension")


@shape_rule(O.DOT)
def dot(ctx: ShapeContext) -> Shape:
    lhs, rhs = operand(ctx, 0, "lhs"), operand(ctx, 1, "rhs")
    lb, rb = int_list(ctx, "lhs_batch_dims", ()), int_list(ctx, "rhs_batch_dims", ())
    lc, rc = int_list(ctx, "lhs_contracting_dims", ()), int_list(ctx, "rhs_contracting_dims", ())
    _check_dim_numbers(ctx, "lhs", lhs, lb, lc)
    _check_dim_numbers(ctx, "rhs", rhs, rb, rc)
    if len(lc) != len(rc):
        raise fail(ctx, f"lhs has {len(lc)} contracting dim(s) but rhs has {len(rc)}")
    for l, r in zip(lc, rc):
        if lhs.dims[l] != rhs.dims[r]:
            raise fail(ctx, f"lhs contracting dim {l} has size {lhs.dims[l]} but rhs contracting dim {r} "
                            f"has size {rhs.dims[r]}")
    if len(lb) != len(rb):
        raise fail(ctx, f"lhs has {len(lb)} batch dim(s) but rhs has {len(rb)}")
    for l, r in zip(lb, rb):
        if lhs.dims[l] != rhs.dims[r]:
            raise fail(ctx, f"lhs batch dim {l} has size {lhs.dims[l]} but rhs batch dim {r} has size {rhs.dims[r]}")
    dims = [lhs.dims[d] for d in lb]
    dims += [n for d, n in enumerate(lhs.dims) if d not in lb and d not in lc]
    dims += [n for d, n in enumerate(rhs.dims) if d not in rb and d not in rc]
    return array(result_type(ctx, lhs, rhs), dims)


def _check_labels(ctx: ShapeContext, labels: ConvDimLabels) -> None:
    rank = labels.num_spatial + 2
    sides = {
        "input": (labels.input_batch, labels.input_feature, *labels.input_spatial),
        "kernel": (labels.kernel_input_feature, labels.kernel_output_feature, *labels.kernel_spatial),
        "output": (labels.output_batch, labels.output_feature, *labels.output_spatial),
    }
    for side, dims in sides.items():
        if len(dims) != rank or sorted(dims) != list(range(rank)):
            raise fail(ctx, f"dim_labels: the {side} dims {list(dims)} are not a permutation of 0..{rank - 1}")


@shape_rule(O.CONVOLUTION)
def convolution(ctx: ShapeContext) -> Shape:
    lhs, rhs = operand(ctx, 0, "the input"), operand(ctx, 1, "the kernel")
    labels: ConvDimLabels = ctx.attr("dim_labels")
    window: Window = ctx.attr("window", Window())
    fgc, bgc = ctx.attr("feature_group_count", 1), ctx.attr("batch_group_count", 1)
    _check_labels(ctx, labels)
    n = labels.num_spatial
    for what, s in (("input", lhs), ("kernel", rhs)):
        if s.rank != n + 2:
            raise fail(ctx, f"the {what} {short(s)} must have rank {n + 2} for {n} spatial dimension(s)")
    if len(window.dims) != n:
        raise fail(ctx, f"window has {len(window.dims)} dimension(s) but there are {n} spatial dimension(s)")
    if fgc < 1 or bgc < 1:
        raise fail(ctx, f"feature_group_count ({fgc}) and batch_group_count ({bgc}) must be positive")
    if fgc > 1 and bgc > 1:
        raise fail(ctx, "feature_group_count and batch_group_count cannot both exceed 1")
    batch, features = lhs.dims[labels.input_batch], lhs.dims[labels.input_feature]
    k_in, k_out = rhs.dims[labels.kernel_input_feature], rhs.dims[labels.kernel_output_feature]
    if features % fgc or features // fgc != k_in:
        raise fail(ctx, f"input feature size {features} must equal kernel input feature size {k_in} times "
                        f"feature_group_count {fgc}")
    if k_out % fgc:
        raise fail(ctx, f"kernel output feature size {k_out} must be a multiple of feature_group_count {fgc}")
    if batch % bgc:
        raise fail(ctx, f"input batch size {batch} must be a multiple of batch_group_count {bgc}")
    if k_out % bgc:
        raise fail(ctx, f"kernel output feature size {k_out} must be a multiple of batch_group_count {bgc}")
    for i, (w, kd) in enumerate(zip(window.dims, labels.kernel_spatial)):
        if w.size != rhs.dims[kd]:
            raise fail(ctx, f"window size {w.size} of spatial dim {i} differs from the kernel's size {rhs.dims[kd]}")
    spatial = window_output_dims(ctx, window, [lhs.dims[d] for d in labels.input_spatial])
    dims = [0] * (n + 2)
    dims[labels.output_batch] = batch // bgc
    dims[labels.output_feature] = k_out
    for d, size in zip(labels.output_spatial, spatial):
        dims[d] = size
    return array(result_type(ctx, lhs, rhs), dims)
