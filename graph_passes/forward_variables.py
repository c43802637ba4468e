"""Forward variable values inside one graph: a read that follows a write to the same variable reads the
value just written, as a plain tensor, so the computation around it can form ONE cluster.

In a traced step (Keras' Adam: ``m.assign_add(...)``, then ``m`` read again) every read after a write
sits between two stateful ops; clustering must keep it in TensorFlow, which cuts the step into many
clusters. TensorFlow's automatic control dependencies order all ops on one resource, so within the
graph each variable's value is known at every point:

- the first ``ReadVariableOp`` of a variable stays (its value becomes a cluster input);
- after ``AssignVariableOp(v, value)`` the value is ``value``; after ``AssignAddVariableOp`` /
  ``AssignSubVariableOp(v, delta)`` it is a new ``AddV2`` / ``Sub`` node ``old + delta`` (what TF's
  kernels compute), where ``old`` is the value before (a new ``ReadVariableOp`` placed before the write
  when the variable was not read yet);
- a later read becomes ``Identity`` of the current value (same name, no control inputs).

``AssignAddVariableOp``/``AssignSubVariableOp`` become ``AssignVariableOp`` of the value computed
above (``assign_values``), so an optimizer's update is computed in the cluster; the variables end
with the same values. Sparse accesses (embedding training) take part the same way, as the dense ops
TF defines them by:

- ``ResourceGather(v, indices)`` reads: it becomes ``GatherV2(value, indices, axis 0, batch_dims)``
  (same name, no control inputs) of the current value (a new first read when there is none);
- ``ResourceScatter{Add,Sub,Min,Max,Update}(v, indices, updates)`` write: the new value is
  ``TensorScatter{Add,...}(value, ExpandDims(indices, -1), BroadcastTo(updates, Shape(GatherV2(value,
  indices))))`` (a scalar ``updates`` is broadcast, as the resource ops allow; duplicate indices
  combine as in TF's kernels, in index order), and the node becomes ``AssignVariableOp`` of it; the
  ``ResourceScatterNd{Add,Sub,Min,Max,Update}`` forms use their indices as they are;
- ``ResourceScatter{Mul,Div}(v, indices, updates)`` have no dense TF op: the new value is ``Mul``/``Div``
  of the value and ``UnsortedSegmentProd(BroadcastTo(updates, ...), indices, rows)`` (1 for rows no index
  names), so duplicate indices multiply (divide) by the product of their updates, where TF's kernel
  applies them one by one (the same up to float rounding; exact for integers, ``Div`` truncating).

A variable is left alone when its
handle does not come straight from a ``Placeholder``/``VarHandleOp``/resource ``_Arg`` (another op could
alias it), when it is an ``_Arg`` that may be the same variable as another ``_Arg`` at run time (a variable
passed as an argument: ``_may_alias``), when
anything but ``ReadVariableOp``/``Assign*VariableOp`` uses its handle, or when two of its ops are not
ordered by the graph's edges (``skipped`` says which and why).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from graph_passes._graph import GraphIndex, fresh_name
from hlo.lowering.tensor_names import control, control_inputs, node_name, tensor

READ = "ReadVariableOp"
DT_RESOURCE = 20
DT_INT32 = 3
WRITES = {"AssignVariableOp": None, "AssignAddVariableOp": "AddV2", "AssignSubVariableOp": "Sub"}
GATHERS = frozenset({"ResourceGather"})
# sparse write -> (the dense op computing the new value, whether its indices index the first dim only)
SCATTERS = {f"ResourceScatter{kind}": (f"TensorScatter{kind}", True) for kind in ("Add", "Sub", "Min", "Max", "Update")}
SCATTERS.update({f"ResourceScatterNd{kind}": (f"TensorScatter{kind}", False)
                 for kind in ("Add", "Sub", "Min", "Max", "Update")})
PRODUCTS = {"ResourceScatterMul": "Mul", "ResourceScatterDiv": "Div"}  # value op product of the updates
SCATTERS.update({op: (dense, True) for op, dense in PRODUCTS.items()})
READS = frozenset({READ}) | GATHERS
TOUCHES = READS | frozenset(WRITES) | frozenset(SCATTERS)


@dataclass
class ForwardResult:
    graph_def: object
    forwarded: list[str] = field(default_factory=list)  # reads turned into Identity of the current value
    assigned: list[str] = field(default_factory=list)  # AssignAdd/AssignSub turned into AssignVariableOp
    skipped: dict[str, str] = field(default_factory=dict)  # resource tensor -> why it was left alone
    densified: list[str] = field(default_factory=list)  # ResourceGather/ResourceScatter* turned into dense ops


def _ordered(index: GraphIndex, rank: dict[str, int], first: str, second: str) -> bool:
    """Whether ``first`` is an ancestor of ``second`` (data or control edges); the walk back from
    ``second`` skips nodes ranked before ``first`` in topological order (they cannot follow it)."""
    seen, work = set(), [second]
    while work:
        name = work.pop()
        for p in index.predecessors(name):
            if p == first:
                return True
            if p not in seen and rank.get(p, -1) > rank[first]:
                seen.add(p)
                work.append(p)
    return False


def _unordered(index: GraphIndex, rank: dict[str, int], ops: list) -> tuple[str, str] | None:
    """Two ops on one variable, one of them a write, that the graph does not order (None: all ordered).
    Reads need no order among themselves; checking each read against the writes around it and each
    write against the previous one covers every pair, by transitivity."""
    last_write, reads = None, []
    for node in ops:
        if node.op in READS:
            if last_write is not None and not _ordered(index, rank, last_write, node.name):
                return last_write, node.name
            reads.append(node.name)
            continue
        for before in reads + ([last_write] if last_write else []):
            if not _ordered(index, rank, before, node.name):
                return before, node.name
        last_write, reads = node.name, []
    return None


def _is_handle(node) -> bool:
    if node.op == "_Arg":
        return node.attr["T"].type == DT_RESOURCE
    return node.op == "VarHandleOp" or (node.op == "Placeholder" and node.attr["dtype"].type == DT_RESOURCE)


def _variable_type(node) -> tuple | None:
    """A resource ``_Arg``'s variable dtype and shape (its ``_handle_dtypes``/``_handle_shapes``), None
    when it has none."""
    shapes, dtypes = node.attr["_handle_shapes"].list.shape, node.attr["_handle_dtypes"].list.type
    if len(shapes) != 1 or len(dtypes) != 1:
        return None
    return int(dtypes[0]), tuple(d.size for d in shapes[0].dim), shapes[0].unknown_rank


def _captured(node) -> bool:
    """Whether a resource ``_Arg`` stands for a captured variable: an argument's ``_Arg`` is named as its
    Python parameter (``_user_specified_name``), a capture's after the op that first used the handle
    (``add_readvariableop_resource``, Keras's ``unknown_3``) with another user-specified name (``resource``,
    the handle's id). Either way round a mistake only leaves a variable unforwarded."""
    specified = node.attr["_user_specified_name"].s.decode() if "_user_specified_name" in node.attr else ""
    return bool(specified) and specified != node.name


def _iterator(index: GraphIndex, node) -> bool:
    """A resource ``_Arg`` without handle attrs whose only users are iterator ops (a data set iterator)."""
    users = [index.by_name[c].op for c in index.successors(node.name)]
    return "_handle_dtypes" not in node.attr and bool(users) and all(op.startswith("Iterator") for op in users)


def _may_alias(index: GraphIndex) -> dict[str, str]:
    """Resource ``_Arg`` tensor -> why it may be the same variable as another ``_Arg`` at run time.

    Two handles of one variable have the same dtype and shape; two captures are distinct variables (each
    eager variable has its own resource and one handle), but a variable passed as an argument may be any
    other argument or capture. So a resource ``_Arg`` is trusted unless another resource ``_Arg`` of its
    dtype and shape exists and one of the two is not a capture (or either has no handle attrs)."""
    args = [n for n in index.nodes if n.op == "_Arg" and n.attr["T"].type == DT_RESOURCE and not _iterator(index, n)]
    out: dict[str, str] = {}
    for a in args:
        for b in args:
            if a is b or (_captured(a) and _captured(b)):
                continue
            ta, tb = _variable_type(a), _variable_type(b)
            if ta is None or tb is None or ta == tb:
                out[tensor(a.name, 0)] = f"_Arg '{a.name}' may be the same variable as _Arg '{b.name}' at run time"
                break
    return out


def _touches(index: GraphIndex, order: list[str]) -> tuple[dict[str, list], dict[str, str]]:
    """Resource tensor -> its reads and writes in topological order; resource -> why it is skipped."""
    touches: dict[str, list] = {}
    skipped: dict[str, str] = {}
    for name in order:
        node = index.by_name[name]
        for e in index.data_in[name]:
            handle = tensor(e.producer, e.index)
            if node.op in TOUCHES:
                if e.slot == 0:
                    touches.setdefault(handle, []).append(node)
            elif _is_handle(index.by_name[e.producer]):
                skipped.setdefault(handle, f"{node.op} '{name}' uses the handle directly")
    shared: dict[bytes, list[str]] = {}
    for node in index.nodes:
        if node.op == "VarHandleOp":
            shared.setdefault(node.attr["shared_name"].s or node.name.encode(), []).append(tensor(node.name, 0))
    for handle in touches:
        producer = index.by_name[node_name(handle)]
        if not _is_handle(producer):  # a handle passed through another op may alias one we track
            skipped.setdefault(handle, f"the handle comes from {producer.op} '{producer.name}', not a variable")
        elif producer.op == "VarHandleOp" and len(shared[producer.attr["shared_name"].s or
                                                         producer.name.encode()]) > 1:
            skipped.setdefault(handle, f"another VarHandleOp shares the variable of '{producer.name}'")
    aliased = _may_alias(index)
    for handle in touches:
        if handle in aliased:
            skipped.setdefault(handle, aliased[handle])
    return touches, skipped


def forward_variables(graph_def, *, assign_values: bool = True) -> ForwardResult:
    """Forward each variable's written value to the reads that follow the write (see module docstring).

    ``assign_values``: also turn each ``AssignAddVariableOp``/``AssignSubVariableOp`` into an
    ``AssignVariableOp`` of the new value, so the arithmetic joins the cluster that computes the delta
    (one fused pass over the weights) and TensorFlow only stores the result."""
    index = GraphIndex(graph_def.node)
    order, rest = index.topological_order()
    rank = {name: i for i, name in enumerate(order)}
    touches, skipped = _touches(index, order)
    out = type(graph_def)()
    out.CopyFrom(graph_def)
    nodes = {n.name: n for n in out.node}
    taken = set(nodes)
    result = ForwardResult(out, skipped=skipped)
    for handle, ops in touches.items():
        if handle in skipped or not any(n.op in WRITES or n.op in SCATTERS or n.op in GATHERS for n in ops):
            continue
        unordered = _unordered(index, rank, ops)
        if unordered:
            skipped[handle] = f"'{unordered[0]}' and '{unordered[1]}' are not ordered by the graph"
            continue
        current: str | None = None  # tensor holding the variable's value at this point
        # an add/sub write and the value it applies to: its new value (value +/- delta) is built only if read
        pending: tuple[Any, str] | None = None
        for original in ops:
            node = nodes[original.name]
            if node.op in GATHERS or node.op in SCATTERS:
                if pending is not None:
                    current, pending = _combine(out, taken, *pending), None
                elif current is None:
                    current = _initial_read(out, taken, node)
                if node.op in GATHERS:
                    _gather(out, taken, node, current)
                else:
                    current = _scatter(out, taken, node, current)
                result.densified.append(node.name)
                continue
            if node.op == READ:
                if pending is not None:
                    current, pending = _combine(out, taken, *pending), None
                if current is None:
                    current = tensor(node.name, 0)
                    continue
                dtype = node.attr["dtype"].type
                del node.input[:]
                node.input.append(current)
                node.op = "Identity"
                del node.attr["dtype"]
                node.attr["T"].type = dtype
                result.forwarded.append(node.name)
            elif WRITES[node.op] is None:
                current, pending = node.input[1], None
            else:
                if pending is not None:
                    current = _combine(out, taken, *pending)
                elif current is None:
                    current = _initial_read(out, taken, node)
                pending = (node, current)
                if assign_values:
                    current, pending = _combine(out, taken, node, current), None
                    _assign(node, current)
                    result.assigned.append(node.name)
    return result


def _assign(write, value: str) -> None:
    """Turn AssignAdd/AssignSub ``write`` into ``AssignVariableOp(handle, value)`` (same name and edges)."""
    dtype = write.attr["dtype"].type
    write.op = "AssignVariableOp"
    write.input[1] = value
    write.ClearField("attr")
    write.attr["dtype"].type = dtype


def _add(gd, taken: set[str], base: str, op: str, inputs: list[str], device: str, **attrs) -> Any:
    """A new node ``op(inputs)`` named after ``base``, with type attributes ``attrs`` (name -> DataType)."""
    node = gd.node.add(name=fresh_name(taken, f"{base}/tfxla_{op.lower()}"), op=op, input=inputs, device=device)
    for key, value in attrs.items():
        node.attr[key].type = value
    return node


def _int_const(gd, taken: set[str], base: str, value: int, device: str) -> str:
    node = gd.node.add(name=fresh_name(taken, f"{base}/tfxla_const"), op="Const", device=device)
    node.attr["dtype"].type = DT_INT32
    node.attr["value"].tensor.dtype = DT_INT32
    node.attr["value"].tensor.int_val.append(value)
    return tensor(node.name, 0)


def _gather_value(gd, taken: set[str], node, value: str, indices: str, batch_dims: int) -> Any:
    gather = _add(gd, taken, node.name, "GatherV2", [value, indices, _int_const(gd, taken, node.name, 0, node.device)],
                  node.device, Tparams=node.attr["dtype"].type, Tindices=node.attr["Tindices"].type, Taxis=DT_INT32)
    gather.attr["batch_dims"].i = batch_dims
    return gather


def _gather(gd, taken: set[str], node, value: str) -> None:
    """Turn ``ResourceGather(v, indices)`` (in place) into ``GatherV2(value, indices, 0)``, same name, no
    control inputs (like a forwarded read: the data edge from ``value`` orders it)."""
    dtype, tindices, batch_dims = node.attr["dtype"].type, node.attr["Tindices"].type, node.attr["batch_dims"].i
    axis = _int_const(gd, taken, node.name, 0, node.device)
    indices = node.input[1]
    node.op = "GatherV2"
    del node.input[:]
    node.input.extend([value, indices, axis])
    node.ClearField("attr")
    node.attr["Tparams"].type, node.attr["Tindices"].type, node.attr["Taxis"].type = dtype, tindices, DT_INT32
    node.attr["batch_dims"].i = batch_dims


def _scatter(gd, taken: set[str], node, value: str) -> str:
    """The dense new value of ``ResourceScatter*(v, indices, updates)`` applied to ``value``; ``node``
    becomes ``AssignVariableOp(v, new value)``."""
    dense, first_dim = SCATTERS[node.op]
    dtype, tindices = _var_dtype(node), node.attr["Tindices"].type
    indices, updates = node.input[1], node.input[2]
    if first_dim:
        like = _gather_value(gd, taken, node, value, indices, 0)  # indices.shape + v.shape[1:]
        shape = _add(gd, taken, node.name, "Shape", [tensor(like.name, 0)], node.device, T=dtype, out_type=DT_INT32)
        updates = tensor(_add(gd, taken, node.name, "BroadcastTo", [updates, tensor(shape.name, 0)], node.device,
                              T=dtype, Tidx=DT_INT32).name, 0)
    if node.op in PRODUCTS:
        factor = _segment_product(gd, taken, node, value, indices, updates)
        new = _add(gd, taken, node.name, dense, [value, factor], node.device, T=dtype)
    else:
        if first_dim:
            indices = tensor(_add(gd, taken, node.name, "ExpandDims",
                                  [indices, _int_const(gd, taken, node.name, -1, node.device)], node.device,
                                  T=tindices, Tdim=DT_INT32).name, 0)
        new = _add(gd, taken, node.name, dense, [value, indices, updates], node.device, T=dtype, Tindices=tindices)
    value = tensor(new.name, 0)
    node.op = "AssignVariableOp"
    node.input[1] = value
    del node.input[2]
    node.ClearField("attr")
    node.attr["dtype"].type = dtype
    return value


def _segment_product(gd, taken: set[str], node, value: str, indices: str, updates: str) -> str:
    """``UnsortedSegmentProd(updates, indices, rows of value)``: per row of the variable, the product of
    the updates its indices name (1 for none)."""
    dtype, tindices = _var_dtype(node), node.attr["Tindices"].type
    shape = _add(gd, taken, node.name, "Shape", [value], node.device, T=dtype, out_type=DT_INT32)
    zero = _int_const(gd, taken, node.name, 0, node.device)
    rows = _add(gd, taken, node.name, "GatherV2", [tensor(shape.name, 0), zero, zero], node.device,
                Tparams=DT_INT32, Tindices=DT_INT32, Taxis=DT_INT32)
    rows.attr["batch_dims"].i = 0
    prod = _add(gd, taken, node.name, "UnsortedSegmentProd", [updates, indices, tensor(rows.name, 0)], node.device,
                T=dtype, Tindices=tindices, Tnumsegments=DT_INT32)
    return tensor(prod.name, 0)


def _combine(gd, taken: set[str], write, current: str) -> str:
    """A node computing the value ``write`` (AssignAdd/AssignSub) leaves: ``current`` +/- its delta."""
    node = gd.node.add(name=fresh_name(taken, f"{write.name}/tfxla_value"), op=WRITES[write.op],
                       input=[current, write.input[1]], device=write.device)
    node.attr["T"].type = write.attr["dtype"].type
    return tensor(node.name, 0)


def _initial_read(gd, taken: set[str], write) -> str:
    """A read of the variable placed before ``write`` (which gains a control edge on it)."""
    controls = control_inputs(write.input)
    read = gd.node.add(name=fresh_name(taken, f"{write.name}/tfxla_read"), op=READ, input=[write.input[0], *controls],
                       device=write.device)
    read.attr["dtype"].type = _var_dtype(write)
    write.input.append(control(read.name))
    return tensor(read.name, 0)


def _var_dtype(node) -> int:
    """The variable's dtype on an op touching it (``dtype``; ``T`` on the ResourceScatterNd ops)."""
    return int(node.attr["dtype"].type if "dtype" in node.attr else node.attr["T"].type)


__all__ = ["ForwardResult", "forward_variables"]
