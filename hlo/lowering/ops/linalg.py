"""Cholesky, MatrixTriangularSolve, MatrixSolve and MatrixInverse (``tf.linalg.cholesky``/
``triangular_solve``/``solve``/``inv``: Gaussian-process and whitening layers) on real float types (TF's
CPU kernels' float32/float64), each as one HLO ``while`` over the matrix rows or columns
(``_loop_util.fori_loop``), the way XLA's CholeskyExpander and TriangularSolveExpander emit them: the
module and the generated code are the same size for any matrix size (the unrolled form grew with its
square and gcc's time with it). Step ``j`` reads its row or column with a dynamic slice, masks by
comparing an iota with ``j``, and writes its result with a dynamic-update-slice. A loop in HLO rather
than a dedicated CPU loop nest: every backend (CUDA too) and the evaluator run it as it is, the CPU's
while, dynamic-slice and in-place update kernels already make it cheap, and no new kernel needs its own
tests; the steps are unblocked (O(n^2) work each, O(n^3) in all, like the unrolled form).

- Cholesky(A [..., n, n]): the lower factor ``L`` (zeros at first) column by column, reading only A's
  lower triangle: ``s = A[:, j] - L L[j, :]`` (L's columns ``>= j`` are still zero), ``L[j, j] =
  sqrt(s[j])``, ``L[j+1:, j] = s[j+1:] / L[j, j]``, rows above ``j`` kept zero. A matrix that is not
  positive definite gives NaNs (XLA's behaviour; TF's kernel raises "Cholesky decomposition was not
  successful").
- MatrixTriangularSolve(A [..., m, m], B [..., m, k]; lower, adjoint): ``X`` with ``op(A) X = B``
  (``op`` the transpose for ``adjoint``, which solves with the other triangle), by forward (lower) or
  backward substitution one row at a time, reading only the triangle it solves with (the other
  coefficients are masked to zero; X's unsolved rows are still zero); batch dims broadcast. Division by
  a zero diagonal gives inf/NaN, as TF's.
- MatrixSolve(A [..., n, n], B [..., n, k]; adjoint) and MatrixInverse(A; adjoint) (``B = I``): Gaussian
  elimination with partial pivoting on ``[op(A) | B]``, as LAPACK's ``getrf``/``getrs`` that TF's kernel
  uses: column ``j``'s pivot is the first row ``>= j`` of largest magnitude, swapped into row ``j``, the
  rows below it eliminated; then back substitution. A singular matrix gives inf/NaN (TF raises "Input is
  not invertible").

Rounding differs from Eigen's blocked kernels: results agree within float rounding.
"""

from __future__ import annotations

from hlo.builder import Value
from hlo.dtypes import PrimitiveType as P
from hlo.lowering.context import LoweringContext
from hlo.lowering.ops._loop_util import dynamic_part, dynamic_put, fori_loop
from hlo.lowering.ops._shape_util import concat, iota, slice_dims
from hlo.lowering.registry import register_lowering
from hlo.opcodes import Opcode

_TYPES = frozenset({P.F32, P.F64})


def _square(ctx: LoweringContext, x: Value, what: str) -> int:
    dims = ctx.dims(x)
    if len(dims) < 2 or dims[-1] != dims[-2]:
        raise ctx.invalid_argument(f"{what} must be a (batch of) square matrices, got shape {list(dims)}")
    return dims[-1]


def _batched_dot(ctx: LoweringContext, x: Value, y: Value, nb: int, x_contract: int, y_contract: int) -> Value:
    """``x . y`` over ``nb`` leading batch dims, contracting ``x``'s dim ``nb + x_contract`` with ``y``'s
    ``nb + y_contract``."""
    dims = tuple(range(nb))
    return ctx.b.dot(x, y, lhs_batch_dims=dims, rhs_batch_dims=dims, lhs_contracting_dims=(nb + x_contract,),
                     rhs_contracting_dims=(nb + y_contract,))


def _transpose(ctx: LoweringContext, a: Value) -> Value:
    nb = len(ctx.dims(a)) - 2
    return ctx.b.transpose(a, dimensions=(*range(nb), nb + 1, nb))


@register_lowering("Cholesky", dtypes=_TYPES)
def cholesky(ctx: LoweringContext) -> Value:
    (a,) = ctx.inputs
    n = _square(ctx, a, "input")
    if not n:
        return a
    batch = ctx.dims(a)[:-2]
    nb = len(batch)

    def column(j: Value, carried: list[Value]) -> list[Value]:
        a, l = carried
        b = ctx.b
        col = ctx.reshape(dynamic_part(ctx, a, [0, j], [n, 1]), (*batch, n))
        row = ctx.reshape(dynamic_part(ctx, l, [j, 0], [1, n]), (*batch, n))  # L[j, :j], zeros after
        s = b.subtract(col, _batched_dot(ctx, l, row, nb, 1, 0))
        d = ctx.broadcast_in_dim(ctx.reshape(b.sqrt(dynamic_part(ctx, s, [j], [1])), batch), (*batch, n), tuple(range(nb)))
        rows = iota(ctx, P.S32, (*batch, n), nb)
        below = ctx.select(ctx.compare(rows, j, "GT"), b.divide(s, d), ctx.full(0, s))
        new = ctx.select(ctx.compare(rows, j, "EQ"), d, below)
        return [a, dynamic_put(ctx, l, ctx.reshape(new, (*batch, n, 1)), [0, j])]

    return fori_loop(ctx, "cholesky", n, [a, ctx.full(0, a)], column)[1]


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
    lower = ctx.attr_bool("lower", True)
    if ctx.attr_bool("adjoint", False):  # op(A) = A^T: solve with the transpose's triangle
        a, lower = _transpose(ctx, a), not lower
    return _substitute(ctx, a, rhs, lower)


