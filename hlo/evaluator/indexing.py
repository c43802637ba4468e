"""Evaluator rules for gather, scatter, dynamic-slice and dynamic-update-slice.

gather: every output index splits into batch dims (those not in ``offset_dims``)
and offset dims. The batch part picks a start vector from ``start_indices``
(along ``index_vector_dim``; ``index_vector_dim == rank`` means a trailing
size-1 vector), scattered into operand dims by ``start_index_map``; an
operand dim in ``operand_batching_dims`` starts at the batch index of the
matching ``start_indices_batching_dims`` dim. Starts are clamped to
``[0, operand_dim - slice_size]`` as XLA does, so a slice never leaves the
operand. Offset dims walk the slice's dims that are neither collapsed nor
batching, in operand order. A gather of an empty operand gives zeros. With
``index_check=`` (TF's semantics, ``hlo/index_check.py``) an index outside the
operand raises ``HloInvalidArgumentError`` with TF's message instead.

scatter: the mirror image (``update_window_dims``, ``inserted_window_dims``,
``scatter_dims_to_operand_dims``, ``input_batching_dims``,
``scatter_indices_batching_dims``). An update window whose start is out of
bounds, or whose window would run past the operand, is skipped entirely (not
clamped). Updates are combined by ``to_apply`` in row-major order of the
scatter indices; N operands and N updates make a variadic scatter. With
``index_check=`` (TF's ScatterNd/TensorScatter* semantics) a bad index row, or
shapes TF refuses, raise ``HloInvalidArgumentError`` with TF's message.

dynamic-slice and dynamic-update-slice clamp their start indices so the slice
or the update fits in the operand.
"""

from __future__ import annotations

import numpy as np

from hlo.errors import HloInvalidArgumentError
from hlo.evaluator import Evaluator, eval_rule
from hlo.evaluator.callees import combine_at
from hlo.index_check import node_name, scatter_violation, violation
from hlo.ir import HloInstruction
from hlo.opcodes import Opcode
from hlo.shapes import array_shape


def _index_vectors(indices: np.ndarray, index_vector_dim: int) -> np.ndarray:
    """``indices`` with the index vector moved last (a trailing size-1 vector when dim == rank)."""
    if index_vector_dim == indices.ndim:
        return indices[..., None].astype(np.int64)
    return np.moveaxis(indices, index_vector_dim, -1).astype(np.int64)


def _starts(vectors: np.ndarray, rank: int, index_map, batching_dims, indices_batching_dims,
            index_vector_dim: int) -> np.ndarray:
    """Start positions [batch..., rank] in operand dims; zero where nothing is given."""
    batch_shape = vectors.shape[:-1]
    starts = np.zeros(batch_shape + (rank,), np.int64)
    for k, d in enumerate(index_map):
        starts[..., d] = vectors[..., k]
    for d, idx_dim in zip(batching_dims, indices_batching_dims):
        axis = idx_dim if idx_dim < index_vector_dim else idx_dim - 1
        shape = [1] * len(batch_shape)
        shape[axis] = batch_shape[axis]
        starts[..., d] = np.arange(batch_shape[axis]).reshape(shape)
    return starts


def _window_index(starts: np.ndarray, window_dims: list[int], window_shape: tuple[int, ...]) -> tuple:
    """Operand index arrays of dims ``batch + window_shape``: start plus offset along window dims."""
    nb, nw = starts.ndim - 1, len(window_dims)
    index = []
    for d in range(starts.shape[-1]):
        idx = starts[..., d].reshape(starts.shape[:-1] + (1,) * nw)
        if d in window_dims:
            j = window_dims.index(d)
            shape = [1] * (nb + nw)
            shape[nb + j] = window_shape[j]
            idx = idx + np.arange(window_shape[j]).reshape(shape)
        index.append(idx)
    return tuple(index)


@eval_rule(Opcode.GATHER)
def _gather(ev: Evaluator, inst: HloInstruction, vals: list[np.ndarray]):
    operand, indices = vals
    ivd = inst.attr("index_vector_dim", indices.ndim)
    offset_dims = list(inst.attr("offset_dims", ()))
    collapsed = set(inst.attr("collapsed_slice_dims", ()))
    batching = list(inst.attr("operand_batching_dims", ()))
    slice_sizes = list(inst.attr("slice_sizes"))
    check = inst.attr("index_check", None)
    if check is not None:
        problem = violation(check, operand.shape, indices, inst.attr("start_index_map", ()),
                            array_shape(inst.shape).num_elements, node_name(inst))
        if problem:
            raise HloInvalidArgumentError(problem)
    starts = _starts(_index_vectors(indices, ivd), operand.ndim, inst.attr("start_index_map", ()),
                     batching, inst.attr("start_indices_batching_dims", ()), ivd)
    starts = np.clip(starts, 0, np.maximum(np.array(operand.shape) - np.array(slice_sizes, np.int64), 0))
    window_dims = [d for d in range(operand.ndim) if d not in collapsed and d not in batching]
    window_shape = tuple(slice_sizes[d] for d in window_dims)
    result_dims = starts.shape[:-1] + window_shape
    if 0 in result_dims or operand.size == 0:
        result = np.zeros(result_dims, operand.dtype)
    else:
        result = operand[_window_index(starts, window_dims, window_shape)]
    # result is [batch..., offsets...]; the output puts offsets at offset_dims, batch dims elsewhere in order.
    rank = result.ndim
    nb = rank - len(window_dims)
    batch_positions = [d for d in range(rank) if d not in offset_dims]
    perm = [0] * rank
    for i, d in enumerate(batch_positions):
        perm[d] = i
    for j, d in enumerate(offset_dims):
        perm[d] = nb + j
    return np.transpose(result, perm)


