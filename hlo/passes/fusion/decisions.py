"""The fusion decision log: one record per (producer, consumer) pair the pass considered.

Every refusal carries a reason a person can act on ("producer %x has 3 users
and is expensive (exponential)", "would create a cycle through %y"); accepted
pairs are recorded too, with the kind of fusion they produced, so the log
reads as the story of the pass. Records are plain frozen dataclasses in the
order the pass made its decisions (deterministic), and ``render`` is the text
form the CLI and dumps show. Names are instruction names of the input module,
except multi-output fusions, which carry their final fusion names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Sequence

PRODUCER_CONSUMER = "producer-consumer"
MULTI_OUTPUT = "multi-output"  # a producer fused into a consumer and kept as an extra output
SIBLING = "sibling"  # two users of the same input fused into one multi-output fusion


@dataclass(frozen=True)
class FusionDecision:
    computation: str
    phase: str  # PRODUCER_CONSUMER, MULTI_OUTPUT or SIBLING
    producer: str  # for siblings: the first sibling
    consumer: str  # for siblings: the second sibling
    fused: bool
    reason: str  # why it was refused, or what fusing it made ("kLoop", "kInput, duplicated into 2 users")

    def __str__(self) -> str:
        verb = "fused  " if self.fused else "refused"
        arrow = "+" if self.phase == SIBLING else "->"
        return f"{verb} {self.phase:<17} %{self.producer} {arrow} %{self.consumer}: {self.reason}"


@dataclass(frozen=True)
class FusionRecord:
    """One fusion instruction the pass created: where, what kind, and which instructions it holds."""

    computation: str
    fusion: str
    kind: str
    calls: str
    outputs: tuple[str, ...]
    members: tuple[str, ...]  # fused instructions, in instruction order

    def __str__(self) -> str:
        outs = ", ".join("%" + o for o in self.outputs)
        body = ", ".join("%" + m for m in self.members)
        return f"%{self.fusion} ({self.kind}, calls=%{self.calls}, outputs {outs}): {body}"


class DecisionLog:
    """Collects decisions for one computation."""

    def __init__(self, computation: str, sink: list[FusionDecision]):
        self.computation = computation
        self.sink = sink

    def record(self, phase: str, producer: str, consumer: str, fused: bool, reason: str) -> None:
        self.sink.append(FusionDecision(self.computation, phase, producer, consumer, fused, reason))


_NAME = re.compile(r"%([A-Za-z0-9_.\-]+)")


def rename(decisions: list[FusionDecision], names: dict[str, str]) -> list[FusionDecision]:
    """Decisions with the temporary names in ``names`` replaced by final ones."""
    if not names:
        return decisions

    def sub(text: str) -> str:
        return _NAME.sub(lambda m: "%" + names.get(m.group(1), m.group(1)), text)

    return [replace(d, producer=names.get(d.producer, d.producer), consumer=names.get(d.consumer, d.consumer),
                    reason=sub(d.reason)) for d in decisions]


def render(decisions: list[FusionDecision], fusions: Sequence[FusionRecord] = (), refused_only: bool = False) -> str:
    """The log as text: fusions made per computation, then every decision in order."""
    lines: list[str] = []
    computations = list(dict.fromkeys([f.computation for f in fusions] + [d.computation for d in decisions]))
    for comp in computations:
        lines.append(f"computation %{comp}:")
        made = [f for f in fusions if f.computation == comp]
        for f in made:
            lines.append(f"  {f}")
        for d in decisions:
            if d.computation == comp and not (refused_only and d.fused):
                lines.append(f"  {d}")
    return "\n".join(lines) + ("\n" if lines else "")
