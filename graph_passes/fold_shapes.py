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

The shapes come from the analysis import (``mark.analysis_graph``). It is only valid where the
graph's own shapes are static, so the caller runs it without substituted input shapes. A folded
node keeps its name and output count; its data inputs are dropped and its control inputs kept.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from graph_passes._graph import GraphIndex, fresh_name
from hlo.lowering.tensor_names import control_inputs

_CLAMPS = {"Minimum": ("Maximum", np.less_equal), "Maximum": ("Minimum", np.greater_equal)}


@dataclass
class FoldResult:
    graph_def: object
    folded: dict[str, str] = field(default_factory=dict)  # node -> what it was folded from


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


def needs_fold(graph_def) -> bool:
    """Whether ``graph_def`` has a node this pass may fold (cheap: no import)."""
    return any(n.op in _SHAPE_FOLDS or n.op in _CLAMPS for n in graph_def.node)


def fold_shapes(graph_def, graph) -> FoldResult:
    """Fold the nodes described in the module docstring; ``graph`` is ``graph_def`` imported for analysis."""
    import tensorflow as tf

    index = GraphIndex(graph_def.node)
    out = type(graph_def)()
    out.CopyFrom(graph_def)
    result = FoldResult(out)
    nodes = {n.name: n for n in out.node}
    taken = set(nodes)
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
