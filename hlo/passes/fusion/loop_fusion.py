"""Producer-consumer fusion: loop (kLoop), input (kInput, reductions) and output (kOutput, dot epilogues).

Consumers are visited from the end of the computation to its start, as XLA's
instruction fusion does; each consumer absorbs its operands one at a time
until none is accepted, so whole chains collapse into their last user. A
producer with several users is copied into each of them only when it is cheap
(no transcendental, reduction or dot), every other user can take it too, and
no arithmetic instruction ends up computed in more than
``FusionOptions.max_copies`` places (pure index remapping and constants are
copied freely); the last user to absorb it removes it. Because a producer with
other users stays where it is, producer-consumer fusion never creates a
cycle. The rules, each recorded with its reason when it refuses:

* only opcodes the elemental emitter handles fuse (``policy.NOT_FUSIBLE``);
* expensive work (transcendentals, reductions, dots) is never computed more
  than once per element: a reduce fuses only into consumers that read each of
  its elements once (an elementwise epilogue, a reshape), never through an
  expanding broadcast;
* a dot keeps its operands in memory and fuses only into elementwise
  consumers (output fusion), with no other reduction or dot in the fusion;
  an output fusion does not take the epilogue of another dot (elementwise work
  reading it through single-user instructions of its shape): that dot's own
  output fusion does;
* size limits from ``FusionOptions``.
"""

from __future__ import annotations

from hlo.ir import HloInstruction
from hlo.passes.fusion.decisions import PRODUCER_CONSUMER, DecisionLog
from hlo.passes.fusion.graph import MANY, ROOT, Cluster, FusionGraph, external_operands, union
from hlo.passes.fusion.policy import OUTPUT_HEROES, REDUCTION_HEROES, FusionOptions, expense, not_fusible_reason, work
from hlo.shapes import Shape


def node_reason(graph: FusionGraph, name: str) -> str | None:
    """Why the top-level node ``name`` cannot take part in producer-consumer fusion at all."""
    node = graph.nodes[name]
    if isinstance(node, Cluster):
        return "is a multi-output fusion" if node.multi_output else None
    if name in graph.controlled:
        return "is a control predecessor"
    return not_fusible_reason(node)


def first_expensive(graph: FusionGraph, cluster: Cluster) -> tuple[str, str] | None:
    """(name, what) of the first expensive instruction of a cluster, if any."""
    for n in graph.ordered(cluster.insts):
        what = expense(cluster.insts[n])
        if what is not None:
            return n, what
    return None


def size_reason(graph: FusionGraph, merged: Cluster, options: FusionOptions) -> str | None:
    if len(merged.insts) > options.max_fused_instructions:
        return f"the fusion would hold {len(merged.insts)} instructions (limit {options.max_fused_instructions})"
    operands = len(external_operands(merged, graph.position))
    if operands > options.max_fusion_operands:
        return f"the fusion would read {operands} operands (limit {options.max_fusion_operands})"
    return None


def recompute_reason(graph: FusionGraph, producer: Cluster, merged: Cluster, consumer: str) -> str | None:
    """Refuse when expensive work of ``producer`` would run more than once per element in ``merged``."""
    costly = [(n, expense(producer.insts[n])) for n in graph.ordered(producer.insts)]
    costly = [(n, what) for n, what in costly if what is not None]
    if not costly:
        return None
    ctx = graph.contexts(merged)
    for n, what in costly:
        if ctx.get(n) == MANY:
            if producer.insts[n].opcode in REDUCTION_HEROES:
                return f"would recompute a reduction per element: %{consumer} reads reduce %{n} repeatedly"
            return f"would recompute %{n} ({what}) per element: %{consumer} reads it repeatedly"
    return None


def dot_reason(graph: FusionGraph, producer: Cluster, consumer: Cluster, merged: Cluster) -> str | None:
    """Output fusion: one dot, operands from memory, an elementwise epilogue only."""
    p = producer.name
    for n in graph.ordered(consumer.insts):
        inst = consumer.insts[n]
        if inst.opcode in OUTPUT_HEROES and p in inst.operands:
            return f"the operands of {inst.opcode.text} %{n} stay in memory (output fusion reads them from buffers)"
    p_dots, c_dots = producer.heroes(OUTPUT_HEROES), consumer.heroes(OUTPUT_HEROES)
    if p_dots:
        dot = producer.insts[p_dots[0]].opcode.text
        others = consumer.heroes()
        if others:
            return f"an output fusion holds one {dot} and its elementwise epilogue; %{consumer.name} already " \
                   f"contains %{others[0]}"
        if graph.contexts(merged).get(p) != ROOT:
            return f"{dot} %{p_dots[0]} fuses only into elementwise consumers (output fusion); " \
                   f"%{consumer.name} reads it at another index"
    if c_dots and producer.heroes():
        return f"output fusion %{consumer.name} holds one {consumer.insts[c_dots[0]].opcode.text}; " \
               f"%{p} contains %{producer.heroes()[0]}"
    return None


EPILOGUE_DEPTH = 16  # same-shape elementwise instructions followed from a producer to a dot/convolution


