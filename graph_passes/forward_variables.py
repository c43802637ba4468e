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
with the same values. A variable is left alone when its
handle does not come straight from a ``Placeholder``/``VarHandleOp`` (another op could alias it), when
anything but ``ReadVariableOp``/``Assign*VariableOp`` uses its handle, or when two of its ops are not
ordered by the graph's edges (``skipped`` says which and why).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from graph_passes._graph import GraphIndex
from hlo.lowering.tensor_names import control, control_inputs, node_name, tensor

READ = "ReadVariableOp"
DT_RESOURCE = 20
WRITES = {"AssignVariableOp": None, "AssignAddVariableOp": "AddV2", "AssignSubVariableOp": "Sub"}


@dataclass
class ForwardResult:
    graph_def: object
    forwarded: list[str] = field(default_factory=list)  # reads turned into Identity of the current value
    assigned: list[str] = field(default_factory=list)  # AssignAdd/AssignSub turned into AssignVariableOp
    skipped: dict[str, str] = field(default_factory=dict)  # resource tensor -> why it was left alone


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
        if node.op == READ:
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
    return node.op == "VarHandleOp" or (node.op == "Placeholder" and node.attr["dtype"].type == DT_RESOURCE)


def _touches(index: GraphIndex, order: list[str]) -> tuple[dict[str, list], dict[str, str]]:
    """Resource tensor -> its reads and writes in topological order; resource -> why it is skipped."""
    touches: dict[str, list] = {}
    skipped: dict[str, str] = {}
    for name in order:
        node = index.by_name[name]
        for e in index.data_in[name]:
            handle = tensor(e.producer, e.index)
            if node.op == READ or node.op in WRITES:
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
        if handle in skipped or not any(n.op in WRITES for n in ops):
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


def _combine(gd, taken: set[str], write, current: str) -> str:
    """A node computing the value ``write`` (AssignAdd/AssignSub) leaves: ``current`` +/- its delta."""
    node = gd.node.add(name=_fresh(taken, f"{write.name}/tfxla_value"), op=WRITES[write.op],
                       input=[current, write.input[1]], device=write.device)
    node.attr["T"].type = write.attr["dtype"].type
    return tensor(node.name, 0)


def _initial_read(gd, taken: set[str], write) -> str:
    """A read of the variable placed before ``write`` (which gains a control edge on it)."""
    controls = control_inputs(write.input)
    read = gd.node.add(name=_fresh(taken, f"{write.name}/tfxla_read"), op=READ, input=[write.input[0], *controls],
                       device=write.device)
    read.attr["dtype"].type = write.attr["dtype"].type
    write.input.append(control(read.name))
    return tensor(read.name, 0)


def _fresh(taken: set[str], name: str) -> str:
    out, k = name, 0
    while out in taken:
        k += 1
        out = f"{name}_{k}"
    taken.add(out)
    return out


__all__ = ["ForwardResult", "forward_variables"]
