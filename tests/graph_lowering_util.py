"""Test helper: lower a whole traced ``tf.function`` (a ConcreteFunction) that reads and writes variables.

Variables stay outside compiled code (docs/design.md §5): what the function reads becomes a cluster input
and what it writes becomes a cluster output that TensorFlow would assign. Inside one function a
variable can be read again after it was written (Keras' Adam reads ``m`` and ``v`` back after
``assign_add``), so the graph is rewritten to treat each variable as a value flowing through the
step, in the order TF's automatic control dependencies impose on the ops of one resource:

- the first ``ReadVariableOp`` of a variable, before any write, is a cluster input (the variable's value
  when the step starts); a later read becomes ``Identity`` of the variable's current value;
- ``AssignVariableOp`` makes its value input the current value; ``AssignAddVariableOp`` /
  ``AssignSubVariableOp`` add an ``AddV2`` / ``Sub`` node ``current +/- delta`` (TF's kernels compute
  exactly that) -- and when the variable was not read before, its value is a cluster input too;
- the outputs are the function's outputs, then the final value of every written variable.

``lower_function(cf)`` checks every node to be compiled with ``can_lower`` first and fails with the
full list of unsupported nodes; ``LoweredFunction.run`` evaluates the module on the variables'
current values and returns the function's outputs and the variables' new values.
"""

from __future__ import annotations

import copy
import heapq
import time
from dataclasses import dataclass, field

import numpy as np
import tensorflow as tf
from tensorflow.python.ops import resource_variable_ops

import hlo
from hlo.lowering import InputSpec, can_lower, lower_graph
from hlo.lowering.tensor_names import control_inputs, node_name
from hlo.lowering.tensor_names import data_inputs as data_input_names
from hlo.lowering.tf_function import python_sources

READ = "ReadVariableOp"
ASSIGNS = {"AssignVariableOp": None, "AssignAddVariableOp": "AddV2", "AssignSubVariableOp": "Sub"}
# Op types that only sequence other ops; they never carry data into a compiled value.
CONTROL_ONLY = {"NoOp"}


@dataclass
class VariableInput:
    """A cluster input holding a variable's value when the step starts."""

    spec: InputSpec
    handle: tf.Tensor  # the eager resource handle the function captured
    dtype: tf.DType


@dataclass
class GraphCut:
    """A ConcreteFunction's GraphDef rewritten so that variables are cluster inputs and outputs."""

    graph_def: object
    data_inputs: list[InputSpec]  # the function's arguments, in order
    captured_inputs: list[tuple[InputSpec, np.ndarray]]  # non-resource captured tensors and their values
    variable_inputs: list[VariableInput]
    outputs: list[str]  # the function's outputs, then one per written variable
    num_results: int  # how many of ``outputs`` are the function's own outputs
    written: list[tuple[tf.Tensor, tf.DType]] = field(default_factory=list)  # (handle, dtype), as the outputs

    @property
    def inputs(self) -> list[InputSpec]:
        return self.data_inputs + [s for s, _ in self.captured_inputs] + [v.spec for v in self.variable_inputs]


