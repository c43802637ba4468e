"""Hoist a loop's read-only variable reads out of the loop, so the loop can be compiled.

A ``While`` that uses a variable (Keras's recurrent layers read their kernels in the loop body) takes the
variable's resource handle as a loop variable, and a resource cannot enter compiled code. When the loop
only reads the variable, its value is the same on every iteration: ``hoist_loop_reads`` gives the
``While`` the value instead, read once just before the loop:

- loop variable ``i`` qualifies when it is a resource whose variable's dtype and shape are known (a
  ``VarHandleOp``, a placeholder in ``resource_shapes``, or a function body's ``_Arg`` with
  ``_handle_shapes``/``_handle_dtypes``: what Grappler hands the hook), every use of it in the body and the
  condition is a ``ReadVariableOp`` of that dtype, and the body returns it unchanged; whatever read
  the loop's output ``i`` (the handle, unchanged: a gradient's ``VariableShape``) reads the handle the
  loop was given instead;
- a new ``ReadVariableOp`` of the handle, with the ``While``'s control inputs (so it follows the writes
  the loop followed, and the writes that follow the loop still follow it), becomes input ``i``;
  ``T`` and ``output_shapes`` say the value's dtype and shape;
- the body and condition become copies (``<name>_tfxla_reads``) whose argument ``i`` has that dtype and
  whose reads are ``Identity`` nodes of the argument.

Branches alike: an ``If``/``Case`` (Keras ``SpectralNormalization`` reads its kernel in a ``cond``) whose
every branch only reads its argument ``j``, a resource of a known variable, gets the value read just before
it (with its control inputs) as input ``j`` (``Tin`` retyped), and copies of its branches that take it.

A ``VariableShape`` of a handle whose variable's shape is known becomes a ``Const`` (a gradient's zeros
of a variable's shape then have a static shape, and can be compiled).

Runs after ``inline_calls`` (loops are then top-level nodes) and before ``forward_variables`` (whose
rules then see the new read). Returns a new GraphDef; the one given is not modified.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from hlo.lowering.tensor_names import control_inputs, data_inputs, parse_input

DT_RESOURCE = 20
READ = "ReadVariableOp"
LOOPS = frozenset({"While", "StatelessWhile"})
BRANCHES = {"If": ("then_branch", "else_branch"), "StatelessIf": ("then_branch", "else_branch"),
            "Case": "branches", "StatelessCase": "branches"}  # op -> its branch attr(s)
SUFFIX = "_tfxla_reads"


@dataclass
class HoistResult:
    graph_def: object
    hoisted: list[str] = field(default_factory=list)  # the new reads, one per hoisted loop variable


def _variable(graph_def, by_name, handle: str, resource_shapes) -> tuple[int, tuple[int, ...]] | None:
    ref = parse_input(handle)
    node = by_name.get(ref.node)
    if node is None or ref.output != 0:
        return None
    if node.op == "VarHandleOp":
        shape = node.attr["shape"].shape
        if shape.unknown_rank or any(d.size < 0 for d in shape.dim):
            return None
        return int(node.attr["dtype"].type), tuple(int(d.size) for d in shape.dim)
    if node.op == "Placeholder" and resource_shapes and node.name in resource_shapes:
        dtype, dims = resource_shapes[node.name]
        return int(dtype), tuple(int(d) for d in dims)
    if node.op == "_Arg" and len(node.attr["_handle_shapes"].list.shape) == 1:  # a function body's (the hook's)
        shape, dtypes = node.attr["_handle_shapes"].list.shape[0], node.attr["_handle_dtypes"].list.type
        if len(dtypes) == 1 and not shape.unknown_rank and all(d.size >= 0 for d in shape.dim):
            return int(dtypes[0]), tuple(int(d.size) for d in shape.dim)
    return None


def _users(fdef, arg: str) -> list:
    """Body nodes using argument ``arg`` (a FunctionDef names an argument without an output index)."""
    return [n for n in fdef.node_def if any(x in (arg, f"^{arg}") for x in n.input)]


def _read_only(fdef, i: int, dtype: int, body: bool) -> bool:
    arg = fdef.signature.input_arg[i].name
    users = _users(fdef, arg)
    if any(n.op != READ or n.attr["dtype"].type != dtype or data_inputs(n.input) != [arg] for n in users):
        return False
    if body:
        out = fdef.signature.output_arg[i].name
        return fdef.ret.get(out) == arg
    return True


def _retype(fdef, indices: Mapping[int, int], body: bool) -> None:
    """In place: arguments ``indices`` (index -> dtype) become values (and so do the body's results at
    those indices, which return them); their reads become Identity."""
    renamed = {}
    for i, dtype in indices.items():
        arg = fdef.signature.input_arg[i]
        arg.type = dtype
        if body:
            fdef.signature.output_arg[i].type = dtype
        if i in fdef.arg_attr:
            del fdef.arg_attr[i]
        for n in _users(fdef, arg.name):
            n.op = "Identity"
            n.ClearField("attr")
            n.attr["T"].type = dtype
            renamed[f"{n.name}:value:"] = f"{n.name}:output:"
    if not renamed:
        return

    def rename(text: str) -> str:
        for old, new in renamed.items():
            if text.startswith(old):
                return new + text[len(old):]
        return text
    for n in fdef.node_def:
        n.input[:] = [rename(x) for x in n.input]
    for key in list(fdef.ret):
        fdef.ret[key] = rename(fdef.ret[key])


def hoist_loop_reads(graph_def, resource_shapes: Mapping[str, tuple[int, Sequence[int]]] | None = None) -> HoistResult:
    """See the module docstring."""
    import tensorflow as tf

    gd = type(graph_def)()
    gd.CopyFrom(graph_def)
    by_name = {n.name: n for n in gd.node}
    library = {f.signature.name: f for f in gd.library.function}
    result = HoistResult(gd)
    new_nodes = []
    for loop in list(gd.node):
        if loop.op not in LOOPS:
            continue
        body, cond = library.get(loop.attr["body"].func.name), library.get(loop.attr["cond"].func.name)
        if body is None or cond is None:
            continue
        types = list(loop.attr["T"].list.type)
        hoist: dict[int, tuple[int, tuple[int, ...]]] = {}
        for i, t in enumerate(types):
            if t != DT_RESOURCE:
                continue
            var = _variable(gd, by_name, loop.input[i], resource_shapes)
            if var and _read_only(body, i, var[0], True) and _read_only(cond, i, var[0], False):
                hoist[i] = var
        if not hoist:
            continue
        for fdef, attr in ((body, "body"), (cond, "cond")):
            copy = gd.library.function.add()
            copy.CopyFrom(fdef)
            copy.signature.name = f"{fdef.signature.name}{SUFFIX}"
            _retype(copy, {i: dtype for i, (dtype, _) in hoist.items()}, attr == "body")
            loop.attr[attr].func.name = copy.signature.name
        _rewire(gd, loop, sorted(hoist))
        for i, (dtype, dims) in sorted(hoist.items()):
            new_nodes.append(_read_before(loop, i, i, dtype))
            loop.attr["T"].list.type[i] = dtype
            if "output_shapes" in loop.attr and i < len(loop.attr["output_shapes"].list.shape):
                loop.attr["output_shapes"].list.shape[i].CopyFrom(tf.TensorShape(list(dims)).as_proto())
            loop.attr.pop("_output_shapes", None)
            result.hoisted.append(new_nodes[-1].name)
    for node in list(gd.node):
        if node.op in BRANCHES:
            reads = _hoist_branch_reads(gd, node, library, by_name, resource_shapes)
            new_nodes.extend(reads)
            result.hoisted.extend(r.name for r in reads)
    gd.node.extend(new_nodes)
    _fold_variable_shapes(gd, by_name, resource_shapes)
    return result


def _read_before(node, arg: int, input_index: int, dtype: int):
    """A new read of ``node``'s input ``input_index`` (a handle, its argument ``arg``), with ``node``'s
    control inputs, which ``node`` takes instead of the handle."""
    read = type(node)()
    read.name = f"{node.name}/tfxla_read_{arg}"
    read.op = READ
    read.input.extend([node.input[input_index]] + control_inputs(node.input))
    read.attr["dtype"].type = dtype
    if node.device:
        read.device = node.device
    node.input[input_index] = read.name
    return read


def _hoist_branch_reads(gd, node, library, by_name, resource_shapes) -> list:
    """The reads hoisted out of the branches of ``node`` (an If/Case; see the module docstring)."""
    attrs = BRANCHES[node.op]
    names = ([node.attr[a].func.name for a in attrs] if isinstance(attrs, tuple)
             else [f.name for f in node.attr[attrs].list.func])
    branches = [library.get(n) for n in names]
    if not branches or any(f is None for f in branches):
        return []
    hoist = {}
    for j, t in enumerate(node.attr["Tin"].list.type):
        var = _variable(gd, by_name, node.input[j + 1], resource_shapes) if t == DT_RESOURCE else None
        if var and all(_read_only(f, j, var[0], False) for f in branches):
            hoist[j] = var[0]
    if not hoist:
        return []
    copies = []
    taken = {f.signature.name for f in gd.library.function}
    for fdef in branches:
        copy = gd.library.function.add()
        copy.CopyFrom(fdef)
        name, k = f"{fdef.signature.name}{SUFFIX}", 1
        while name in taken:  # a branch two nodes call, or called twice by one Case
            name, k = f"{fdef.signature.name}{SUFFIX}_{k}", k + 1
        taken.add(name)
        copy.signature.name = name
        _retype(copy, hoist, False)
        copies.append(copy.signature.name)
    if isinstance(attrs, tuple):
        for a, name in zip(attrs, copies):
            node.attr[a].func.name = name
    else:
        for f, name in zip(node.attr[attrs].list.func, copies):
            f.name = name
    reads = [_read_before(node, j, j + 1, dtype) for j, dtype in sorted(hoist.items())]
    for j, dtype in hoist.items():
        node.attr["Tin"].list.type[j] = dtype
    return reads


def _rewire(gd, loop, indices: Sequence[int]) -> None:
    """Inputs reading output ``i`` of ``loop`` (a handle the body returns unchanged) read its input ``i``."""
    outputs = {f"{loop.name}:{i}" if i else loop.name: loop.input[i] for i in indices}
    outputs.update({f"{loop.name}:{i}": loop.input[i] for i in indices})
    for n in gd.node:
        n.input[:] = [outputs.get(x, x) for x in n.input]


def _fold_variable_shapes(gd, by_name, resource_shapes) -> None:
    import numpy as np
    from tensorflow.python.framework import tensor_util

    for n in gd.node:
        if n.op != "VariableShape" or len(data_inputs(n.input)) != 1:
            continue
        var = _variable(gd, by_name, data_inputs(n.input)[0], resource_shapes)
        if var is None:
            continue
        out_type = n.attr["out_type"].type or 3
        value = np.asarray(var[1], np.int64 if out_type == 9 else np.int32)
        controls = control_inputs(n.input)
        n.op = "Const"
        n.ClearField("attr")
        n.attr["dtype"].type = out_type
        n.attr["value"].tensor.CopyFrom(tensor_util.make_tensor_proto(value, shape=value.shape))
        n.input[:] = controls


__all__ = ["HoistResult", "hoist_loop_reads"]
