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

Constant elements (``Uniform``): while_v2's gradient pushes values such as a list's length or element
shape onto accumulator lists in the forward loop and pops them in the backward loop, where they size a
``TensorListReserve`` and so must be compile-time constants. A list records when every element it
holds is one compile-time constant (``Uniform``), also across loops, so reading it yields that constant.

A ``ListValue`` never reaches HLO as a tuple: across While/If/Case boundaries it is two elements of the
flat tuple (``ListSpec`` describes them; ``flatten``/``unflatten`` convert), and it never is a cluster
input or output (clustering keeps every list inside one cluster).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Sequence, Union

import numpy as np

from hlo.builder import Value
from hlo.dtypes import PrimitiveType
from hlo.shapes import Shape, ShapeLike, array_shape, scalar

if TYPE_CHECKING:
    from hlo.lowering.context import LoweringContext


@dataclass(frozen=True)
class Uniform:
    """What every element of a list is known to be.

    ``kind``: ``"none"`` (no element written yet), ``"value"`` (every element is ``value``, flat), or
    ``"entry"`` (inside a loop body: the elements the list entered the iteration with, then, when
    ``value`` is set, pushes of ``value``).
    """

    kind: str
    value: tuple | None = None

    def array(self, dtype: PrimitiveType, dims: tuple[int, ...]) -> np.ndarray:
        return np.asarray(self.value, dtype.numpy).reshape(dims)


NOTHING_WRITTEN = Uniform("none")
ENTRY = Uniform("entry")


def after_write(u: Uniform | None, value: tuple | None) -> Uniform | None:
    """``u`` after writing an element: ``value`` (flat) when it is a compile-time constant, else None."""
    if u is None or value is None:
        return None
    if u.kind == "none" or (u.kind == "value" and u.value == value):
        return Uniform("value", value)
    if u.kind == "entry" and u.value in (None, value):
        return Uniform("entry", value)
    return None


def after_loop(entry: Uniform | None, result: Uniform | None) -> Uniform | None:
    """A list's ``Uniform`` after a loop it entered as ``entry`` whose body (the list bound as ``ENTRY``)
    returns it as ``result``."""
    if result is None or entry is None:
        return None
    if result.kind != "entry":
        return result  # a list the body made afresh
    if result.value is None:
        return entry
    return after_write(entry, result.value)


@dataclass(frozen=True)
class ListSpec:
    """The static type of a list crossing a computation boundary: two flat tuple elements. ``uniform``
    (not part of the type) is what the list's elements are known to be where it is bound."""

    dtype: PrimitiveType
    max_size: int
    element_dims: tuple[int, ...]
    uniform: Uniform | None = None

    def same_type(self, other: "ListSpec") -> bool:
        return (self.dtype, self.max_size, self.element_dims) == (other.dtype, other.max_size, other.element_dims)

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
    uniform: Uniform | None = None  # what every element is known to be (None: nothing known)

    @property
    def spec(self) -> ListSpec | None:
        if self.buffer is None or self.element_dims is None:
            return None
        return ListSpec(self.dtype, self.max_size, self.element_dims, self.uniform)

    def with_(self, **changes: Any) -> "ListValue":
        return replace(self, **changes)

    @staticmethod
    def of(buffer: Value, length: Value) -> "ListValue":
        shape = array_shape(buffer.shape)
        return ListValue(shape.dtype, shape.dims[0], tuple(shape.dims[1:]), buffer, length)


Item = Union[Value, ListValue]  # what a TF tensor is while lowering
Slot = Union[ShapeLike, ListSpec]  # its static type at a computation boundary


def slot_of(ctx: LoweringContext, item: Item, what: str) -> Slot:
    """The boundary type of ``item`` (``what`` names it in the error for a list without a buffer)."""
    if isinstance(item, ListValue):
        spec = item.spec
        if spec is None:
            raise ctx.error(f"{what}: a TensorList whose element shape is not known yet (no element was written) "
                            "cannot cross a loop or branch boundary: give the TensorArray/TensorList an element_shape")
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
            out.append(ListValue(s.dtype, s.max_size, s.element_dims, flat[k], flat[k + 1], s.uniform))
            k += 2
        else:
            out.append(flat[k])
            k += 1
    return out


def zeros_like_list(ctx: LoweringContext, lst: ListValue) -> ListValue:
    """TF's ZerosLike of a list (``ctx``: the node's LoweringContext): same length and size, zero elements."""
    if lst.buffer is None:
        return lst
    dims = array_shape(lst.buffer.shape).dims
    return lst.with_(buffer=ctx.broadcast_to(ctx.scalar(0, lst.dtype), dims), uniform=None)


def add_lists(ctx: LoweringContext, items: Sequence[Item]) -> ListValue:
    """TF's AddN of lists (gradients): element-wise sums of lists of one size; a list with no element
    written yet counts as zeros."""
    lists = [x for x in items if isinstance(x, ListValue)]
    if len(lists) != len(items):
        raise ctx.error("AddN mixes TensorLists and tensors")
    written = [x for x in lists if x.buffer is not None]
    buffers = [x.buffer for x in written if x.buffer is not None]
    if not buffers:
        return lists[0]
    total = buffers[0]
    for x, buffer in zip(written[1:], buffers[1:]):
        if array_shape(buffer.shape) != array_shape(total.shape):
            raise ctx.error(f"AddN of lists of different sizes or element shapes: {x.spec} and {written[0].spec}")
        total = ctx.b.add(total, buffer)
    return written[0].with_(buffer=total, uniform=None)


def slot_compatible(a: Slot, b: Slot) -> bool:
    if isinstance(a, ListSpec) or isinstance(b, ListSpec):
        return isinstance(a, ListSpec) and isinstance(b, ListSpec) and a.same_type(b)
    return a.compatible(b)


__all__ = ["ENTRY", "NOTHING_WRITTEN", "Uniform", "after_loop", "after_write", "Item", "add_lists", "ListSpec", "ListValue", "Slot", "flat_shapes", "flatten", "slot_compatible", "slot_of",
           "unflatten", "zeros_like_list"]
