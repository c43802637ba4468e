"""CommonSubexpressionElimination: equal instructions merge, commutative operands in any order."""

import numpy as np

import hlo
from hlo.passes.cse import CommonSubexpressionElimination

TEXT = """
HloModule cse
ENTRY %main (x: f32[3], y: f32[3]) -> (f32[3], f32[3]) {
  %x = f32[3]{0} parameter(0)
  %y = f32[3]{0} parameter(1)
  %a1 = f32[3]{0} add(%x, %y), metadata={op_name="first"}
  %a2 = f32[3]{0} add(%y, %x), metadata={op_name="second"}
  %s1 = f32[3]{0} subtract(%x, %y)
  %s2 = f32[3]{0} subtract(%y, %x)
  %e1 = f32[3]{0} exponential(%a1)
  %e2 = f32[3]{0} exponential(%a2)
  %m1 = f32[3]{0} multiply(%e1, %s1)
  %m2 = f32[3]{0} multiply(%e2, %s2)
  ROOT %t = (f32[3]{0}, f32[3]{0}) tuple(%m1, %m2)
}
"""


def test_cse_merges_commutative_and_chained_duplicates() -> None:
    m = hlo.parse_module(TEXT)
    out = CommonSubexpressionElimination().run(m)
    hlo.verify(out)
    ops = [i.opcode.text for i in out.entry.instructions]
    assert ops.count("add") == 1 and ops.count("exponential") == 1
    assert ops.count("subtract") == 2  # not commutative: both stay
    assert ops.count("multiply") == 2
    x, y = np.array([1, 2, 3], np.float32), np.array([0.5, -1, 4], np.float32)
    for a, b in zip(hlo.evaluate(out, x, y), hlo.evaluate(m, x, y)):
        np.testing.assert_array_equal(a, b)


def test_cse_leaves_distinct_constants_and_is_idempotent() -> None:
    m = hlo.parse_module("""
HloModule c
ENTRY %main () -> (f32[], f32[], f32[]) {
  %a = f32[] constant(1)
  %b = f32[] constant(1)
  %c = f32[] constant(-0)
  %z = f32[] constant(0)
  %s = f32[] add(%c, %z)
  ROOT %t = (f32[], f32[], f32[]) tuple(%a, %b, %s)
}""")
    out = CommonSubexpressionElimination().run(m)
    assert [i.name for i in out.entry.instructions] == ["a", "c", "z", "s", "t"]  # -0 and 0 differ bitwise
    assert CommonSubexpressionElimination().run(out) is out
