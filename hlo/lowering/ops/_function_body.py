"""Lowering the body of a function from the graph's FunctionDefLibrary (cond branches, loop bodies, calls).

A ``FunctionBody`` is a FunctionDef turned into NodeDefs (with TF's own
``function_def_to_graph_def``), its argument placeholders and its results as
flat tensor names. A ``FunctionLowering`` is a ``GraphLowering`` over those
nodes that shares the module's helper computations, library and Python
sources (nodes of function ``f`` are found under ``"f::node"``, as
``tf_function.python_sources`` records them), so every instruction it builds
carries metadata like the outer graph's.

Two ways to use a body:

* ``body_computation``: a computation taking one tuple parameter (the
  arguments) and returning a tuple (the results), or what ``finish`` makes of
  them; cached per (function, argument shapes, materialized constants, role).
  A TensorList argument or result (``hlo/lowering/lists.py``) is two elements
  of the flat tuple, its buffer and its length.
* ``inline_body``: the body's instructions built straight into the caller's
  computation, its arguments bound to the caller's values (constant-ness flows
  through, so shapes computed inside a called function still fold).

Invariant: argument values that are compile-time constants in the caller and
small (``MATERIALIZE_LIMIT`` elements) may be passed as ``constants``; they are
rebuilt as constants inside the computation, so shape-like arguments stay
foldable there, as tf2xla's const-argument analysis allows.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence, cast

import numpy as np

from hlo.builder import ComputationBuilder, Value
from hlo.dtypes import PrimitiveType
from hlo.ir import HloComputation
from hlo.lowering.context import LoweringContext
from hlo.lowering.errors import LoweringError, UnsupportedOpError
from hlo.lowering.graph import GraphLowering, _hlo_name
from hlo.lowering.lists import Item, ListSpec, ListValue, Slot, flat_shapes, flatten, slot_of
from hlo.lowering.tensor_names import data_inputs, parse_tensor
from hlo.shapes import TupleShape, array_shape

SOURCE_SEP = "::"  # python_sources keys the nodes of function f as f"{f}::{node}"
MATERIALIZE_LIMIT = 1024  # elements of a constant argument rebuilt inside a branch or loop computation
_PASS_THROUGH_OPS = frozenset({"Identity", "Snapshot"})


@dataclass(frozen=True)
class FunctionBody:
    name: str
    nodes: tuple  # NodeDefs (argument placeholders included)
    args: tuple[str, ...]  # flat tensor names of the argument placeholders, in signature order
    arg_names: tuple[str, ...]
    rets: tuple[str, ...]  # flat tensor names of the results, in signature order

    def invariants(self) -> set[int]:
        """Indices i whose result i is argument i unchanged (through Identity nodes): loop invariants."""
        by_name = {n.name: n for n in self.nodes}
        out = set()
        for i, tensor in enumerate(self.rets[:len(self.args)]):
            while True:
                node, idx, _ = ref = parse_tensor(tensor)
                if str(ref) == self.args[i]:
                    out.add(i)
                n = by_name.get(node)
                if n is None or idx != 0 or n.op not in _PASS_THROUGH_OPS:
                    break
                tensor = data_inputs(n.input)[0]
        return out


def function_body(ctx: LoweringContext, name: str) -> FunctionBody:
    """The body of library function ``name``, converted once per module."""
    lowering = ctx._lowering
    bodies = lowering.shared.setdefault("function_bodies", {})
    if name in bodies:
        return bodies[name]
    library = lowering.library
    defs = lowering.shared.setdefault(
        "function_defs", {f.signature.name: f for f in (library.function if library is not None else ())})
    fdef = defs.get(name)
    if fdef is None:
        raise ctx.error(f"function '{name}' is not in the graph's function library")
    if fdef.signature.attr:
        raise ctx.error(f"function '{name}' is polymorphic (attrs {[a.name for a in fdef.signature.attr]}); "
                        "only instantiated functions can be lowered")
    from tensorflow.python.framework.function_def_to_graph import function_def_to_graph_def

    fdef = calls_as_partitioned(fdef, defs)
    try:
        graph_def, flat = function_def_to_graph_def(fdef)
    except Exception as e:  # an op TF does not know, a malformed FunctionDef
        raise ctx.error(f"cannot read function '{name}': {type(e).__name__}: {e}") from e
    sig = fdef.signature
    body = FunctionBody(name, tuple(graph_def.node), tuple(flat[a.name] for a in sig.input_arg),
                        tuple(a.name for a in sig.input_arg), tuple(flat[fdef.ret[o.name]] for o in sig.output_arg))
    bodies[name] = body
    return body


def calls_as_partitioned(fdef: Any, defs: dict[str, Any]) -> Any:  # FunctionDef protos (TF ships no stubs)
    """``fdef`` with every node whose op type is a library function (a v1 ``Defun`` call, as in the ``While``
    bodies of ``tf.nn.ctc_loss``) rewritten as the ``PartitionedCall`` of it that means the same (its
    results ``node:<output arg>:0`` read as ``node:output:<k>``), so the call lowering inlines it; ``fdef``
    itself when there is none. A callee with list or polymorphic arguments is left as it is."""
    calls = {n.name: defs[n.op].signature for n in fdef.node_def if n.op in defs and _plain(defs[n.op].signature)}
    if not calls:
        return fdef
    out = type(fdef)()
    out.CopyFrom(fdef)
    renamed = {f"{name}:{arg.name}:0": f"{name}:output:{k}"
               for name, sig in calls.items() for k, arg in enumerate(sig.output_arg)}
    for node in out.node_def:
        if node.name in calls:
            sig = calls[node.name]
            node.attr.clear()
            node.attr["f"].func.name = node.op
            node.attr["Tin"].list.type.extend(a.type for a in sig.input_arg)
            node.attr["Tout"].list.type.extend(a.type for a in sig.output_arg)
            node.op = "StatefulPartitionedCall" if sig.is_stateful else "PartitionedCall"
        node.input[:] = [renamed.get(i, i) for i in node.input]
    for key, value in list(out.ret.items()):
        out.ret[key] = renamed.get(value, value)
    return out


def _plain(sig: Any) -> bool:
    """Whether every argument of ``sig`` is one tensor of a fixed type (an instantiated function)."""
    return not sig.attr and all(a.type and not (a.number_attr or a.type_list_attr or a.type_attr)
                                for a in list(sig.input_arg) + list(sig.output_arg))


class FunctionLowering(GraphLowering):
    """A GraphLowering of one function's body, sharing the outer lowering's module-wide state."""

    def __init__(self, outer: GraphLowering, body: FunctionBody, name: str, inline: bool = False):
        super().__init__(body.nodes, name=name, sources=outer.sources, library=outer.library, shared=outer.shared)
        self.function = body.name
        self.body = body
        if inline:  # build into the caller's computation, sharing what it knows about constants
            self.builder, self._constant, self._const_cache = outer.builder, outer._constant, outer._const_cache

    def source_of(self, node_name: str) -> tuple[str, int] | None:
        return self.sources.get(f"{self.function}{SOURCE_SEP}{node_name}")

    def bind(self, i: int, value: Item, constant: bool = False) -> None:
        self.values[self.body.args[i]] = cast(Value, value)  # a list is bound like a value
        if constant and isinstance(value, Value):
            self._constant[value.name] = True

    def results(self, ctx: LoweringContext, role: str) -> list[Item]:
        """Lower every result; errors say which function, and for which node, they come from.

        A stateful node no result depends on (a print, an assert, a variable write: TF runs it through the
        function's control outputs) cannot be compiled, and dropping it would lose its effect: an error.
        """
        try:
            values: list[Item] = [self.lower_tensor(t) for t in self.body.rets]
            for node in self.body.nodes:
                if node.name not in self.done and node.op != "Placeholder" and _is_stateful(node.op):
                    raise UnsupportedOpError(f"cannot compile: {node.op} has side effects and no result depends on "
                                             "it, so compiling would lose them", node.name, node.op, None,
                                             self.source_of(node.name))
            return values
        except LoweringError as e:
            e.args = (f"{e.args[0]} [in function '{self.function}', the {role} of node '{ctx.name}' "
                      f"({ctx.op_type})]",) + e.args[1:]
            raise


def _is_stateful(op_type: str) -> bool:
    from tensorflow.python.framework import op_def_registry

    op_def = op_def_registry.get(op_type)
    return op_def is None or op_def.is_stateful


def check_arity(ctx: LoweringContext, body: FunctionBody, role: str, n_args: int, n_rets: int | None) -> None:
    if len(body.args) != n_args or (n_rets is not None and len(body.rets) != n_rets):
        want = f"{n_args} arguments" + (f" and {n_rets} results" if n_rets is not None else "")
        raise ctx.error(f"{role} function '{body.name}' takes {len(body.args)} arguments and returns "
                        f"{len(body.rets)} results, but the node needs {want}")


def small_constants(ctx: LoweringContext, indices: Sequence[int]) -> dict[int, np.ndarray]:
    """Values of those inputs ``indices`` that are compile-time constants of at most MATERIALIZE_LIMIT elements
    (for a TensorList: its length, when that is a compile-time constant)."""
    out = {}
    for i in indices:
        v = ctx.inputs[i]
        if isinstance(v, ListValue) and ctx._lowering.is_constant(v.length):
            out[i] = ctx._lowering.constant_value_of(v.length)
        elif isinstance(v, Value) and ctx._lowering.is_constant(v) and ctx.shape(v).num_elements <= MATERIALIZE_LIMIT:
            out[i] = ctx.const_input(i)
    return out


def _unique_name(ctx: LoweringContext, base: str) -> str:
    used = ctx._lowering.shared.setdefault("computation_names", {ctx._lowering.builder.name})
    helpers = {c.name for c in ctx._lowering.shared["computations"].values()}
    name, n = _hlo_name(base), 0
    while name in used or name in helpers:
        n += 1
        name = f"{_hlo_name(base)}.{n}"
    used.add(name)
    return name


@dataclass(frozen=True)
class BodyComputation:
    """A body built as a computation, with the boundary types of its results."""

    computation: HloComputation
    results: tuple[Slot, ...]
    same_length: frozenset[int]  # list results whose length is the list argument's at the same index


def body_computation(ctx: LoweringContext, body: FunctionBody, arg_slots: Sequence[Slot], role: str,
                     constants: dict[int, np.ndarray] | None = None,
                     finish: Callable[[ComputationBuilder, list[Item]], Value] | None = None) -> BodyComputation:
    """``body`` as a computation ``(flat tuple of arg_slots) -> flat tuple of results`` (or
    ``finish(builder, results)``).

    ``constants``: argument index -> its value, rebuilt as a constant instead of read from the parameter.
    """
    constants = constants or {}
    key = (role, body.name, tuple(repr(s) if isinstance(s, ListSpec) else str(s) for s in arg_slots),
           tuple((i, str(constants[i].dtype), constants[i].tobytes()) for i in sorted(constants)))
    cache = ctx._lowering.shared.setdefault("function_computations", {})
    if key in cache:
        return cache[key]
    fl = FunctionLowering(ctx._lowering, body, _unique_name(ctx, body.name))
    cb = fl.builder
    glue = ctx.b.metadata  # parameter, tuple plumbing and predicate conversion belong to the calling node
    cb.metadata = glue
    param = cb.parameter(TupleShape(tuple(flat_shapes(arg_slots))), name="args")
    k = 0
    for i, slot in enumerate(arg_slots):
        cb.name_hint = _hlo_name(body.arg_names[i])
        if isinstance(slot, ListSpec):
            buffer, length = (cb.get_tuple_element(param, index=k + j) for j in range(2))
            if i in constants:  # a list whose length is known: it stays known inside
                length = cb.constant(constants[i], PrimitiveType.S32)
                fl._constant[length.name] = True
            fl.bind(i, ListValue(slot.dtype, slot.max_size, slot.element_dims, buffer, length, slot.uniform))
            k += 2
            continue
        if i in constants:
            fl.bind(i, cb.constant(constants[i], array_shape(slot).dtype), constant=True)
        else:
            fl.bind(i, cb.get_tuple_element(param, index=k))
        k += 1
    cb.name_hint, cb.metadata = None, None
    results = fl.results(ctx, role)
    cb.name_hint, cb.metadata = None, glue
    slots = tuple(slot_of(ctx, r, f"result {j} of {role} function '{body.name}'") for j, r in enumerate(results))
    root = finish(cb, results) if finish is not None else cb.tuple(*flatten(results))
    comp = cb.build(root)
    ctx._lowering.shared["builders"].append(cb)
    same = frozenset(j for j, r in enumerate(results[:len(arg_slots)]) if isinstance(r, ListValue)
                     and isinstance(arg := fl.values[body.args[j]], ListValue) and arg.length.name == r.length.name)
    built = BodyComputation(comp, slots, same)
    cache[key] = built
    return built


def inline_body(ctx: LoweringContext, body: FunctionBody, operands: Sequence[Item]) -> list[Item]:
    """The results of ``body`` applied to ``operands``, built into the caller's computation."""
    fl = FunctionLowering(ctx._lowering, body, ctx.b.name, inline=True)
    for i, v in enumerate(operands):
        fl.bind(i, v)
    hint, metadata = ctx.b.name_hint, ctx.b.metadata
    try:
        return fl.results(ctx, "body")
    finally:
        ctx.b.name_hint, ctx.b.metadata = hint, metadata
