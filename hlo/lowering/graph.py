"""Lowering a GraphDef subgraph to a verified HloModule.

``lower_graph(graph, inputs, outputs)`` walks the nodes the outputs depend on
(inputs cut the walk), lowers each through its registered rule, and returns a
module whose parameters are ``inputs`` and whose ROOT tuple is ``outputs``,
both in the order given. Every instruction carries ``metadata`` naming the TF
node (and its Python file and line when the caller knows them).

Compile-time constants: a value that depends on no parameter can be
evaluated while lowering, with the HLO evaluator, so ``Const``, ``Shape`` of
a static tensor, ``Pack`` of constants and arithmetic on them all fold
through the ordinary rules.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence, cast

import numpy as np

from hlo.attributes import OpMetadata
from hlo.builder import ComputationBuilder, Value, module_of
from hlo.dtypes import PrimitiveType
from hlo.errors import first_duplicate
from hlo.evaluator import evaluate
from hlo.ir import HloComputation, HloModule
from hlo.lowering import tf_types
from hlo.lowering.context import LoweringContext, NodeDefLike
from hlo.lowering.errors import LoweringError, UnsupportedOpError
from hlo.lowering.lists import ListValue
from hlo.lowering.registry import can_lower, rule_for
from hlo.lowering.tensor_names import canonical, data_inputs, parse_input, parse_tensor
from hlo.lowering.tensor_names import tensor as tensor_name
from hlo.opcodes import Group, Opcode
from hlo.shapes import Shape, array_shape, scalar
from hlo.verifier import verify

_NOT_CONSTANT_OPCODES = Group.RANDOM | {Opcode.PARAMETER, Opcode.CUSTOM_CALL}


@dataclass(frozen=True)
class InputSpec:
    """A cluster input: a tensor name (``node:0``), its dtype (HLO or TF enum) and static dims."""

    tensor: str
    dtype: PrimitiveType | int
    dims: tuple[int, ...]

    @property
    def element_type(self) -> PrimitiveType:
        return self.dtype if isinstance(self.dtype, PrimitiveType) else tf_types.to_hlo(self.dtype)


def _hlo_name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.\-]", "_", text) or "x"


class GraphLowering:
    """Lowers the nodes of one graph into one computation (nested bodies get their own instance)."""

    def __init__(self, nodes: Sequence[NodeDefLike], *, name: str = "cluster",
                 sources: Mapping[str, tuple[str, int]] | None = None, library: Any = None,
                 shared: dict[str, Any] | None = None):  # library: a FunctionDefLibrary proto
        self.nodes = {n.name: n for n in nodes}
        if len(self.nodes) != len(nodes):
            dup = first_duplicate(n.name for n in nodes)
            raise LoweringError(f"the graph defines node '{dup}' more than once")
        self.builder = ComputationBuilder(_hlo_name(name))
        self.sources = dict(sources or {})
        self.library = library
        self.shared = shared if shared is not None else {"computations": {}, "builders": []}
        self.values: dict[str, Value] = {}  # tensor name -> value
        self._constant: dict[str, bool] = {}  # instruction name -> depends on no parameter
        self._const_cache: dict[str, np.ndarray] = {}
        self.done: set[str] = set()  # nodes already lowered

    # --- entry points ------------------------------------------------------------
    def add_input(self, spec: InputSpec) -> Value:
        node, idx, _ = parse_tensor(spec.tensor)
        shape = Shape.array(spec.element_type, spec.dims)
        self.builder.name_hint = None
        value = self.builder.parameter(shape, name=_hlo_name(f"{node}.{idx}" if idx else node))
        self._constant[value.name] = False
        self.values[tensor_name(node, idx)] = value
        return value

    def lower_tensor(self, tensor: str) -> Value:
        """Lower whatever ``tensor`` needs, iteratively (deep graphs must not hit Python's recursion limit)."""
        ref = parse_tensor(tensor)
        key = str(ref)
        if key not in self.values:
            self._lower_needed(ref.node, tensor)
        if key not in self.values:
            raise LoweringError(f"node has no output {ref.output}", ref.node, self.nodes[ref.node].op)
        return self.values[key]

    def _lower_needed(self, root: str, tensor: str) -> None:
        if root not in self.nodes:
            raise LoweringError(f"tensor '{tensor}' comes from node '{root}', which is not in the graph")
        stack = [(root, False)]
        on_path: set[str] = set()
        while stack:
            name, expanded = stack.pop()
            if name in self.done:
                continue
            node = self.nodes[name]
            if expanded:
                on_path.discard(name)
                self._lower_node(node)
                self.done.add(name)
                continue
            if name in on_path:
                raise LoweringError("the graph has a cycle through this node", name, node.op)
            on_path.add(name)
            stack.append((name, True))
            for inp in reversed(node.input):
                try:
                    ref = parse_input(inp)
                except ValueError as e:
                    raise LoweringError(f"bad input: {e}", node.name, node.op, self.source_of(node.name)) from None
                if ref.control or str(ref) in self.values:
                    continue
                dep = ref.node
                if dep not in self.nodes:
                    raise LoweringError(f"input '{inp}' refers to node '{dep}', which is not in the graph",
                                        node.name, node.op, self.source_of(node.name))
                stack.append((dep, False))

    # --- one node ------------------------------------------------------------------
    def source_of(self, node_name: str) -> tuple[str, int] | None:
        return self.sources.get(node_name)

    def _lower_node(self, node: NodeDefLike) -> None:
        source = self.source_of(node.name)
        rule = rule_for(node.op)
        inputs = []
        for inp in data_inputs(node.input):
            key = canonical(inp)
            if key not in self.values:
                raise LoweringError(f"input '{inp}' is not produced by the graph", node.name, node.op, source)
            inputs.append(self.values[key])
        dtypes = [array_shape(v.shape).dtype for v in inputs if isinstance(v, Value)]  # not TensorLists
        verdict = can_lower(node, [tf_types.to_tf(t) for t in dtypes if t in _TF_TYPES])
        if not verdict:
            raise UnsupportedOpError(f"cannot compile: {verdict.reason}", node.name, node.op, verdict.dtype, source)
        assert rule is not None  # can_lower refuses an op without a rule
        b = self.builder
        b.name_hint = _hlo_name(node.name.rsplit("/", 1)[-1])
        b.metadata = OpMetadata.make(node.op, node.name, *(source or (None, None)))
        start = len(b.instructions)
        ctx = LoweringContext(self, node, inputs)
        try:
            result = rule.fn(ctx)
        except LoweringError:
            raise
        except Exception as e:  # a rule's bug or an input it cannot handle: name the node, never a bare KeyError
            raise LoweringError(f"lowering failed: {type(e).__name__}: {e}", node.name, node.op, source) from e
        finally:
            b.name_hint = None
            b.metadata = None
        for inst in b.instructions[start:]:
            self._constant[inst.name] = inst.opcode not in _NOT_CONSTANT_OPCODES and all(
                self._constant.get(o, False) for o in inst.operands)
        outputs = [result] if isinstance(result, (Value, ListValue)) else list(result)
        for i, value in enumerate(outputs):
            # an output that is a cluster input stays one; a TensorList is held like a value (rules that take
            # lists check for ListValue)
            self.values.setdefault(tensor_name(node.name, i), cast(Value, value))

    # --- compile-time constants ------------------------------------------------------
    def is_constant(self, value: Value) -> bool:
        return self._constant.get(value.name, False)

    def constant_value(self, ctx: LoweringContext, i: int) -> np.ndarray:
        value = ctx.inputs[i]
        if not self.is_constant(value):
            producer = data_inputs(ctx.node.input)[i]
            raise LoweringError(
                f"input {i} ('{producer}') must be a compile-time constant, but its value depends on a "
                f"cluster input", ctx.node.name, ctx.node.op, self.source_of(ctx.node.name))
        return self.constant_value_of(value)

    def constant_value_of(self, value: Value) -> np.ndarray:
        """The value of ``value``, which must depend on no parameter (``is_constant``)."""
        if not self.is_constant(value):
            raise LoweringError(f"'{value.name}' is not a compile-time constant")
        if value.name not in self._const_cache:
            self._const_cache[value.name] = self._evaluate(value)
        return self._const_cache[value.name]

    def _evaluate(self, value: Value) -> np.ndarray:
        insts = self.builder.instructions
        by_name = {i.name: i for i in insts}
        needed: set[str] = set()
        work = [value.name]
        while work:
            name = work.pop()
            if name not in needed:
                needed.add(name)
                work.extend(by_name[name].operands)
        comp = HloComputation("const_eval", tuple(i for i in insts if i.name in needed), value.name)
        module = module_of("const_eval", comp, self.builder, *self.shared["builders"])
        (out,) = evaluate(module)
        return out

    # --- shared helper computations ------------------------------------------------
    def scalar_computation(self, opcode: Opcode, dtype: PrimitiveType) -> HloComputation:
        key = f"{opcode.text}_{dtype.value}"

        def build(cb: ComputationBuilder) -> Value:
            a = cb.parameter(scalar(dtype), name="a")
            c = cb.parameter(scalar(dtype), name="b")
            return cb.op(opcode, a, c)
        return self.helper_computation(key, build)

    def helper_computation(self, key: str, build: Callable[[ComputationBuilder], Value]) -> HloComputation:
        cache = self.shared["computations"]
        if key not in cache:
            cb = ComputationBuilder(_hlo_name(key))
            cache[key] = cb.build(build(cb))
            self.shared["builders"].append(cb)
        return cache[key]


_TF_TYPES = frozenset(tf_types._TO_TF)


def lower_graph(graph: Any, inputs: Sequence[InputSpec], outputs: Sequence[str], *, name: str = "cluster",
                sources: Mapping[str, tuple[str, int]] | None = None, library: Any = None) -> HloModule:
    """Lower the part of ``graph`` (a GraphDef or a list of NodeDefs) between ``inputs`` and ``outputs``.

    Returns a verified module: parameter i is ``inputs[i]``; the ROOT is a tuple of ``outputs``.
    Raises ``UnsupportedOpError`` for an op or dtype we cannot compile and ``LoweringError`` for a
    malformed graph or a non-constant value where a constant is required.
    """
    nodes = list(graph.node) if hasattr(graph, "node") else list(graph)
    if library is None and hasattr(graph, "library"):
        library = graph.library
    lowering = GraphLowering(nodes, name=name, sources=sources, library=library)
    for spec in inputs:
        lowering.add_input(spec)
    results = [lowering.lower_tensor(t) for t in outputs]
    for t, value in zip(outputs, results):
        if isinstance(value, ListValue):
            raise LoweringError(f"output '{t}' is a TensorList, which cannot leave compiled code")
    b = lowering.builder
    b.name_hint, b.metadata = None, None
    root = b.tuple(*results, name=_hlo_name(f"{name}_results"))
    module = module_of(_hlo_name(name), b.build(root), b, *lowering.shared["builders"])
    verify(module)
    return module
