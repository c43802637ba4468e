"""Variable reads inside the launch: a launch input that is a ``ReadVariableOp`` of a plain variable takes
the variable's resource handle instead, and the launch op reads it (``tfxla_plugin/ops/tfxla_launch.cc``:
a ``DT_RESOURCE`` ``Tin`` entry is read as ``ReadVariableOp`` reads it).

After the rewrite a compiled function is one launch plus one ``ReadVariableOp`` per variable (262 of them
for a MobileNetV2 predict step), which TensorFlow's executor runs one by one to feed the launch. Folded,
the launch reads them all itself. The fold changes WHEN the variable is read (at launch time, not when
the read ran), so it is made only where the two values are the same:

- the handle comes straight from a ``VarHandleOp``, a resource ``_Arg`` or a resource ``Placeholder``
  (``forward_variables``' plain variables), and nothing that could alias it (``Identity``, control flow)
  takes it; for an ``_Arg`` that may be another ``_Arg``'s variable (``forward_variables._may_alias``)
  the writes of every such handle count as its writes;
- every write of the variable (any op on the handle but the readers in ``READERS``) that the launch
  waits on ran before the read, and every other write is ordered after the launch once the read's
  control edges move (below): otherwise the fold is refused (``ReadsResult.kept`` says why);
- the read has no ``_class`` colocation or device other than the launch's.

Folding one read: the launch's input becomes the handle and its ``Tin`` entry ``DT_RESOURCE``; the
read's control inputs become the launch's; a node with a control input from the read (TF's automatic
control dependencies put one on each later write) waits on the launch instead, or, when the launch waits
on it (a ``tf.function``'s output ``NoOp`` waits on every read, and the rewrite moved that edge to the
launch), on what the read waited on (a write of the variable among what the launch waits on is refused
above, so what it ordered stays ordered). A read with another data consumer, or a tensor fetch in
``keep``, stays for them (the nodes waiting on it then wait on both); a read that is only a target
(``^read`` in ``keep``: a function's control output, which Grappler must preserve; TF's automatic control
dependencies make each variable's last read one) becomes a ``NoOp`` of its name waiting on the launch, as
``rewrite`` keeps a fetched clustered node. Launches are taken in GraphDef order and their inputs in
order, so the result depends only on the GraphDef; the GraphDef given is not changed.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterable

from graph_passes._graph import GraphIndex, device_key
from graph_passes.forward_variables import DT_RESOURCE, READ, _is_handle, _may_alias
from graph_passes.rewrite import LAUNCH_OP
from hlo.lowering.tensor_names import canonical, control, data_inputs, is_control, node_name, parse_input

if TYPE_CHECKING:
    from graph_passes.rewrite import RewriteResult

# ops on a handle that only read the variable (the launch op reads a handle it takes)
READERS = frozenset({READ, "VariableShape", "ResourceGather", "_Retval", LAUNCH_OP})
# ops that pass a handle on (a write through their output would not be seen as one): the variable stays read
ALIASES = frozenset({"Identity", "IdentityN", "Snapshot", "Enter", "Exit", "Switch", "Merge", "NextIteration",
                     "RefEnter", "RefSwitch", "RefMerge", "RefExit", "RefNextIteration"})


@dataclass
class ReadsResult:
    graph_def: Any  # a tf.compat.v1.GraphDef
    folded: list[tuple[str, int, str]] = field(default_factory=list)  # (launch, argument index, read), in order
    removed: list[str] = field(default_factory=list)  # reads gone from the graph, GraphDef order
    targets: list[str] = field(default_factory=list)  # reads that became a NoOp of their name, GraphDef order
    kept: dict[str, str] = field(default_factory=dict)  # read feeding a launch -> why it was not folded


@dataclass(frozen=True)
class _Variables:
    """What the graph does with each plain variable's handle: its writes, or why it is not plain."""

    writes: dict[str, list[str]]  # handle node -> nodes that may write its variable
    refused: dict[str, str]  # handle node -> why its reads stay


