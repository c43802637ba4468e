"""Mark compilable nodes: for every node of a GraphDef, whether it may join a cluster and, if not, why.

The answer comes from ``hlo.lowering.can_lower`` (so clustering and lowering cannot drift apart), asked
with each node's real input dtypes and whether its must-be-constant inputs are compile-time constants,
after our own rules, in this order (the first that applies gives the reason):

1. the node is placed on a device that is not a CPU, or lies on a cycle (v1 control flow);
2. op types that always stay in TensorFlow: ``NEVER_COMPILED`` (variable reads/writes, Placeholder,
   NoOp, Print/Assert, stateful random ops), any other stateful random op, TensorArray (v1) ops and
   TensorList ops without a lowering;
3. a string, variant or resource input or output (resource handles themselves included), except the
   variant TensorLists of ops whose lowering takes lists (the TensorList ops, While/If/Case, Identity:
   ``hlo/lowering/lists.py``); a list must have a static element shape when it enters a loop or branch
   and a bounded size (``list_problems``; ``list_shapes.py`` gives a list the shape its loop writes
   first); clustering keeps every list inside one cluster
   (``cluster.py``);
4. ``can_lower`` (op type, dtypes, must-be-constant inputs);
5. a node calling a function (If/While/Case bodies) containing a node rules 2-4 refuse;
6. an input or output without a static shape ("dynamic shape").

Dtypes and static shapes come from importing the GraphDef into a fresh ``tf.Graph`` (TF's shape
inference). Resource placeholders carry no variable shape, so the caller may bind them
(``resource_shapes``): they are imported as ``VarHandleOp`` nodes of that dtype and shape, and the shapes of
``ReadVariableOp`` results become known.

A tensor is a compile-time constant when it is produced by ``Const``, by ``Shape``/``Size``/``Rank``/
``ShapeN`` of a tensor whose shape is static, or by a stateless lowerable op whose inputs are all
constants (``Pack``, arithmetic, ``Cast`` ... of constants). The marking records every such tensor;
extraction copies a constant a cluster needs as a constant into that cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from graph_passes._graph import GraphIndex, device_type, is_stub
from hlo.lowering import tf_types
from hlo.lowering.registry import NEVER_COMPILED, can_lower, rule_for
from hlo.lowering.tensor_names import tensor

SHAPE_OPS = frozenset({"Shape", "Size", "Rank", "ShapeN"})
CONST_OPS = frozenset({"Const", "HostConst"})
_STATEFUL_RANDOM = frozenset({
    "RandomUniform", "RandomUniformInt", "RandomStandardNormal", "TruncatedNormal", "ParameterizedTruncatedNormal",
    "RandomGamma", "RandomPoisson", "RandomPoissonV2", "RandomShuffle", "Multinomial", "RandomCrop",
    "StatefulRandomBinomial", "StatefulStandardNormal", "StatefulStandardNormalV2", "StatefulTruncatedNormal",
    "StatefulUniform", "StatefulUniformFullInt", "StatefulUniformInt", "RngSkip", "RngReadAndSkip",
    "NonDeterministicInts", "RandomGammaGrad",
})
_SIDE_EFFECTS = frozenset({"Print", "PrintV2", "Assert", "ScalarSummary", "HistogramSummary", "ImageSummary",
                           "AudioSummaryV2", "WriteScalarSummary", "WriteHistogramSummary", "WriteSummary"})
_FUNCTIONAL_OK = frozenset({"If", "While", "Case", "StatelessIf", "StatelessWhile", "StatelessCase", "PartitionedCall",
                            "StatefulPartitionedCall"})
_STATE_DTYPES = {tf_types.DT_STRING: "string", tf_types.DT_VARIANT: "variant", tf_types.DT_RESOURCE: "resource"}
_STATE_REASONS = {
    "string": "string tensors stay in TensorFlow",
    "variant": "variant tensors (TensorList, Optional, datasets) stay in TensorFlow",
    "resource": "resource handles (variables, tables, iterators) stay in TensorFlow",
}


@dataclass(frozen=True)
class TensorInfo:
    """A tensor's TF dtype (DataType enum) and static dims (None: unknown rank; a dim None: unknown)."""

    dtype: int
    dims: tuple[int | None, ...] | None

    @property
    def static(self) -> bool:
        return self.dims is not None and all(d is not None for d in self.dims)

    def shape_text(self) -> str:
        if self.dims is None:
            return "<unknown rank>"
        return "[" + ",".join("?" if d is None else str(d) for d in self.dims) + "]"


