"""Why the compiler did what it did, for one compiled signature (a ``CompiledGraph``).

``explain_json(compiled_graph)`` is ``graph_passes.pipeline.summary_json`` of the clustering (clusters,
compute nodes clustered / all compute nodes: the op types of ``NON_COMPUTE_OPS``, Placeholder,
ReadVariableOp, NoOp, Const, Identity and the like, are not counted, so a fully compiled function reads
100%; op histogram per cluster, every excluded node with its reason, refused cluster merges) where each cluster entry also carries what its HLO compilation did: instruction counts before and
after optimization, the kernel hash, the fusions made and EVERY fusion the pass refused, with its reason.
``explain_text(compiled_graph)`` renders the same: the clustering summary, then per cluster its backend
(``cpu`` or ``cuda``), the fusions
and at most ``MAX_REFUSED_FUSION_LINES`` refused fusions (the JSON lists them all).

These two signatures are stable: ``f.explain(*args, format=...)``, ``tfxla show --clusters`` and the
TensorBoard export call them. Both take anything with ``analysis`` and ``clusters`` (a ``CompiledGraph``,
or the hook's ``HookedGraph``).

``explain_hooked(fn, *args, format=...)`` is the same for what the Grappler hook did to a function the
user never wrapped (a ``tf.function``, a ``ConcreteFunction``, a Keras model's steps: ``hook.lookup``):
one section per function body the hook saw, with what it decided (rewritten, or why it left the graph
to TF), then the explanation of its clustering and clusters. A ``tfxla_plugin.function`` is explained as
``f.explain`` does.
"""

from __future__ import annotations

import json

import backends

from graph_passes.pipeline import summary, summary_json

MAX_REFUSED_FUSION_LINES = 20  # refused fusions listed per cluster in the text form
FORMATS = ("text", "json")


def _instruction_count(module) -> int:
    return sum(1 for _ in module.instructions())


def _cluster_compilation(cluster) -> dict:
    refused = [d for d in cluster.fusion_decisions if not d.fused]
    return {
        "hlo_instructions": _instruction_count(cluster.hlo),
        "optimized_instructions": _instruction_count(cluster.optimized),
        "kernel_hash": cluster.kernel_hash,
        "backend": getattr(cluster, "backend", backends.DEFAULT),
        "fusions": [{"fusion": f.fusion, "kind": f.kind, "computation": f.computation,
                     "members": list(f.members)} for f in cluster.fusions],
        "fused_pairs": sum(1 for d in cluster.fusion_decisions if d.fused),
        "refused_fusions": [{"computation": d.computation, "phase": d.phase, "producer": d.producer,
                             "consumer": d.consumer, "reason": d.reason} for d in refused],
    }


def explain_json(compiled_graph) -> dict:
    """The explanation as a JSON-serializable dict (``json.dumps`` it for a document)."""
    data = summary_json(compiled_graph.analysis)
    compiled = {c.name: c for c in compiled_graph.clusters}
    for entry in data["clusters"]:
        cluster = compiled.get(entry["name"])
        if cluster is not None:
            entry.update(_cluster_compilation(cluster))
    return data


def explain_text(compiled_graph, max_refused: int = MAX_REFUSED_FUSION_LINES) -> str:
    """The clustering summary, then per compiled cluster its fusions and (a bounded list of) refusals."""
    lines = [summary(compiled_graph.analysis)]
    for cluster in compiled_graph.clusters:
        info = _cluster_compilation(cluster)
        refused = info["refused_fusions"]
        lines.append(f"HLO of {cluster.name}: {info['hlo_instructions']} instructions lowered, "
                     f"{info['optimized_instructions']} after optimization; {len(info['fusions'])} fusion(s) "
                     f"made, {len(refused)} fusion(s) refused; {info['backend']} kernel {info['kernel_hash'][:12]}")
        for f in info["fusions"]:
            lines.append(f"  %{f['fusion']} ({f['kind']}): {len(f['members'])} instructions")
        if refused:
            lines.append(f"  Refused fusions ({len(refused)}):")
            for r in refused[:max_refused]:
                arrow = "+" if r["phase"] == "sibling" else "->"
                lines.append(f"    {r['phase']}: %{r['producer']} {arrow} %{r['consumer']}: {r['reason']}")
            if len(refused) > max_refused:
                lines.append(f"    ... and {len(refused) - max_refused} more (explain_json lists them all)")
    return "\n".join(lines)


def _hooked_header(graph) -> str:
    clusters = f", {len(graph.clusters)} cluster(s)" if graph.clusters else ""
    released = f", {len(graph.released)} call(s) taken from XLA" if graph.released and graph.clusters else ""
    return f"== {graph.function or '<unnamed graph>'}: {graph.decision}{clusters}{released}, {graph.seconds:.2f} s"


def explain_hooked_json(fn, *args, **kwargs) -> dict:
    """``{"graphs": [...]}``: per function body of ``fn`` the hook saw, its decision and ``explain_json``."""
    from tfxla_plugin.hook import lookup

    out = []
    for graph in lookup.require(fn, *args, **kwargs):
        entry = {"function": graph.function, "decision": graph.decision, "detail": graph.detail,
                 "seconds": graph.seconds, "calls_taken_from_xla": list(graph.released)}
        if graph.analysis is not None:
            entry.update(explain_json(graph))
        out.append(entry)
    return {"graphs": out}


def explain_hooked(fn, *args, format: str = "text", **kwargs) -> str:  # noqa: A002
    """What the Grappler hook did to ``fn`` (see the module docstring), as text or a JSON document."""
    from tfxla_plugin.api import CompiledFunction
    from tfxla_plugin.hook import lookup

    _check_format(format)
    if isinstance(fn, CompiledFunction):
        return fn.explain(*args, format=format, **kwargs)
    if format == "json":
        return json.dumps(explain_hooked_json(fn, *args, **kwargs), indent=2)
    lines = []
    for graph in lookup.require(fn, *args, **kwargs):
        lines.append(_hooked_header(graph))
        if graph.detail:
            lines.append(graph.detail)
        if graph.analysis is not None:
            lines.append(explain_text(graph))
    return "\n".join(lines)


def _check_format(format: str) -> None:  # noqa: A002
    if format not in FORMATS:
        raise ValueError(f"explain: format must be one of {', '.join(map(repr, FORMATS))}, got {format!r}")


def explain(compiled_graph, format: str = "text") -> str:  # noqa: A002 (mirrors the CLI flag)
    """``explain_text``, or ``explain_json`` as an indented JSON document, by ``format``."""
    _check_format(format)
    if format == "json":
        return json.dumps(explain_json(compiled_graph), indent=2)
    return explain_text(compiled_graph)


__all__ = ["MAX_REFUSED_FUSION_LINES", "explain", "explain_hooked", "explain_hooked_json", "explain_json",
           "explain_text"]
