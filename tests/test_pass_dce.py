"""DeadCodeElimination: unused instructions and computations go; parameters and side effects stay."""

import numpy as np

import hlo
from hlo.passes.dce import DeadCodeElimination

TEXT = """
HloModule dce
%unused_comp (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %m = f32[] maximum(%a, %b)
}
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
ENTRY %main (x: f32[4], y: f32[4]) -> f32[] {
  %x = f32[4]{0} parameter(0)
  %y = f32[4]{0} parameter(1)
  %dead = f32[4]{0} exponential(%x)
  %dead2 = f32[4]{0} add(%dead, %x)
  %zero = f32[] constant(0)
  ROOT %r = f32[] reduce(%x, %zero), dimensions={0}, to_apply=%add
}
"""


def test_dce_removes_dead_instructions_and_computations() -> None:
    m = hlo.parse_module(TEXT)
    out = DeadCodeElimination().run(m)
    names = [i.name for i in out.entry.instructions]
    assert names == ["x", "y", "zero", "r"]  # unused parameter y stays: the signature is fixed
    assert [c.name for c in out.computations] == ["add", "main"]
    hlo.verify(out)
    x = np.arange(4, dtype=np.float32)
    assert hlo.evaluate(out, x, x) == hlo.evaluate(m, x, x)


def test_dce_is_idempotent_and_reports_no_change() -> None:
    out = DeadCodeElimination().run(hlo.parse_module(TEXT))
    assert DeadCodeElimination().run(out) is out
