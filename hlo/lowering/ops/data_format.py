"""Data-format index ops that layout rewrites emit (Grappler's layout optimizer, ``tf.nn`` with
``data_format`` conversions): DataFormatVecPermute and DataFormatDimMap, as TF's kernels define them.

- DataFormatVecPermute(x; src_format, dst_format): ``x`` holds one entry (or one row of 2, a ``[4, 2]``
  paddings tensor) per dim in ``src_format`` order; the result holds them in ``dst_format`` order. A
  vector of ``len(format) - 2`` entries holds the spatial dims only (the formats without ``N`` and ``C``).
- DataFormatDimMap(x; src_format, dst_format): each element ``x`` (in ``[-n, n)``) names dim
  ``src_format[x mod n]``; the result is that dim's index in ``dst_format``.
"""

from __future__ import annotations

from hlo.builder import Value
from hlo.lowering.context import LoweringContext
from hlo.lowering.ops._shape_util import concat, slice_axis
from hlo.lowering.ops._reduce_util import INDEX_TYPES
from hlo.lowering.registry import register_lowering


def _formats(ctx: LoweringContext) -> tuple[str, str]:
    src, dst = ctx.attr_str("src_format", "NHWC"), ctx.attr_str("dst_format", "NCHW")
    if sorted(src) != sorted(dst) or len(set(src)) != len(src):
        raise ctx.invalid_argument(f"Destination and source format must determine a permutation, got {src} and {dst}")
    return src, dst


@register_lowering("DataFormatVecPermute", dtypes=INDEX_TYPES)
def data_format_vec_permute(ctx: LoweringContext) -> Value:
    (x,) = ctx.inputs
    src, dst = _formats(ctx)
    dims = ctx.dims(x)
    if len(dims) not in (1, 2) or (len(dims) == 2 and dims[1] != 2):
        raise ctx.invalid_argument(f"input must be a vector or 2D tensor, and the second dimension of a 2D tensor "
                                   f"must be 2, but got shape {list(dims)}")
    if dims[0] == len(src) - 2:  # spatial dims only
        src, dst = ("".join(c for c in f if c not in "NC") for f in (src, dst))
    if dims[0] != len(src):
        raise ctx.invalid_argument(f"First dimension of input must be of size {len(src)} or {len(src) - 2}, "
                                   f"but got shape {list(dims)}")
    rows = [slice_axis(ctx, x, 0, src.index(c), src.index(c) + 1) for c in dst]
    return concat(ctx, rows, 0)


@register_lowering("DataFormatDimMap", dtypes=INDEX_TYPES)
def data_format_dim_map(ctx: LoweringContext) -> Value:
    (x,) = ctx.inputs
    src, dst = _formats(ctx)
    n = len(src)
    b = ctx.b
    wrapped = b.remainder(b.add(b.remainder(x, ctx.full(n, x)), ctx.full(n, x)), ctx.full(n, x))  # x mod n
    out = ctx.full(dst.index(src[-1]), x)
    for i in range(n - 2, -1, -1):
        out = ctx.select(ctx.compare(wrapped, ctx.full(i, x), "EQ"), ctx.full(dst.index(src[i]), x), out)
    return out
