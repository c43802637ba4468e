"""Fold shape arithmetic whose value TF's shape inference cannot see, so the tensors after it get static
shapes and can be compiled (what tf2xla gets from XLA's constant analysis and value inference):

- ``BroadcastGradientArgs(s0, s1)`` / ``BroadcastArgs(s0, s1)`` of shapes that are known (the gradients
  of batched ``MatMul``/``BatchMatMulV2`` with broadcast batch dims, Keras ``MultiHeadAttention`` and
  ``EinsumDense``): TF infers their outputs as ``[?]``, so the ``Sum``/``Reshape`` after them lose
  their shapes. The node becomes an ``IdentityN`` (same name, same outputs) of new ``Const`` nodes
  holding TF's result (``BCast``: ``r_j`` lists the dims where input ``j``, left-padded with 1s, is 1).
- a clamp with an empty range, ``Minimum(a, Maximum(b, x))`` with constants ``a <= b`` (and
  ``Maximum(a, Minimum(b, x))`` with ``a >= b``), is ``a`` whatever ``x`` is: ``tf.math.bincount``
  with ``minlength == maxlength`` (Keras ``CategoryEncoding``) sizes its ``DenseBincount`` so.
  The node becomes a ``Const``.
- a ``StridedSlice`` at a run-time offset, ``x[:, b:b + c, ...]`` (Keras ``RandomCrop``): its begin and
  end are ``Pack``s whose entries are ``b`` and ``AddV2(b, c)`` with a constant ``c >= 0``, strides 1,
  no ellipsis or new axis. TF infers such a dim as unknown; XLA sees its size ``c`` by value inference.
  The node keeps everything and gains an ``_output_shapes`` attr holding what TF inferred with each such
  dim set to ``c`` (``sized``), which TF's shape inference takes on import and the lowering reads
  (``hlo/lowering/ops/strided_slice.py``: a ``dynamic-slice``). TF's kernels ignore the attr; only a
  begin that puts the slice past the end, where TF returns a shorter slice, breaks the promise.

The shapes come from the analysis import (``mark.analysis_graph``). It is only valid where the
graph's own shapes are static, so the caller runs it without substituted input shapes. A folded
node keeps its name and output count; its data inputs are dropped and its control inputs kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from graph_passes._graph import GraphIndex, fresh_name
from hlo.lowering.tensor_names import canonical, control_inputs, data_inputs, node_name

_CLAMPS = {"Minimum": ("Maximum", np.less_equal), "Maximum": ("Minimum", np.greater_equal)}


@dataclass
class FoldResult:
    graph_def: object
    folded: dict[str, str] = field(default_factory=dict)  # node -> what it was folded from
    sized: dict[str, list[int]] = field(default_factory=dict)  # StridedSlice -> output dims it was given

    @property
    def changed(self) -> bool:
        return bool(self.folded or self.sized)


def _const_value(node) -> np.ndarray | None:
    if node.op != "Const":
        return None
    from tensorflow.python.framework import tensor_util

    return np.asarray(tensor_util.MakeNdarray(node.attr["value"].tensor))


def _clamp_value(index: GraphIndex, node) -> np.ndarray | None:
    """``a`` when ``node`` is ``Minimum(a, Maximum(b, x))`` with constant scalars ``a <= b`` (or the
    mirror image), in either operand order; None otherwise."""
    inner_op, holds = _CLAMPS[node.op]
    ins = [index.by_name[e.producer] for e in index.data_in[node.name]]
    for outer, inner in (ins, ins[::-1]):
        a = _const_value(outer)
        if a is None or a.ndim or inner.op != inner_op:
            continue
        for e in index.data_in[inner.name]:
            b = _const_value(index.by_name[e.producer])
            if b is not None and not b.ndim and holds(a, b):
                return a
    return None


def _shape_value(t) -> list[int] | None:
    """The value of the shape vector ``t`` (a tf.Tensor) when the analysis graph knows it."""
    from tensorflow.python.framework import tensor_util

    shape = tensor_util.constant_value_as_shape(t)
    return shape.as_list() if shape.is_fully_defined() else None


def broadcast_gradient_args(s0: list[int], s1: list[int]) -> tuple[list[int], list[int]] | None:
    """TF's BCast reduction indices for two shapes (equal shapes: none; else every dim where the
    left-padded shape is 1), or None when they do not broadcast."""
    rank = max(len(s0), len(s1))
    a, b = [1] * (rank - len(s0)) + s0, [1] * (rank - len(s1)) + s1
    if any(x != y and 1 not in (x, y) for x, y in zip(a, b)):
        return None
    if s0 == s1:
        return [], []
    return [d for d in range(rank) if a[d] == 1], [d for d in range(rank) if b[d] == 1]


def broadcast_args(s0: list[int], s1: list[int]) -> tuple[list[int]] | None:
    rank = max(len(s0), len(s1))
    a, b = [1] * (rank - len(s0)) + s0, [1] * (rank - len(s1)) + s1
    if any(x != y and 1 not in (x, y) for x, y in zip(a, b)):
        return None
    return ([y if x == 1 else x for x, y in zip(a, b)],)


_SHAPE_FOLDS: dict[str, Callable[[list[int], list[int]], tuple[list[int], ...] | None]] = {
    "BroadcastGradientArgs": broadcast_gradient_args,
    "BroadcastArgs": broadcast_args,
}


_ADDS = frozenset({"AddV2", "Add"})


def _const_vector(nodes: dict, node) -> np.ndarray | None:
    """The value of a ``Const``, or of a ``Pack`` of scalar ``Const``s (how strides are written)."""
    if node.op != "Pack":
        return _const_value(node)
    items = [_const_value(nodes[node_name(t)]) if node_name(t) in nodes else None for t in data_inputs(node.input)]
    if any(v is None or v.ndim for v in items):
        return None
    return np.array(items)


def _const_size(nodes: dict, begin: str, end: str | None, n: int | None) -> int | None:
    """The size of ``x[b:e]`` (``e`` None: to the end) for constant ``b``, ``e >= 0`` in a dim of size ``n``."""
    b = _const_value(nodes[node_name(begin)]) if node_name(begin) in nodes else None
    if n is None or b is None or b.ndim or int(b) < 0:
        return None
    stop = n
    if end is not None:
        e = _const_value(nodes[node_name(end)]) if node_name(end) in nodes else None
        if e is None or e.ndim or int(e) < 0:
            return None
        stop = min(int(e), n)
    return max(0, stop - min(int(b), n))


def _slice_sizes(nodes: dict, node, dims: list[int | None]) -> list[int | None] | None:
    """Per entry of a StridedSlice's spec (``node``, slicing an input of ``dims``): the constant ``c``
    where the entry reads ``x[b:b + c]`` with a run-time ``b``, the size of ``x[b:e]`` or ``x[b:]`` for
    constant ``b``, ``e`` (None elsewhere); None when no entry has a run-time ``b`` or the spec has an
    ellipsis, a new axis or a stride other than 1."""
    if node.attr["ellipsis_mask"].i or node.attr["new_axis_mask"].i:
        return None
    names = [node_name(t) for t in data_inputs(node.input)[1:4]]
    if len(names) != 3 or any(n not in nodes for n in names):
        return None
    begin, end, stride = (nodes[n] for n in names)
    if begin.op != "Pack" or end.op != "Pack":
        return None
    strides = _const_vector(nodes, stride)
    begins, ends = data_inputs(begin.input), data_inputs(end.input)
    if strides is None or strides.shape != (len(begins),) or len(ends) != len(begins) or (strides != 1).any():
        return None
    both = node.attr["begin_mask"].i & node.attr["end_mask"].i
    sizes: list[int | None] = []
    runtime = False
    for i, (b, e) in enumerate(zip(begins, ends)):
        end = nodes.get(node_name(e))
        size = None
        if (both | node.attr["shrink_axis_mask"].i) & (1 << i) or node.attr["begin_mask"].i & (1 << i):
            pass
        elif end is not None and end.op in _ADDS:
            a, c = data_inputs(end.input)[:2]
            for term, other in ((a, c), (c, a)):
                value = _const_value(nodes[node_name(other)]) if node_name(other) in nodes else None
                if canonical(term) == canonical(b) and value is not None and value.ndim == 0 and int(value) >= 0:
                    size, runtime = int(value), True
        else:
            size = _const_size(nodes, b, None if node.attr["end_mask"].i & (1 << i) else e,
                               dims[i] if i < len(dims) else None)
        sizes.append(size)
    return sizes if runtime else None


def _sized_dims(node, sizes: list[int | None], inferred: list[int | None]) -> list[int] | None:
    """``inferred`` (TF's output dims of ``node``) with the dims ``sizes`` knows filled in (-1: unknown)."""
    shrink = node.attr["shrink_axis_mask"].i
    kept = [s for i, s in enumerate(sizes) if not shrink & (1 << i)]  # output dims, in order
    out = [-1 if d is None else d for d in inferred]
    for j, s in enumerate(kept[:len(out)]):
        if s is not None and out[j] < 0:
            out[j] = s
    return out if out != [-1 if d is None else d for d in inferred] else None


def needs_fold(graph_def) -> bool:
    """Whether ``graph_def`` has a node this pass may fold or size (cheap: no import)."""
    packs = {n.name for n in graph_def.node if n.op == "Pack"}
    return any(n.op in _SHAPE_FOLDS or n.op in _CLAMPS or
               (n.op == "StridedSlice" and len(n.input) > 1 and node_name(n.input[1]) in packs)
               for n in graph_def.node)


def _size_slices(graph_def, graph, nodes: dict, result: FoldResult) -> None:
    """Give each StridedSlice ``_slice_sizes`` knows more about its ``_output_shapes`` (in ``nodes``)."""
    import tensorflow as tf

    for node in graph_def.node:
        if node.op != "StridedSlice":
            continue
        op = graph.get_operation_by_name(node.name)
        x = op.inputs[0].shape
        sizes = _slice_sizes(nodes, node, x.as_list() if x.rank is not None else [])
        shape = op.outputs[0].shape
        dims = _sized_dims(node, sizes, shape.as_list()) if sizes and shape.rank is not None else None
        if dims is None:
            continue
        target = nodes[node.name]
        target.attr["_output_shapes"].list.ClearField("shape")
        target.attr["_output_shapes"].list.shape.add().CopyFrom(
            tf.TensorShape([None if d < 0 else d for d in dims]).as_proto())
        result.sized[node.name] = dims


def fold_shapes(graph_def, graph) -> FoldResult:
    """Fold the nodes described in the module docstring; ``graph`` is ``graph_def`` imported for analysis."""
    import tensorflow as tf

    index = GraphIndex(graph_def.node)
    out = type(graph_def)()
    out.CopyFrom(graph_def)
    result = FoldResult(out)
    nodes = {n.name: n for n in out.node}
    taken = set(nodes)
    _size_slices(graph_def, graph, nodes, result)
    for node in graph_def.node:
        values: tuple | None = None
        if node.op in _CLAMPS:
            a = _clamp_value(index, node)
            scalar = graph.get_operation_by_name(node.name).outputs[0].shape.rank == 0
            values = None if a is None or not scalar else (a,)
        elif node.op in _SHAPE_FOLDS and len(node.input) >= 2:
            op = graph.get_operation_by_name(node.name)
            shapes = [_shape_value(t) for t in op.inputs]
            known = [s for s in shapes if s is not None]
            if len(known) == len(shapes):
                values = _SHAPE_FOLDS[node.op](*known)
        if values is None:
            continue
        result.folded[node.name] = node.op
        target = nodes[node.name]
        dtype = tf.as_dtype(node.attr["T"].type)
        controls = control_inputs(target.input)
        if node.op in _CLAMPS:  # one output: the node itself becomes the constant
            _make_const(target, values[0], dtype, controls)
            continue
        consts = []
        for k, v in enumerate(values):
            const = out.node.add(name=fresh_name(taken, f"{node.name}/tfxla_folded_{k}"), device=target.device)
            _make_const(const, v, dtype, controls)
            consts.append(const.name)
        target.op = "IdentityN"
        target.ClearField("attr")
        target.attr["T"].list.type.extend([dtype.as_datatype_enum] * len(consts))
        del target.input[:]
        target.input.extend(consts + controls)
    return result


def _make_const(node, value, dtype, controls: list[str]) -> None:
    """Turn ``node`` (in place) into ``Const`` holding ``value`` of ``dtype``, with only ``controls`` as inputs."""
    import tensorflow as tf

    node.op = "Const"
    node.ClearField("attr")
    node.attr["dtype"].type = dtype.as_datatype_enum
    node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(np.asarray(value, dtype.as_numpy_dtype), dtype))
    del node.input[:]
    node.input.extend(controls)


__all__ = ["FoldResult", "fold_shapes", "needs_fold"]