def epilogue_hero(graph: FusionGraph, producer: Cluster) -> str | None:
    """The unfused dot/convolution whose elementwise epilogue ``producer`` (a heroless cluster) continues:
    one with a single user, reached from its operands through same-shape elementwise instructions that
    have one user each."""
    dims = producer.shape.dims if isinstance(producer.shape, Shape) else None
    work, seen = [(o, 0) for o in graph.operands(producer.name)], set()
    while work:
        name, depth = work.pop()
        node = graph.nodes.get(name)
        if name in seen or not isinstance(node, HloInstruction) or not isinstance(node.shape, Shape) \
                or node.shape.dims != dims:
            continue
        seen.add(name)
        if node.opcode in OUTPUT_HEROES:
            return name if len(graph.users[name]) == 1 else None
        if node.opcode.is_elementwise and len(graph.users[name]) == 1 and depth < EPILOGUE_DEPTH:
            work += [(o, depth + 1) for o in node.operands]
    return None


def epilogue_reason(graph: FusionGraph, producer: Cluster, consumer: Cluster) -> str | None:
    """An output fusion does not take the epilogue of another dot/convolution: that one's output fusion does
    (ResNet's ``relu(bn(conv_a) + bn(conv_b))``: conv_a with its batch norm as post-ops, conv_b with the
    sum as a residual, instead of conv_a's batch norm in conv_b's elemental loop)."""
    held = consumer.heroes(OUTPUT_HEROES)
    if not held or producer.heroes():
        return None
    other = epilogue_hero(graph, producer)
    hero = graph.nodes.get(other) if other is not None else None
    if not isinstance(hero, HloInstruction):
        return None
    return (f"%{producer.name} is in the epilogue of {hero.opcode.text} %{other}, which fuses it "
            f"itself (%{consumer.name} holds %{held[0]})")


def pair_reason(graph: FusionGraph, producer: str, consumer: str, options: FusionOptions) -> str | None:
    """Why ``producer`` cannot fuse into ``consumer``, ignoring the producer's other users."""
    why = node_reason(graph, consumer)
    if why is not None:
        return f"consumer %{consumer} {why}"
    why = node_reason(graph, producer)
    if why is not None:
        return f"producer %{producer} {why}"
    pc, cc = graph.cluster_of(producer), graph.cluster_of(consumer)
    merged = union(cc, pc)
    return (dot_reason(graph, pc, cc, merged) or epilogue_reason(graph, pc, cc)
            or recompute_reason(graph, pc, merged, consumer) or size_reason(graph, merged, options))


class LoopFusion:
    """Phase 1 of ``FusionPass``: producer-consumer fusion over one computation's graph."""

    def __init__(self, graph: FusionGraph, options: FusionOptions, log: DecisionLog):
        self.graph = graph
        self.options = options
        self.log = log

    def run(self) -> None:
        for consumer in reversed(self.graph.ordered(self.graph.nodes)):
            if consumer in self.graph.nodes:
                self._absorb_operands(consumer)

    def _absorb_operands(self, consumer: str) -> None:
        # A refused producer is tried again only once it has fewer users (its refusal may depend on them).
        tried: set[tuple[str, int]] = set()
        progress = True
        while progress:
            progress = False
            for producer in self.graph.operands(consumer):
                key = (producer, len(self.graph.users[producer]))
                if key in tried:
                    continue
                tried.add(key)
                reason = pair_reason(self.graph, producer, consumer, self.options)
                note = ""
                if reason is None:
                    reason, note = self._sharing(producer, consumer)
                if reason is not None:
                    self.log.record(PRODUCER_CONSUMER, producer, consumer, False, reason)
                    continue
                merged = self.graph.fuse(producer, consumer)
                self.log.record(PRODUCER_CONSUMER, producer, consumer, True, merged.kind.value + note)
                progress = True
                break

    def _sharing(self, producer: str, consumer: str) -> tuple[str | None, str]:
        """Policy for a producer with several users: duplicate only cheap, bounded work."""
        g, opt = self.graph, self.options
        users = g.user_list(producer)
        n = len(users) + (1 if producer == g.root else 0)
        if n <= 1:
            return None, ""
        pc = g.cluster_of(producer)
        costly = first_expensive(g, pc)
        if costly is not None:
            what = costly[1] if costly[0] == producer else f"{costly[1]} %{costly[0]}"
            return f"producer %{producer} has {n} users and is expensive ({what})", ""
        w = sum(work(i) for i in pc.insts.values())
        if w == 0:
            return None, f", duplicated (index remapping only; {n} users)"
        if producer == g.root:
            return (f"producer %{producer} is also the computation's result, so it stays in memory and a copy "
                    f"would only repeat its {w} arithmetic instruction(s)"), ""
        inside = g.cluster_of(consumer).insts
        for name in g.ordered(pc.insts):
            if work(pc.insts[name]) and name not in inside and g.copies.get(name, 0) + 1 > opt.max_copies:
                return (f"producer %{producer} has {n} users; another copy would compute %{name} in "
                        f"{g.copies[name] + 1} places (limit {opt.max_copies})"), ""
        for other in users:
            if other != consumer:
                why = pair_reason(g, producer, other, opt)
                if why is not None:
                    return (f"producer %{producer} has {n} users and %{other} cannot fuse it ({why}), "
                            f"so a copy would not remove it"), ""
        return None, f", duplicated into {n} users"