def _variables(index: GraphIndex) -> _Variables:
    writes: dict[str, list[str]] = {}
    refused: dict[str, str] = {}
    for node in index.nodes:
        if not _is_handle(node):
            continue
        users = [index.by_name[e.consumer] for e in index.data_out[node.name]]
        alias = next((u for u in users if u.op in ALIASES), None)
        if alias is not None:
            refused[node.name] = f"its handle is passed on by {alias.op} '{alias.name}'"
            continue
        writes[node.name] = [u.name for u in users if u.op not in READERS]
    shared = {node_name(t) for t in _may_alias(GraphIndex(_copy(index.nodes)))}  # (a copy: it adds attrs)
    passed_on = sorted(shared & set(refused))
    for h in sorted(shared - set(refused)):
        if passed_on:  # the writes through that alias are not seen: none of them is a plain variable
            refused[h] = f"it may be the variable of '{passed_on[0]}', whose handle is passed on"
            del writes[h]
    shared -= set(refused)
    every = sorted({w for h in shared for w in writes[h]}, key=index.position.__getitem__)
    for h in shared:  # a variable that may be another _Arg's: that one's writes are its writes too
        writes[h] = every
    return _Variables(writes, refused)


def _copy(nodes) -> list:
    out = []
    for node in nodes:
        out.append(type(node)())
        out[-1].CopyFrom(node)
    return out


def _refusal(index: GraphIndex, variables: _Variables, launch, read, before: set[str], later: set[str]) -> str:
    """Why ``read`` may not be folded into ``launch`` ("" when it may); ``before``: the launch's ancestors,
    ``later``: the launch and its descendants."""
    handle = parse_input(read.input[0])
    if handle.output != 0 or not _is_handle(index.by_name[handle.node]):
        return "its handle is not a variable's (VarHandleOp, resource _Arg or Placeholder)"
    if handle.node in variables.refused:
        return variables.refused[handle.node]
    if "_class" in read.attr and ("_class" not in launch.attr or read.attr["_class"] != launch.attr["_class"]):
        return "it has a colocation (_class) the launch does not"
    if device_key(read.device) != device_key(launch.device):
        return f"it is on device '{read.device}', the launch on '{launch.device}'"
    after = [c for c in index.control_out[read.name] if c not in before]  # they will wait on the launch
    earlier: set[str] | None = None  # the read's ancestors, when a write the launch waits on needs them
    for w in variables.writes[handle.node]:
        if w in before:
            earlier = index.reached(index.predecessors(read.name), forward=False) if earlier is None else earlier
            if w not in earlier:
                return f"the launch waits on '{w}', which may write the variable after the read"
        if w not in before and w not in later and w not in index.reached(after):
            return f"'{w}' may write the variable before the launch runs"
    return ""


def fold_launch_reads(graph_def, keep: Iterable[str] = (), launch_op: str = LAUNCH_OP) -> ReadsResult:
    """``graph_def`` with every launch input that is a safe-to-fold variable read replaced by the variable's
    handle (module docstring); ``keep``: fetches that must stay valid, ``^node`` (a target: a ``NoOp`` may take
    its name) or a tensor name (the node stays as it is)."""
    kept_names = {node_name(k): is_control(k) for k in keep}
    result = ReadsResult(graph_def)
    out = graph_def
    removed: set[str] = set()
    for launch_name in [n.name for n in graph_def.node if n.op == launch_op]:
        index = GraphIndex(out.node)  # the graph as the launches before this one left it (read only)
        variables = _variables(index)
        launch = index.by_name[launch_name]
        before, later = index.reached(index.predecessors(launch_name), forward=False), index.reached([launch_name])
        tin = launch.attr["Tin"].list.type
        folds: list[tuple[int, object]] = []
        for k, text in enumerate(data_inputs(launch.input)[1:]):  # input 0: the kernel path
            src = parse_input(text)
            read = index.by_name[src.node]
            if read.op != READ or src.output != 0 or k >= len(tin) or tin[k] == DT_RESOURCE:
                continue
            why = _refusal(index, variables, launch, read, before, later)
            if why:
                result.kept[read.name] = why
            else:
                folds.append((k, read))
        if folds:
            out, gone = _apply(out, index, launch_name, folds, before, kept_names, result)
            removed |= gone
    result.graph_def = out
    present = {n.name: n.op for n in out.node}
    result.removed = [n.name for n in graph_def.node if n.name in removed and n.name not in present]
    result.targets = [n.name for n in graph_def.node if n.name in removed and n.name in present]
    return result