@dataclass(frozen=True)
class NodeVerdict:
    name: str
    op: str
    ok: bool
    reason: str = ""  # why the node stays in TensorFlow (empty when ok)
    device: str = ""

    def __bool__(self) -> bool:
        return self.ok


@dataclass
class Marking:
    graph_def: object  # the GraphDef that was marked
    verdicts: dict[str, NodeVerdict]  # in GraphDef order
    tensors: dict[str, TensorInfo]  # "node:i" -> dtype and static shape
    constants: frozenset[str]  # tensors computable at compile time

    def compilable(self) -> list[str]:
        return [n for n, v in self.verdicts.items() if v.ok]

    def excluded(self) -> dict[str, str]:
        return {n: v.reason for n, v in self.verdicts.items() if not v.ok}


def _is_stateful_random(op: str, op_def) -> bool:
    if op in _STATEFUL_RANDOM:
        return True
    return bool(op_def is not None and op_def.is_stateful and not op.startswith("Stateless")
                and ("Random" in op or "Rng" in op))


def op_rule(node) -> str | None:
    """Our own op-type rules (2. above): the reason a node of this op type never compiles, or None."""
    from tensorflow.python.framework import op_def_registry

    op = node.op
    if op in NEVER_COMPILED:
        return NEVER_COMPILED[op]
    if _is_stateful_random(op, op_def_registry.get(op)):
        return "stateful random op: results depend on hidden RNG state, so it stays in TensorFlow"
    if op in _SIDE_EFFECTS:
        return "side effect (printing, assertion, summary) must happen in TensorFlow"
    if op.startswith(("TensorArray", "TensorList")) and not _takes_lists(op):
        return f"{op} has no lowering: its variant-typed TensorArray/TensorList state stays in TensorFlow"
    return None


def _takes_lists(op: str) -> bool:
    rule = rule_for(op)
    return rule is not None and rule.lists


def _state_reason(op: str, kind: str) -> str | None:
    """Why a ``kind`` (string/variant/resource) tensor at a node of type ``op`` keeps it in TensorFlow."""
    if kind == "variant" and _takes_lists(op):
        return None
    return _STATE_REASONS[kind]


def _attr_state_dtype(node) -> str | None:
    for value in node.attr.values():
        for t in ([value.type] if value.HasField("type") else []) + list(value.list.type):
            if t in _STATE_DTYPES:
                return _STATE_DTYPES[t]
    return None


def _function_names(node) -> list[str]:
    names = []
    for key in sorted(node.attr):
        value = node.attr[key]
        if value.HasField("func"):
            names.append(value.func.name)
        names.extend(f.name for f in value.list.func)
    return [n for n in names if n]


def body_problem(node, library: Mapping, seen: set[str] | None = None) -> str | None:
    """Why a function called by ``node`` (a branch, loop body, call, or a node whose op type is a library
    function: a v1 ``Defun`` call, lowered as the ``PartitionedCall`` of it) cannot be compiled, or None."""
    seen = set() if seen is None else seen
    for fname in _function_names(node) + ([node.op] if node.op in library else []):
        if fname in seen:
            continue
        seen.add(fname)
        fdef = library.get(fname)
        if fdef is None:
            return f"calls function '{fname}', which is not in the graph's function library"
        if is_stub(fdef):
            return f"calls function '{fname}', which is only a signature here (no body)"
        for inner in fdef.node_def:
            if inner.op == "NoOp":
                continue
            state = _attr_state_dtype(inner)
            called = inner.op in library  # checked through its body
            reason = ((None if called else op_rule(inner) or (_state_reason(inner.op, state) if state else None)
                       or can_lower(inner).reason) or body_problem(inner, library, seen))
            if reason:
                return f"calls function '{fname}', whose node '{inner.name}' ({inner.op}) cannot be compiled: {reason}"
    return None


