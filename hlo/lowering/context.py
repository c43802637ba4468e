"""The typed context a lowering rule receives, and the HLO-building helpers rules share.

A rule is ``fn(ctx: LoweringContext) -> Value | list[Value]`` (one result per TF output). It sees
its node's inputs as builder ``Value``s (``ctx.shape``/``ctx.dims``/``ctx.dtype`` give their array
shape, dims and element type), its attributes through typed accessors (``attr_int``, ``attr_ints``,
``attr_str``, ``attr_bool``, ``attr_float``, ``attr_tensor``, ``attr_func``, ``dtype_attr``; each
checks the attribute's kind and raises a ``LoweringError`` naming the node when it is missing or of
another kind), compile-time constant inputs as NumPy arrays, the builder ``ctx.b``, and helpers for
what many ops need: NumPy style broadcasting, constants, converts, and reductions with cached
scalar computations. Broadcasting and dtype handling live here and nowhere else.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence, Union

import numpy as np
import numpy.typing as npt

from hlo.attributes import ComparisonDirection
from hlo.builder import ComputationBuilder, Value
from hlo.dtypes import PrimitiveType
from hlo.ir import HloComputation
from hlo.lowering import tf_types
from hlo.lowering.errors import InvalidArgumentLoweringError, LoweringError
from hlo.lowering.lists import ListValue
from hlo.opcodes import Opcode
from hlo.shapes import Shape

if TYPE_CHECKING:
    from hlo.lowering.graph import GraphLowering

# What a rule returns: its node's single output, or one value per output (a TensorList is a ListValue).
RuleResult = Union[Value, ListValue, Sequence[Union[Value, ListValue]]]


class NodeDefLike(Protocol):
    """The parts of a TF ``NodeDef`` lowering reads (TensorFlow ships no type stubs)."""

    @property
    def name(self) -> str: ...

    @property
    def op(self) -> str: ...

    @property
    def input(self) -> Sequence[str]: ...

    @property
    def attr(self) -> Mapping[str, Any]: ...  # name -> AttrValue proto


def _kind(value: Any) -> str | None:
    """Which field of an AttrValue proto is set (None: none)."""
    kind: str | None = value.WhichOneof("value")
    return kind


class LoweringContext:
    """Everything one rule needs to lower one node."""

    def __init__(self, lowering: GraphLowering, node: NodeDefLike, inputs: list[Value]):
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

    # --- attributes: each accessor returns ``default`` when the node lacks the attribute and
    # raises (naming the node) when there is no default or the attribute is of another kind.
    def has_attr(self, name: str) -> bool:
        return name in self.node.attr

    def _attr_value(self, name: str, kinds: tuple[str | None, ...], what: str) -> Any:
        """The AttrValue proto ``name``, which must be present and hold one of ``kinds``."""
        if name not in self.node.attr:
            raise self.error(f"missing attribute {name!r}")
        value = self.node.attr[name]
        if _kind(value) not in kinds:
            raise self.error(f"attribute {name!r} is not {what} (it holds {_kind(value) or 'nothing'})")
        return value

    def attr_int(self, name: str, default: int | None = None) -> int:
        if default is not None and not self.has_attr(name):
            return default
        return int(self._attr_value(name, ("i",), "an int").i)

    def attr_float(self, name: str, default: float | None = None) -> float:
        if default is not None and not self.has_attr(name):
            return default
        return float(self._attr_value(name, ("f",), "a float").f)

    def attr_bool(self, name: str, default: bool | None = None) -> bool:
        if default is not None and not self.has_attr(name):
            return default
        return bool(self._attr_value(name, ("b",), "a bool").b)

    def attr_str(self, name: str, default: str | None = None) -> str:
        if default is not None and not self.has_attr(name):
            return default
        return str(self._attr_value(name, ("s",), "a string").s.decode("utf-8", "replace"))

    def attr_ints(self, name: str, default: Sequence[int] | None = None) -> tuple[int, ...]:
        if default is not None and not self.has_attr(name):
            return tuple(default)
        return tuple(int(v) for v in self._attr_value(name, ("list", None), "a list of ints").list.i)

    def attr_tensor(self, name: str) -> np.ndarray:
        from tensorflow.python.framework import tensor_util

        return np.asarray(tensor_util.MakeNdarray(self._attr_value(name, ("tensor",), "a tensor").tensor))

    def attr_func(self, name: str) -> str:
        """The name of the function attribute ``name`` (If's branches, While's cond and body, ...)."""
        return str(self._attr_value(name, ("func",), "a function").func.name)

    def attr_funcs(self, name: str) -> tuple[str, ...]:
        """The function names of the list attribute ``name`` (Case's branches)."""
        return tuple(str(f.name) for f in self._attr_value(name, ("list", None), "a list of functions").list.func)

    def dtype_attr(self, name: str = "T", default: PrimitiveType | None = None) -> PrimitiveType:
        """The element type of the type attribute ``name``, as an HLO type (an error for one HLO lacks)."""
        if default is not None and not self.has_attr(name):
            return default
        dt = int(self._attr_value(name, ("type",), "a type").type)
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
    def shape(self, v: Value) -> Shape:
        """The array shape of ``v`` (every TF tensor is an array; a tuple here is a rule's bug)."""
        if not isinstance(v.shape, Shape):
            raise self.error(f"expected an array, got the tuple {v.shape}")
        return v.shape

    def dims(self, v: Value) -> tuple[int, ...]:
        return self.shape(v).dims

    def dtype(self, v: Value) -> PrimitiveType:
        return self.shape(v).dtype

    def normalize_axis(self, axis: int, rank: int, what: str = "axis") -> int:
        if not -rank <= axis < max(rank, 1):
            raise self.error(f"{what} {axis} is out of range for rank {rank}")
        return axis % rank if rank else 0

    # --- building blocks ---------------------------------------------------------
    def constant(self, value: npt.ArrayLike, dtype: PrimitiveType) -> Value:
        return self.b.constant(np.asarray(value).astype(dtype.numpy), dtype)

    def scalar(self, value: npt.ArrayLike, dtype: PrimitiveType) -> Value:
        return self.constant(np.asarray(value), dtype)

    def full(self, value: npt.ArrayLike, like: Value, dtype: PrimitiveType | None = None) -> Value:
        """A broadcast scalar with the dims of ``like``."""
        dtype = dtype or self.dtype(like)
        return self.broadcast_to(self.scalar(value, dtype), self.dims(like))

    def convert(self, v: Value, dtype: PrimitiveType) -> Value:
        if self.dtype(v) == dtype:
            return v
        return self.b.convert(v, shape=Shape.array(dtype, self.dims(v)))

    def reshape(self, v: Value, dims: Sequence[int]) -> Value:
        dims = tuple(int(d) for d in dims)
        if self.dims(v) == dims:
            return v
        return self.b.reshape(v, shape=Shape.array(self.dtype(v), dims))

    def broadcast_in_dim(self, v: Value, dims: Sequence[int], mapping: Sequence[int]) -> Value:
        dims = tuple(dims)
        if self.dims(v) == dims and tuple(mapping) == tuple(range(len(dims))):
            return v
        return self.b.broadcast(v, dimensions=tuple(mapping), shape=Shape.array(self.dtype(v), dims))

    def broadcast_to(self, v: Value, dims: Sequence[int]) -> Value:
        """NumPy-style broadcast of ``v`` to ``dims`` (size-1 dims are stretched)."""
        dims = tuple(dims)
        src = self.dims(v)
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
        dims = self.broadcast_shapes(*(self.dims(v) for v in values))
        return [self.broadcast_to(v, dims) for v in values]

    def binary(self, opcode: Opcode, x: Value, y: Value, **attrs: Any) -> Value:
        """An elementwise binary op with NumPy broadcasting of its operands."""
        x, y = self.broadcast_all(x, y)
        return self.b.op(opcode, x, y, **attrs)

    def compare(self, x: Value, y: Value, direction: str) -> Value:
        x, y = self.broadcast_all(x, y)
        return self.b.compare(x, y, direction=ComparisonDirection(direction))

    def select(self, pred: Value, on_true: Value, on_false: Value) -> Value:
        pred, on_true, on_false = self.broadcast_all(pred, on_true, on_false)
        return self.b.select(pred, on_true, on_false)

    def reduce(self, v: Value, axes: Sequence[int], opcode: Opcode, init: npt.ArrayLike) -> Value:
        """Reduce ``v`` over ``axes`` with a scalar binary ``opcode`` and initial value ``init``."""
        dtype = self.dtype(v)
        axes = tuple(sorted(set(axes)))
        init_v = self.scalar(init, dtype)
        return self.b.reduce(v, init_v, dimensions=axes, to_apply=self.scalar_computation(opcode, dtype))

    def scalar_computation(self, opcode: Opcode, dtype: PrimitiveType) -> HloComputation:
        """``(a, b) -> opcode(a, b)`` on scalars of ``dtype``, built once per module."""
        return self._lowering.scalar_computation(opcode, dtype)

    def computation(self, key: str, build: Callable[[ComputationBuilder], Value]) -> HloComputation:
        """A helper computation built once per module by ``build(ComputationBuilder) -> Value`` (root)."""
        return self._lowering.helper_computation(key, build)
