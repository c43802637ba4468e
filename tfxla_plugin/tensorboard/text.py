"""The text summaries of a TensorBoard run, as Markdown (TensorBoard renders tables and fenced code).

``clustering_table`` renders ``tfxla_plugin.explain.explain_json`` as tables (clusters, left-out nodes,
refused fusions); ``code_block`` fences HLO, C or a report so TensorBoard shows it verbatim, and
``unfence`` gets the text back.
"""

from __future__ import annotations

MAX_TABLE_ROWS = 200  # rows per table; the explain_json document has every row


def _cell(value) -> str:
    return str(value).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _table(header: list[str], rows: list[list], limit: int = MAX_TABLE_ROWS) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(v) for v in row) + " |" for row in rows[:limit]]
    if len(rows) > limit:
        lines.append(f"\n... and {len(rows) - limit} more rows")
    return lines


def clustering_table(data: dict) -> str:
    """Markdown for an ``explain_json`` (or ``summary_json``) document."""
    lines = [f"**{len(data['clusters'])} cluster(s)**, {data['nodes_clustered']} of {data['nodes_total']} "
             f"nodes clustered ({data['percent_clustered']:.1f}%)", ""]
    rows = []
    for c in data["clusters"]:
        ops = ", ".join(f"{op} x{n}" for op, n in sorted(c["op_types"].items(), key=lambda kv: (-kv[1], kv[0])))
        rows.append([c["name"], c["nodes"], c["size"], c["inputs"], c["outputs"],
                     c.get("optimized_instructions", ""), len(c.get("fusions", [])),
                     len(c.get("refused_fusions", [])), c.get("kernel_hash", "")[:12], ops])
    lines += _table(["cluster", "nodes", "counted ops", "inputs", "outputs", "HLO ops (optimized)", "fusions",
                     "refused fusions", "kernel", "op histogram"], rows)
    if data["excluded"]:
        lines += ["", f"**Nodes left in TensorFlow ({len(data['excluded'])})**", ""]
        lines += _table(["node", "op", "reason", "source"],
                        [[e["node"], e["op"], e["reason"], e.get("source", "")] for e in data["excluded"]])
    refused = [(c["name"], r) for c in data["clusters"] for r in c.get("refused_fusions", [])]
    if refused:
        lines += ["", f"**Refused fusions ({len(refused)})**", ""]
        lines += _table(["cluster", "phase", "producer", "consumer", "reason"],
                        [[name, r["phase"], r["producer"], r["consumer"], r["reason"]] for name, r in refused])
    return "\n".join(lines)


def code_block(text: str, language: str = "") -> str:
    """``text`` as a fenced block (a fence longer than any backtick run inside it)."""
    longest, run = 0, 0
    for ch in text:
        run = run + 1 if ch == "`" else 0
        longest = max(longest, run)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{language}\n{text.rstrip(chr(10))}\n{fence}"


def unfence(markdown: str) -> str:
    """The text inside a ``code_block`` (inverse of ``code_block``, up to a trailing newline)."""
    lines = markdown.split("\n")
    if len(lines) >= 2 and lines[0].startswith("```") and lines[-1].startswith("```"):
        return "\n".join(lines[1:-1]) + "\n"
    return markdown


__all__ = ["MAX_TABLE_ROWS", "clustering_table", "code_block", "unfence"]
