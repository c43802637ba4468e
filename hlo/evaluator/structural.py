"""Evaluator rules that create, reshape and move data: constant, iota, broadcast,
reshape, bitcast, transpose, slice, concatenate, pad, reverse, tuples, tokens, ids.

Every rule also works under a batched call (``Evaluator.call(..., batch=)``),
where values carry extra leading dims: the number of batch dims is the value's
rank minus the rank the HLO declares for it.

* A token is represented by ``TOKEN``, an empty (shape ``(0,)``) bool array;
  after-all returns it and nothing reads its contents.
* partition-id and replica-id are 0: the evaluator runs one replica, one partition.
* bitcast reinterprets the physical buffer: the operand is read in its layout's
  major-to-minor order and the result written in its own. With default layouts
  that is a reshape; a dtype change of equal total size reinterprets the bytes.
  Tiled layouts are not supported.
* get-dimension-size returns the static size and set-dimension-size passes its
  operand through: values carry no dynamic sizes.
"""

from __future__ import annotations

import weakref

import numpy as np

from hlo.errors import HloEvaluationError
from hlo.evaluator import Evaluator, eval_rule
from hlo.evaluator.conversions import convert_array
from hlo.ir import HloComputation, HloInstruction
from hlo.opcodes import Opcode
from hlo.shapes import Shape, ShapeLike, TupleShape, array_shape

TOKEN = np.zeros((0,), np.bool_)
TOKEN.setflags(write=False)

_OWNERS: "weakref.WeakKeyDictionary[Evaluator, dict[int, HloComputation]]" = weakref.WeakKeyDictionary()


def operand_shapes(ev: Evaluator, inst: HloInstruction) -> list[ShapeLike]:
    """The declared shapes of ``inst``'s operands (looked up in the computation holding ``inst``)."""
    owners = _OWNERS.get(ev)
    if owners is None:
        owners = {id(i): c for c in ev.module.computations for i in c.instructions}
        _OWNERS[ev] = owners
    comp = owners.get(id(inst))
    if comp is None:
        raise HloEvaluationError(f"%{inst.name} is not an instruction of module {ev.module.name}")
    return [comp[o].shape for o in inst.operands]


def operand_array_shapes(ev: Evaluator, inst: HloInstruction) -> list[Shape]:
    """``operand_shapes`` of an instruction whose operands are all arrays."""
    return [array_shape(s) for s in operand_shapes(ev, inst)]


def batch_dims(values: list, shapes: list[ShapeLike]) -> tuple[int, ...]:
    """Leading dims the values carry beyond their declared shapes (``()`` outside batched calls)."""
    return _first_batch(values, shapes) or ()


def _first_batch(values, shapes) -> tuple[int, ...] | None:
    for v, s in zip(values, shapes):
        if isinstance(s, TupleShape):
            found = _first_batch(list(v), list(s.elements))
            if found is not None:
                return found
        elif s.dtype.is_array_type:
            v = np.asarray(v)
            return v.shape[:v.ndim - s.rank]
    return None


def _lead(nb: int) -> tuple[slice, ...]:
    return (slice(None),) * nb


# --- leaves -----------------------------------------------------------------


@eval_rule(Opcode.CONSTANT)
def _constant(ev, inst, vals):
    lit = inst.literal
    if lit is None or lit.is_elided:
        raise HloEvaluationError(f"%{inst.name} (constant): {inst.shape} was elided in the HLO text ({{...}}); "
                                 "its values are unknown")
    return lit.to_numpy()


@eval_rule(Opcode.IOTA)
def _iota(ev, inst, vals):
    dims = inst.shape.dims
    d = inst.attr("iota_dimension")
    if not 0 <= d < len(dims):
        raise HloEvaluationError(f"%{inst.name}: iota_dimension={d} out of range for {inst.shape}")
    column = [1] * len(dims)
    column[d] = dims[d]
    values = convert_array(np.arange(dims[d], dtype=np.int64), inst.shape.dtype)  # as XLA converts s64
    return np.broadcast_to(values.reshape(column), dims)


@eval_rule(Opcode.AFTER_ALL)
def _after_all(ev, inst, vals):
    return TOKEN


@eval_rule(Opcode.PARTITION_ID, Opcode.REPLICA_ID)
def _id(ev, inst, vals):
    return np.uint32(0)


# --- shape changes ----------------------------------------------------------


@eval_rule(Opcode.BROADCAST)
def _broadcast(ev, inst, vals):
    (x,) = vals
    dims = inst.attr("dimensions", ())
    out = inst.shape.dims
    nb = x.ndim - len(dims)
    order = sorted(range(len(dims)), key=lambda i: dims[i])  # operand dims in output order
    moved = np.transpose(x, list(range(nb)) + [nb + i for i in order])
    shape = list(x.shape[:nb]) + [1] * len(out)
    for i in order:
        shape[nb + dims[i]] = x.shape[nb + i]
    return np.broadcast_to(moved.reshape(shape), x.shape[:nb] + out).copy()


@eval_rule(Opcode.RESHAPE)
def _reshape(ev, inst, vals):
    (x,) = vals
    (src,) = operand_array_shapes(ev, inst)
    return np.reshape(x, x.shape[:x.ndim - src.rank] + array_shape(inst.shape).dims)


