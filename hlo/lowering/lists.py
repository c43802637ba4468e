"""TensorLists inside a cluster: a (buffer, length) pair of HLO values, as tf2xla represents them.

A TF TensorList (a variant tensor: what ``tf.TensorArray``, Keras's recurrent layers and while_v2's
gradient accumulators use) becomes a ``ListValue`` while lowering:

* ``buffer``: an array ``[max_size, *element_dims]`` of the element type holding every element slot;
* ``length``: an s32 scalar, the number of elements the list holds (pushed, reserved or given).

Reads and writes are dynamic slices and dynamic updates of the buffer's leading dimension, so a list
needs a static element shape and a static ``max_size`` (a reserved size, a tensor's leading dimension,
or ``max_num_elements``). A list whose element shape is not known when it is created (a
``TensorListReserve`` with ``element_shape=-1``) has no buffer until its first write fixes the shape
(``buffer is None``).

A ``ListValue`` never reaches HLO as a tuple: across While/If/Case boundaries it is two elements of the
flat tuple (``ListSpec`` describes them; ``flatten``/``unflatten`` convert), and it never is a cluster
input or output (clustering keeps every list inside one cluster).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence, Union

from hlo.builder import Value
from hlo.dtypes import PrimitiveType
from hlo.shapes import Shape, ShapeLike, array_shape, scalar


@dataclass(frozen=True)
class ListSpec:
    """The static type of a list crossing a computation boundary: two flat tuple elements."""

    dtype: PrimitiveType
    max_size: int
    element_dims: tuple[int, ...]

    @property
    def shapes(self) -> tuple[Shape, Shape]:
        return Shape.array(self.dtype, (self.max_size,) + self.element_dims), scalar(PrimitiveType.S32)

    def short(self) -> str:
        dims = ",".join(str(d) for d in self.element_dims)
        return f"list<{self.dtype.value}[{dims}] x {self.max_size}>"

    def __str__(self) -> str:
        return self.short()


@dataclass(frozen=True)
class ListValue:
    """A TensorList being lowered (see the module docstring); ``element_dims`` None: not known yet."""

    dtype: PrimitiveType
    max_size: int
    element_dims: tuple[int, ...] | None
    buffer: Value | None
    length: Value

    @property
    def spec(self) -> ListSpec | None:
        if self.buffer is None or self.element_dims is None:
            return None
        return ListSpec(self.dtype, self.max_size, self.element_dims)

    def with_(self, **changes) -> "ListValue":
        return replace(self, **changes)

    @staticmethod
    def of(buffer: Value, length: Value) -> "ListValue":
        shape = array_shape(buffer.shape)
        return ListValue(shape.dtype, shape.dims[0], tuple(shape.dims[1:]), buffer, length)


Item = Union[Value, ListValue]  # what a TF tensor is while lowering
Slot = Union[ShapeLike, ListSpec]  # its static type at a computation boundary


def slot_of(item: Item, fail) -> Slot:
    """The boundary type of ``item``; ``fail(message)`` makes the error for a list without a buffer."""
    if isinstance(item, ListValue):
        spec = item.spec
        if spec is None:
            raise fail("a TensorList whose element shape is not known yet (no element was written) cannot "
                       "cross a loop or branch boundary: give the TensorArray/TensorList an element_shape")
        return spec
    return item.shape


def flat_shapes(slots: Sequence[Slot]) -> list[ShapeLike]:
    out: list[ShapeLike] = []
    for s in slots:
        out.extend(s.shapes if isinstance(s, ListSpec) else (s,))
    return out


def flatten(items: Sequence[Item]) -> list[Value]:
    out: list[Value] = []
    for item in items:
        if isinstance(item, ListValue):
            assert item.buffer is not None, "slot_of refuses lists without a buffer"
            out.extend((item.buffer, item.length))
        else:
            out.append(item)
    return out


def unflatten(slots: Sequence[Slot], flat: Sequence[Value]) -> list[Item]:
    """The items ``flatten`` made ``flat`` from, given their boundary types."""
    out: list[Item] = []
    k = 0
    for s in slots:
        if isinstance(s, ListSpec):
            out.append(ListValue(s.dtype, s.max_size, s.element_dims, flat[k], flat[k + 1]))
            k += 2
        else:
            out.append(flat[k])
            k += 1
    return out


def zeros_like_list(ctx, lst: ListValue) -> ListValue:
    """TF's ZerosLike of a list (``ctx``: the node's LoweringContext): same length and size, zero elements."""
    if lst.buffer is None:
        return lst
    dims = array_shape(lst.buffer.shape).dims
    return lst.with_(buffer=ctx.broadcast_to(ctx.scalar(0, lst.dtype), dims))


def slot_compatible(a: Slot, b: Slot) -> bool:
    if isinstance(a, ListSpec) or isinstance(b, ListSpec):
        return a == b
    return a.compatible(b)


def slot_short(s: Slot) -> str:
    return s.short()


__all__ = ["Item", "ListSpec", "ListValue", "Slot", "flat_shapes", "flatten", "slot_compatible", "slot_of",
           "slot_short", "unflatten", "zeros_like_list"]
