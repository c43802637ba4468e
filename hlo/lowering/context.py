"""The typed context a lowering rule receives, and the HLO-building helpers rules share.

A rule sees its node's inputs as builder ``Value``s (HLO shapes carry dtype
and static dims), its attributes decoded to Python values, compile-time
constant inputs as NumPy arrays, and helpers for what many ops need: NumPy
style broadcasting, constants, converts, and reductions with cached scalar
computations. Broadcasting and dtype handling live here and nowhere else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from hlo.attributes import ComparisonDirection
from hlo.builder import ComputationBuilder, Value
from hlo.dtypes import PrimitiveType
from hlo.ir import HloComputation
from hlo.lowering import tf_types
from hlo.lowering.errors import InvalidArgumentLoweringError, LoweringError
from hlo.opcodes import Opcode
from hlo.shapes import Shape

if TYPE_CHECKING:
    from hlo.lowering.graph import GraphLowering

_MISSING = object()


def decode_attr(value) -> Any:
    """A TF AttrValue proto as a Python value (lists as tuples, types as DataType ints)."""
    kind = value.WhichOneof("value")
    if kind is None:
        return None
    if kind == "s":
        return value.s.decode("utf-8", "replace")
    if kind in ("i", "f", "b", "type"):
        return getattr(value, kind)
    if kind == "shape":
        if value.shape.unknown_rank:
            return None
        return tuple(d.size for d in value.shape.dim)
    if kind == "tensor":
        from tensorflow.python.framework import tensor_util

        return tensor_util.MakeNdarray(value.tensor)
    if kind == "func":
        return value.func
    if kind == "list":
        lst = value.list
        for field in ("s", "i", "f", "b", "type", "shape", "tensor", "func"):
            items = getattr(lst, field)
            if len(items):
                if field == "s":
                    return tuple(x.decode("utf-8", "replace") for x in items)
                if field == "shape":
                    return tuple(None if s.unknown_rank else tuple(d.size for d in s.dim) for s in items)
                return tuple(items)
        return ()
    return None


class LoweringContext:
    """Everything one rule needs to lower one node."""

    def __init__(self, lowering: "GraphLowering", node, inputs: list[Value]):
        self._lowering = lowering
        self.node = node
        self.inputs = inputs
        self.b: ComputationBuilder = lowering.builder

    # --- the node -------------------------------------------------------------
    @property
    def op_type(self) -> str:
        return self.node.op

    @property
    def name(self) -> str:
        return self.node.name

    def error(self, message: str) -> LoweringError:
        return LoweringError(message, self.node.name, self.node.op, self._lowering.source_of(self.node.name))

    def invalid_argument(self, message: str) -> InvalidArgumentLoweringError:
        """The error for inputs TF's kernel rejects with InvalidArgumentError (see the class)."""
        return InvalidArgumentLoweringError(message, self.node.name, self.node.op,
                                            self._lowering.source_of(self.node.name))

    def attr(self, name: str, default: Any = _MISSING) -> Any:
        if name in self.node.attr:
            return decode_attr(self.node.attr[name])
        if default is _MISSING:
            raise self.error(f"missing attribute {name!r}")
        return default

    def dtype_attr(self, name: str = "T") -> PrimitiveType:
        dt = self.attr(name)
        try:
            return tf_types.to_hlo(dt)
        except TypeError as e:
            raise self.error(str(e)) from None

    def const_input(self, i: int) -> np.ndarray:
        """The value of input ``i``, which must be computable at compile time."""
        return self._lowering.constant_value(self, i)

    def const_ints(self, i: int) -> list[int]:
        return [int(v) for v in np.asarray(self.const_input(i)).reshape(-1)]

    # --- shapes ----------------------------------------------------------------
    @staticmethod
    def dims(v: Value) -> tuple[int, ...]:
        return v.shape.dims

    @staticmethod
    def dtype(v: Value) -> PrimitiveType:
        return v.shape.dtype

    def normalize_axis(self, axis: int, rank: int, what: str = "axis") -> int:
        if not -rank <= axis < max(rank, 1):
            raise self.error(f"{what} {axis} is out of range for rank {rank}")
        return axis % rank if rank else 0

    # --- building blocks ---------------------------------------------------------
    def constant(self, value, dtype: PrimitiveType) -> Value:
        return self.b.constant(np.asarray(value).astype(dtype.numpy), dtype)

    def scalar(self, value, dtype: PrimitiveType) -> Value:
        return self.constant(np.asarray(value), dtype)

    def full(self, value, like: Value, dtype: PrimitiveType | None = None) -> Value:
        """A broadcast scalar with the dims of ``like``."""
        dtype = dtype or like.shape.dtype
        return self.broadcast_to(self.scalar(value, dtype), like.shape.dims)

    def convert(self, v: Value, dtype: PrimitiveType) -> Value:
        if v.shape.dtype == dtype:
            return v
        return self.b.convert(v, shape=Shape.array(dtype, v.shape.dims))

    def reshape(self, v: Value, dims: Sequence[int]) -> Value:
        dims = tuple(int(d) for d in dims)
        if v.shape.dims == dims:
            return v
        return self.b.reshape(v, shape=Shape.array(v.shape.dtype, dims))

    def broadcast_in_dim(self, v: Value, dims: Sequence[int], mapping: Sequence[int]) -> Value:
        dims = tuple(dims)
        if v.shape.dims == dims and tuple(mapping) == tuple(range(len(dims))):
            return v
        return self.b.broadcast(v, dimensions=tuple(mapping), shape=Shape.array(v.shape.dtype, dims))

    def broadcast_to(self, v: Value, dims: Sequence[int]) -> Value:
        """NumPy-style broadcast of ``v`` to ``dims`` (size-1 dims are stretched)."""
        dims = tuple(dims)
        src = v.shape.dims
        if src == dims:
            return v
        if len(src) > len(dims):
            raise self.error(f"cannot broadcast {list(src)} to {list(dims)}")
        offset = len(dims) - len(src)
        keep = [i for i, d in enumerate(src) if d == dims[offset + i]]
        for i, d in enumerate(src):
            if d != dims[offset + i] and d != 1:
                raise self.error(f"incompatible shapes for broadcasting: {list(src)} and {list(dims)}")
        squeezed = self.reshape(v, [src[i] for i in keep])
        return self.broadcast_in_dim(squeezed, dims, [offset + i for i in keep])

    def broadcast_shapes(self, *shapes: Sequence[int]) -> tuple[int, ...]:
        rank = max((len(s) for s in shapes), default=0)
        out = []
        for i in range(rank):
            sizes = {s[i - rank + len(s)] for s in shapes if i - rank + len(s) >= 0}
            sizes.discard(1)
            if len(sizes) > 1:
                raise self.error("incompatible shapes for broadcasting: " + ", ".join(str(list(s)) for s in shapes))
            out.append(sizes.pop() if sizes else 1)
        return tuple(out)

    def broadcast_all(self, *values: Value) -> list[Value]:
        dims = self.broadcast_shapes(*(v.shape.dims for v in values))
        return [self.broadcast_to(v, dims) for v in values]

    def binary(self, opcode: Opcode, x: Value, y: Value, **attrs) -> Value:
        """An elementwise binary op with NumPy broadcasting of its operands."""
        x, y = self.broadcast_all(x, y)
        return self.b.op(opcode, x, y, **attrs)

    def compare(self, x: Value, y: Value, direction: str) -> Value:
        x, y = self.broadcast_all(x, y)
        return self.b.compare(x, y, direction=ComparisonDirection(direction))

    def select(self, pred: Value, on_true: Value, on_false: Value) -> Value:
        pred, on_true, on_false = self.broadcast_all(pred, on_true, on_false)
        return self.b.select(pred, on_true, on_false)

    def reduce(self, v: Value, axes: Sequence[int], opcode: Opcode, init) -> Value:
        """Reduce ``v`` over ``axes`` with a scalar binary ``opcode`` and initial value ``init``."""
        dtype = v.shape.dtype
        axes = tuple(sorted(set(axes)))
        init_v = self.scalar(init, dtype)
        return self.b.reduce(v, init_v, dimensions=axes, to_apply=self.scalar_computation(opcode, dtype))

    def scalar_computation(self, opcode: Opcode, dtype: PrimitiveType) -> HloComputation:
        """``(a, b) -> opcode(a, b)`` on scalars of ``dtype``, built once per module."""
        return self._lowering.scalar_computation(opcode, dtype)

    def computation(self, key: str, build) -> HloComputation:
        """A helper computation built once per module by ``build(ComputationBuilder) -> Value`` (root)."""
        return self._lowering.helper_computation(key, build)
