"""TensorList ops (``tf.TensorArray``, Keras recurrent layers, while_v2 gradient accumulators) as tf2xla does them.

A list is a ``ListValue`` (``hlo/lowering/lists.py``): a buffer ``[max_size, *element_dims]`` and an s32
length. Creating a list fixes ``max_size``: ``TensorListReserve``'s ``num_elements``,
``EmptyTensorList``'s ``max_num_elements`` (unbounded, -1, is refused), ``TensorListFromTensor``'s leading
dimension. Reads and writes are dynamic slices and dynamic updates of the leading dimension:

* ``GetItem``/``SetItem``/``PushBack``/``PopBack``: one element at an index (``PushBack`` at the length,
  ``PopBack`` at length - 1); like XLA, an index outside the buffer is clamped (TF's kernels raise);
* ``Stack``: the first ``length`` elements, so the length must be known when compiling (a constant, or a
  loop that leaves it unchanged) unless the node's ``num_elements`` says the list is full;
* ``Gather``/``Scatter*``: an HLO gather/scatter of whole elements;
* ``Split``: a reshape, when every piece has one length (``TensorListConcatV2`` is not lowered: TF's shape
  inference leaves its result's leading dimension unknown, so clustering would not take it anyway).

A list whose element shape is unknown when it is created gets its buffer at its first write; reading it
before that is an error naming the node.
"""

from __future__ import annotations

from typing import Callable, Sequence, TypeVar

import numpy as np

from hlo.builder import Value
from hlo.dtypes import PrimitiveType
from hlo.lowering import tf_types
from hlo.lowering.context import LoweringContext
from hlo.lowering.lists import NOTHING_WRITTEN, ListValue, after_write
from hlo.lowering.ops._shape_util import combiner, slice_axis
from hlo.lowering.registry import Rule, register_lowering

P = PrimitiveType
_R = TypeVar("_R", bound=Rule)


def _list_rule(*op_types: str, const_inputs: Sequence[int] = ()) -> Callable[[_R], _R]:
    """Register a TensorList op's rule: element types checked on ``element_dtype``, lists taken."""
    return register_lowering(*op_types, dtypes=tf_types.ALL, type_attrs=("element_dtype",), const_inputs=const_inputs,
                             lists=True)


def _list(ctx: LoweringContext, i: int = 0) -> ListValue:
    v = ctx.inputs[i]
    if not isinstance(v, ListValue):
        raise ctx.error(f"input {i} is not a TensorList")
    return v


def _element_shape(ctx: LoweringContext, i: int) -> tuple[int, ...] | None:
    """The constant ``element_shape`` input ``i``: its dims, or None when any is unknown (-1 or rank -1)."""
    dims = [int(d) for d in np.asarray(ctx.const_input(i)).reshape(-1)]
    if np.asarray(ctx.const_input(i)).ndim == 0 or any(d < 0 for d in dims):
        return None
    return tuple(dims)


def _s32(ctx: LoweringContext, v: Value) -> Value:
    return ctx.convert(ctx.reshape(v, ()), P.S32)


def _zeros(ctx: LoweringContext, dtype: PrimitiveType, dims: tuple[int, ...]) -> Value:
    return ctx.broadcast_to(ctx.scalar(0, dtype), dims)


def _unknown(ctx: LoweringContext, what: str) -> Exception:
    return ctx.error(f"cannot {what} a TensorList whose element shape is not known yet (nothing was written "
                     "to it): give the TensorArray/TensorList an element_shape")


def _buffer(ctx: LoweringContext, lst: ListValue, what: str) -> Value:
    if lst.buffer is None:
        raise _unknown(ctx, what)
    return lst.buffer


def _check_dtype(ctx: LoweringContext, lst: ListValue) -> None:
    want = ctx.dtype_attr("element_dtype")
    if lst.dtype != want:
        raise ctx.error(f"the list holds {lst.dtype.value} but the node reads {want.value}")


UNIFORM_LIMIT = 64  # elements of a constant list element that is tracked (lists.Uniform)


def _read(ctx: LoweringContext, lst: ListValue, index: Value) -> Value:
    """Element ``index`` (an s32 scalar) of ``lst``: a constant when every element is that constant."""
    buffer = _buffer(ctx, lst, "read")
    dims = ctx.dims(buffer)[1:]
    if lst.uniform is not None and lst.uniform.kind == "value":
        return ctx.constant(lst.uniform.array(lst.dtype, dims), lst.dtype)
    zero = ctx.scalar(0, P.S32)
    item = ctx.b.dynamic_slice(buffer, index, *([zero] * len(dims)), dynamic_slice_sizes=(1,) + dims)
    return ctx.reshape(item, dims)


