"""Cholesky, MatrixTriangularSolve, MatrixSolve and MatrixInverse (``tf.linalg.cholesky``/
``triangular_solve``/``solve``/``inv``: Gaussian-process and whitening layers), unrolled over the matrix size: small matrices only (``MAX_UNROLLED`` rows), real
float types (TF's CPU kernels' float32/float64).

- Cholesky(A [..., n, n]): the lower factor ``L`` column by column, reading only A's lower triangle:
  ``s = A[j:, j] - L[j:, :j] L[j, :j]``, ``L[j, j] = sqrt(s[0])``, ``L[j+1:, j] = s[1:] / L[j, j]``, zeros
  above the diagonal. A matrix that is not positive definite gives NaNs (XLA's behaviour; TF's kernel
  raises "Cholesky decomposition was not successful").
- MatrixTriangularSolve(A [..., m, m], B [..., m, k]; lower, adjoint): ``X`` with ``op(A) X = B``
  (``op`` the transpose for ``adjoint``, which solves with the other triangle), by forward (lower) or
  backward substitution one row at a time, reading only the triangle it solves with; batch dims
  broadcast. Division by a zero diagonal gives inf/NaN, as TF's.
- MatrixSolve(A [..., n, n], B [..., n, k]; adjoint) and MatrixInverse(A; adjoint) (``B = I``): Gaussian
  elimination with partial pivoting on ``[op(A) | B]``, as LAPACK's ``getrf``/``getrs`` that TF's kernel
  uses: column ``j``'s pivot is the first row ``>= j`` of largest magnitude, swapped into row ``j``, the
  rows below it eliminated; then back substitution. A singular matrix gives inf/NaN (TF raises "Input is
  not invertible").

Rounding differs from Eigen's blocked kernels: results agree within float rounding.
"""

from __future__ import annotations

from typing import Sequence

from hlo.builder import Value
from hlo.dtypes import PrimitiveType as P
from hlo.lowering.context import LoweringContext
from hlo.lowering.ops._shape_util import concat, iota, slice_dims
from hlo.lowering.registry import register_lowering
from hlo.opcodes import Opcode

_TYPES = frozenset({P.F32, P.F64})
MAX_UNROLLED = 64  # rows of the largest matrix lowered (the HLO grows with the square of it)


def _part(ctx: LoweringContext, x: Value, ranges: Sequence[tuple[int, int] | None]) -> Value:
    """``x`` sliced on its last dims by ``ranges`` (one ``(lo, hi)`` or None: all, per trailing dim)."""
    dims = ctx.dims(x)
    lead = len(dims) - len(ranges)
    starts, limits = [0] * len(dims), list(dims)
    for d, r in enumerate(ranges):
        if r is not None:
            starts[lead + d], limits[lead + d] = r
    return slice_dims(ctx, x, starts, limits)


def _matvec(ctx: LoweringContext, m: Value, v: Value, batch: int) -> Value:
    """``m [..., r, j] . v [..., j] -> [..., r]`` over ``batch`` leading dims."""
    dims = tuple(range(batch))
    return ctx.b.dot(m, v, lhs_batch_dims=dims, rhs_batch_dims=dims, lhs_contracting_dims=(batch + 1,),
                     rhs_contracting_dims=(batch,))


def _square(ctx: LoweringContext, x: Value, what: str) -> int:
    dims = ctx.dims(x)
    if len(dims) < 2 or dims[-1] != dims[-2]:
        raise ctx.invalid_argument(f"{what} must be a (batch of) square matrices, got shape {list(dims)}")
    if dims[-1] > MAX_UNROLLED:
        raise ctx.error(f"{ctx.op_type} of {dims[-1]}x{dims[-1]} matrices is not supported: it is unrolled over "
                        f"the rows, up to {MAX_UNROLLED}")
    return dims[-1]