def _apply(graph_def, index: GraphIndex, launch_name: str, folds: list, before: set[str], keep: dict[str, bool],
           result: ReadsResult) -> tuple[object, set[str]]:
    """(new GraphDef, reads removed or made NoOps): ``graph_def`` (``index`` is its view) with ``folds`` ((argument index,
    read) pairs) folded into its launch ``launch_name``."""
    out = type(graph_def)()
    out.CopyFrom(graph_def)
    launch = next(n for n in out.node if n.name == launch_name)
    args = {k: read for k, read in folds}
    data = [text if args.get(pos - 1) is None else canonical(args[pos - 1].input[0])
            for pos, text in enumerate(data_inputs(launch.input))]
    controls = dict.fromkeys(i for i in launch.input if is_control(i))
    for k, read in folds:
        launch.attr["Tin"].list.type[k] = DT_RESOURCE
        controls.update(dict.fromkeys(i for i in read.input if is_control(i)))
        result.folded.append((launch_name, k, read.name))
    del launch.input[:]
    launch.input.extend(data)
    still_read = {node_name(t) for n in out.node for t in data_inputs(n.input)}
    gone = {read.name for _, read in folds if read.name not in still_read and keep.get(read.name, True)}
    launch.input.extend(c for c in controls if c != control(launch_name) and c[1:] not in gone)
    waiting: dict[str, list] = {}  # node -> the folded reads it has a control input from
    for _, read in folds:
        for c in index.control_out[read.name]:
            if c != launch_name:
                waiting.setdefault(c, []).append(read)
    for node in out.node:
        reads = waiting.get(node.name)
        if not reads:
            continue
        if node.name in before:  # the launch waits on it: it waits on what the reads waited on instead
            added = [i for r in reads if r.name in gone for i in r.input if is_control(i)]
        else:
            added = [control(launch_name)]
        dropped = {control(r.name) for r in reads if r.name in gone}
        inputs = list(dict.fromkeys([*(i for i in node.input if i not in dropped), *added]))
        del node.input[:]
        node.input.extend(inputs)
    if not gone:
        return out, gone
    new = type(out)()
    new.CopyFrom(out)
    del new.node[:]
    for node in out.node:
        if node.name not in gone:
            new.node.append(node)
        elif node.name in keep:  # a target: a NoOp of its name
            new.node.add(name=node.name, op="NoOp", input=[control(launch_name)], device=node.device)
    return new, gone


def fold_rewrite(rewritten: RewriteResult, keep: Iterable[str] = ()) -> RewriteResult:
    """``rewritten`` with its reads folded (``fold_launch_reads``): the GraphDef, ``removed`` and each
    ``LaunchRecord``'s inputs and control inputs as the folded launch nodes have them."""
    folded = fold_launch_reads(rewritten.graph_def, keep)
    if not folded.folded:
        return rewritten
    nodes = {n.name: n for n in folded.graph_def.node}
    launches = {}
    for cluster, record in rewritten.launches.items():
        node = nodes.get(record.node)
        if node is None or not any(f[0] == record.node for f in folded.folded):
            launches[cluster] = record
            continue
        inputs = tuple(canonical(t) for t in data_inputs(node.input)[1:])
        controls = tuple(node_name(i) for i in node.input if is_control(i))
        launches[cluster] = dataclasses.replace(record, inputs=inputs, control_inputs=controls)
    return dataclasses.replace(rewritten, graph_def=folded.graph_def, removed=[*rewritten.removed, *folded.removed],
                               launches=launches)


__all__ = ["ALIASES", "READERS", "ReadsResult", "fold_launch_reads", "fold_rewrite"]