def _write(ctx: LoweringContext, lst: ListValue, index: Value, item: Value) -> ListValue:
    """``lst`` with element ``index`` replaced by ``item`` (the first write of a list fixes its element shape)."""
    dims = ctx.dims(item)
    if ctx.dtype(item) != lst.dtype:
        raise ctx.error(f"cannot write {ctx.shape(item).short()} to a list of {lst.dtype.value}")
    if lst.element_dims is not None and tuple(lst.element_dims) != dims:
        raise ctx.error(f"cannot write an element of shape {list(dims)} to a list of elements of shape "
                        f"{list(lst.element_dims)}")
    buffer = lst.buffer if lst.buffer is not None else _zeros(ctx, lst.dtype, (lst.max_size,) + dims)
    zero = ctx.scalar(0, P.S32)
    updated = ctx.b.dynamic_update_slice(buffer, ctx.reshape(item, (1,) + dims), index, *([zero] * len(dims)))
    constant = (tuple(np.asarray(_value(ctx, item)).reshape(-1).tolist())
                if ctx._lowering.is_constant(item) and ctx.shape(item).num_elements <= UNIFORM_LIMIT else None)
    return lst.with_(buffer=updated, element_dims=dims, uniform=after_write(lst.uniform, constant))


def _new_list(ctx: LoweringContext, dims: tuple[int, ...] | None, max_size: int, length: Value) -> ListValue:
    dtype = ctx.dtype_attr("element_dtype")
    buffer = _zeros(ctx, dtype, (max_size,) + dims) if dims is not None else None
    return ListValue(dtype, max_size, dims, buffer, length)


@_list_rule("TensorListReserve", const_inputs=(0, 1))
def reserve(ctx: LoweringContext) -> ListValue:
    (n,) = ctx.const_ints(1)
    if n < 0:
        raise ctx.invalid_argument(f"num_elements must be >= 0, got {n}")
    return _new_list(ctx, _element_shape(ctx, 0), n, ctx.scalar(n, P.S32))


@_list_rule("EmptyTensorList", const_inputs=(0, 1))
def empty(ctx: LoweringContext) -> ListValue:
    (n,) = ctx.const_ints(1)
    if n < 0:
        raise ctx.error("EmptyTensorList without max_num_elements (an unbounded list) cannot be compiled: XLA "
                        "needs a bound on the list's size")
    return _new_list(ctx, _element_shape(ctx, 0), n, ctx.scalar(0, P.S32)).with_(uniform=NOTHING_WRITTEN)


@_list_rule("TensorListFromTensor")
def from_tensor(ctx: LoweringContext) -> ListValue:
    tensor = ctx.inputs[0]
    dims = ctx.dims(tensor)
    if not dims:
        raise ctx.invalid_argument("TensorListFromTensor needs a tensor of rank >= 1")
    return ListValue.of(tensor, ctx.scalar(dims[0], P.S32))


@_list_rule("TensorListGetItem")
def get_item(ctx: LoweringContext) -> Value:
    lst = _list(ctx)
    _check_dtype(ctx, lst)
    if lst.buffer is None:  # nothing written yet: TF returns zeros of the requested element shape
        dims = _element_shape(ctx, 2) if ctx._lowering.is_constant(ctx.inputs[2]) else None
        if dims is None:
            raise _unknown(ctx, "read")
        return _zeros(ctx, lst.dtype, dims)
    return _read(ctx, lst, _s32(ctx, ctx.inputs[1]))


@_list_rule("TensorListSetItem")
def set_item(ctx: LoweringContext) -> ListValue:
    if ctx.attr_bool("resize_if_index_out_of_bounds", False):
        raise ctx.error("resize_if_index_out_of_bounds=True (a list that grows) cannot be compiled")
    return _write(ctx, _list(ctx), _s32(ctx, ctx.inputs[1]), ctx.inputs[2])


@_list_rule("TensorListPushBack")
def push_back(ctx: LoweringContext) -> ListValue:
    lst = _list(ctx)
    if ctx._lowering.is_constant(lst.length) and int(_value(ctx, lst.length)) >= lst.max_size:
        raise ctx.error(f"TensorListPushBack onto a full list (max_num_elements {lst.max_size})")
    out = _write(ctx, lst, lst.length, ctx.inputs[1])
    return out.with_(length=ctx.b.add(lst.length, ctx.scalar(1, P.S32)))


@_list_rule("TensorListPopBack")
def pop_back(ctx: LoweringContext) -> list:
    lst = _list(ctx)
    _check_dtype(ctx, lst)
    last = ctx.b.subtract(lst.length, ctx.scalar(1, P.S32))
    return [lst.with_(length=last), _read(ctx, lst, last)]


@register_lowering("TensorListLength", lists=True, type_attrs=())
def length(ctx: LoweringContext) -> Value:
    return _list(ctx).length


@register_lowering("TensorListElementShape", lists=True, dtypes=frozenset({P.S32, P.S64}), type_attrs=("shape_type",))
def element_shape(ctx: LoweringContext) -> Value:
    lst = _list(ctx)
    if lst.element_dims is None:
        raise _unknown(ctx, "take the element shape of")
    return ctx.constant(np.asarray(lst.element_dims, np.int64), ctx.dtype_attr("shape_type"))