def _fill_stubs(library) -> None:
    """Give each stub in ``library`` (in place) a body TF accepts on import: a placeholder per result.
    A call's result shapes are unknown to TF's shape inference whatever the body, so nothing is lost."""
    for fdef in library.function:
        if not is_stub(fdef):
            continue
        for k, arg in enumerate(fdef.signature.output_arg):
            node = fdef.node_def.add(name=f"tfxla_stub_{k}", op="Placeholder")
            node.attr["dtype"].type = arg.type
            fdef.ret[arg.name] = f"{node.name}:output:0"


def analysis_graph(graph_def, resource_shapes: Mapping[str, tuple[int, Sequence[int]]] | None = None,
                   input_shapes: Mapping[str, Sequence[int]] | None = None):
    """``graph_def`` imported into a fresh ``tf.Graph``, resource placeholders bound to variable shapes
    and data placeholders named in ``input_shapes`` given those (static) shapes."""
    import tensorflow as tf

    gd = type(graph_def)()
    gd.CopyFrom(graph_def)
    _fill_stubs(gd.library)
    for node in gd.node:
        if node.op == "Placeholder" and input_shapes and node.name in input_shapes:
            node.attr["shape"].shape.CopyFrom(tf.TensorShape(list(input_shapes[node.name])).as_proto())
            node.attr.pop("_output_shapes", None)
        if node.op == "Placeholder" and resource_shapes and node.name in resource_shapes:
            dtype, dims = resource_shapes[node.name]
            attrs = {k: v for k, v in node.attr.items() if k.startswith("_")}
            node.op = "VarHandleOp"
            node.ClearField("attr")
            for k, v in attrs.items():
                node.attr[k].CopyFrom(v)
            node.attr["dtype"].type = int(dtype)
            node.attr["shape"].shape.CopyFrom(tf.TensorShape(list(dims)).as_proto())
            node.attr["shared_name"].s = f"tfxla_analysis/{node.name}".encode()
    graph = tf.Graph()
    try:
        with graph.as_default():
            tf.graph_util.import_graph_def(gd, name="")
    except (ValueError, tf.errors.OpError) as e:
        raise ValueError(f"cannot import the graph to infer dtypes and shapes: {e}") from e
    return graph


def tensor_infos(graph) -> dict[str, TensorInfo]:
    out: dict[str, TensorInfo] = {}
    for op in graph.get_operations():
        for t in op.outputs:
            dims = None if t.shape.rank is None else tuple(t.shape.as_list())
            out[tensor(op.name, t.value_index)] = TensorInfo(t.dtype.as_datatype_enum, dims)
    return out


class _Marker:
    def __init__(self, graph_def, infos: dict[str, TensorInfo]):
        self.index = GraphIndex(graph_def.node)
        self.infos = infos
        self.library = {f.signature.name: f for f in graph_def.library.function}
        self.constants: set[str] = set()
        self.in_cycle = {n for comp in self.index.strongly_connected() for n in comp}
        self.list_problems: dict[str, str] = {}

    def inputs(self, name: str) -> list[tuple[str, TensorInfo | None]]:
        return [(tensor(e.producer, e.index), self.infos.get(tensor(e.producer, e.index)))
                for e in self.index.data_in[name]]

    def outputs(self, name: str) -> list[tuple[str, TensorInfo]]:
        out, k = [], 0
        while tensor(name, k) in self.infos:
            out.append((tensor(name, k), self.infos[tensor(name, k)]))
            k += 1
        return out

    def lowerable(self, node) -> str | None:
        """The reason ``can_lower`` refuses ``node`` with its real input dtypes and constants, or None."""
        ins = self.inputs(node.name)
        dtypes = [info.dtype for _, info in ins if info is not None]
        verdict = can_lower(node, dtypes if len(dtypes) == len(ins) else None,
                            lambda i: ins[i][0] in self.constants)
        return None if verdict.ok else verdict.reason

    def reason(self, node) -> str | None:
        if device_type(node.device) != "CPU":
            return f"placed on '{node.device}': only CPU nodes are compiled"
        if node.name in self.in_cycle:
            return "part of a cycle in the graph (v1 control flow) stays in TensorFlow"
        rule = op_rule(node)
        if rule:
            return rule
        ports = self.inputs(node.name) + self.outputs(node.name)
        for t, info in ports:
            if info is not None and info.dtype in _STATE_DTYPES:
                kind = _STATE_DTYPES[info.dtype]
                state = _state_reason(node.op, kind)
                if state:
                    return f"{kind} tensor '{t}': {state}"
        problem = self.list_problems.get(node.name) or self.lowerable(node) or body_problem(node, self.library)
        if problem:
            return problem
        for t, info in ports:
            if info is None or not info.static:
                return f"dynamic shape: '{t}' has shape {info.shape_text() if info else '<unknown>'}"
        return None

    def update_constants(self, node) -> None:
        outs = self.outputs(node.name)
        if not outs or any(info.dtype in _STATE_DTYPES for _, info in outs):
            return
        if node.op in CONST_OPS:
            self.constants.update(t for t, _ in outs)
        elif node.op in SHAPE_OPS:
            ins = self.inputs(node.name)
            for k, (t, _) in enumerate(outs):
                src = ins[k if node.op == "ShapeN" else 0][1]
                known = src is not None and (src.dims is not None if node.op == "Rank" else src.static)
                if known:
                    self.constants.add(t)
        elif (all(t in self.constants for t, _ in self.inputs(node.name)) and self.index.data_in[node.name]
              and all(info.static for _, info in outs) and not _function_names(node)
              and op_rule(node) is None and self.lowerable(node) is None and _stateless(node.op)):
            self.constants.update(t for t, _ in outs)


