"""Reductions that reduce nothing, and reductions of reshapes that only add or drop size-1 dims.

The evaluator defines a reduce whose reduced dims hold one element each (or
that has no reduced dims) as ``f(init, x)`` per element, with ``f`` the reducer.
So such a reduce is a reshape of x only when init is ``f``'s exact identity (for
float add that is -0.0: TF's usual init of +0.0 turns -0.0 into +0.0). Otherwise,
for a reducer that is one elementwise op, it becomes that op applied to the
reshaped x and a broadcast init, which later passes fuse like any elementwise op.
For maximum/minimum that needs a constant init other than +-0.0: the evaluator's
NumPy reductions break a -0.0/+0.0 tie differently per dtype (f32 returns the
element, f16 the init), so the elementwise op (which returns its lhs) cannot
match both; the op is written ``f(x, init)``. Variadic reduces and reducers of
any other form are left alone.
"""

from __future__ import annotations

import numpy as np

from hlo.dtypes import PrimitiveType
from hlo.evaluator.callees import REDUCIBLE_UFUNCS, binary_ufunc, body
from hlo.ir import HloInstruction
from hlo.opcodes import Opcode
from hlo.passes.algsimp.context import Replacement, RewriteContext, rule, same_bits
from hlo.passes.algsimp.rules_arith import additive_identity, extreme
from hlo.passes.algsimp.rules_logic import all_ones
from hlo.shapes import Shape, array_shape

_OPCODE_OF_UFUNC = {ufunc: op for op, ufunc in REDUCIBLE_UFUNCS.items()}


def reducer_opcode(ctx: RewriteContext, inst: HloInstruction) -> Opcode | None:
    """The elementwise opcode of a reduce's ``to_apply`` when it is one op on its two parameters."""
    ufunc = binary_ufunc(body(ctx.module, inst.attr("to_apply").name))
    return _OPCODE_OF_UFUNC.get(ufunc) if ufunc is not None else None


def identity(op: Opcode, dtype: PrimitiveType) -> np.ndarray | None:
    """The exact identity of reducer ``op`` in ``dtype`` (x op identity == x bit for bit), if any."""
    if dtype.is_complex:
        return None
    if op is Opcode.ADD or op is Opcode.OR or op is Opcode.XOR:
        value = additive_identity(dtype) if op is Opcode.ADD else 0
    elif op is Opcode.MULTIPLY:
        value = 1
    elif op is Opcode.AND:
        if not (dtype.is_pred or dtype.is_integral):
            return None
        value = all_ones(dtype)
    else:
        return extreme(dtype, lowest=op is Opcode.MAXIMUM)
    with np.errstate(all="ignore"):
        return np.array(value).astype(dtype.numpy)


def _single_array_reduce(inst: HloInstruction) -> Shape | None:
    """The result shape of a reduce of one array (None for a variadic reduce)."""
    return inst.shape if len(inst.operands) == 2 and isinstance(inst.shape, Shape) else None


@rule(Opcode.REDUCE)
def reduce_nothing(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """A reduce that keeps every element (no reduced dims, or all of size 1) -> reshape(x) when init is
    the reducer's identity, else op(reshape(x), broadcast(init))."""
    shape = _single_array_reduce(inst)
    if shape is None:
        return None
    x, init = ctx.operands(inst)
    if not isinstance(x.shape, Shape) or x.shape.num_elements != shape.num_elements:
        return None
    if not x.shape.dtype == array_shape(init.shape).dtype == shape.dtype:
        return None
    op = reducer_opcode(ctx, inst)
    if op is None:
        return None
    value = ctx.uniform_value(init)
    ident = identity(op, shape.dtype)
    if value is not None and ident is not None and same_bits(value, ident):
        return ctx.reshape(x, shape)
    if op in (Opcode.MAXIMUM, Opcode.MINIMUM) and (value is None or value == 0):
        return None  # which of -0.0 and +0.0 wins a tie is not pinned down (see the docstring)
    reshaped = ctx.reshape(x, shape)
    splat = ctx.new(Opcode.BROADCAST, shape, [init], {"dimensions": ()}) if shape.rank else init.name
    return ctx.new(op, shape, [reshaped, splat])


def _unit_dim_map(src: Shape, dst: Shape) -> dict[int, int] | None:
    """For a reshape src -> dst that only inserts or removes size-1 dims: dst dim -> src dim for
    every dim of size other than 1; None for any other reshape."""
    src_big = [d for d, n in enumerate(src.dims) if n != 1]
    dst_big = [d for d, n in enumerate(dst.dims) if n != 1]
    if [src.dims[d] for d in src_big] != [dst.dims[d] for d in dst_big]:
        return None
    return dict(zip(dst_big, src_big))


@rule(Opcode.REDUCE)
def reduce_of_unit_reshape(ctx: RewriteContext, inst: HloInstruction) -> Replacement:
    """reduce(reshape(x)) where the reshape only inserts/removes size-1 dims -> reduce(x) over the
    matching dims (then a reshape, if the size-1 dims of the result differ)."""
    shape = _single_array_reduce(inst)
    if shape is None:
        return None
    reshape, init = ctx.operands(inst)
    if reshape.opcode is not Opcode.RESHAPE:
        return None
    x = ctx.operand(reshape)
    if not isinstance(x.shape, Shape) or not isinstance(reshape.shape, Shape):
        return None
    mapping = _unit_dim_map(x.shape, reshape.shape)
    if mapping is None:
        return None
    dims = tuple(sorted(mapping[d] for d in inst.attr("dimensions", ()) if d in mapping))
    kept = tuple(n for d, n in enumerate(x.shape.dims) if d not in dims)
    attrs = [(k, v) for k, v in inst.attrs.items() if k != "metadata"]
    attrs = [(k, dims if k == "dimensions" else v) for k, v in attrs]
    if kept == shape.dims:
        return ctx.new(Opcode.REDUCE, shape, [x, init], attrs)
    reduced = ctx.new(Opcode.REDUCE, ctx.like(shape.dtype, kept), [x, init], attrs)
    return ctx.new(Opcode.RESHAPE, shape, [reduced])
