"""Matrix diagonals, one diagonal at a time: MatrixDiagPart/V2/V3 (Keras ``MeanIoU``,
``tf.linalg.diag_part``), MatrixDiag/V2/V3 (``tf.linalg.diag``, Keras ``CTC``), MatrixSetDiag/V2/V3
(``tf.linalg.set_diag``), the tensor diagonals Diag/DiagPart (``tf.linalg.tensor_diag``), and Empty.

Diagonal ``k`` of ``[..., M, N]`` (``k > 0`` above the main one) holds ``L = min(M + min(k, 0),
N - max(k, 0))`` elements; in the row-major flattening of a matrix they sit at ``start + i * (N + 1)``
with ``start = k`` (``k >= 0``) or ``-k * N``. So a diagonal part is one strided slice of the
flattened matrices, and a diagonal matrix is the diagonal padded (interior ``N``) with
``padding_value`` and reshaped: no arithmetic, exact. ``k`` (and ``num_rows``/``num_cols``) are
compile-time constants; a band of several diagonals (``k = [lo, hi]`` with ``lo < hi``) is refused.
A set diagonal is the diagonal placed so (padded with zeros) and selected where a mask placed the
same way (``true`` padded with ``false``) is set. ``Diag`` of ``[d1, ..., dk]`` is the flattened
``P = d1 ... dk`` values padded with interior ``P`` and reshaped to ``[d1, ..., dk, d1, ..., dk]``;
``DiagPart`` is the inverse strided slice (step ``P + 1``).
``Empty`` (uninitialized memory in TF) gives zeros.
"""

from __future__ import annotations

from hlo.attributes import PadDim
from hlo.builder import Value
from hlo.dtypes import PrimitiveType as P
from hlo.lowering.context import LoweringContext
from hlo.lowering.ops._shape_util import slice_dims
from hlo.lowering.registry import register_lowering
from hlo.lowering.tf_types import ALL


def _single_k(ctx: LoweringContext, i: int | None) -> int:
    if i is None:
        return 0
    ks = ctx.const_ints(i)
    if not 1 <= len(ks) <= 2 or (len(ks) == 2 and ks[0] != ks[1]):
        raise ctx.error(f"only a single diagonal is supported, got k = {ks}")
    return ks[0]


def _length(m: int, n: int, k: int) -> int:
    return max(0, min(m + min(k, 0), n - max(k, 0)))


def _start(n: int, k: int) -> int:
    return k if k >= 0 else -k * n


def _diag_part(ctx: LoweringContext, k_input: int | None) -> Value:
    x = ctx.inputs[0]
    dims = ctx.dims(x)
    if len(dims) < 2:
        raise ctx.invalid_argument(f"input must be at least 2-dim, received shape: {list(dims)}")
    *batch, m, n = dims
    k = _single_k(ctx, k_input)
    if not -m < k < n and (m or n):
        raise ctx.invalid_argument(f"k must be in (-{m}, {n}), got {k}")
    length = _length(m, n, k)
    flat = ctx.reshape(x, (*batch, m * n))
    if length == 0:
        return ctx.broadcast_in_dim(ctx.scalar(0, ctx.dtype(x)), (*batch, 0), ())
    start = _start(n, k)
    r = len(batch)
    return slice_dims(ctx, flat, [0] * r + [start], list(batch) + [start + (length - 1) * (n + 1) + 1],
                      [1] * r + [n + 1])


def _diag(ctx: LoweringContext, k_input: int | None, rows_input: int | None, cols_input: int | None,
          padding: Value | None) -> Value:
    d = ctx.inputs[0]
    dims = ctx.dims(d)
    if not dims:
        raise ctx.invalid_argument("diagonal must be at least 1-dim")
    *batch, length = dims
    k = _single_k(ctx, k_input)
    m = ctx.const_ints(rows_input)[0] if rows_input is not None else -1
    n = ctx.const_ints(cols_input)[0] if cols_input is not None else -1
    least_m, least_n = length + max(-k, 0), length + max(k, 0)  # TF: both unknown gives a square matrix
    if m == -1 and n == -1:
        m = n = max(least_m, least_n)
    m, n = (least_m if m == -1 else m), (least_n if n == -1 else n)
    if _length(m, n, k) != length:
        raise ctx.invalid_argument(f"a diagonal of {length} elements does not fit diagonal {k} of a {m}x{n} matrix")
    value = padding if padding is not None else ctx.scalar(0, ctx.dtype(d))
    if ctx.dims(value):
        raise ctx.invalid_argument(f"padding_value must be a scalar, got shape {list(ctx.dims(value))}")
    return _place(ctx, d, value, m, n, k)


