"""A function body whose loops TF already lowered, given back in functional form with its library.

By the time Grappler hands a function body to the hook, TF's ``LowerFunctionalOpsPass`` (a
pre-placement pass of function instantiation) has turned every ``While`` / ``If`` into v1 control
flow (``Enter``/``Merge``/``Switch``/``NextIteration``/``Exit``) and inlined the loop bodies into it, and
the graph's function library lists only what is still called (usually nothing). Our lowerings compile
functional loops (``hlo/lowering/lists.py``), not frames of ``Merge`` nodes, so such a graph would keep
its loops in TF.

The function itself is still registered with TF under Grappler's item id (``__inference_f_12``, a
loaded SavedModel's functions alike, and ``eager_jit``'s twins): ``functional_body`` rebuilds the body
from that ``FunctionDef`` (``function_def_to_graph_def``) and adds every function it reaches (``While``
conds and bodies, called functions, their callees) from the same registry as the graph's library.
Grappler's ``_Arg`` and ``_Retval`` nodes are kept as they are (names, index, the ``_output_shapes`` /
``_handle_shapes`` attrs the marking pass reads, device); every other node takes the device Grappler
placed the graph on (one CPU device: the plugin only sees CPU graphs).

What the hook returns must be a graph TF can run as it is: a loop left in TF runs as the functional
``While`` op (nothing lowers control flow after Grappler), whose cond and body TF looks up in the
library it took when it began instantiating the function, the one ``functional_body`` read.
``runnable`` makes sure the rewrite names no other function: a loop whose body our passes copied gets
TF's own back; when that is not possible the hook leaves the graph to TF.
"""

from __future__ import annotations

from collections import Counter

from hlo.lowering.tensor_names import data_inputs, node_name

LOWERED_OPS = frozenset({"Enter", "Exit", "Merge", "Switch", "NextIteration", "LoopCond"})
LOOP_FUNCTIONS = ("cond", "body")
DT_RESOURCE = 20
READ = "ReadVariableOp"


def _context():
    from tensorflow.python.eager import context

    return context.context()


def _function_def(name: str):
    ctx = _context()
    return ctx.get_function_def(name) if name and ctx.has_function(name) else None


def called_functions(nodes) -> list[str]:
    """The function names ``nodes`` refer to in ``func`` and ``list(func)`` attrs (``While`` cond/body,
    ``PartitionedCall`` f, ``If`` branches, a ``Case``'s)."""
    names = []
    for node in nodes:
        for value in node.attr.values():
            kind = value.WhichOneof("value")
            if kind == "func":
                names.append(value.func.name)
            elif kind == "list":
                names.extend(f.name for f in value.list.func)
    return [n for n in dict.fromkeys(names) if n]


def _callees(nodes) -> list[str]:
    """``called_functions`` and the op types that are functions TF has (a legacy call by op type)."""
    ctx = _context()
    return called_functions(nodes) + [n.op for n in nodes if ctx.has_function(n.op)]


def reachable(names) -> dict:
    """name -> FunctionDef of ``names`` and every function they reach, from TF's registry; a name TF
    does not know raises ``LookupError``."""
    out = {}
    work = list(names)
    while work:
        name = work.pop()
        if name in out:
            continue
        fdef = _function_def(name)
        if fdef is None:
            raise LookupError(f"function '{name}' is not registered with TensorFlow")
        out[name] = fdef
        work.extend(_callees(fdef.node_def))
    return out


def lowered(graph_def) -> bool:
    """Whether TF lowered control flow in ``graph_def`` (it holds v1 loop or cond nodes)."""
    return any(n.op in LOWERED_OPS for n in graph_def.node)


