"""Inline function calls: every ``PartitionedCall`` / ``StatefulPartitionedCall`` (and a node whose op
type is a library function) is replaced by a copy of the called body, recursively, as Grappler's
function inlining does.

Contract (valid GraphDef in, valid GraphDef out, same values for every fetch):

- body nodes are named ``<call>/<node>`` (``<call>_1/<node>``, ... when that would collide) and take
  the call's place in the node list; a body node with no device inherits the call's;
- a reference to a function argument becomes the call's input tensor; body nodes that depend on no
  other body node inherit the call's control inputs, so nothing in the body runs before them;
- a consumer of ``call:k`` reads the body's k-th result directly; when something still needs the call's
  name (a control edge ``^call`` or a fetch), a node of that name stays behind: ``IdentityN`` of the
  results when fetched, else a ``NoOp``, depending on every result and every control result (the body's
  stateful ops), so ``^call`` still means "after the whole call";
- ``origins`` maps each inlined node to ``"<function>::<node>"``, the key under which
  ``hlo.lowering.tf_function.python_sources`` records the Python line that created it;
- calls this pass cannot inline (function not in the library or only its signature, polymorphic, list-typed
  signature) stay;
- the library keeps only the functions still referenced (If/While/Case bodies and what they call).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable

from graph_passes._graph import is_stub
from hlo.lowering.tensor_names import (FunctionRef, canonical, control, control_inputs, data_inputs, fetch_nodes,
                                       is_control, node_name, parse_function_ref, tensor)

CALL_OPS = frozenset({"PartitionedCall", "StatefulPartitionedCall"})


@dataclass
class InlineResult:
    graph_def: object  # GraphDef
    inlined: int  # calls replaced by their bodies
    skipped: dict[str, str] = field(default_factory=dict)  # call node -> why it was not inlined
    origins: dict[str, str] = field(default_factory=dict)  # inlined node -> "<function>::<node in its body>"


def _output_count(arg, node) -> int:
    if arg.number_attr:
        return node.attr[arg.number_attr].i
    if arg.type_list_attr:
        return len(node.attr[arg.type_list_attr].list.type)
    return 1


def _op_def(op: str, library: dict):
    if op in library:
        return library[op].signature
    from tensorflow.python.framework import op_def_registry

    op_def = op_def_registry.get(op)
    if op_def is None:
        raise ValueError(f"op type '{op}' is neither registered with TensorFlow nor in the function library")
    return op_def


def _flat_names(fdef, library: dict) -> dict[str, str]:
    """FunctionDef tensor references (``node:out_arg:i``) -> GraphDef ones (``node:k``) of the body nodes."""
    flat: dict[str, str] = {}
    for node in fdef.node_def:
        k = 0
        for arg in _op_def(node.op, library).output_arg:
            for i in range(_output_count(arg, node)):
                flat[str(FunctionRef(node.name, arg.name, i))] = tensor(node.name, k)
                k += 1
    return flat


def _called_function(node, library: dict) -> str | None:
    if node.op in CALL_OPS:
        return node.attr["f"].func.name
    if node.op in library:
        return node.op
    return None


def _why_not(node, fname: str, library: dict) -> str | None:
    fdef = library.get(fname)
    if fdef is None:
        return f"function '{fname}' is not in the graph's function library"
    if is_stub(fdef):
        return f"function '{fname}' is only a signature here (no body: Grappler's view of a call it does not inline)"
    if fdef.signature.attr:
        return f"function '{fname}' is polymorphic; only instantiated functions are inlined"
    if any(a.number_attr or a.type_list_attr for a in (*fdef.signature.input_arg, *fdef.signature.output_arg)):
        return f"function '{fname}' has list-typed arguments"
    return None


def _unique_prefix(call: str, body_names: Iterable[str], taken: set[str]) -> str:
    names = list(body_names)
    for k in range(0, 1 << 20):
        prefix = f"{call}/" if k == 0 else f"{call}_{k}/"
        if not any(prefix + n in taken for n in names):
            return prefix
    raise AssertionError("unreachable")


def _inline_one(call, fdef, library: dict, taken: set[str]) -> tuple[list, list[str], list[str]]:
    """(body nodes, result tensors, control-result nodes) of ``call`` with ``fdef``'s body."""
    sig = fdef.signature
    data = data_inputs(call.input)
    controls = control_inputs(call.input)
    if len(data) != len(sig.input_arg):
        raise ValueError(f"call '{call.name}' passes {len(data)} inputs to '{sig.name}', which takes "
                         f"{len(sig.input_arg)}")
    args = {a.name: canonical(t) for a, t in zip(sig.input_arg, data)}
    flat = _flat_names(fdef, library)
    prefix = _unique_prefix(call.name, (n.name for n in fdef.node_def), taken)
    body_names = {n.name for n in fdef.node_def}

    def rename(ref: str) -> str:
        if is_control(ref):
            name = node_name(ref)
            if name in args:  # a control edge on an argument: on the node producing the call's input
                return control(node_name(args[name]))
            return control(prefix + name)
        if ref in args:
            return args[ref]
        if ref not in flat:
            raise ValueError(f"function '{sig.name}' refers to unknown tensor '{ref}'")
        return prefix + flat[ref]

    nodes = []
    for original in fdef.node_def:
        node = type(original)()
        node.CopyFrom(original)
        node.name = prefix + original.name
        new_inputs = [rename(i) for i in original.input]
        if not any(parse_function_ref(r).node in body_names for r in original.input):
            new_inputs += [c for c in controls if c not in new_inputs]
        del node.input[:]
        node.input.extend(new_inputs)
        if not node.device:
            node.device = call.device
        if "_class" in node.attr:  # colocation with a body node follows its new name
            entries = [b"loc:@" + prefix.encode() + e[5:] if e.startswith(b"loc:@") and e[5:].decode() in body_names
                       else e for e in node.attr["_class"].list.s]
            del node.attr["_class"].list.s[:]
            node.attr["_class"].list.s.extend(entries)
        nodes.append(node)
        taken.add(node.name)
    results = [rename(fdef.ret[a.name]) for a in sig.output_arg]
    control_results = [prefix + fdef.control_ret[a] for a in sig.control_output]
    return nodes, results, control_results