def _stateless(op: str) -> bool:
    from tensorflow.python.framework import op_def_registry

    op_def = op_def_registry.get(op)
    return op_def is not None and not op_def.is_stateful


_LIST_CREATORS = frozenset({"TensorListReserve", "EmptyTensorList"})


def list_problems(graph) -> dict[str, str]:
    """Nodes creating a TensorList that cannot be lowered -> why: an unbounded ``EmptyTensorList``
    (``max_num_elements`` -1), or a list of unknown element shape that enters a loop or branch (its
    buffer's shape must be fixed before the loop; outside loops the first write fixes it)."""
    from tensorflow.python.framework import tensor_util

    out = {}
    for op in graph.get_operations():
        if op.type not in _LIST_CREATORS:
            continue
        if op.type == "EmptyTensorList":
            bound = tensor_util.constant_value(op.inputs[1])
            if bound is not None and int(bound) < 0:
                out[op.name] = (f"EmptyTensorList '{op.name}' has no max_num_elements (an unbounded list): XLA "
                                "needs a bound on the list's size, so it stays in TensorFlow")
                continue
        shape = tensor_util.constant_value(op.inputs[0])
        known = shape is not None and shape.ndim == 1 and all(int(d) >= 0 for d in shape)
        enters = [c for c in op.outputs[0].consumers() if c.type in _FUNCTIONAL_OK]
        if not known and enters:
            out[op.name] = (f"TensorList '{op.name}' has an unknown element shape and enters '{enters[0].name}' "
                            f"({enters[0].type}): XLA needs the element shape before the loop or branch (give the "
                            "TensorArray an element_shape), so the list stays in TensorFlow")
    return out


def mark_compilable(graph_def, *, resource_shapes: Mapping[str, tuple[int, Sequence[int]]] | None = None,
                    input_shapes: Mapping[str, Sequence[int]] | None = None, graph=None) -> Marking:
    """A verdict for every node of ``graph_def`` (see the module docstring for the rules).

    ``resource_shapes``: resource placeholder name -> (dtype enum, dims) of the variable it stands for;
    ``input_shapes``: placeholder name -> static dims to infer shapes with (a ``None`` batch dim made
    concrete); ``graph``: an already imported analysis graph (from ``analysis_graph``) to reuse.
    """
    graph = graph if graph is not None else analysis_graph(graph_def, resource_shapes, input_shapes)
    marker = _Marker(graph_def, tensor_infos(graph))
    marker.list_problems = list_problems(graph)
    ordered, rest = marker.index.topological_order()
    for name in ordered:  # producers first, so constants are known before their consumers ask
        marker.update_constants(marker.index.by_name[name])
    verdicts = {}
    for node in graph_def.node:
        reason = marker.reason(node)
        verdicts[node.name] = NodeVerdict(node.name, node.op, reason is None, reason or "", node.device)
    return Marking(graph_def, verdicts, marker.infos, frozenset(marker.constants))


__all__ = ["Marking", "NodeVerdict", "TensorInfo", "analysis_graph", "body_problem", "list_problems", "mark_compilable",
           "op_rule", "tensor_infos"]
