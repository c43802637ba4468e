"""One function body Grappler hands the hook, clustered, compiled and rewritten to ``TfxlaLaunch`` nodes.

The graph is in function-body form: ``_Arg`` nodes for the inputs (their ``_output_shapes`` attrs give
their shapes; a variable is a ``DT_RESOURCE`` ``_Arg`` whose ``_handle_shapes``/``_handle_dtypes``
attrs give its shape, so TF's own shape inference knows what every ``ReadVariableOp`` yields),
``_Retval`` nodes for the outputs, an empty function library (where TF lowered the function's loops, the
callback hands over its own body in functional form with its library instead: ``functional``).
``rewrite_body`` runs the same graph
passes as ``tfxla_plugin.function`` (``graph_passes.pipeline.analyze``: inline, forward variables,
mark, cluster, extract), compiles every cluster through the kernel cache
(``compiled_graph.compile_clusters``) and replaces each by one launch node (``pipeline.rewrite``), which
then reads its variables through their handles (``graph_passes.launch_reads``: no ``ReadVariableOp`` per
variable for TF's executor to run). The
nodes Grappler must preserve (fetches, control outputs) and every ``_Arg``/``_Retval`` are the
fetches, so they keep their names; a variable's write that only a forwarded read kept running is tied
to the ``_Retval``s (``keep_alive``). A node whose shapes are not static stays in TensorFlow ("dynamic
shape", as in ``mark``). Calls TF would hand to XLA (``jit_compile=True`` functions called from another
function) are released to the hook first (``release_from_xla``), and what a caller knows of the functions
it calls reaches their bodies (``callees``: variable shapes, and whether the function asked for
``jit_compile=True``: under ``enable(jit_compile=True)`` only those bodies are must-compile).

It returns a ``BodyResult``: the rewritten GraphDef, or ``None`` with the reason the graph is left
alone. It raises on a failure; the caller (``callback``) turns that into the original graph and one
WARNING.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Sequence

from graph_passes.launch_reads import fold_rewrite
from graph_passes.pipeline import ClusteringResult, analyze, rewrite
from graph_passes.rewrite import LAUNCH_OP, LaunchSpec, RewriteResult, is_stateful, reachable, standard_attrs
from hlo.lowering.tensor_names import control, node_name
from tfxla_plugin.cluster_compiler import CompiledCluster
from tfxla_plugin import compiled_graph
from tfxla_plugin.compiled_graph import cluster_options
from tfxla_plugin.flags import Flags
from tfxla_plugin.hook import callees

BODY_OPS = frozenset({"_Arg", "_Retval"})
XLA_MUST_COMPILE = "_XlaMustCompile"  # the call-node attr that sends a call to XLA
MAX_LISTED = 5  # unsupported nodes named in a must-compile error


@dataclass
class BodyResult:
    graph_def: object | None  # the rewritten GraphDef; None: leave the graph as it is
    reason: str = ""  # why it is left alone (a short, countable phrase)
    detail: str = ""  # more about it (the nodes must-compile refused)
    analysis: ClusteringResult | None = None
    clusters: list[CompiledCluster] = field(default_factory=list)
    released: list[str] = field(default_factory=list)  # calls taken from XLA (``release_from_xla``)
    rewritten: RewriteResult | None = None  # the rewrite's record (its ``graph_def`` is ``graph_def``)


Compile = Callable[[ClusteringResult, Flags], list[CompiledCluster]]


def rewrite_body(graph_def, preserve: Sequence[str], flags: Flags, *, must_compile: bool = False,
                 jit_requested: bool = False, compile: Compile | None = None) -> BodyResult:
    """``graph_def`` with each cluster replaced by a ``TfxlaLaunch`` node, or why it is left alone.
    ``must_compile`` (``enable(jit_compile=True)``) applies to the bodies of functions that asked for it:
    ``jit_requested`` (a ``jit_compile=True`` function called eagerly, ``eager_jit``) or a caller's note.
    ``compile``: how the clusters are compiled (default ``compiled_graph.compile_clusters``, looked up at call time)."""
    ops = {n.name: n.op for n in graph_def.node}
    if LAUNCH_OP in ops.values():
        return BodyResult(None, "already holds TfxlaLaunch nodes")
    body = [name for name, op in ops.items() if op in BODY_OPS]
    if not body:
        return BodyResult(None, "not a function body (no _Arg or _Retval node)")
    callee = callees.lookup(graph_def)  # what the graph calling this function knew about it
    must_compile = must_compile and (jit_requested or (callee is not None and callee.jit))
    graph_def, released = release_from_xla(callees.with_handles(graph_def, callee))
    callees.note(graph_def, released)  # what this graph knows about the functions it calls
    fetches = [control(n) for n in dict.fromkeys([*preserve, *body]) if n in ops]
    analysis = analyze(graph_def, fetches, cluster_options(flags, must_compile))
    if must_compile:
        bad = analysis.unsupported()
        if bad:
            listed = "; ".join(f"{ops[n]} '{n}': {r}" for n, r in list(bad.items())[:MAX_LISTED])
            more = f" (and {len(bad) - MAX_LISTED} more)" if len(bad) > MAX_LISTED else ""
            return BodyResult(None, "must-compile: unsupported nodes", f"{len(bad)} node(s) cannot be compiled: "
                              f"{listed}{more}", analysis)
    if not analysis.clusters:
        if released:  # nothing to compile here, but the calls now reach the hook instead of XLA
            return BodyResult(graph_def, analysis=analysis, released=released)
        dynamic = any(r.startswith("dynamic shape") for r in analysis.excluded.values())
        return BodyResult(None, "no cluster (dynamic shapes)" if dynamic else "no cluster", "", analysis)
    compiled = (compile or compiled_graph.compile_clusters)(analysis, flags)
    by_name = {c.name: c for c in compiled}

    def launch(spec) -> LaunchSpec:
        c = by_name[spec.name]
        return LaunchSpec(standard_attrs(spec, kernel_hash=c.kernel_hash), kernel_path=c.kernel_path)

    rewritten = fold_rewrite(rewrite(analysis, launch), keep=fetches)  # variable reads inside the launches
    keep_alive(graph_def, rewritten.graph_def, fetches)
    return BodyResult(rewritten.graph_def, analysis=analysis, clusters=compiled, released=released, rewritten=rewritten)


def keep_alive(original, rewritten, fetches: Sequence[str]) -> list[str]:
    """Give every stateful node of ``rewritten`` (in place) that TF ran in ``original`` (an ancestor of
    a fetch) and no fetch needs any more a control edge to the ``_Retval`` nodes (none: to one control
output that is not upstream of them); the names of those nodes.

    TF's function runtime runs only what the results and control outputs need. A variable's write
    followed by a read (a metric's ``assign_add`` and its ``result()``, Adam's ``m`` updated then read)
    is kept by its control edge to the read, the variable's last op, which auto control dependencies
    make a control output; forwarded (``graph_passes.forward_variables``), the read takes the written
    value inside the launch, and the write (of a launch output) would be pruned. A ``_Retval`` waits for
    it instead: a function returns when all its nodes have run, so nothing runs later than before."""
    roots = [node_name(f) for f in fetches]
    before = reachable(original.node, roots)
    after = reachable(rewritten.node, roots)
    lost = [n.name for n in rewritten.node if n.name in before and n.name not in after and n.op != "_Arg"
            and is_stateful(n.op)]
    if not lost:
        return []
    sinks = [n for n in rewritten.node if n.op == "_Retval"]
    if not sinks:  # a function returning nothing: its control outputs that do not lead to what they wait for
        upstream = reachable(rewritten.node, lost)
        sinks = [n for n in rewritten.node if n.name in set(roots) - upstream][:1]
    if not sinks:
        raise ValueError(f"no _Retval or control output to keep {len(lost)} stateful node(s) alive, e.g. '{lost[0]}'")
    for sink in sinks:
        sink.input.extend(control(n) for n in lost)
    return lost


def release_from_xla(graph_def) -> tuple[object, list[str]]:
    """(graph, calls): ``graph_def`` with ``_XlaMustCompile`` turned off on every call node that has it,
    and those nodes' names. TF hands such a call (a ``tf.function(jit_compile=True)`` called from
    another function, as Keras's ``model.compile(jit_compile=True)`` steps are) to XLA, bypassing
    Grappler; released, TF instantiates the called function as any other, and Grappler hands its body
    to the hook. ``graph_def`` itself is not changed."""
    calls = [n.name for n in graph_def.node if XLA_MUST_COMPILE in n.attr and n.attr[XLA_MUST_COMPILE].b]
    if not calls:
        return graph_def, []
    out = type(graph_def)()
    out.CopyFrom(graph_def)
    for node in out.node:
        if node.name in calls:
            node.attr[XLA_MUST_COMPILE].b = False
    return out, calls


__all__ = ["BODY_OPS", "XLA_MUST_COMPILE", "BodyResult", "keep_alive", "release_from_xla", "rewrite_body"]