def _substitute(ctx: LoweringContext, a: Value, rhs: Value, lower: bool) -> Value:
    """``X`` with ``A X = B`` for triangular ``A`` (``lower`` or upper), one row at a time: forward from
    row 0 or backward from the last."""
    m, k = ctx.dims(a)[-1], ctx.dims(rhs)[-1]
    if not m:
        return rhs
    batch = ctx.dims(a)[:-2]
    nb = len(batch)

    def row(i: Value, carried: list[Value]) -> list[Value]:
        a, rhs, x = carried
        b = ctx.b
        cols = iota(ctx, P.S32, (*batch, 1, m), nb + 1)
        arow = dynamic_part(ctx, a, [i, 0], [1, m])
        coeffs = ctx.select(ctx.compare(cols, i, "LT" if lower else "GT"), arow, ctx.full(0, arow))
        r = b.subtract(dynamic_part(ctx, rhs, [i, 0], [1, k]), _batched_dot(ctx, coeffs, x, nb, 1, 0))
        diag = ctx.broadcast_in_dim(ctx.reshape(dynamic_part(ctx, a, [i, i], [1, 1]), batch), (*batch, 1, k),
                                    tuple(range(nb)))
        return [a, rhs, dynamic_put(ctx, x, b.divide(r, diag), [i, 0])]

    key = "forward_substitution" if lower else "back_substitution"
    return fori_loop(ctx, key, m, [a, rhs, ctx.full(0, rhs)], row, reverse=not lower)[2]


def _eliminate(ctx: LoweringContext, m: Value, n: int) -> Value:
    """``m [..., n, w]`` (``w >= n``) reduced to upper triangular form in its first ``n`` columns by
    Gaussian elimination with partial pivoting (row swaps applied to every column), one column a step."""
    dims = ctx.dims(m)
    nb = len(dims) - 2
    batch, w = dims[:nb], dims[-1]
    spread = (*range(nb), nb + 1)  # a row [..., w] over [..., n, w]

    def column(j: Value, carried: list[Value]) -> list[Value]:
        (m,) = carried
        b = ctx.b
        rows, row_ids = iota(ctx, P.S32, dims, nb), iota(ctx, P.S32, dims[:-1], nb)
        col = ctx.reshape(dynamic_part(ctx, m, [0, j], [n, 1]), dims[:-1])
        mag = ctx.select(ctx.compare(row_ids, j, "GE"), b.abs(col), ctx.full(-1, col))
        best = ctx.broadcast_in_dim(ctx.reduce(mag, (nb,), Opcode.MAXIMUM, -1), dims[:-1], tuple(range(nb)))
        first = ctx.select(ctx.compare(mag, best, "EQ"), row_ids, ctx.full(n, row_ids))
        pivot = ctx.broadcast_in_dim(ctx.reduce(first, (nb,), Opcode.MINIMUM, n), dims, tuple(range(nb)))
        at_pivot = ctx.compare(rows, pivot, "EQ")
        pivot_row = ctx.reduce(ctx.select(at_pivot, m, ctx.full(0, m)), (nb,), Opcode.ADD, 0)  # [..., w]
        row_j = ctx.reshape(dynamic_part(ctx, m, [j, 0], [1, w]), (*batch, w))
        top = ctx.broadcast_in_dim(pivot_row, dims, spread)  # row j after the swap
        is_j = ctx.compare(rows, j, "EQ")
        m = ctx.select(is_j, top, ctx.select(at_pivot, ctx.broadcast_in_dim(row_j, dims, spread), m))
        lead = ctx.reshape(dynamic_part(ctx, m, [0, j], [n, 1]), dims[:-1])
        diag = ctx.reshape(dynamic_part(ctx, pivot_row, [j], [1]), batch)
        factor = b.divide(lead, ctx.broadcast_in_dim(diag, dims[:-1], tuple(range(nb))))
        update = b.subtract(m, b.multiply(ctx.broadcast_in_dim(factor, dims, tuple(range(nb + 1))), top))
        return [ctx.select(ctx.compare(rows, j, "GT"), update, m)]

    return fori_loop(ctx, "pivoted_elimination", n, [m], column)[0]


def _solve(ctx: LoweringContext, a: Value, rhs: Value) -> Value:
    """``X`` with ``op(A) X = B`` (``op``: the node's ``adjoint``), batch dims already equal."""
    n, k = ctx.dims(a)[-1], ctx.dims(rhs)[-1]
    nb = len(ctx.dims(a)) - 2
    if ctx.attr_bool("adjoint", False):
        a = _transpose(ctx, a)
    upper = _eliminate(ctx, concat(ctx, [a, rhs], nb + 1), n)
    dims = ctx.dims(upper)
    u = slice_dims(ctx, upper, [0] * len(dims), (*dims[:-1], n))
    y = slice_dims(ctx, upper, [0] * (len(dims) - 1) + [n], (*dims[:-1], n + k))
    return _substitute(ctx, u, y, lower=False)


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
