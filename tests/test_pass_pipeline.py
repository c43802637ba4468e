"""Pipeline and FixedPoint: verification after each pass, dumps, disabling, capped fixed points."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

import hlo
from hlo.errors import HloVerifierError
from hlo.passes import FixedPoint, Pipeline, PipelineOptions
from hlo.passes.cse import CommonSubexpressionElimination
from hlo.passes.dce import DeadCodeElimination

TEXT = """
HloModule p
ENTRY %main (x: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  %a = f32[4]{0} exponential(%x)
  %b = f32[4]{0} exponential(%x)
  %dead = f32[4]{0} negate(%x)
  ROOT %s = f32[4]{0} add(%a, %b)
}
"""


def test_pipeline_runs_passes_logs_changes_and_dumps() -> None:
    dumps = []
    pipe = Pipeline([CommonSubexpressionElimination(), DeadCodeElimination()],
                    PipelineOptions(dump=lambda step, name, m: dumps.append((step, name, len(m.entry)))))
    out = pipe.run(hlo.parse_module(TEXT))
    assert [i.name for i in out.entry.instructions] == ["x", "a", "s"]
    assert pipe.log == [("cse", True), ("dce", True)]
    assert dumps == [(0, "cse", 4), (1, "dce", 3)]


def test_disabled_pass_is_skipped() -> None:
    m = hlo.parse_module(TEXT)
    pipe = Pipeline([CommonSubexpressionElimination()], PipelineOptions(disabled=frozenset({"cse"})))
    assert pipe.run(m) is m and pipe.log == []


@dataclass
class _Breaks:
    name: str = "breaks"

    def run(self, module):
        comp = module.entry
        bad = comp.root.replace(shape=hlo.Shape.array("f32", [5]))
        return module.with_computation(comp.replace(instructions=comp.instructions[:-1] + (bad,)))


def test_a_pass_that_breaks_the_module_is_named() -> None:
    with pytest.raises(HloVerifierError, match="after pass breaks"):
        Pipeline([_Breaks()]).run(hlo.parse_module(TEXT))


@dataclass
class _Flip:
    """Swaps the operands of the root add every run: never converges."""

    name: str = "flip"

    def run(self, module):
        comp = module.entry
        root = comp.root
        flipped = root.replace(operands=tuple(reversed(root.operands)))
        return module.with_computation(comp.replace(instructions=comp.instructions[:-1] + (flipped,)))


def test_fixed_point_stops_on_a_cycle_and_at_the_cap() -> None:
    m = hlo.parse_module(TEXT)
    fp = FixedPoint([_Flip()], max_rounds=25)
    fp.run(m)
    assert fp.rounds_run == 2  # round 2 reproduces the input: a cycle, not 25 rounds
    fp = FixedPoint([CommonSubexpressionElimination(), DeadCodeElimination()], max_rounds=25)
    out = fp.run(m)
    assert fp.rounds_run == 2 and len(out.entry) == 3  # changes once, then a round with no change