@register_lowering("Cholesky", dtypes=_TYPES)
def cholesky(ctx: LoweringContext) -> Value:
    (a,) = ctx.inputs
    n = _square(ctx, a, "input")
    batch = ctx.dims(a)[:-2]
    nb = len(batch)
    b = ctx.b
    cols: list[Value] = []  # column j of L, [..., n, 1]
    for j in range(n):
        s = ctx.reshape(_part(ctx, a, [(j, n), (j, j + 1)]), (*batch, n - j))
        if j:
            done = concat(ctx, cols, nb + 1)  # [..., n, j]
            rows = _part(ctx, done, [(j, n), None])
            s = b.subtract(s, _matvec(ctx, rows, ctx.reshape(_part(ctx, done, [(j, j + 1), None]), (*batch, j)), nb))
        d = b.sqrt(_part(ctx, s, [(0, 1)]))  # [..., 1]
        pieces = [ctx.broadcast_to(ctx.scalar(0, ctx.dtype(a)), (*batch, j)), d]
        if j + 1 < n:
            spread = ctx.broadcast_in_dim(ctx.reshape(d, batch), (*batch, n - j - 1), tuple(range(nb)))
            pieces.append(b.divide(_part(ctx, s, [(1, n - j)]), spread))
        cols.append(ctx.reshape(concat(ctx, pieces, nb), (*batch, n, 1)))
    return concat(ctx, cols, nb + 1) if n else a


@register_lowering("MatrixTriangularSolve", dtypes=_TYPES)
def matrix_triangular_solve(ctx: LoweringContext) -> Value:
    a, rhs = ctx.inputs
    m = _square(ctx, a, "matrix")
    rd = ctx.dims(rhs)
    if len(rd) < 2 or rd[-2] != m:
        raise ctx.invalid_argument(f"Incompatible shapes: matrix {list(ctx.dims(a))}, rhs {list(rd)}")
    k = rd[-1]
    batch = ctx.broadcast_shapes(ctx.dims(a)[:-2], rd[:-2])
    a, rhs = ctx.broadcast_to(a, (*batch, m, m)), ctx.broadcast_to(rhs, (*batch, m, k))
    nb = len(batch)
    lower = ctx.attr_bool("lower", True)
    if ctx.attr_bool("adjoint", False):  # op(A) = A^T: solve with the transpose's triangle
        a = ctx.b.transpose(a, dimensions=(*range(nb), nb + 1, nb))
        lower = not lower
    return _substitute(ctx, a, rhs, lower)


def _eliminate(ctx: LoweringContext, m: Value, n: int) -> Value:
    """``m [..., n, w]`` (``w >= n``) reduced to upper triangular form in its first ``n`` columns by
    Gaussian elimination with partial pivoting (row swaps applied to every column)."""
    dims = ctx.dims(m)
    nb = len(dims) - 2
    b = ctx.b
    rows = iota(ctx, P.S32, dims, nb)
    row_ids = iota(ctx, P.S32, dims[:-1], nb)  # [..., n]
    for j in range(n):
        col = ctx.reshape(_part(ctx, m, [None, (j, j + 1)]), dims[:-1])
        mag = ctx.select(ctx.compare(row_ids, ctx.full(j, row_ids), "GE"), b.abs(col), ctx.full(-1, col))
        best = ctx.broadcast_in_dim(ctx.reduce(mag, (nb,), Opcode.MAXIMUM, -1), dims[:-1], tuple(range(nb)))
        first = ctx.select(ctx.compare(mag, best, "EQ"), row_ids, ctx.full(n, row_ids))
        pivot = ctx.broadcast_in_dim(ctx.reduce(first, (nb,), Opcode.MINIMUM, n), dims, tuple(range(nb)))
        at_pivot = ctx.compare(rows, pivot, "EQ")
        zero = ctx.full(0, m)
        pivot_row = ctx.reduce(ctx.select(at_pivot, m, zero), (nb,), Opcode.ADD, 0)  # [..., w]
        row_j = ctx.reshape(_part(ctx, m, [(j, j + 1), None]), (*dims[:nb], dims[-1]))
        spread = tuple(range(nb)) + (nb + 1,)
        is_j = ctx.compare(rows, ctx.full(j, rows), "EQ")
        m = ctx.select(is_j, ctx.broadcast_in_dim(pivot_row, dims, spread),
                       ctx.select(at_pivot, ctx.broadcast_in_dim(row_j, dims, spread), m))
        top = ctx.broadcast_in_dim(pivot_row, dims, spread)  # row j after the swap
        lead = _part(ctx, m, [None, (j, j + 1)])  # [..., n, 1]
        diag = ctx.reshape(_part(ctx, top, [(0, 1), (j, j + 1)]), dims[:nb])
        factor = b.divide(ctx.reshape(lead, dims[:-1]), ctx.broadcast_in_dim(diag, dims[:-1], tuple(range(nb))))
        below = ctx.compare(rows, ctx.full(j, rows), "GT")
        update = b.subtract(m, b.multiply(ctx.broadcast_in_dim(factor, dims, tuple(range(nb + 1))), top))
        m = ctx.select(below, update, m)
    return m


