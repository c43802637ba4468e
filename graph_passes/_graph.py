"""Shared read-only views of a GraphDef used by every pass: tensor names, edges, orders, devices.

Tensor names are canonical ``"node:i"`` everywhere (a GraphDef input ``"node"`` means ``"node:0"``);
control inputs are ``"^node"``; ``hlo.lowering.tensor_names`` parses them. A ``GraphIndex`` is built once per GraphDef and never mutated; the
passes build new GraphDefs instead of editing the one they were given.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass
from typing import Iterable, Sequence

from hlo.errors import first_duplicate
from hlo.lowering.tensor_names import parse_input


def fresh_name(taken: set[str], name: str) -> str:
    """``name``, or ``name_1``, ``name_2``... the first not in ``taken``; added to ``taken`` (a new node's name)."""
    out, k = name, 0
    while out in taken:
        k += 1
        out = f"{name}_{k}"
    taken.add(out)
    return out


@dataclass(frozen=True)
class Edge:
    """A data edge: output ``index`` of ``producer`` feeds input ``slot`` of ``consumer``."""

    producer: str
    index: int
    consumer: str
    slot: int


class GraphIndex:
    """Nodes by name and position, data and control edges in both directions."""

    def __init__(self, nodes: Sequence):
        self.nodes = list(nodes)
        self.by_name = {n.name: n for n in self.nodes}
        if len(self.by_name) != len(self.nodes):
            dup = first_duplicate(n.name for n in self.nodes)
            raise ValueError(f"the graph defines node '{dup}' more than once")
        self.position = {n.name: i for i, n in enumerate(self.nodes)}
        self.data_in: dict[str, list[Edge]] = {n.name: [] for n in self.nodes}
        self.data_out: dict[str, list[Edge]] = {n.name: [] for n in self.nodes}
        self.control_in: dict[str, list[str]] = {n.name: [] for n in self.nodes}
        self.control_out: dict[str, list[str]] = {n.name: [] for n in self.nodes}
        for n in self.nodes:
            slot = 0
            for text in n.input:
                try:
                    src, idx, control = parse_input(text)
                except ValueError as e:
                    raise ValueError(f"node '{n.name}' has a bad input: {e}") from None
                if src not in self.by_name:
                    raise ValueError(f"node '{n.name}' has input '{text}' from a node that is not in the graph")
                if control:
                    if src not in self.control_in[n.name]:
                        self.control_in[n.name].append(src)
                        self.control_out[src].append(n.name)
                    continue
                edge = Edge(src, idx, n.name, slot)
                self.data_in[n.name].append(edge)
                self.data_out[src].append(edge)
                slot += 1

    def predecessors(self, name: str) -> list[str]:
        """Data and control producers of ``name``, each once, in input order."""
        out = dict.fromkeys(e.producer for e in self.data_in[name])
        out.update(dict.fromkeys(self.control_in[name]))
        return list(out)

    def successors(self, name: str) -> list[str]:
        out = dict.fromkeys(e.consumer for e in self.data_out[name])
        out.update(dict.fromkeys(self.control_out[name]))
        return list(out)

    def reached(self, sources: Iterable[str], forward: bool = True) -> set[str]:
        """``sources`` and every node reached from them along data and control edges (towards consumers
        when ``forward``, else towards producers)."""
        step = self.successors if forward else self.predecessors
        seen: set[str] = set()
        work = list(sources)
        while work:
            n = work.pop()
            if n not in seen:
                seen.add(n)
                work.extend(step(n))
        return seen

    def topological_order(self) -> tuple[list[str], list[str]]:
        """(ordered, rest): Kahn's order over data and control edges, ties broken by GraphDef position;
        ``rest`` holds the nodes on or after a cycle (v1 control flow), in GraphDef order."""
        pending = {n.name: len(self.predecessors(n.name)) for n in self.nodes}
        ready = [self.position[n] for n, p in pending.items() if p == 0]
        heapq.heapify(ready)
        order: list[str] = []
        while ready:
            name = self.nodes[heapq.heappop(ready)].name
            order.append(name)
            for succ in self.successors(name):
                pending[succ] -= 1
                if pending[succ] == 0:
                    heapq.heappush(ready, self.position[succ])
        done = set(order)
        return order, [n.name for n in self.nodes if n.name not in done]

    def strongly_connected(self) -> list[list[str]]:
        """Strongly connected components with more than one node (or a self loop), iteratively (Tarjan)."""
        index: dict[str, int] = {}
        low: dict[str, int] = {}
        stack: list[str] = []
        on_stack: set[str] = set()
        out: list[list[str]] = []
        for root in (n.name for n in self.nodes):
            if root in index:
                continue
            work = [(root, iter(self.successors(root)))]
            index[root] = low[root] = len(index)
            stack.append(root)
            on_stack.add(root)
            while work:
                name, it = work[-1]
                advanced = False
                for succ in it:
                    if succ not in index:
                        index[succ] = low[succ] = len(index)
                        stack.append(succ)
                        on_stack.add(succ)
                        work.append((succ, iter(self.successors(succ))))
                        advanced = True
                        break
                    if succ in on_stack:
                        low[name] = min(low[name], index[succ])
                if advanced:
                    continue
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[name])
                if low[name] == index[name]:
                    comp = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        comp.append(member)
                        if member == name:
                            break
                    if len(comp) > 1 or name in self.successors(name):
                        out.append(sorted(comp, key=self.position.__getitem__))
        return out


def is_stub(fdef) -> bool:
    """Whether a library function is a signature with no body: how Grappler's graphs list the functions
    of calls it did not inline (a ``jit_compile=True`` function, a ``_noinline`` one)."""
    return bool(fdef.signature.output_arg) and not fdef.ret


def device_key(device: str) -> tuple | None:
    """A comparable key for a device string (None when unset); ``/cpu:0`` and
    ``/job:localhost/replica:0/task:0/device:CPU:0`` compare equal."""
    if not device:
        return None
    from tensorflow.python.framework.device_spec import DeviceSpecV2

    spec = DeviceSpecV2.from_string(device)
    return (spec.job or "localhost", spec.replica or 0, spec.task or 0, (spec.device_type or "CPU").upper(),
            spec.device_index or 0)


def device_type(device: str) -> str:
    key = device_key(device)
    return "CPU" if key is None else key[3]


__all__ = ["Edge", "GraphIndex", "device_key", "device_type", "is_stub"]