def functional_body(graph_def, name: str):
    """``graph_def`` rebuilt from the ``FunctionDef`` TF has under ``name``, with its library; ``None``
    when TF has no such function or its signature is not the graph's ``_Arg``/``_Retval`` nodes."""
    fdef = _function_def(name)
    if fdef is None or fdef.signature.attr:
        return None
    args = sorted((n for n in graph_def.node if n.op == "_Arg"), key=lambda n: n.attr["index"].i)
    rets = sorted((n for n in graph_def.node if n.op == "_Retval"), key=lambda n: n.attr["index"].i)
    sig = fdef.signature
    if ([n.attr["T"].type for n in args] != [a.type for a in sig.input_arg]
            or [n.attr["T"].type for n in rets] != [a.type for a in sig.output_arg]):
        return None
    from tensorflow.python.framework.function_def_to_graph import function_def_to_graph_def

    body, flat = function_def_to_graph_def(fdef)
    placeholders = {a.name for a in sig.input_arg}
    taken = {n.name for n in body.node} - placeholders
    if any(n.name in taken for n in rets):
        return None  # a _Retval name that is also a body node's: cannot happen in TF's naming, but never clash
    placed = Counter(n.device for n in graph_def.node if n.device).most_common(1)
    device = placed[0][0] if placed else ""
    out = type(graph_def)()
    out.versions.CopyFrom(graph_def.versions)
    for node, arg in zip(args, sig.input_arg):
        new = out.node.add()
        new.CopyFrom(node)
        new.name = arg.name  # what the body's nodes refer to ("x:0" in ``flat``)
    for node in body.node:
        if node.name in placeholders:
            continue
        new = out.node.add()
        new.CopyFrom(node)
        new.device = new.device or device
    for node, arg in zip(rets, sig.output_arg):
        new = out.node.add()
        new.CopyFrom(node)
        del new.input[:]
        new.input.append(flat[fdef.ret[arg.name]])
    library = reachable(_callees(out.node))
    out.library.function.extend(library.values())
    return out


def runnable(graph_def, known: dict):
    """``graph_def`` (our rewrite of a ``functional_body``) naming only functions of ``known`` (its library:
    what TF instantiates this body with, and all a loop left in TF can run), or ``None`` when it cannot.

    TF looks a ``While``'s cond and body up in the library it took when it began instantiating this
    function, so a function our passes wrote is not there at run time, even registered now. A loop
    left in TF whose cond and body are ``loop_reads``' copies (``<name>_tfxla_reads``: a variable's value
    as loop variable instead of its handle) gets TF's own back, and the handle again as that loop
    variable; the read the pass put before the loop goes with it."""
    from graph_passes.loop_reads import LOOPS, SUFFIX

    out = type(graph_def)()
    out.CopyFrom(graph_def)
    nodes = {n.name: n for n in out.node}
    dropped = set()
    for loop in out.node:
        if loop.op not in LOOPS or all(loop.attr[a].func.name in known for a in LOOP_FUNCTIONS):
            continue
        names = [loop.attr[a].func.name for a in LOOP_FUNCTIONS]
        originals = [n[:-len(SUFFIX)] for n in names if n.endswith(SUFFIX)]
        if len(originals) != len(names) or not all(n in known for n in originals):
            return None
        types = loop.attr["T"].list.type
        for i, arg in enumerate(known[originals[1]].signature.input_arg):
            if arg.type != DT_RESOURCE or types[i] == DT_RESOURCE:
                continue
            read = nodes.get(node_name(loop.input[i]))
            if read is None or read.op != READ:
                return None
            loop.input[i] = data_inputs(read.input)[0]
            types[i] = DT_RESOURCE
            if i < len(loop.attr["output_shapes"].list.shape):
                loop.attr["output_shapes"].list.shape[i].Clear()  # a handle is a scalar
            dropped.add(read.name)
        for attr, name in zip(LOOP_FUNCTIONS, originals):
            loop.attr[attr].func.name = name
    used = {node_name(x) for n in out.node for x in n.input}
    keep = [n for n in out.node if n.name not in dropped or n.name in used]
    del out.node[:]
    out.node.extend(keep)
    if not all(name in known for name in called_functions(out.node)):
        return None
    functions = [f for f in out.library.function if f.signature.name in known]  # not the copies
    del out.library.function[:]
    out.library.function.extend(functions)
    return out


__all__ = ["LOWERED_OPS", "called_functions", "functional_body", "lowered", "reachable", "runnable"]