def _solve(ctx: LoweringContext, a: Value, rhs: Value) -> Value:
    """``X`` with ``op(A) X = B`` (``op``: the node's ``adjoint``), batch dims already equal."""
    n, k = ctx.dims(a)[-1], ctx.dims(rhs)[-1]
    nb = len(ctx.dims(a)) - 2
    if ctx.attr_bool("adjoint", False):
        a = ctx.b.transpose(a, dimensions=(*range(nb), nb + 1, nb))
    upper = _eliminate(ctx, concat(ctx, [a, rhs], nb + 1), n)
    u, y = _part(ctx, upper, [None, (0, n)]), _part(ctx, upper, [None, (n, n + k)])
    return _substitute(ctx, u, y, lower=False)


def _substitute(ctx: LoweringContext, a: Value, rhs: Value, lower: bool) -> Value:
    """``X`` with ``A X = B`` for triangular ``A`` (``lower`` or upper), one row at a time."""
    m, k = ctx.dims(a)[-1], ctx.dims(rhs)[-1]
    batch = ctx.dims(a)[:-2]
    nb = len(batch)
    b = ctx.b
    rows: dict[int, Value] = {}  # solved row i of X, [..., 1, k]
    for i in (range(m) if lower else range(m - 1, -1, -1)):
        r = _part(ctx, rhs, [(i, i + 1), None])
        done = range(0, i) if lower else range(i + 1, m)
        if len(done):
            lo, hi = done[0], done[-1] + 1
            solved = concat(ctx, [rows[j] for j in done], nb)  # [..., len, k]
            coeffs = _part(ctx, a, [(i, i + 1), (lo, hi)])  # [..., 1, len]
            r = b.subtract(r, b.dot(coeffs, solved, lhs_batch_dims=tuple(range(nb)), rhs_batch_dims=tuple(range(nb)),
                                    lhs_contracting_dims=(nb + 1,), rhs_contracting_dims=(nb,)))
        diag = _part(ctx, a, [(i, i + 1), (i, i + 1)])  # [..., 1, 1]
        rows[i] = b.divide(r, ctx.broadcast_in_dim(ctx.reshape(diag, batch), (*batch, 1, k), tuple(range(nb))))
    return concat(ctx, [rows[i] for i in range(m)], nb) if m else rhs


@register_lowering("MatrixSolve", dtypes=_TYPES)
def matrix_solve(ctx: LoweringContext) -> Value:
    a, rhs = ctx.inputs
    n = _square(ctx, a, "matrix")
    if ctx.dims(rhs)[:-2] != ctx.dims(a)[:-2] or len(ctx.dims(rhs)) < 2 or ctx.dims(rhs)[-2] != n:
        raise ctx.invalid_argument(f"Incompatible shapes: matrix {list(ctx.dims(a))}, rhs {list(ctx.dims(rhs))}")
    return _solve(ctx, a, rhs) if n else rhs


@register_lowering("MatrixInverse", dtypes=_TYPES)
def matrix_inverse(ctx: LoweringContext) -> Value:
    (a,) = ctx.inputs
    n = _square(ctx, a, "input")
    if not n:
        return a
    dims = ctx.dims(a)
    eye = ctx.convert(ctx.compare(iota(ctx, P.S32, dims, len(dims) - 2), iota(ctx, P.S32, dims, len(dims) - 1), "EQ"),
                      ctx.dtype(a))
    return _solve(ctx, a, eye)
