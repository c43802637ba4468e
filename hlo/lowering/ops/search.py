"""Searching and small generators tf2xla lowers: LowerBound / UpperBound (``tf.searchsorted``), LinSpace,
and Cross (``tf.linalg.cross``).

- ``LowerBound(sorted_inputs [B, N], values [B, M])``: per row, the number of sorted inputs ``< v``
  (``UpperBound``: ``<= v``), as ``out_type``: a comparison of every pair, counted, which is the
  binary search's answer for sorted rows (TF requires them sorted; rows holding NaN are unspecified).
- ``LinSpace(start, stop, num)``: ``start + i * (stop - start) / (num - 1)``, the last one ``stop``,
  folded in the element type as TF's kernel computes it (``num`` and both ends compile-time constants).
- ``Cross(a, b)``: the cross product of the innermost 3-vectors.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from hlo.builder import Value
from hlo.dtypes import PrimitiveType as P
from hlo.lowering.context import LoweringContext
from hlo.lowering.ops._shape_util import concat, slice_axis
from hlo.lowering.registry import register_lowering
from hlo.lowering.tf_types import FLOATS, NUMERIC
from hlo.opcodes import Opcode


def _bound(direction: str) -> Callable[[LoweringContext], Value]:
    def lower(ctx: LoweringContext) -> Value:
        sorted_inputs, values = ctx.inputs
        sd, vd = ctx.dims(sorted_inputs), ctx.dims(values)
        if len(sd) != 2 or len(vd) != 2 or sd[0] != vd[0]:
            raise ctx.invalid_argument(f"sorted_inputs and values must be matrices with the same number of rows, got "
                                       f"{list(sd)} and {list(vd)}")
        (rows, n), m = sd, vd[1]
        grid = (rows, m, n)
        s = ctx.broadcast_in_dim(sorted_inputs, grid, (0, 2))
        v = ctx.broadcast_in_dim(values, grid, (0, 1))
        hit = ctx.convert(ctx.compare(s, v, direction), P.S64)
        return ctx.convert(ctx.reduce(hit, (2,), Opcode.ADD, 0), ctx.dtype_attr("out_type"))
    return lower


register_lowering("LowerBound", dtypes=NUMERIC)(_bound("LT"))
register_lowering("UpperBound", dtypes=NUMERIC)(_bound("LE"))


@register_lowering("LinSpace", dtypes=FLOATS, const_inputs=(0, 1, 2))
def lin_space(ctx: LoweringContext) -> Value:
    dtype = ctx.dtype_attr("T")
    start, stop = (np.asarray(ctx.const_input(i)).astype(dtype.numpy) for i in (0, 1))
    (num,) = ctx.const_ints(2)
    if start.ndim or stop.ndim:
        raise ctx.invalid_argument("start and stop must be scalars")
    if num <= 0:
        raise ctx.invalid_argument(f"Requires num > 0: {num}")
    if num == 1:
        return ctx.constant(np.array([start]), dtype)
    step = (stop - start) / dtype.numpy.type(num - 1)
    values = np.array([start + dtype.numpy.type(i) * step for i in range(num - 1)] + [stop], dtype.numpy)
    return ctx.constant(values, dtype)


@register_lowering("Cross", dtypes=NUMERIC)
def cross(ctx: LoweringContext) -> Value:
    a, c = ctx.inputs
    dims = ctx.dims(a)
    if not dims or dims[-1] != 3 or ctx.dims(c) != dims:
        raise ctx.invalid_argument(f"inputs must be the same shape with an innermost dimension of 3, got "
                                   f"{list(dims)} and {list(ctx.dims(c))}")
    axis = len(dims) - 1
    x = [slice_axis(ctx, a, axis, i, i + 1) for i in range(3)]
    y = [slice_axis(ctx, c, axis, i, i + 1) for i in range(3)]
    b = ctx.b

    def term(i: int, j: int) -> Value:
        return b.subtract(b.multiply(x[i], y[j]), b.multiply(x[j], y[i]))
    return concat(ctx, [term(1, 2), term(2, 0), term(0, 1)], axis)
