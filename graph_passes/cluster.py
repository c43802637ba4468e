"""Cluster compilable nodes: union-find over data edges with a cycle check, as XLA's mark_for_compilation.

Invariants of the result:

- a cluster holds compilable nodes (per ``mark``) of one device only (an unset device matches any);
- contracting every cluster into one node leaves the graph acyclic, counting data AND control edges:
  a merge of producer cluster P and consumer cluster C is refused when C stays reachable from P through
  a path outside the two (the check runs on a contracted graph kept in topological order, Pearce-Kelly
  style: it walks back from C only over nodes ranked after P, and after a merge just those nodes move);
- merges are tried in topological order of the consumer, its inputs in order, until nothing changes
  (at most ``MAX_ROUNDS`` rounds); the result depends only on the GraphDef, never on dict or set order;
- ``fuel`` caps the number of successful merges (fuel=k: exactly the first k merges happen), so a bad
  clustering decision can be found by bisection;
- ``must_compile`` (``jit_compile=True``) then also merges clusters that share no edge, in topological
  order, whenever that creates no cycle, so everything compilable forms ONE cluster when possible;
- clusters smaller than ``min_cluster_size`` (``Const``, ``Identity``, ``IdentityN``, ``Snapshot`` and
  ``StopGradient`` count 0, as in XLA) are dissolved; ``must_compile`` lowers the minimum to 1;
- clusters are named ``cluster_0, cluster_1, ...`` by the GraphDef position of their first node;
- every refused merge is recorded with its reason, every node left out carries one;
- a TensorList (a variant tensor) never crosses a cluster boundary: when a list's producer and a consumer
  end up apart, or a fetch reads a list, every clustered node that list connects (through list edges)
  is left out and the clustering reruns (``_split_lists``), so its ops stay in TensorFlow together.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from graph_passes._graph import GraphIndex, device_key
from hlo.lowering.tensor_names import parse_tensor, tensor

ZERO_COST_OPS = frozenset({"Const", "Identity", "IdentityN", "Snapshot", "StopGradient"})
MAX_ROUNDS = 25
MIN_RANK_GAP = 1e-6  # below this gap between float ranks, all ranks are renumbered 0, 1, 2, ...


@dataclass(frozen=True)
class ClusterOptions:
    min_cluster_size: int = 4
    max_cluster_size: int | None = None  # in counted ops (zero-cost ops excluded), None: no limit
    fuel: int | None = None  # successful merges allowed, None: unlimited
    must_compile: bool = False

    def __post_init__(self):
        if self.min_cluster_size < 0 or (self.max_cluster_size is not None and self.max_cluster_size < 1):
            raise ValueError(f"bad cluster size limits: min {self.min_cluster_size}, max {self.max_cluster_size}")
        if self.fuel is not None and self.fuel < 0:
            raise ValueError(f"fuel must be >= 0, got {self.fuel}")


@dataclass(frozen=True)
class RefusedMerge:
    producer: str  # node names: an edge producer -> consumer, or two clusters' first nodes (must_compile)
    consumer: str
    reason: str


@dataclass(frozen=True)
class Cluster:
    name: str
    nodes: tuple[str, ...]  # in GraphDef order
    size: int  # counted ops
    device: str = ""


@dataclass
class Clustering:
    clusters: list[Cluster]
    cluster_of: dict[str, str]  # node -> cluster name
    excluded: dict[str, str]  # every node in no cluster -> why (GraphDef order)
    refused: list[RefusedMerge] = field(default_factory=list)
    merges: int = 0


def op_cost(op: str) -> int:
    return 0 if op in ZERO_COST_OPS else 1


class _Contracted:
    """The graph with each cluster contracted to its representative, kept in topological rank order."""

    def __init__(self, index: GraphIndex, groups: list[list[str]]):
        self.rep = {n.name: n.name for n in index.nodes}
        for group in groups:  # v1 control-flow cycles: one node each, never compiled
            for name in group:
                self.rep[name] = group[0]
        self.succs: dict[str, set[str]] = {r: set() for r in set(self.rep.values())}
        self.preds: dict[str, set[str]] = {r: set() for r in self.succs}
        for n in index.nodes:
            for s in index.successors(n.name):
                a, b = self.rep[n.name], self.rep[s]
                if a != b:
                    self.succs[a].add(b)
                    self.preds[b].add(a)
        order = self._topological(index)
        self.rank = {r: float(i) for i, r in enumerate(order)}  # a topological order, kept while contracting
        self.position = index.position

    def key(self, r: str) -> tuple[float, int]:
        """Sort key: rank, ties (unrelated nodes may share a rank) broken by GraphDef position."""
        return self.rank[r], self.position[r]

    def _topological(self, index: GraphIndex) -> list[str]:
        pos = {r: index.position[r] for r in self.succs}
        pending = {r: len(p) for r, p in self.preds.items()}
        ready = [(pos[r], r) for r, p in pending.items() if p == 0]
        heapq.heapify(ready)
        out = []
        while ready:
            _, r = heapq.heappop(ready)
            out.append(r)
            for s in self.succs[r]:
                pending[s] -= 1
                if pending[s] == 0:
                    heapq.heappush(ready, (pos[s], s))
        assert len(out) == len(self.succs), "cycle left after contracting strongly connected components"
        return out

    def find(self, name: str) -> str:
        root = name
        while self.rep[root] != root:
            root = self.rep[root]
        while self.rep[name] != root:
            self.rep[name], name = root, self.rep[name]
        return root

    def between(self, a: str, b: str) -> set[str]:
        """Nodes other than ``a`` ranked no lower than ``a`` (rank a <= rank b) from which ``b`` is reachable,
        ``b`` excluded. Every edge goes strictly up in rank; unrelated nodes may share a rank, hence ">=". """
        low, rank, preds = self.rank[a], self.rank, self.preds
        seen: set[str] = set()
        work = [p for p in preds[b] if p != a]
        while work:
            r = work.pop()
            if r not in seen and r != a and rank[r] >= low:
                seen.add(r)
                work.extend(preds[r])
        return seen

    def witness(self, a: str, between: set[str]) -> str | None:
        """A node on a path a -> ... -> b of length >= 2 (one fed by ``a`` among ``between``), or None."""
        return min((x for x in between if a in self.preds[x]), key=self.key, default=None)

    def contract(self, a: str, b: str, between: set[str]) -> str:
        """Merge ``a`` and ``b`` (no other path a -> b) into one node with ``a``'s rank; the nodes ``between``
        move just before it, in their order (their other predecessors all rank before ``a``). The node
        with fewer edges is folded into the other, which is returned."""
        if between:
            floor = self._floor(between)
            step = (self.rank[a] - floor) / (len(between) + 1)
            if step < MIN_RANK_GAP:  # ranks are floats: renumber when the gaps get too fine
                self.rank = {r: float(i) for i, r in enumerate(sorted(self.rank, key=self.key))}
                floor = self._floor(between)
                step = (self.rank[a] - floor) / (len(between) + 1)
            for i, r in enumerate(sorted(between, key=self.key)):
                self.rank[r] = floor + step * (i + 1)
        rank = self.rank.pop(a)
        del self.rank[b]
        degree = {r: len(self.succs[r]) + len(self.preds[r]) for r in (a, b)}
        keep, gone = (a, b) if degree[a] >= degree[b] else (b, a)
        self.rank[keep] = rank
        for s in self.succs.pop(gone):
            self.preds[s].discard(gone)
            if s != keep:
                self.preds[s].add(keep)
                self.succs[keep].add(s)
        for p in self.preds.pop(gone):
            self.succs[p].discard(gone)
            if p != keep:
                self.succs[p].add(keep)
                self.preds[keep].add(p)
        self.rep[gone] = keep
        return keep

    def _floor(self, between: set[str]) -> float:
        return max((self.rank[p] for x in between for p in self.preds[x] if p not in between), default=-1.0)


class _Clusterer:
    def __init__(self, marking, options: ClusterOptions):
        self.options = options
        self.index = GraphIndex(marking.graph_def.node)
        self.ok = {n for n, v in marking.verdicts.items() if v.ok}
        self.graph = _Contracted(self.index, self.index.strongly_connected())
        self.members = {n: [n] for n in self.ok}
        self.size = {n: op_cost(self.index.by_name[n].op) for n in self.ok}
        self.device = {n: (device_key(self.index.by_name[n].device), self.index.by_name[n].device) for n in self.ok}
        self.refused: dict[tuple[str, str], str] = {}
        self.merges = 0

    def refusal(self, a: str, b: str) -> tuple[str | None, set[str]]:
        """Why clusters ``a`` and ``b`` (ranked a before b) cannot merge, else (None, nodes between them)."""
        (ka, da), (kb, db) = self.device[a], self.device[b]
        if ka is not None and kb is not None and ka != kb:
            return f"different devices: '{da}' vs '{db}'", set()
        limit = self.options.max_cluster_size
        if limit is not None and self.size[a] + self.size[b] > limit:
            return f"max_cluster_size exceeded ({self.size[a] + self.size[b]} ops > {limit})", set()
        if self.options.fuel is not None and self.merges >= self.options.fuel:
            return f"out of fuel (fuel={self.options.fuel})", set()
        between = self.graph.between(a, b)
        witness = self.graph.witness(a, between)
        if witness is not None:
            return (f"would create a cycle: the consumer is also reachable from the producer through "
                    f"'{self.members.get(witness, [witness])[0]}'"), set()
        return None, between

    def try_merge(self, x: str, y: str, key: tuple[str, str]) -> bool:
        a, b = self.graph.find(x), self.graph.find(y)
        if a == b:
            return False
        if self.graph.key(a) > self.graph.key(b):
            a, b = b, a
        reason, between = self.refusal(a, b)
        if reason:
            self.refused[key] = reason
            return False
        keep = self.graph.contract(a, b, between)
        gone = b if keep == a else a
        members = self.members.pop(gone)
        self.members[keep].extend(members)
        self.size[keep] += self.size.pop(gone)
        device = self.device.pop(gone)
        if self.device[keep][0] is None:
            self.device[keep] = device
        self.merges += 1
        return True

    def merge_edges(self, order: list[str]) -> None:
        for _ in range(MAX_ROUNDS):
            changed = False
            for name in order:
                if name not in self.ok:
                    continue
                for edge in self.index.data_in[name]:
                    if edge.producer in self.ok:
                        changed |= self.try_merge(edge.producer, name, (edge.producer, name))
            if not changed:
                return

    def merge_all(self) -> None:
        """must_compile: merge every cluster into the earliest one where no cycle results."""
        for _ in range(MAX_ROUNDS):
            roots = sorted({self.graph.find(n) for n in self.ok}, key=self.graph.key)
            changed = False
            for other in roots[1:]:
                first = self.graph.find(roots[0])
                a, b = sorted((first, other), key=self.graph.key)
                changed |= self.try_merge(a, b, (self.first_node(first), self.first_node(other)))
            if not changed:
                return

    def first_node(self, root: str) -> str:
        return min(self.members[root], key=self.index.position.__getitem__)

    def run(self, marking) -> Clustering:
        order, rest = self.index.topological_order()
        self.merge_edges(order + rest)
        if self.options.must_compile:
            self.merge_all()
        minimum = 1 if self.options.must_compile else self.options.min_cluster_size
        roots = sorted(self.members, key=lambda r: self.index.position[self.first_node(r)])
        clusters: list[Cluster] = []
        excluded: dict[str, str] = {}
        cluster_of: dict[str, str] = {}
        for root in roots:
            nodes = tuple(sorted(self.members[root], key=self.index.position.__getitem__))
            size = self.size[root]
            if size < minimum:
                for n in nodes:
                    excluded[n] = f"cluster too small ({size} ops < min_cluster_size {minimum})"
                continue
            name = f"cluster_{len(clusters)}"
            device = next((self.index.by_name[n].device for n in nodes if self.index.by_name[n].device), "")
            clusters.append(Cluster(name, nodes, size, device))
            cluster_of.update((n, name) for n in nodes)
        for n, verdict in marking.verdicts.items():
            if not verdict.ok:
                excluded[n] = verdict.reason
        excluded = {n.name: excluded[n.name] for n in self.index.nodes if n.name in excluded}
        refused = [RefusedMerge(p, c, reason) for (p, c), reason in self.refused.items()
                   if self.graph.find(p) != self.graph.find(c)]
        refused.sort(key=lambda r: (self.index.position[r.consumer], self.index.position[r.producer]))
        return Clustering(clusters, cluster_of, excluded, refused, self.merges)


DT_VARIANT = 21


def _split_lists(marking, clustering: Clustering, index: GraphIndex, fetches) -> dict[str, str]:
    """Clustered nodes to leave out -> why: those a list edge crossing a cluster boundary connects."""
    rep = {n.name: n.name for n in index.nodes}

    def find(x: str) -> str:
        while rep[x] != x:
            rep[x] = rep[rep[x]]
            x = rep[x]
        return x

    crossing: dict[str, str] = {}  # component root -> why
    where = clustering.cluster_of.get
    for n in index.nodes:
        for e in index.data_in[n.name]:
            t = tensor(e.producer, e.index)
            info = marking.tensors.get(t)
            if info is None or info.dtype != DT_VARIANT:
                continue
            rep[find(e.producer)] = find(n.name)
            if where(e.producer) != where(n.name):
                outside = n.name if where(e.producer) else e.producer
                how = "is in another cluster" if where(outside) else "stays in TensorFlow"
                crossing[n.name] = f"TensorList '{t}' would cross a cluster boundary ('{outside}' {how})"
    for f in fetches:
        if f.startswith("^"):
            continue
        ref = parse_tensor(f)
        info = marking.tensors.get(str(ref))
        if info is not None and info.dtype == DT_VARIANT and where(ref.node):
            crossing[ref.node] = f"TensorList '{ref}' is fetched, and a list cannot leave compiled code"
    why = {find(n): reason for n, reason in crossing.items()}
    return {n: f"{why[find(n)]}: the ops of that list stay in TensorFlow together"
            for n in clustering.cluster_of if find(n) in why}


def cluster_nodes(marking, options: ClusterOptions = ClusterOptions(), fetches=()) -> Clustering:
    """Group the compilable nodes of ``marking`` (from ``mark.mark_compilable``) into clusters;
    ``fetches`` (tensor names) are what the caller reads, so no TensorList among them is clustered."""
    from graph_passes.mark import Marking, NodeVerdict

    index = GraphIndex(marking.graph_def.node)
    for _ in range(MAX_ROUNDS):
        clustering = _Clusterer(marking, options).run(marking)
        split = _split_lists(marking, clustering, index, fetches)
        if not split:
            return clustering
        verdicts = {n: NodeVerdict(n, v.op, False, split[n], v.device) if n in split else v
                    for n, v in marking.verdicts.items()}
        marking = Marking(marking.graph_def, verdicts, marking.tensors, marking.constants)
    return clustering


__all__ = ["Cluster", "ClusterOptions", "Clustering", "RefusedMerge", "ZERO_COST_OPS", "cluster_nodes", "op_cost"]