def _topological_order(nodes) -> list:
    """Nodes ordered by data and control edges (ties broken by GraphDef position)."""
    index = {n.name: i for i, n in enumerate(nodes)}
    deps = [{index[node_name(i)] for i in n.input} for n in nodes]
    users: list[list[int]] = [[] for _ in nodes]
    for i, ds in enumerate(deps):
        for d in ds:
            users[d].append(i)
    pending = [len(ds) for ds in deps]
    ready = sorted(i for i, p in enumerate(pending) if p == 0)
    order: list[int] = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            pending[u] -= 1
            if pending[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(nodes):
        raise ValueError("the function's graph has a cycle")
    return [nodes[i] for i in order]


def _check_resource_order(order, touches: dict[str, list]) -> None:
    """Every write must be ordered (through data or control edges) against every other op on its variable;
    TF's automatic control dependencies guarantee it, and the rewrite relies on it."""
    position = {n.name: i for i, n in enumerate(order)}
    ancestors: dict[str, int] = {}  # node -> bitmask of its ancestors' positions
    for n in order:
        mask = 0
        for i in n.input:
            dep = node_name(i)
            mask |= ancestors[dep] | (1 << position[dep])
        ancestors[n.name] = mask
    for ops in touches.values():
        for k, w in enumerate(ops):
            if w.op not in ASSIGNS:
                continue
            for j, other in enumerate(ops):
                first, second = (other, w) if j < k else (w, other)
                if j != k and not ancestors[second.name] >> position[first.name] & 1:
                    raise ValueError(f"{first.op} '{first.name}' and {second.op} '{second.name}' touch the same "
                                     "variable with no dependency between them")


def cut_variables(cf) -> GraphCut:
    """Rewrite ``cf``'s graph so that variable reads are inputs and variable writes are outputs."""
    graph = cf.graph
    gd = copy.deepcopy(graph.as_graph_def())
    captured = {ph.op.name: eager for eager, ph in graph.captures}
    data_inputs = [InputSpec(t.name, t.dtype.as_datatype_enum, tuple(t.shape.as_list()))
                   for t in graph.inputs if t.op.name not in captured]
    for spec in data_inputs:
        if any(d is None for d in spec.dims):
            raise ValueError(f"input {spec.tensor} has unknown dims {spec.dims}; lowering needs static shapes")
    resources = {name for name, eager in captured.items() if eager.dtype == tf.resource}
    captured_inputs = [(InputSpec(f"{name}:0", eager.dtype.as_datatype_enum, tuple(eager.shape)), eager.numpy())
                       for name, eager in captured.items() if name not in resources]

    order = _topological_order(list(gd.node))
    touches: dict[str, list] = {}
    for n in order:
        if n.op == READ or n.op in ASSIGNS:
            resource = node_name(n.input[0])
            if resource not in resources:
                raise ValueError(f"{n.op} '{n.name}' uses resource '{n.input[0]}', which is not a captured variable")
            touches.setdefault(resource, []).append(n)
        elif any(node_name(i) in resources for i in data_input_names(n.input)):
            # ResourceGather, ResourceApply*, ...: what they read or write would be silently lost
            raise ValueError(f"{n.op} '{n.name}' uses a variable directly; only ReadVariableOp and "
                             f"{'/'.join(ASSIGNS)} are cut out of the graph")
    if any(n.op in ASSIGNS for ops in touches.values() for n in ops):
        _check_resource_order(order, touches)

    variable_inputs: list[VariableInput] = []
    current: dict[str, str] = {}  # resource -> tensor holding its current value
    written: dict[str, tf.DType] = {}  # resource -> dtype, in the order first written

    def initial_value(resource: str, node, tensor: str | None = None) -> str:
        dtype = tf.as_dtype(node.attr["dtype"].type)
        handle = captured[resource]
        dims = tuple(resource_variable_ops.read_variable_op(handle, dtype).shape)
        if tensor is None:  # written before any read: its value comes in through a placeholder of our own
            placeholder = gd.node.add(name=f"{resource}/initial_value", op="Placeholder")
            placeholder.attr["dtype"].type = node.attr["dtype"].type
            tensor = f"{placeholder.name}:0"
        variable_inputs.append(VariableInput(InputSpec(tensor, dtype.as_datatype_enum, dims), handle, dtype))
        current[resource] = tensor
        return tensor

    for n in order:
        if n.op not in (READ, *ASSIGNS):
            continue
        resource = node_name(n.input[0])
        if n.op == READ:
            if resource not in current:
                initial_value(resource, n, f"{n.name}:0")
            else:  # a second read, or a read after a write: the variable's current value
                value, controls = current[resource], control_inputs(n.input[1:])
                n.op = "Identity"
                n.ClearField("input")
                n.input.extend([value, *controls])
                n.attr["T"].type = n.attr["dtype"].type
                del n.attr["dtype"]
            continue
        combine = ASSIGNS[n.op]
        value = n.input[1]
        if combine is not None:
            old = current.get(resource) or initial_value(resource, n)
            new = gd.node.add(name=f"{n.name}/new_value", op=combine, input=[old, value])
            new.attr["T"].type = n.attr["dtype"].type
            value = f"{new.name}:0"
        current[resource] = value
        written.setdefault(resource, tf.as_dtype(n.attr["dtype"].type))

    results = [t.name for t in graph.outputs]
    for t in graph.outputs:
        if t.dtype == tf.resource:
            raise ValueError(f"output {t.name} is a resource; only values can be compiled")
    return GraphCut(gd, data_inputs, captured_inputs, variable_inputs, results + [current[r] for r in written],
                    len(results), [(captured[r], dtype) for r, dtype in written.items()])


def unsupported_nodes(cut: GraphCut) -> list[tuple[str, str, str]]:
    """(op type, node, reason) for every node the outputs need that cannot be lowered (function bodies too)."""
    nodes = {n.name: n for n in cut.graph_def.node}
    boundary = {node_name(s.tensor) for s in cut.inputs}
    seen: set[str] = set()
    work = [node_name(t) for t in cut.outputs]
    bad = []
    while work:
        name = work.pop()
        if name in seen or name in boundary:
            continue
        seen.add(name)
        node = nodes[name]
        verdict = can_lower(node)
        if not verdict:
            bad.append((node.op, node.name, verdict.reason))
        work.extend(node_name(i) for i in data_input_names(node.input))
    for fn in cut.graph_def.library.function:
        for node in fn.node_def:
            verdict = can_lower(node)
            if node.op not in CONTROL_ONLY and not verdict:
                bad.append((node.op, f"{fn.signature.name}::{node.name}", verdict.reason))
    return sorted(bad)


def format_unsupported(bad: list[tuple[str, str, str]]) -> str:
    lines = [f"{len(bad)} node(s) cannot be lowered:"]
    lines += [f"  {op} '{name}': {reason}" for op, name, reason in bad]
    return "\n".join(lines)


@dataclass
class LoweredFunction:
    cut: GraphCut
    module: hlo.HloModule
    lower_seconds: float
    node_count: int
    op_types: dict[str, int]

    def variable_values(self) -> list[np.ndarray]:
        """The current values of the variables the step reads (its trailing inputs)."""
        return read_values([(v.handle, v.dtype) for v in self.cut.variable_inputs])

    def written_values(self) -> list[np.ndarray]:
        """The current values of the variables the step writes, in the order of its trailing outputs."""
        return read_values(self.cut.written)

    def run(self, *args) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Evaluate on ``args`` and the variables' current values: (function outputs, new variable values)."""
        captured = [value for _, value in self.cut.captured_inputs]
        out = hlo.evaluate(self.module, *[np.asarray(a) for a in args], *captured, *self.variable_values(),
                           verify=False)  # lower_graph verified it
        return out[:self.cut.num_results], out[self.cut.num_results:]


def lower_function(cf, name: str = "step") -> LoweredFunction:
    """Cut ``cf`` at its variables, check every node can be lowered, and lower it."""
    cut = cut_variables(cf)
    bad = unsupported_nodes(cut)
    assert not bad, format_unsupported(bad)
    start = time.perf_counter()
    module = lower_graph(cut.graph_def, cut.inputs, cut.outputs, name=name, sources=python_sources(cf.graph))
    seconds = time.perf_counter() - start
    ops: dict[str, int] = {}
    for n in cf.graph.as_graph_def().node:
        ops[n.op] = ops.get(n.op, 0) + 1
    return LoweredFunction(cut, module, seconds, sum(ops.values()), dict(sorted(ops.items())))


def read_values(variables: list[tuple[tf.Tensor, tf.DType]]) -> list[np.ndarray]:
    """Current values of variables given as (resource handle, dtype)."""
    return [np.asarray(resource_variable_ops.read_variable_op(h, dtype).numpy()) for h, dtype in variables]


__all__ = ["GraphCut", "LoweredFunction", "VariableInput", "cut_variables", "format_unsupported", "lower_function",
           "read_values", "unsupported_nodes"]
