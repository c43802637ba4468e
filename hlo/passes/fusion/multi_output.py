"""Multi-output fusion: one loop nest computing several results (a fusion whose root is a tuple).

Runs after producer-consumer fusion, on what it left:

* producer-consumer: a producer that had to stay in memory (it is expensive
  and has several users, or it is a result of the computation) is fused into
  one consumer and kept as an extra output, so it is written once and not
  read back; its other users read it through a get-tuple-element;
* siblings: two users of the same (non-scalar) input become one fusion, so
  the input is read in one pass.

The CPU code generator emits a tuple root only when every output has the same
dims, so both forms require identical output dims. Merging two nodes is the
one place fusion could create a cycle: it is refused when another path joins
them. Output fusions (dot epilogues) are left alone: their dot is meant for a
library call with post-ops.
"""

from __future__ import annotations

from hlo.ir import HloInstruction
from hlo.passes.fusion.decisions import MULTI_OUTPUT, SIBLING, DecisionLog
from hlo.passes.fusion.graph import MANY, FusionGraph, element_count, union
from hlo.passes.fusion.loop_fusion import size_reason
from hlo.passes.fusion.policy import OUTPUT_HEROES, FusionOptions, expense, not_fusible_reason, same_dims


def eligible_reason(graph: FusionGraph, name: str) -> str | None:
    """Why node ``name`` cannot be part of a multi-output fusion (None when it can)."""
    node = graph.nodes[name]
    if isinstance(node, HloInstruction):
        if name in graph.controlled:
            return "is a control predecessor"
        why = not_fusible_reason(node)
        if why is not None:
            return why
        if not node.operands:
            return f"is a {node.opcode.text} (no inputs to share)"
    if graph.cluster_of(name).heroes(OUTPUT_HEROES):
        return "holds a dot or convolution (output fusions are not merged)"
    return None


def _dims(shape) -> str:
    return shape.short()


class MultiOutputFusion:
    """Phase 2 of ``FusionPass``: producer-consumer and sibling multi-output fusion."""

    def __init__(self, graph: FusionGraph, options: FusionOptions, log: DecisionLog):
        self.graph = graph
        self.options = options
        self.log = log

    def run(self) -> None:
        self._producer_consumer()
        self._siblings()

    # --- a producer kept as an extra output of its consumer ------------------------------------
    def _producer_consumer(self) -> None:
        g = self.graph
        for producer in g.ordered(list(g.nodes)):
            if producer not in g.nodes or eligible_reason(g, producer) is not None:
                continue
            if g.cluster_of(producer).multi_output:
                continue
            users = g.user_list(producer)
            if len(users) + (1 if producer == g.root else 0) < 2:
                continue
            for consumer in users:
                reason = self._producer_consumer_reason(producer, consumer)
                if reason is not None:
                    self.log.record(MULTI_OUTPUT, producer, consumer, False, reason)
                    continue
                merged = g.merge(consumer, producer)
                self.log.record(MULTI_OUTPUT, producer, consumer, True,
                                f"{merged.kind.value}, %{producer} kept as an output of %{merged.name}")
                break

    def _producer_consumer_reason(self, producer: str, consumer: str) -> str | None:
        g = self.graph
        why = eligible_reason(g, consumer)
        if why is not None:
            return f"consumer %{consumer} {why}"
        if not same_dims(g.shape(producer), g.shape(consumer)):
            return (f"different output dims for multi-output fusion ({_dims(g.shape(producer))} vs "
                    f"{_dims(g.shape(consumer))})")
        pc = g.cluster_of(producer)
        merged = union(g.cluster_of(consumer), pc, keep_producer_output=True)
        ctx = g.contexts(merged)
        for n in g.ordered(pc.insts):
            what = expense(pc.insts[n])
            if what is not None and ctx.get(n) == MANY:
                return f"would recompute %{n} ({what}) per element: %{consumer} reads it at another index"
        through = g.path_between(producer, consumer)
        if through is not None:
            return f"would create a cycle through %{through}"
        return size_reason(g, merged, self.options)

    # --- users of one input merged into one fusion ---------------------------------------------
    def _siblings(self) -> None:
        g = self.graph
        for shared in g.ordered(list(g.nodes)):
            if shared not in g.nodes or element_count(g.shape(shared)) <= 1:
                continue
            buckets: dict[tuple, list[str]] = {}
            for user in g.user_list(shared):
                if eligible_reason(g, user) is None:
                    buckets.setdefault(tuple(sorted({s.dims for s in g.shape(user).leaves()})), []).append(user)
            firsts = [group[0] for group in buckets.values()]
            for i, a in enumerate(firsts):  # one line per pair of output dims, not per pair of users
                for b in firsts[i + 1:]:
                    self.log.record(SIBLING, a, b, False, f"siblings reading %{shared}: different output dims for "
                                                          f"multi-output fusion ({_dims(g.shape(a))} vs "
                                                          f"{_dims(g.shape(b))})")
            for group in buckets.values():
                self._merge_group(shared, group)

    def _merge_group(self, shared: str, group: list[str]) -> None:
        """Greedily merge users of ``shared`` with equal output dims, in topological order."""
        g = self.graph
        topo = g.topo_index()
        group = sorted(group, key=topo.__getitem__)
        i = 0
        while i < len(group):
            refusals, j = 0, i + 1
            while j < len(group) and refusals < self.options.max_sibling_refusals:
                a, b = group[i], group[j]
                reason = self._sibling_reason(a, b)
                if reason is not None:
                    self.log.record(SIBLING, a, b, False, f"siblings reading %{shared}: {reason}")
                    refusals += 1
                    j += 1
                    continue
                merged = g.merge(a, b)
                self.log.record(SIBLING, a, b, True,
                                f"{merged.kind.value} multi-output fusion %{merged.name} reading %{shared}")
                group[i] = merged.name
                del group[j]
            i += 1

    def _sibling_reason(self, a: str, b: str) -> str | None:
        """Why ``b`` cannot join ``a`` (``a`` comes first in topological order, so only a -> b paths matter)."""
        g = self.graph
        through = g.path_between(a, b, direct=True)
        if through == b:
            return f"%{b} reads %{a} (producer and consumer, not siblings)"
        if through is not None:
            return f"would create a cycle through %{through}"
        return size_reason(g, union(g.cluster_of(a), g.cluster_of(b), keep_producer_output=True), self.options)