def _place(ctx: LoweringContext, d: Value, value: Value, m: int, n: int, k: int) -> Value:
    """``[..., m, n]`` matrices holding the diagonals ``d`` ``[..., L]`` at ``k``, ``value`` elsewhere."""
    *batch, length = ctx.dims(d)
    start = _start(n, k)
    tail = m * n - (start + (length - 1) * (n + 1) + 1) if length else m * n - start
    config = tuple(PadDim(0, 0, 0) for _ in batch) + (PadDim(start, tail, n if length else 0),)
    flat = ctx.b.pad(d, value, padding=config)
    return ctx.reshape(flat, (*batch, m, n))


def _set_diag(ctx: LoweringContext, k_input: int | None) -> Value:
    x, d = ctx.inputs[0], ctx.inputs[1]
    dims = ctx.dims(x)
    if len(dims) < 2:
        raise ctx.invalid_argument(f"input must be at least a matrix, received shape: {list(dims)}")
    *batch, m, n = dims
    k = _single_k(ctx, k_input)
    want = (*batch, _length(m, n, k))
    if ctx.dims(d) != want:
        raise ctx.invalid_argument(f"diagonal must have shape {list(want)} for diagonal {k} of input "
                                   f"{list(dims)}, got {list(ctx.dims(d))}")
    placed = _place(ctx, d, ctx.scalar(0, ctx.dtype(x)), m, n, k)
    mask = _place(ctx, ctx.broadcast_in_dim(ctx.scalar(True, P.PRED), want, ()), ctx.scalar(False, P.PRED), m, n, k)
    return ctx.select(mask, placed, x)


@register_lowering("MatrixSetDiag", dtypes=ALL)
def matrix_set_diag(ctx: LoweringContext) -> Value:
    return _set_diag(ctx, None)


@register_lowering("MatrixSetDiagV2", "MatrixSetDiagV3", dtypes=ALL, const_inputs=(2,))
def matrix_set_diag_v3(ctx: LoweringContext) -> Value:
    return _set_diag(ctx, 2)


@register_lowering("Diag", dtypes=ALL)
def diag(ctx: LoweringContext) -> Value:
    (d,) = ctx.inputs
    dims = ctx.dims(d)
    if not dims:
        raise ctx.invalid_argument("Input must be at least rank 1, got 0")
    size = 1
    for v in dims:
        size *= v
    flat = ctx.reshape(d, (size,))
    if size:
        flat = ctx.b.pad(flat, ctx.scalar(0, ctx.dtype(d)), padding=(PadDim(0, 0, size),))
    return ctx.reshape(flat, (*dims, *dims))


@register_lowering("DiagPart", dtypes=ALL)
def diag_part(ctx: LoweringContext) -> Value:
    (x,) = ctx.inputs
    dims = ctx.dims(x)
    half = len(dims) // 2
    shape = "[" + ",".join(map(str, dims)) + "]"
    if not dims or len(dims) % 2:
        raise ctx.invalid_argument(f"The rank of the tensor should be even and positive, got shape {shape}")
    for i in range(half):
        if dims[i] != dims[i + half]:
            raise ctx.invalid_argument(f"Invalid shape {shape}: dimensions {i} and {i + half} do not match.")
    size = 1
    for v in dims[:half]:
        size *= v
    flat = ctx.reshape(x, (size * size,))
    part = slice_dims(ctx, flat, [0], [size * size], [size + 1]) if size else flat
    return ctx.reshape(part, dims[:half])


@register_lowering("MatrixDiagPart", dtypes=ALL)
def matrix_diag_part(ctx: LoweringContext) -> Value:
    return _diag_part(ctx, None)


@register_lowering("MatrixDiagPartV2", "MatrixDiagPartV3", dtypes=ALL, const_inputs=(1,))
def matrix_diag_part_v3(ctx: LoweringContext) -> Value:
    return _diag_part(ctx, 1)  # padding_value fills only the shorter diagonals of a band


@register_lowering("MatrixDiag", dtypes=ALL)
def matrix_diag(ctx: LoweringContext) -> Value:
    return _diag(ctx, None, None, None, None)


@register_lowering("MatrixDiagV2", "MatrixDiagV3", dtypes=ALL, const_inputs=(1, 2, 3))
def matrix_diag_v3(ctx: LoweringContext) -> Value:
    return _diag(ctx, 1, 2, 3, ctx.inputs[4])


@register_lowering("Empty", dtypes=ALL, type_attrs=("dtype",), const_inputs=(0,))
def empty(ctx: LoweringContext) -> Value:
    dims = ctx.const_ints(0)
    if any(d < 0 for d in dims):
        raise ctx.invalid_argument(f"shape {dims} must be non-negative")
    return ctx.broadcast_in_dim(ctx.scalar(0, ctx.dtype_attr("dtype")), dims, ())
