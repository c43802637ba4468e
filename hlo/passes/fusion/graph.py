"""The working graph of one computation while fusion runs: top-level nodes, clusters, users.

Invariant (it is what makes fusing a union): every name denotes one value. A
top-level node named ``n`` and an instruction named ``n`` inside any cluster
compute the value of the original instruction ``n``. Clusters hold copies of
original instructions under their own names, so fusing a producer into a
consumer, or merging two clusters, is a union of instruction dicts, and a
producer duplicated into two consumers is the same instruction in both.

A single-output cluster is a top-level node named after its output (its root
instruction). A multi-output cluster gets a fresh name, and each of its
outputs stays a top-level node under its own name: a get-tuple-element of the
cluster, so outside users never need rewriting. Original positions (text
order) give a topological order of the originals and make every iteration
deterministic; ``materialize`` turns the graph back into a computation whose
order the stable topological sort fixes. ``copies`` counts the places
computing each original instruction (the duplication budget reads it), and a
cached topological numbering, kept valid across merges, bounds the searches
for paths that would make a merge a cycle.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property

from hlo.attributes import Attrs, FusionKind
from hlo.ir import HloComputation, HloInstruction
from hlo.opcodes import Opcode
from hlo.passes.fusion.policy import OUTPUT_HEROES, REDUCTION_HEROES, Access, access
from hlo.shapes import Shape, ShapeLike, TupleShape

ROOT = "root"  # evaluation context of a cluster's outputs (see ``contexts``)
MANY = "many"  # evaluated in several contexts: recomputed per element


@dataclass
class Cluster:
    """A fusion under construction: instructions by name and the names of its outputs."""

    name: str
    insts: dict[str, HloInstruction]  # never mutated: fusing builds a new cluster
    outputs: list[str]
    external: list[str] | None = field(default=None, repr=False, compare=False)  # cache of external_operands

    @property
    def multi_output(self) -> bool:
        return len(self.outputs) > 1

    @property
    def shape(self) -> ShapeLike:
        if self.multi_output:
            return TupleShape(tuple(self.insts[o].shape for o in self.outputs))
        return self.insts[self.outputs[0]].shape

    @cached_property
    def _heroes(self) -> list[str]:
        return sorted(n for n, i in self.insts.items() if i.opcode in REDUCTION_HEROES | OUTPUT_HEROES)

    def heroes(self, opcodes=REDUCTION_HEROES | OUTPUT_HEROES) -> list[str]:
        """Names of the reductions and dots (or of the given opcodes among them) in the cluster."""
        return [n for n in self._heroes if self.insts[n].opcode in opcodes]

    @property
    def kind(self) -> FusionKind:
        if self.heroes(OUTPUT_HEROES):
            return FusionKind.OUTPUT
        if self.heroes(REDUCTION_HEROES):
            return FusionKind.INPUT
        return FusionKind.LOOP


Node = HloInstruction | Cluster


def union(consumer: Cluster, producer: Cluster, name: str | None = None, keep_producer_output: bool = False) -> Cluster:
    """The cluster computing both (the invariant makes this a dict union)."""
    outputs = list(consumer.outputs)
    if keep_producer_output:
        outputs += [o for o in producer.outputs if o not in outputs]
    return Cluster(name or consumer.name, {**producer.insts, **consumer.insts}, outputs)


@dataclass
class FusionGraph:
    comp: HloComputation
    # Instructions of this computation already copied into existing fusions (name -> number of copies), so that
    # the duplication budget holds across runs of the pass.
    existing_copies: dict[str, int] = field(default_factory=dict)
    nodes: dict[str, Node] = field(init=False)
    users: dict[str, set[str]] = field(init=False)
    position: dict[str, float] = field(init=False)
    root: str = field(init=False)
    changed: bool = field(default=False, init=False)

    def __post_init__(self) -> None:
        self.nodes = {i.name: i for i in self.comp.instructions}
        self.position = {i.name: float(k) for k, i in enumerate(self.comp.instructions)}
        self.root = self.comp.root_name
        self.users = {n: set() for n in self.nodes}
        for name in self.nodes:
            self._link(name)
        self.controlled = {r.name for i in self.comp.instructions for r in i.attr("control-predecessors", ())}
        self.output_aliases: set[str] = set()  # get-tuple-element nodes standing for multi-output results
        self.copies: dict[str, int] = {n: 1 + self.existing_copies.get(n, 0) for n in self.nodes}
        self._fresh = 0
        self.aliases: dict[str, str] = {}  # multi-output cluster name -> the cluster it was merged into
        self._topo: dict[str, float] | None = None

    # --- queries ---------------------------------------------------------------------------
    def ordered(self, names) -> list[str]:
        return sorted(names, key=lambda n: (self.position[n], n))

    def operands(self, name: str) -> list[str]:
        """Distinct top-level operands of a node, in order of first use."""
        node = self.nodes[name]
        if isinstance(node, HloInstruction):
            return list(dict.fromkeys(node.operands))
        return external_operands(node, self.position)

    def user_list(self, name: str) -> list[str]:
        return self.ordered(self.users[name])

    def shape(self, name: str) -> ShapeLike:
        return self.nodes[name].shape

    def cluster_of(self, name: str) -> Cluster:
        """The node as a cluster (a plain instruction as a cluster of one; nothing is modified)."""
        node = self.nodes[name]
        return node if isinstance(node, Cluster) else Cluster(name, {name: node}, [name])

    def shape_of(self, cluster: Cluster):
        return lambda n: cluster.insts[n].shape if n in cluster.insts else self.shape(n)

    def contexts(self, cluster: Cluster) -> dict[str, object]:
        """In how many index contexts each value (internal or external operand) is evaluated per element.

        Outputs are evaluated at the loop index (``ROOT``). A user evaluated in one context
        passes it on to an operand read at the same index, a fresh context ``(user, slot)`` to
        an operand read once at a remapped index, and ``MANY`` when it reuses elements. A
        value whose context is not ``MANY`` is computed once per element of its own.
        """
        ctx: dict[str, object] = {}

        def add(name: str, token) -> None:
            cur = ctx.get(name)
            ctx[name] = token if cur is None or cur == token else MANY

        for o in cluster.outputs:
            add(o, ROOT)
        shape_of = self.shape_of(cluster)
        for n in reversed(self.ordered(cluster.insts)):
            token = ctx.get(n)
            if token is None:
                continue
            inst = cluster.insts[n]
            for slot, op in enumerate(inst.operands):
                how = access(inst, slot, shape_of(op))
                if token == MANY or how is Access.REUSE:
                    add(op, MANY)
                elif how is Access.SAME:
                    add(op, token)
                else:
                    add(op, (n, slot))
        return ctx

    def computed(self, name: str) -> list[str]:
        """The original instructions node ``name`` computes."""
        node = self.nodes[name]
        if isinstance(node, Cluster):
            return list(node.insts)
        return [] if name in self.output_aliases else [name]

    def _count(self, names, delta: int) -> None:
        for n in names:
            self.copies[n] = self.copies.get(n, 0) + delta

    def topo_index(self) -> dict[str, float]:
        """A topological numbering of the nodes (kept up to date by ``merge``)."""
        if self._topo is None:
            order = stable_topological_order(self.ordered(self.nodes), lambda n: self.operands(n))
            self._topo = {n: float(k) for k, n in enumerate(order)}
        return self._topo

    def path_between(self, src: str, dst: str, direct: bool = False) -> str | None:
        """The first node of a path src -> ... -> dst, or None; the direct edge src -> dst counts (and
        ``dst`` is returned) only when ``direct``. The search stays within the topological window."""
        topo = self.topo_index()
        origin: dict[str, str] = {}
        for start in self.user_list(src):
            if start == dst:
                if direct:
                    return dst
                continue
            stack = [start]
            while stack:
                n = stack.pop()
                if n == dst:
                    return start
                if n in origin or topo[n] > topo[dst]:
                    continue
                origin[n] = start
                stack.extend(self.users[n])
        return None

    def fresh_name(self, base: str) -> str:
        while True:
            self._fresh += 1
            name = f"{base}.{self._fresh}"
            if name not in self.nodes and name not in self.position:
                return name

    # --- edits -------------------------------------------------------------------------------
    def _link(self, name: str) -> None:
        for op in self.operands(name):
            self.users.setdefault(op, set()).add(name)

    def _unlink(self, name: str) -> None:
        for op in self.operands(name):
            self.users[op].discard(name)

    def _remove_if_dead(self, name: str) -> None:
        """Drop a node nothing reads any more, and then any operand that leaves without users."""
        work = [name]
        while work:
            n = work.pop()
            node = self.nodes.get(n)
            if node is None or self.users[n] or n == self.root:
                continue
            if isinstance(node, HloInstruction) and (node.opcode is Opcode.PARAMETER or node.opcode.has_side_effect):
                continue
            operands = self.operands(n)
            self._count(self.computed(n), -1)
            self._unlink(n)
            del self.nodes[n]
            del self.users[n]
            work.extend(reversed(operands))

    def fuse(self, producer: str, consumer: str) -> Cluster:
        """Fuse ``producer`` into ``consumer``; the producer stays only if it has other users."""
        before = self.cluster_of(consumer)
        merged = union(before, self.cluster_of(producer))
        self._count([n for n in merged.insts if n not in before.insts], +1)
        self._unlink(consumer)
        self.nodes[consumer] = merged
        self._link(consumer)
        self._remove_if_dead(producer)
        self.changed = True
        return merged

    def merge(self, first: str, second: str) -> Cluster:
        """One multi-output cluster computing every output of both nodes (the caller checked for cycles)."""
        a, b = self.cluster_of(first), self.cluster_of(second)
        name = self.fresh_name("multi_output_fusion")
        merged = union(a, b, name, keep_producer_output=True)
        self._count([n for n in a.insts if n in b.insts], -1)
        self.position[name] = min(self.position[first], self.position[second])
        for old in (first, second):
            self._unlink(old)
            if isinstance(node := self.nodes[old], Cluster) and node.multi_output:
                del self.users[old]
                self.aliases[old] = name
            del self.nodes[old]
        self.nodes[name] = merged
        self.users[name] = set()
        self._link(name)
        for index, out in enumerate(merged.outputs):  # outputs stay reachable under their own names
            self.users.setdefault(out, set())
            self.nodes[out] = HloInstruction(out, Opcode.GET_TUPLE_ELEMENT, merged.insts[out].shape, (name,),
                                             Attrs([("index", index)]))
            self.output_aliases.add(out)
            self.users[name].add(out)
        self._place(name, merged)
        self.changed = True
        return merged

    def _place(self, name: str, merged: Cluster) -> None:
        """Keep the cached topological numbering valid after a merge: put the new cluster and its
        get-tuple-elements between its operands and their users, or renumber when they do not fit."""
        topo = self._topo
        if topo is None:
            return
        lo = max((topo[o] for o in self.operands(name)), default=-1.0)
        hi = min((topo[u] for o in merged.outputs for u in self.users[o]), default=lo + 3.0)
        if not hi - lo > 1e-6:
            self._topo = None
            return
        topo[name] = lo + (hi - lo) / 3
        for o in merged.outputs:
            topo[o] = lo + 2 * (hi - lo) / 3


def external_operands(cluster: Cluster, position: dict[str, float]) -> list[str]:
    """Values a cluster reads from outside, in order of first use (instruction order, operand order)."""
    if cluster.external is None:
        seen: dict[str, None] = {}
        for n in sorted(cluster.insts, key=lambda n: (position[n], n)):
            for op in cluster.insts[n].operands:
                if op not in cluster.insts:
                    seen.setdefault(op, None)
        cluster.external = list(seen)
    return list(cluster.external)


def stable_topological_order(names: list[str], operands_of) -> list[str]:
    """``names`` reordered so that operands come first, otherwise keeping the given order."""
    known = set(names)
    rank = {n: k for k, n in enumerate(names)}
    done: set[str] = set()
    out: list[str] = []
    for n in names:
        stack = [(n, False)]
        while stack:
            name, ready = stack.pop()
            if name in done:
                continue
            if ready:
                done.add(name)
                out.append(name)
                continue
            stack.append((name, True))
            deps = [o for o in operands_of(name) if o in known and o not in done]
            stack.extend((d, False) for d in sorted(deps, key=rank.__getitem__, reverse=True))
    return out


def element_count(shape: ShapeLike) -> int:
    return shape.num_elements if isinstance(shape, Shape) else 0