@eval_rule(Opcode.SCATTER)
def _scatter(ev: Evaluator, inst: HloInstruction, vals: list[np.ndarray]):
    n = (len(vals) - 1) // 2
    operands, indices, updates = vals[:n], vals[n], vals[n + 1:]
    ivd = inst.attr("index_vector_dim", indices.ndim)
    window_dims_u = list(inst.attr("update_window_dims", ()))
    inserted = set(inst.attr("inserted_window_dims", ()))
    batching = list(inst.attr("input_batching_dims", ()))
    shape = operands[0].shape
    check = inst.attr("index_check", None)
    if check is not None:
        problem = scatter_violation(check, shape, indices, updates[0].size, node_name(inst))
        if problem:
            raise HloInvalidArgumentError(problem)
    starts = _starts(_index_vectors(indices, ivd), len(shape), inst.attr("scatter_dims_to_operand_dims", ()),
                     batching, inst.attr("scatter_indices_batching_dims", ()), ivd)
    window_dims = [d for d in range(len(shape)) if d not in inserted and d not in batching]
    scatter_dims_u = [d for d in range(updates[0].ndim) if d not in window_dims_u]
    window_shape = tuple(updates[0].shape[d] for d in window_dims_u)
    sizes = np.ones(len(shape), np.int64)
    sizes[window_dims] = window_shape
    in_bounds = np.all((starts >= 0) & (starts + sizes <= np.array(shape, np.int64)), axis=-1)
    perm = scatter_dims_u + window_dims_u  # updates as [batch..., window...], row-major = XLA's order
    ups = [np.transpose(u, perm).astype(o.dtype) for u, o in zip(updates, operands)]
    outs = [o.copy().reshape(-1) for o in operands]
    if outs[0].size and ups[0].size:
        index = [np.clip(np.broadcast_to(i, ups[0].shape), 0, max(s - 1, 0))
                 for i, s in zip(_window_index(starts, window_dims, window_shape), shape)]
        targets = np.ravel_multi_index(index, shape) if shape else np.zeros(ups[0].shape, np.int64)
        keep = np.broadcast_to(in_bounds.reshape(in_bounds.shape + (1,) * len(window_shape)), ups[0].shape)
        combine_at(ev, inst.attr("to_apply").name, outs, targets[keep], [u[keep] for u in ups])
    results = tuple(o.reshape(shape) for o in outs)
    return results if inst.shape.is_tuple else results[0]


def _dynamic_starts(vals: list[np.ndarray], rank: int) -> list[int]:
    """Start indices given as one scalar operand per dim (or, in old HLO, one vector operand)."""
    if len(vals) == 1 and vals[0].ndim == 1:
        vals = list(vals[0])
    elif len(vals) != rank or any(v.ndim != 0 for v in vals):
        raise ValueError(f"expected {rank} scalar start indices")
    if len(vals) != rank:
        raise ValueError(f"expected {rank} start indices, got {len(vals)}")
    return [int(v) for v in vals]


def _clamped(starts: list[int], dims, sizes) -> tuple[slice, ...]:
    out = []
    for s, dim, size in zip(starts, dims, sizes):
        s = min(max(s, 0), dim - size)
        out.append(slice(s, s + size))
    return tuple(out)


@eval_rule(Opcode.DYNAMIC_SLICE)
def _dynamic_slice(ev: Evaluator, inst: HloInstruction, vals: list[np.ndarray]):
    operand = vals[0]
    sizes = inst.attr("dynamic_slice_sizes", array_shape(inst.shape).dims)
    if any(s > d for s, d in zip(sizes, operand.shape)):
        raise ValueError(f"slice sizes {list(sizes)} exceed operand dims {list(operand.shape)}")
    return operand[_clamped(_dynamic_starts(vals[1:], operand.ndim), operand.shape, sizes)].copy()


@eval_rule(Opcode.DYNAMIC_UPDATE_SLICE)
def _dynamic_update_slice(ev: Evaluator, inst: HloInstruction, vals: list[np.ndarray]):
    operand, update = vals[0], vals[1]
    if any(u > d for u, d in zip(update.shape, operand.shape)):
        raise ValueError(f"update dims {list(update.shape)} exceed operand dims {list(operand.shape)}")
    out = operand.copy()
    out[_clamped(_dynamic_starts(vals[2:], operand.ndim), operand.shape, update.shape)] = update
    return out