@eval_rule(Opcode.DYNAMIC_RESHAPE)
def _dynamic_reshape(ev, inst, vals):
    """Reshape to the run-time sizes (operands 1..), placed at the start of the result's bounds."""
    x = vals[0]
    src = operand_array_shapes(ev, inst)[0]
    if x.ndim != src.rank or any(np.ndim(s) != 0 for s in vals[1:]):
        raise HloEvaluationError(f"%{inst.name}: dynamic-reshape cannot run elementwise on a batch")
    sizes = [int(np.asarray(s)) for s in vals[1:]]
    bounds = array_shape(inst.shape).dims
    if any(not 0 <= s <= b for s, b in zip(sizes, bounds)) or int(np.prod(sizes)) != x.size:
        raise HloEvaluationError(f"%{inst.name}: cannot reshape {list(x.shape)} to sizes {sizes} "
                                 f"within bounds {list(bounds)}")
    out = np.zeros(bounds, x.dtype)  # XLA leaves the part beyond the sizes unspecified
    out[tuple(slice(0, s) for s in sizes)] = x.reshape(sizes)
    return out


def _major_to_minor(shape: Shape, what: str) -> list[int]:
    layout = shape.layout
    if layout is None or not layout.minor_to_major:
        return list(range(shape.rank))
    if layout.extra:
        raise HloEvaluationError(f"bitcast of {what} {shape}: tiled or annotated layouts are not supported")
    return list(reversed(layout.minor_to_major))


@eval_rule(Opcode.BITCAST)
def _bitcast(ev, inst, vals):
    (x,) = vals
    (src,) = operand_array_shapes(ev, inst)
    dst = array_shape(inst.shape)
    nb = x.ndim - src.rank
    batch = x.shape[:nb]
    physical = np.transpose(x, list(range(nb)) + [nb + d for d in _major_to_minor(src, "operand")])
    out_order = _major_to_minor(dst, "result")
    out_physical = tuple(dst.dims[d] for d in out_order)
    if src.dtype is not dst.dtype:
        if src.dtype.bit_width % 8 or dst.dtype.bit_width % 8 or src.byte_size != dst.byte_size:
            raise HloEvaluationError(f"%{inst.name}: bitcast {src} -> {dst} does not keep the byte size")
        flat = np.array(physical, order="C").reshape(batch + (src.num_elements,))
        physical = flat.view(dst.dtype.numpy)  # reinterprets the minor (only) dim's bytes
    elif src.num_elements != dst.num_elements:
        raise HloEvaluationError(f"%{inst.name}: bitcast {src} -> {dst} changes the element count")
    y = np.reshape(physical, batch + out_physical)
    return np.transpose(y, list(range(nb)) + [nb + out_order.index(d) for d in range(dst.rank)])


@eval_rule(Opcode.TRANSPOSE)
def _transpose(ev, inst, vals):
    (x,) = vals
    perm = inst.attr("dimensions")
    nb = x.ndim - len(perm)
    return np.transpose(x, list(range(nb)) + [nb + p for p in perm]).copy()


@eval_rule(Opcode.SLICE)
def _slice(ev, inst, vals):
    (x,) = vals
    dims = inst.attr("slice")
    nb = x.ndim - len(dims)
    return x[_lead(nb) + tuple(slice(d.start, d.limit, d.stride) for d in dims)].copy()


@eval_rule(Opcode.CONCATENATE)
def _concatenate(ev, inst, vals):
    (dim,) = inst.attr("dimensions")
    nb = vals[0].ndim - inst.shape.rank
    return np.concatenate(vals, axis=nb + dim)


@eval_rule(Opcode.PAD)
def _pad(ev, inst, vals):
    x, value = vals
    pads = inst.attr("padding")
    nb = x.ndim - len(pads)
    sizes, dest, crop = [], [], []
    for n, p in zip(x.shape[nb:], pads):
        low, high = max(p.low, 0), max(p.high, 0)
        core = n + max(n - 1, 0) * p.interior  # the operand with interior padding
        size = low + core + high
        sizes.append(size)
        dest.append(slice(low, low + core, p.interior + 1))
        crop.append(slice(-min(p.low, 0), size + min(p.high, 0)))  # negative padding removes edges
    value = np.asarray(value)
    out = np.empty(x.shape[:nb] + tuple(sizes), x.dtype)
    out[...] = value.reshape(value.shape + (1,) * len(pads))
    out[_lead(nb) + tuple(dest)] = x
    return out[_lead(nb) + tuple(crop)]


@eval_rule(Opcode.REVERSE)
def _reverse(ev, inst, vals):
    (x,) = vals
    nb = x.ndim - inst.shape.rank
    return np.flip(x, axis=tuple(nb + d for d in inst.attr("dimensions", ()))).copy()


@eval_rule(Opcode.GET_DIMENSION_SIZE)
def _get_dimension_size(ev, inst, vals):
    (x,) = vals
    (src,) = operand_array_shapes(ev, inst)
    (d,) = inst.attr("dimensions")
    return np.int32(x.shape[x.ndim - src.rank + d])


@eval_rule(Opcode.SET_DIMENSION_SIZE)
def _set_dimension_size(ev, inst, vals):
    """Values keep their static bound; a size below it only marks the tail as padding (kept as is)."""
    x, size = vals
    (src, _) = operand_array_shapes(ev, inst)
    (d,) = inst.attr("dimensions")
    bound = src.dims[d]
    if np.any((np.asarray(size) < 0) | (np.asarray(size) > bound)):
        raise HloEvaluationError(f"%{inst.name}: set-dimension-size {np.asarray(size).tolist()} outside [0, {bound}]")
    return x


# --- tuples and barriers -----------------------------------------------------


@eval_rule(Opcode.TUPLE)
def _tuple(ev, inst, vals):
    return tuple(vals)


@eval_rule(Opcode.GET_TUPLE_ELEMENT)
def _get_tuple_element(ev, inst, vals):
    (t,) = vals
    if not isinstance(t, tuple):
        raise HloEvaluationError(f"%{inst.name}: get-tuple-element of a non-tuple value")
    return t[inst.attr("index")]


@eval_rule(Opcode.OPTIMIZATION_BARRIER)
def _optimization_barrier(ev, inst, vals):
    return vals[0]