@_list_rule("TensorListStack", const_inputs=(1,))
def stack(ctx: LoweringContext) -> Value:
    lst = _list(ctx)
    _check_dtype(ctx, lst)
    if lst.buffer is None:
        dims = _element_shape(ctx, 1)
        n = ctx.attr_int("num_elements", -1)
        if dims is None or n < 0 or not _known_length(ctx, lst):
            raise _unknown(ctx, "stack")
        return _zeros(ctx, lst.dtype, (int(_value(ctx, lst.length)),) + dims)
    if _known_length(ctx, lst):
        return slice_axis(ctx, lst.buffer, 0, 0, int(_value(ctx, lst.length)))
    if ctx.attr_int("num_elements", -1) == lst.max_size:
        return lst.buffer
    raise ctx.error(f"TensorListStack of a list whose length is only known at run time (up to {lst.max_size} "
                    "elements) cannot be compiled: the result's shape would depend on it")


@_list_rule("TensorListGather")
def gather(ctx: LoweringContext) -> Value:
    lst = _list(ctx)
    _check_dtype(ctx, lst)
    buffer = _buffer(ctx, lst, "gather from")
    indices = ctx.inputs[1]
    rank, dims = len(ctx.dims(indices)), ctx.dims(buffer)[1:]
    return ctx.b.gather(buffer, indices, offset_dims=tuple(range(rank, rank + len(dims))), collapsed_slice_dims=(0,),
                        start_index_map=(0,), index_vector_dim=rank, slice_sizes=(1,) + dims)


def _scatter(ctx: LoweringContext, lst: ListValue, tensor: Value, indices: Value) -> ListValue:
    dims = ctx.dims(tensor)
    if len(ctx.dims(indices)) != 1 or not dims or dims[0] != ctx.dims(indices)[0]:
        raise ctx.invalid_argument(f"scatter needs a tensor whose leading dimension matches the indices, got "
                                   f"{list(dims)} and {list(ctx.dims(indices))}")
    if ctx.dtype(tensor) != lst.dtype:
        raise ctx.error(f"cannot scatter {ctx.shape(tensor).short()} into a list of {lst.dtype.value}")
    buffer = lst.buffer if lst.buffer is not None else _zeros(ctx, lst.dtype, (lst.max_size,) + dims[1:])
    out = ctx.b.scatter(buffer, indices, tensor, update_window_dims=tuple(range(1, len(dims))),
                        inserted_window_dims=(0,), scatter_dims_to_operand_dims=(0,), index_vector_dim=1,
                        to_apply=combiner(ctx, "replace", lst.dtype))
    return lst.with_(buffer=out, element_dims=tuple(dims[1:]), uniform=None)


@_list_rule("TensorListScatterIntoExistingList")
def scatter_into(ctx: LoweringContext) -> ListValue:
    return _scatter(ctx, _list(ctx), ctx.inputs[1], ctx.inputs[2])


@_list_rule("TensorListScatter", "TensorListScatterV2", const_inputs=(1, 3))
def scatter_new(ctx: LoweringContext) -> ListValue:
    """A new list of max(num_elements, max(indices) + 1) elements (indices known when compiling)."""
    indices = ctx.const_ints(1)
    n = max([ctx.const_ints(3)[0] if ctx.op_type == "TensorListScatterV2" else -1] + [i + 1 for i in indices])
    dims = ctx.dims(ctx.inputs[0])[1:]
    lst = ListValue(ctx.dtype_attr("element_dtype"), n, dims, None, ctx.scalar(n, P.S32))
    return _scatter(ctx, lst, ctx.inputs[0], ctx.inputs[1])


@_list_rule("TensorListSplit", const_inputs=(2,))
def split(ctx: LoweringContext) -> ListValue:
    """``tensor`` cut along dim 0 into pieces of ``lengths`` (known when compiling, all equal: every element of
    a buffer has one shape)."""
    tensor = ctx.inputs[0]
    dims, lengths = ctx.dims(tensor), ctx.const_ints(2)
    if not dims or sum(lengths) != dims[0] or any(n < 0 for n in lengths):
        raise ctx.invalid_argument(f"lengths {lengths} must be non-negative and sum to the leading dimension of "
                                   f"{list(dims)}")
    if len(set(lengths)) > 1:
        raise ctx.error(f"TensorListSplit into pieces of different lengths {lengths} cannot be compiled: a "
                        "compiled list holds elements of one shape")
    n, piece = len(lengths), (lengths[0] if lengths else 0)
    return ListValue.of(ctx.reshape(tensor, (n, piece) + dims[1:]), ctx.scalar(n, P.S32))


def _known_length(ctx: LoweringContext, lst: ListValue) -> bool:
    return ctx._lowering.is_constant(lst.length)


def _value(ctx: LoweringContext, v: Value) -> np.ndarray:
    return ctx._lowering.constant_value_of(v)
