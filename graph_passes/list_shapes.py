"""Give a TensorList created without an element shape the shape its loop writes, so the loop can be compiled.

``tf.TensorArray(tf.float32, size=n)`` without ``element_shape`` becomes a ``TensorListReserve`` with
``element_shape=-1``; written in a loop, neither TF's shape inference nor a compiled loop (whose state
needs static shapes, ``hlo/lowering/lists.py``) knows the element shape, so the list and its loop
would stay in TensorFlow. tf2xla compiles the loop body once to find the shape; here TF's own shape
inference of the body does it:

- a list-creating node (``TensorListReserve``, ``EmptyTensorList``) whose ``element_shape`` input is a
  ``Const`` with an unknown dim, and whose list enters a ``While`` as loop variable ``k``, is a candidate;
- the loop body is imported with the loop's input shapes (``function_def_to_graph``); every
  ``TensorListSetItem``/``TensorListPushBack`` on argument ``k`` (through ``Identity`` and earlier
  writes) writes an item; when all items have one static shape (and the list's dtype), the node's
  ``element_shape`` input becomes a new ``Const`` of that shape.

Writing an element of another shape to the list is an error in TF, so the shape is the one every
element has. Nothing else changes: TF's shape inference then knows the list's element shape
everywhere (``mark`` reads it), and lowering sees a list of known element shape. Returns a new
GraphDef; the one given is not modified. Nothing is imported when no node is a candidate.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from hlo.lowering.tensor_names import data_inputs, parse_input

CREATORS = frozenset({"TensorListReserve", "EmptyTensorList"})
LOOPS = frozenset({"While", "StatelessWhile"})
WRITES = {"TensorListSetItem": 2, "TensorListPushBack": 1}  # op -> index of the item input
PASS_THROUGH = frozenset({"Identity", "TensorListSetItem", "TensorListPushBack"})


@dataclass
class ListShapesResult:
    graph_def: object
    inferred: dict[str, tuple[int, ...]] = field(default_factory=dict)  # creating node -> element shape


def _unknown_shape_const(node) -> bool:
    if node is None or node.op != "Const":
        return False
    from tensorflow.python.framework import tensor_util

    value = tensor_util.MakeNdarray(node.attr["value"].tensor)
    return value.ndim == 0 or any(int(d) < 0 for d in value.reshape(-1))


def _candidates(gd) -> dict[str, list[tuple[str, int]]]:
    """Creating node -> the (loop, loop-variable index) its list enters."""
    by_name = {n.name: n for n in gd.node}
    bodies = {f.signature.name for f in gd.library.function if f.node_def}
    out: dict[str, list[tuple[str, int]]] = {}
    for loop in gd.node:
        if loop.op not in LOOPS or loop.attr["body"].func.name not in bodies:
            continue
        for k, text in enumerate(data_inputs(loop.input)):
            ref = parse_input(text)
            node = by_name.get(ref.node)
            if node is not None and node.op in CREATORS and ref.output == 0 and \
                    _unknown_shape_const(by_name.get(parse_input(node.input[0]).node)):
                out.setdefault(node.name, []).append((loop.name, k))
    return out


def _written_shape(graph, library: Mapping, loop, k: int, dtype) -> tuple[int, ...] | None:
    """The one static shape of the items the body of ``loop`` (an op of the analysis ``graph``) writes to
    loop variable ``k``."""
    from tensorflow.python.framework.function_def_to_graph import function_def_to_graph

    fdef = library.get(loop.get_attr("body").name)
    if fdef is None:
        return None
    try:
        with graph.as_default():  # the functions the body calls are found in the analysis graph
            body = function_def_to_graph(fdef, input_shapes=[t.shape for t in loop.inputs])
    except Exception:  # a body TF cannot import on its own: leave the list alone
        return None
    shapes, seen, work = set(), set(), [body.inputs[k]]
    while work:
        t = work.pop()
        for op in t.consumers():
            if op.name in seen:
                continue
            seen.add(op.name)
            if op.type in WRITES and op.inputs[0] is t:
                item = op.inputs[WRITES[op.type]]
                if item.dtype != dtype or not item.shape.is_fully_defined():
                    return None
                shapes.add(tuple(int(d) for d in item.shape.as_list()))
            if op.type in PASS_THROUGH:
                work.append(op.outputs[0])
    return shapes.pop() if len(shapes) == 1 else None


def infer_list_shapes(graph_def, resource_shapes: Mapping[str, tuple[int, Sequence[int]]] | None = None,
                      input_shapes: Mapping[str, Sequence[int]] | None = None) -> ListShapesResult:
    """See the module docstring; ``resource_shapes`` and ``input_shapes`` as ``mark.analysis_graph`` takes them
    (a ``None`` batch dim analysed at a concrete size gives the lists written per row that size too)."""
    candidates = _candidates(graph_def)
    if not candidates:
        return ListShapesResult(graph_def)
    import numpy as np
    from tensorflow.python.framework import tensor_util

    from graph_passes.mark import analysis_graph

    graph = analysis_graph(graph_def, resource_shapes, input_shapes)
    gd = type(graph_def)()
    gd.CopyFrom(graph_def)
    result = ListShapesResult(gd)
    nodes = {n.name: n for n in gd.node}
    library = {f.signature.name: f for f in gd.library.function}
    for name, uses in candidates.items():
        node = nodes[name]
        dtype = graph.get_operation_by_name(name).get_attr("element_dtype")
        found = {_written_shape(graph, library, graph.get_operation_by_name(loop), k, dtype) for loop, k in uses}
        dims = found.pop() if len(found) == 1 else None
        if dims is None:
            continue
        old = nodes[parse_input(node.input[0]).node]
        const = gd.node.add(name=f"{name}/tfxla_element_shape", op="Const", device=node.device)
        value = np.asarray(dims, tensor_util.MakeNdarray(old.attr["value"].tensor).dtype)
        const.attr["dtype"].CopyFrom(old.attr["dtype"])
        const.attr["value"].tensor.CopyFrom(tensor_util.make_tensor_proto(value, shape=value.shape))
        node.input[0] = const.name
        result.inferred[name] = dims
    return result


__all__ = ["ListShapesResult", "infer_list_shapes"]