def _name_keeper(call, fdef, results: list[str], control_results: list[str], fetched: bool):
    """The node left under the call's name: IdentityN of the results (fetched) or a NoOp."""
    node = type(call)()
    node.name = call.name
    node.device = call.device
    deps = list(dict.fromkeys([control(node_name(r)) for r in results] + [control(c) for c in control_results]
                              + control_inputs(call.input)))
    if fetched and results:
        node.op = "IdentityN"
        node.input.extend(results + [d for d in deps if d not in {control(node_name(r)) for r in results}])
        node.attr["T"].list.type.extend(a.type for a in fdef.signature.output_arg)
    else:
        node.op = "NoOp"
        node.input.extend(deps)
    return node


def referenced_functions(nodes, library: dict) -> set[str]:
    """Library functions that ``nodes`` reach through func attrs, op types and nested bodies."""
    seen: set[str] = set()
    work = list(nodes)
    while work:
        node = work.pop()
        names = [node.op] if node.op in library else []
        for value in node.attr.values():
            if value.HasField("func"):
                names.append(value.func.name)
            names.extend(f.name for f in value.list.func)
        for name in names:
            if name in library and name not in seen:
                seen.add(name)
                work.extend(library[name].node_def)
    return seen


def inline_calls(graph_def, fetches: Iterable[str] = (), *, max_depth: int = 64) -> InlineResult:
    """Inline every call in ``graph_def`` (nested calls too, up to ``max_depth`` levels); ``fetches``
    name the tensors or nodes the caller will fetch, so that their names survive."""
    from tensorflow.core.framework import graph_pb2

    library = {f.signature.name: f for f in graph_def.library.function}
    fetched = fetch_nodes(fetches)
    nodes = []
    for original in graph_def.node:  # copies: the caller's GraphDef is never modified
        node = type(original)()
        node.CopyFrom(original)
        nodes.append(node)
    taken = {n.name for n in nodes}
    inlined = 0
    skipped: dict[str, str] = {}  # call node -> why it stays a call
    origins: dict[str, str] = {}  # inlined node -> function::node it came from
    for _ in range(max_depth):
        calls = [(n, f) for n in nodes if (f := _called_function(n, library)) is not None and n.name not in skipped]
        replacement: dict[str, tuple[list, list[str], list[str]]] = {}
        rewire: dict[str, str] = {}  # "call:k" -> result tensor
        for call, fname in calls:
            why = _why_not(call, fname, library)
            if why:
                skipped[call.name] = why
                continue
            body, results, control_results = _inline_one(call, library[fname], library, taken)
            origins.update((n.name, f"{fname}::{o.name}") for n, o in zip(body, library[fname].node_def))
            rewire.update({tensor(call.name, k): r for k, r in enumerate(results)})
            replacement[call.name] = (body, results, control_results)
            inlined += 1
        if not replacement:
            break
        for key in rewire:  # a result may be another inlined call's output (a body returning a nested call)
            value, seen = rewire[key], {key}
            while value in rewire and value not in seen:
                seen.add(value)
                value = rewire[value]
            rewire[key] = value
        controlled = {node_name(i) for n in nodes for i in control_inputs(n.input)}
        controlled |= {node_name(i) for body, _, _ in replacement.values() for n in body for i in control_inputs(n.input)}
        new_nodes = []
        for node in nodes:
            if node.name not in replacement:
                new_nodes.append(node)
                continue
            body, results, control_results = replacement[node.name]
            new_nodes.extend(body)
            if node.name in fetched or node.name in controlled:
                results = [rewire.get(r, r) for r in results]
                fdef = library[_called_function(node, library)]
                new_nodes.append(_name_keeper(node, fdef, results, control_results, node.name in fetched))
        for node in new_nodes:
            if any(not is_control(i) and canonical(i) in rewire for i in node.input):
                updated = [i if is_control(i) else rewire.get(canonical(i), i) for i in node.input]
                del node.input[:]
                node.input.extend(updated)
        nodes = new_nodes
    else:
        if any(_called_function(n, library) is not None and n.name not in skipped for n in nodes):
            raise ValueError(f"function calls nested deeper than {max_depth} levels (a recursive function?)")
    out = graph_pb2.GraphDef()
    out.versions.CopyFrom(graph_def.versions)
    out.node.extend(nodes)
    keep = referenced_functions(nodes, library)
    out.library.function.extend(f for f in graph_def.library.function if f.signature.name in keep)
    out.library.gradient.extend(g for g in graph_def.library.gradient if g.function_name in keep)
    return InlineResult(out, inlined, skipped, {n.name: origins[n.name] for n in nodes if n.name in origins})


__all__ = ["CALL_OPS", "InlineResult", "inline_calls", "referenced_functions"]
