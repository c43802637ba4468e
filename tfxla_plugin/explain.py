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
TensorBoard export call them.
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


def explain(compiled_graph, format: str = "text") -> str:  # noqa: A002 (mirrors the CLI flag)
    """``explain_text``, or ``explain_json`` as an indented JSON document, by ``format``."""
    if format not in FORMATS:
        raise ValueError(f"explain: format must be one of {', '.join(map(repr, FORMATS))}, got {format!r}")
    if format == "json":
        return json.dumps(explain_json(compiled_graph), indent=2)
    return explain_text(compiled_graph)


__all__ = ["MAX_REFUSED_FUSION_LINES", "explain", "explain_json", "explain_text"]
