"""Errors of the public API."""

from __future__ import annotations


class UnsupportedGraphError(ValueError):
    """``jit_compile=True`` (must-compile) on a function with nodes that cannot be compiled.

    ``nodes`` lists (op type, node name, reason, "file:line" or None) for every such node.
    """

    def __init__(self, message: str, nodes: list[tuple[str, str, str, str | None]]):
        super().__init__(message)
        self.nodes = nodes

    @classmethod
    def from_nodes(cls, cf, analysis, bad: dict[str, str]) -> "UnsupportedGraphError":
        ops = {n.name: n.op for n in analysis.graph_def.node}
        sources = getattr(analysis, "sources", {}) or {}
        rows = []
        for node, reason in bad.items():
            src = sources.get(node)
            rows.append((ops.get(node, "?"), node, reason, f"{src[0]}:{src[1]}" if src else None))
        name = cf.name.decode() if isinstance(cf.name, bytes) else str(cf.name)
        lines = [f"jit_compile=True: {len(rows)} node(s) of function {name} cannot be compiled "
                 f"(use jit_compile=\"auto\" to leave them in TensorFlow):"]
        for op, node, reason, where in rows:
            lines.append(f"  {op} '{node}': {reason}" + (f" (created at {where})" if where else ""))
        return cls("\n".join(lines), rows)
