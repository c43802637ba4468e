"""Helpers shared by the reduction, softmax, loss and gradient rules.

Invariants: reduction axes are validated and normalized the way TF does
(``-rank <= axis < rank``, no duplicates); sums and products of f16/bf16 are
accumulated in f32 and rounded once, as XLA does (``accumulation_type``);
``keep_dims`` puts size-1 dims back where the reduced axes were.
"""

from __future__ import annotations

from typing import Sequence, Union

import ml_dtypes
import numpy as np
import numpy.typing as npt

from hlo.builder import Value
from hlo.dtypes import PrimitiveType as P
from hlo.lowering.context import LoweringContext
from hlo.opcodes import Opcode

_NARROW_FLOATS = frozenset({P.F16, P.BF16})
INDEX_TYPES = frozenset({P.S32, P.S64})  # the element types of TF shape and index tensors


def accumulation_type(dtype: P) -> P:
    """The element type sums of ``dtype`` accumulate in (f32 for f16/bf16, else ``dtype`` itself)."""
    return P.F32 if dtype in _NARROW_FLOATS else dtype


def reduction_axes(ctx: LoweringContext, axes: Sequence[int], rank: int) -> tuple[int, ...]:
    """TF's reduction-axis check: each in ``[-rank, rank)``, no dimension twice; returned sorted."""
    out: list[int] = []
    for a in axes:
        if not -rank <= a < rank:
            raise ctx.error(f"invalid reduction dimension {a} for an input of rank {rank}")
        a %= rank
        if a in out:
            raise ctx.error(f"reduction axes contain dimension {a} twice")
        out.append(a)
    return tuple(sorted(out))


def keep_dims(ctx: LoweringContext, v: Value, in_dims: Sequence[int], axes: Sequence[int]) -> Value:
    """``v`` (``in_dims`` with ``axes`` removed) reshaped to ``in_dims`` with size 1 at ``axes``."""
    return ctx.reshape(v, [1 if i in axes else d for i, d in enumerate(in_dims)])


# A dtype's extreme value, as the identity or initial value of a reduction.
Extreme = Union[bool, int, float, np.floating]


def lowest(dtype: P) -> Extreme:
    """The smallest value of ``dtype`` (-inf for floats): the identity of maximum."""
    if dtype.is_float:
        return -np.inf
    if dtype.is_pred:
        return False
    return np.iinfo(dtype.numpy).min


def highest(dtype: P) -> Extreme:
    """The largest value of ``dtype`` (+inf for floats): the identity of minimum."""
    if dtype.is_float:
        return np.inf
    if dtype.is_pred:
        return True
    return np.iinfo(dtype.numpy).max


def finite_lowest(dtype: P) -> Extreme:
    """Eigen's ``NumTraits<T>::lowest()``: the most negative finite value (argmax's initial value)."""
    return ml_dtypes.finfo(dtype.numpy).min if dtype.is_float else lowest(dtype)


def finite_highest(dtype: P) -> Extreme:
    return ml_dtypes.finfo(dtype.numpy).max if dtype.is_float else highest(dtype)


def reduce(ctx: LoweringContext, x: Value, axes: Sequence[int], opcode: Opcode, init: npt.ArrayLike,
           acc: P | None = None) -> Value:
    """Reduce ``x`` over ``axes`` in element type ``acc`` (default: ``accumulation_type``), then
    convert back to ``x``'s type."""
    dtype = ctx.dtype(x)
    acc = acc or accumulation_type(dtype)
    out = ctx.reduce(ctx.convert(x, acc), axes, opcode, init)
    return ctx.convert(out, dtype)


def sum_(ctx: LoweringContext, x: Value, axes: Sequence[int]) -> Value:
    return reduce(ctx, x, axes, Opcode.ADD, 0)


def max_(ctx: LoweringContext, x: Value, axes: Sequence[int]) -> Value:
    return ctx.reduce(x, axes, Opcode.MAXIMUM, lowest(ctx.dtype(x)))


def broadcast_back(ctx: LoweringContext, v: Value, dims: Sequence[int], axes: Sequence[int]) -> Value:
    """Broadcast ``v`` (``dims`` with ``axes`` reduced away) back to ``dims``."""
    kept = [i for i in range(len(dims)) if i not in axes]
    return ctx.broadcast_in_dim(v, dims, kept)


def count_elements(dims: Sequence[int], axes: Sequence[int]) -> int:
    return int(np.prod([dims[a] for a in axes], dtype=np.int64))
